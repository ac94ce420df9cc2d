package logging

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// sent is one entry the journald core would have sent.
type sent struct {
	Message  string
	Priority journal.Priority
	Vars     map[string]string
}

// capture returns a send func recording entries into *got.
func capture(got *[]sent) sendFunc {
	return func(message string, p journal.Priority, vars map[string]string) error {
		*got = append(*got, sent{message, p, vars})
		return nil
	}
}

type trigger string

type capacity struct {
	CPU    int    `json:"cpu"`
	Memory string `json:"memory"`
}

func TestJournaldCoreFields(t *testing.T) {
	at := time.Date(2026, 11, 22, 2, 22, 21, 500, time.UTC)
	tests := []struct {
		name string
		log  func(*zap.Logger)
		want []sent
	}{
		{
			name: "change",
			log: func(l *zap.Logger) {
				l.Info("topology changed", zap.String("resource", "cpu"), zap.Int("old", 2), zap.Int("new", 1), zap.String("trigger", "uevent"))
			},
			want: []sent{{"topology changed", journal.PriInfo, map[string]string{
				"SYSLOG_IDENTIFIER": "hotplugd",
				"HOTPLUG_RESOURCE":  "cpu",
				"HOTPLUG_OLD":       "2",
				"HOTPLUG_NEW":       "1",
				"HOTPLUG_TRIGGER":   "uevent",
			}}},
		},
		{
			name: "named logger, With fields, duration",
			log: func(l *zap.Logger) {
				l.Named("reconcile").With(zap.Int("node", 0)).Warn("slow reconcile", zap.Duration("latency", 1500*time.Millisecond))
			},
			want: []sent{{"slow reconcile", journal.PriWarning, map[string]string{
				"SYSLOG_IDENTIFIER": "hotplugd",
				"HOTPLUG_LOGGER":    "reconcile",
				"HOTPLUG_NODE":      "0",
				"HOTPLUG_LATENCY":   "1.5s",
			}}},
		},
		{
			name: "nested logger names",
			log:  func(l *zap.Logger) { l.Named("source").Named("uevent").Debug("listening") },
			want: []sent{{"listening", journal.PriDebug, map[string]string{
				"SYSLOG_IDENTIFIER": "hotplugd",
				"HOTPLUG_LOGGER":    "source.uevent",
			}}},
		},
		{
			name: "error as its message",
			log: func(l *zap.Logger) {
				l.Error("read failed", zap.Error(errors.New("topology: read /sys/devices/system/cpu/online: EIO")))
			},
			want: []sent{{"read failed", journal.PriErr, map[string]string{
				"SYSLOG_IDENTIFIER": "hotplugd",
				"HOTPLUG_ERROR":     "topology: read /sys/devices/system/cpu/online: EIO",
			}}},
		},
		{
			name: "key names",
			log: func(l *zap.Logger) {
				l.Info("m",
					zap.String("numa-node", "a"),
					zap.String("hugepages.2Mi", "b"),
					zap.String("Already_UPPER_9", "c"),
					zap.String("élan", "d"),
					zap.String(strings.Repeat("x", 70), "e"),
				)
			},
			want: []sent{{"m", journal.PriInfo, map[string]string{
				"SYSLOG_IDENTIFIER":                  "hotplugd",
				"HOTPLUG_NUMA_NODE":                  "a",
				"HOTPLUG_HUGEPAGES_2MI":              "b",
				"HOTPLUG_ALREADY_UPPER_9":            "c",
				"HOTPLUG__LAN":                       "d",
				"HOTPLUG_" + strings.Repeat("X", 56): "e",
			}}},
		},
		{
			name: "value types as plain text",
			log: func(l *zap.Logger) {
				l.Info("m",
					zap.Bool("bool", true),
					zap.Float64("float", 0.25),
					zap.Float32("float32", 1.5),
					zap.Uint64("uint", 18446744073709551615),
					zap.Int64("negative", -3),
					zap.Time("time", at),
					zap.Any("named_string", trigger("sighup")),
					zap.Stringer("stringer", 2*time.Second),
					zap.Strings("array", []string{"cpu", "memory"}),
					zap.Any("object", capacity{CPU: 2, Memory: "8Gi"}),
					zap.Binary("binary", []byte{0, 1, 2}),
					zap.ByteString("bytestring", []byte("text")),
					zap.Uintptr("uintptr", 10),
					zap.Complex128("complex", 1+2i),
				)
			},
			want: []sent{{"m", journal.PriInfo, map[string]string{
				"SYSLOG_IDENTIFIER":    "hotplugd",
				"HOTPLUG_BOOL":         "true",
				"HOTPLUG_FLOAT":        "0.25",
				"HOTPLUG_FLOAT32":      "1.5",
				"HOTPLUG_UINT":         "18446744073709551615",
				"HOTPLUG_NEGATIVE":     "-3",
				"HOTPLUG_TIME":         "2026-11-22T02:22:21.0000005Z",
				"HOTPLUG_NAMED_STRING": "sighup",
				"HOTPLUG_STRINGER":     "2s",
				"HOTPLUG_ARRAY":        `["cpu","memory"]`,
				"HOTPLUG_OBJECT":       `{"cpu":2,"memory":"8Gi"}`,
				"HOTPLUG_BINARY":       "AAEC",
				"HOTPLUG_BYTESTRING":   "text",
				"HOTPLUG_UINTPTR":      "10",
				"HOTPLUG_COMPLEX":      "(1+2i)",
			}}},
		},
		{
			name: "namespace as JSON",
			log: func(l *zap.Logger) {
				l.Info("m", zap.Namespace("node0"), zap.Int("cpus", 1), zap.String("memory", "4Gi"))
			},
			want: []sent{{"m", journal.PriInfo, map[string]string{
				"SYSLOG_IDENTIFIER": "hotplugd",
				"HOTPLUG_NODE0":     `{"cpus":1,"memory":"4Gi"}`,
			}}},
		},
		{
			name: "entry field overrides With field",
			log: func(l *zap.Logger) {
				l.With(zap.String("trigger", "start")).Info("m", zap.String("trigger", "uevent"))
			},
			want: []sent{{"m", journal.PriInfo, map[string]string{
				"SYSLOG_IDENTIFIER": "hotplugd",
				"HOTPLUG_TRIGGER":   "uevent",
			}}},
		},
		{
			name: "With does not change the parent",
			log: func(l *zap.Logger) {
				child := l.With(zap.String("resource", "cpu"))
				child.Info("child", zap.String("old", "2"))
				l.Info("parent")
			},
			want: []sent{
				{"child", journal.PriInfo, map[string]string{
					"SYSLOG_IDENTIFIER": "hotplugd",
					"HOTPLUG_RESOURCE":  "cpu",
					"HOTPLUG_OLD":       "2",
				}},
				{"parent", journal.PriInfo, map[string]string{"SYSLOG_IDENTIFIER": "hotplugd"}},
			},
		},
		{
			name: "fixed fields win over zap fields",
			log: func(l *zap.Logger) {
				l.Named("real").Info("m", zap.String("logger", "fake"))
			},
			want: []sent{{"m", journal.PriInfo, map[string]string{
				"SYSLOG_IDENTIFIER": "hotplugd",
				"HOTPLUG_LOGGER":    "real",
			}}},
		},
		{
			name: "multi-line message and value",
			log:  func(l *zap.Logger) { l.Info("two\nlines", zap.String("plan", "a\nb")) },
			want: []sent{{"two\nlines", journal.PriInfo, map[string]string{
				"SYSLOG_IDENTIFIER": "hotplugd",
				"HOTPLUG_PLAN":      "a\nb",
			}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []sent
			tt.log(zap.New(newJournaldCore(zapcore.DebugLevel, capture(&got))))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("unexpected journal entries (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJournaldCoreCaller(t *testing.T) {
	var got []sent
	log := zap.New(newJournaldCore(zapcore.DebugLevel, capture(&got)), zap.AddCaller())
	log.Info("here")
	if len(got) != 1 {
		t.Fatalf("got %d entries, want 1", len(got))
	}
	v := got[0].Vars
	if !strings.HasSuffix(v["CODE_FILE"], "pkg/logging/journald_test.go") {
		t.Errorf("CODE_FILE = %q, want .../pkg/logging/journald_test.go", v["CODE_FILE"])
	}
	if n, err := strconv.Atoi(v["CODE_LINE"]); err != nil || n <= 0 {
		t.Errorf("CODE_LINE = %q, want a line number", v["CODE_LINE"])
	}
	if v["CODE_FUNC"] != "github.com/hotplugd/hotplugd/pkg/logging.TestJournaldCoreCaller" {
		t.Errorf("CODE_FUNC = %q, want this test function", v["CODE_FUNC"])
	}
}

func TestPriority(t *testing.T) {
	tests := []struct {
		level zapcore.Level
		want  journal.Priority
	}{
		{zapcore.DebugLevel, 7},
		{zapcore.InfoLevel, 6},
		{zapcore.WarnLevel, 4},
		{zapcore.ErrorLevel, 3},
		{zapcore.DPanicLevel, 2},
		{zapcore.PanicLevel, 2},
		{zapcore.FatalLevel, 2},
	}
	for _, tt := range tests {
		t.Run(tt.level.String(), func(t *testing.T) {
			if got := priority(tt.level); got != tt.want {
				t.Errorf("priority(%v) = %d, want %d", tt.level, got, tt.want)
			}
		})
	}
}

func TestJournaldCoreLevel(t *testing.T) {
	var got []sent
	level := zap.NewAtomicLevelAt(zapcore.WarnLevel)
	log := zap.New(newJournaldCore(level, capture(&got)))
	log.Debug("debug")
	log.Info("info")
	log.Warn("warn")
	log.Error("error")
	log.DPanic("dpanic") // logs, does not panic: the logger is not in development mode
	var msgs []string
	var pris []journal.Priority
	for _, e := range got {
		msgs = append(msgs, e.Message)
		pris = append(pris, e.Priority)
	}
	if diff := cmp.Diff([]string{"warn", "error", "dpanic"}, msgs); diff != "" {
		t.Errorf("unexpected messages at level warn (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]journal.Priority{4, 3, 2}, pris); diff != "" {
		t.Errorf("unexpected priorities (-want +got):\n%s", diff)
	}
	if l := log.Level(); l != zapcore.WarnLevel {
		t.Errorf("log.Level() = %v, want warn", l)
	}
	level.SetLevel(zapcore.DebugLevel)
	got = nil
	log.Debug("debug")
	if len(got) != 1 {
		t.Errorf("after SetLevel(debug): %d entries, want 1", len(got))
	}
}

func TestJournaldCoreSendError(t *testing.T) {
	var errOut bytes.Buffer
	fail := func(string, journal.Priority, map[string]string) error {
		return errors.New("sendmsg: connection refused")
	}
	log := zap.New(newJournaldCore(zapcore.InfoLevel, fail), zap.ErrorOutput(zapcore.AddSync(&errOut)))
	log.Info("lost")
	if !strings.Contains(errOut.String(), "logging: journald: sendmsg: connection refused") {
		t.Errorf("error output = %q, want the send error", errOut.String())
	}
}
