package logging

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
)

// streamID is the JOURNAL_STREAM value systemd would set for f.
func streamID(t *testing.T, f *os.File) string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

func tempFile(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

func TestIsJournalStream(t *testing.T) {
	file, other := tempFile(t, "stderr"), tempFile(t, "other")
	_, pw := pipe(t)
	_, otherPW := pipe(t)
	tests := []struct {
		name   string
		stream string
		w      io.Writer
		want   bool
	}{
		{"file matches", streamID(t, file), file, true},
		{"pipe matches", streamID(t, pw), pw, true},
		{"unset", "", file, false},
		{"another file", streamID(t, other), file, false},
		{"another pipe", streamID(t, otherPW), pw, false},
		// A child that inherited JOURNAL_STREAM but whose stderr was redirected.
		{"inherited, stderr redirected to a file", streamID(t, pw), file, false},
		{"same inode, other device", fmt.Sprintf("%d:%s", 1<<40, strings.Split(streamID(t, file), ":")[1]), file, false},
		{"not an *os.File", streamID(t, file), &bytes.Buffer{}, false},
		{"no colon", "2049", file, false},
		{"not numbers", "a:b", file, false},
		{"trailing garbage", streamID(t, file) + "x", file, false},
		{"three parts", streamID(t, file) + ":1", file, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isJournalStream(tt.stream, tt.w); got != tt.want {
				t.Errorf("isJournalStream(%q) = %v, want %v", tt.stream, got, tt.want)
			}
		})
	}
}

func TestNew(t *testing.T) {
	tests := []struct {
		name           string
		o              Options
		stream         string // "match": stderr's dev:ino; "other": another file's
		journalEnabled bool
		want           string // journald, console, json, or the error
	}{
		{"auto outside systemd", Options{}, "", true, "console"},
		{"auto under systemd", Options{Format: "auto"}, "match", true, "journald"},
		{"auto, stderr redirected", Options{}, "other", true, "console"},
		{"auto, journal socket missing", Options{}, "match", false, "console"},
		{"console under systemd", Options{Format: "console"}, "match", true, "console"},
		{"json under systemd", Options{Format: "json"}, "match", true, "json"},
		{"journald outside systemd", Options{Format: "journald"}, "", true, "journald"},
		{"journald without socket", Options{Format: "journald"}, "", false, "logging: --log-format=journald: the journal socket /run/systemd/journal/socket is not available"},
		{"invalid", Options{Format: "xml"}, "", true, `logging: --log-format must be auto, console, json or journald, not "xml"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stderr := tempFile(t, "stderr")
			env := map[string]string{}
			switch tt.stream {
			case "match":
				env["JOURNAL_STREAM"] = streamID(t, stderr)
			case "other":
				env["JOURNAL_STREAM"] = streamID(t, tempFile(t, "other"))
			}
			var got []sent
			log, err := newLogger(tt.o, stderr, host{
				getenv:         func(k string) string { return env[k] },
				journalEnabled: func() bool { return tt.journalEnabled },
				send:           capture(&got),
			})
			if err != nil {
				if err.Error() != tt.want {
					t.Fatalf("New: %v, want %s", err, tt.want)
				}
				return
			}
			log.Named("reconcile").Info("topology changed", zap.String("resource", "cpu"))
			if err := log.Sync(); err != nil {
				t.Errorf("Sync: %v", err)
			}
			out, err := os.ReadFile(stderr.Name())
			if err != nil {
				t.Fatal(err)
			}
			if f := format(t, got, out); f != tt.want {
				t.Errorf("format = %s, want %s\njournal: %v\nstderr: %q", f, tt.want, got, out)
			}
		})
	}
}

// format tells which format produced the entry the test logged.
func format(t *testing.T, journal []sent, stderr []byte) string {
	t.Helper()
	switch {
	case len(journal) == 1 && len(stderr) == 0:
		if v := journal[0].Vars; v["HOTPLUG_RESOURCE"] != "cpu" || v["HOTPLUG_LOGGER"] != "reconcile" || v["CODE_FILE"] == "" {
			t.Errorf("journal entry lacks fields: %v", v)
		}
		return "journald"
	case len(journal) != 0:
		return "journald and stderr"
	case bytes.HasPrefix(stderr, []byte("{")):
		var e map[string]any
		if err := json.Unmarshal(stderr, &e); err != nil {
			t.Fatalf("stderr is not one JSON object: %v: %q", err, stderr)
		}
		for k, want := range map[string]any{"level": "info", "logger": "reconcile", "msg": "topology changed", "resource": "cpu"} {
			if e[k] != want {
				t.Errorf("JSON %s = %v, want %v", k, e[k], want)
			}
		}
		return "json"
	default:
		// 2026-11-22T02:22:21.123Z	INFO	reconcile	logging/logging_test.go:140	topology changed	{"resource": "cpu"}
		parts := strings.Split(strings.TrimSuffix(string(stderr), "\n"), "\t")
		want := []string{"INFO", "reconcile", "topology changed", `{"resource": "cpu"}`}
		if len(parts) != 6 {
			t.Fatalf("console line %q: %d tab-separated parts, want 6", stderr, len(parts))
		}
		if diff := cmp.Diff(want, []string{parts[1], parts[2], parts[4], parts[5]}); diff != "" {
			t.Errorf("unexpected console line (-want +got):\n%s", diff)
		}
		return "console"
	}
}

func TestNewLevel(t *testing.T) {
	var stderr bytes.Buffer
	log, err := New(Options{Format: "console", Level: "warn"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("dropped")
	log.Warn("kept")
	if got := stderr.String(); strings.Contains(got, "dropped") || !strings.Contains(got, "kept") {
		t.Errorf("at level warn, stderr = %q", got)
	}
}
