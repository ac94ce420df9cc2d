package logging_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"

	"github.com/hotplugd/hotplugd/pkg/logging"
	"github.com/hotplugd/hotplugd/test/systemd"
)

// TestIntegrationJournald writes through a real systemd-journald (started
// by the test when none runs, see test/systemd) and reads the entries back
// with journalctl. stderr is a file whose dev:ino is in JOURNAL_STREAM, as
// systemd sets it, so the auto format must pick the journal.
func TestIntegrationJournald(t *testing.T) {
	begin := time.Now()
	j := systemd.StartJournald(t)

	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(stderr.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", st.Dev, st.Ino))

	log, err := logging.New(logging.Options{Level: "debug"}, stderr)
	if err != nil {
		t.Fatal(err)
	}
	// A value no other entry has, so entries of earlier runs or other
	// processes in the same journal do not count.
	run := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	rlog := log.Named("reconcile").With(zap.String("test_run", run))
	rlog.Warn("topology changed", zap.String("resource", "cpu"), zap.Int("old", 2), zap.Int("new", 1), zap.String("trigger", "uevent"))
	rlog.Debug("reconcile done", zap.Duration("took", 1500*time.Microsecond), zap.String("trigger", "resync"))

	entries := j.WaitEntries(t, 10*time.Second, 2, logging.Identifier, "HOTPLUG_TEST_RUN="+run)
	if len(entries) != 2 {
		t.Fatalf("got %d entries, want 2: %v", len(entries), entries)
	}
	want := []map[string]string{
		{
			"MESSAGE":           "topology changed",
			"PRIORITY":          "4",
			"SYSLOG_IDENTIFIER": "hotplugd",
			"HOTPLUG_LOGGER":    "reconcile",
			"HOTPLUG_RESOURCE":  "cpu",
			"HOTPLUG_OLD":       "2",
			"HOTPLUG_NEW":       "1",
			"HOTPLUG_TRIGGER":   "uevent",
			"HOTPLUG_TEST_RUN":  run,
			"_TRANSPORT":        "journal",
		},
		{
			"MESSAGE":           "reconcile done",
			"PRIORITY":          "7",
			"SYSLOG_IDENTIFIER": "hotplugd",
			"HOTPLUG_LOGGER":    "reconcile",
			"HOTPLUG_TOOK":      "1.5ms",
			"HOTPLUG_TRIGGER":   "resync",
			"HOTPLUG_TEST_RUN":  run,
			"_TRANSPORT":        "journal",
		},
	}
	var got []map[string]string
	for _, e := range entries {
		g := map[string]string{}
		for k := range want[0] {
			if v, ok := e[k]; ok {
				g[k] = v
			}
		}
		for k := range want[1] {
			if v, ok := e[k]; ok {
				g[k] = v
			}
		}
		got = append(got, g)
		if !strings.HasSuffix(e["CODE_FILE"], "pkg/logging/integration_test.go") || e["CODE_LINE"] == "" {
			t.Errorf("entry %q: CODE_FILE=%q CODE_LINE=%q, want this file and a line", e["MESSAGE"], e["CODE_FILE"], e["CODE_LINE"])
		}
		if e["_PID"] != fmt.Sprint(os.Getpid()) {
			t.Errorf("entry %q: _PID=%q, want this process, %d", e["MESSAGE"], e["_PID"], os.Getpid())
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unexpected journal entries (-want +got):\n%s", diff)
	}
	if out, _ := os.ReadFile(stderr.Name()); len(out) != 0 {
		t.Errorf("under the journal, stderr got %q, want nothing", out)
	}
	t.Logf("journald started=%v (socket in %v); test body took %v", j.Started, j.StartTime, time.Since(begin))
}
