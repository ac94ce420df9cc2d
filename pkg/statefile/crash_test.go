package statefile_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotplugd/hotplugd/pkg/statefile"
)

// The crash helper is this test binary run again with crashHelperEnv=1: it
// writes crashContents to the file named by crashPathEnv in a loop until it
// is killed.
const (
	crashHelperEnv = "STATEFILE_CRASH_HELPER"
	crashPathEnv   = "STATEFILE_CRASH_PATH"
	crashTrialEnv  = "STATEFILE_CRASH_TRIAL"
	crashSeedEnv   = "STATEFILE_CRASH_SEED"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashHelperEnv) == "1" {
		os.Exit(crashHelper(os.Getenv(crashPathEnv), os.Getenv(crashTrialEnv)))
	}
	os.Exit(m.Run())
}

// crashContents are the two valid states the helper alternates between:
// cpu_manager_state-like documents of different lengths (about 6 and 10 KiB,
// more than one page each) whose bytes differ from the first entry on, so a
// truncated, empty or mixed file matches neither.
var crashContents = [2][]byte{crashState("a", 60), crashState("b", 100)}

func crashState(tag string, pods int) []byte {
	var b strings.Builder
	b.WriteString(`{"policyName":"static","defaultCpuSet":"0-1,` + tag + `","entries":{`)
	for i := range pods {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%s-%08d-0000-4000-8000-000000000000":{"app":"%d-%d","sidecar":"%d"}`, tag, i, 2*i+2, 2*i+3, i%2)
	}
	b.WriteString(`},"checksum":` + strconv.Itoa(len(tag)*pods) + "}\n")
	return []byte(b.String())
}

// crashHelper writes until it is killed: one byte on stdout when it starts,
// then one after each completed Write. Each Write has its own time, so its
// backup path is new.
func crashHelper(path, trial string) int {
	n, err := strconv.Atoi(trial)
	if err != nil {
		fmt.Fprintf(os.Stderr, "crash helper: bad %s %q\n", crashTrialEnv, trial)
		return 2
	}
	// Start with the content the file does not have.
	next := 0
	if cur, err := statefile.Read(path); err == nil && bytes.Equal(cur, crashContents[0]) {
		next = 1
	}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second)
	os.Stdout.Write([]byte{'R'})
	for i := 0; ; i++ {
		if _, err := statefile.Write(path, crashContents[next], base.Add(time.Duration(i)*time.Microsecond)); err != nil {
			fmt.Fprintf(os.Stderr, "crash helper: %v\n", err)
			return 1
		}
		os.Stdout.Write([]byte{'.'})
		next = 1 - next
	}
}

// TestCrashSafety SIGKILLs a writer process at a random point, crashTrials
// times, and checks that the state file is always exactly one of the two
// contents, never empty or a mix, and that so is every backup. Temporary
// files left by a kill are counted, checked to be a prefix of a content
// (a write cut short) and removed; they never take the state file's place.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped with -short: starts and SIGKILLs 1000 writer processes (about 10 s, 40 s with -race)")
	}
	const (
		crashTrials = 1000
		// Writers are killed in this many directories at once: most of a
		// trial is waiting for a process to start or an fsync to end.
		crashWorkers = 2
		// maxDelay is how long after its start a helper is killed at
		// most. A Write with its four fsyncs takes 4 to 6 ms on the
		// project's VM (BenchmarkWrite), so kills land anywhere in the
		// first two Writes, backup and replacement alike.
		maxDelay = 10 * time.Millisecond
	)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s: %v", crashSeedEnv, err)
		}
	}
	t.Logf("seed %d (set %s=%d to repeat the kill delays)", seed, crashSeedEnv, seed)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	stats := make([]crashStats, crashWorkers)
	start := time.Now()
	t.Run("writers", func(t *testing.T) {
		for w := range crashWorkers {
			t.Run(strconv.Itoa(w), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(seed, uint64(w)))
				dir := t.TempDir()
				path := filepath.Join(dir, "cpu_manager_state")
				if _, err := statefile.Write(path, crashContents[0], time.Now()); err != nil {
					t.Fatal(err)
				}
				for trial := w; trial < crashTrials; trial += crashWorkers {
					delay := time.Duration(rng.Int64N(int64(maxDelay) + 1))
					stats[w].writes += runCrashTrial(t, exe, path, trial, delay)
					checkAfterCrash(t, dir, path, trial, &stats[w])
				}
			})
		}
	})
	elapsed := time.Since(start)

	var st crashStats
	for _, s := range stats {
		st.add(s)
	}
	t.Logf("%d trials in %v (%d at a time): %d Writes completed before the kills; "+
		"%d kills left temporary files (%d of the state file, %d of a backup; %d of them cut short in the data); "+
		"%d backups checked; the state file was A %d times, B %d times",
		crashTrials, elapsed.Round(time.Millisecond), crashWorkers, st.writes,
		st.killsMidWrite, st.stateTemps, st.backupTemps, st.partialTemps,
		st.backups, st.final[0], st.final[1])
	if !t.Failed() && st.killsMidWrite == 0 {
		t.Errorf("no kill landed inside a Write (no temporary file left in %d trials): the test does not test anything", crashTrials)
	}
}

type crashStats struct {
	writes        int
	killsMidWrite int // trials that left a temporary file
	stateTemps    int // temporary files of the state file
	backupTemps   int // temporary files of a backup
	partialTemps  int // temporary files shorter than their content
	backups       int
	final         [2]int // how often the state file was each content
}

func (s *crashStats) add(o crashStats) {
	s.writes += o.writes
	s.killsMidWrite += o.killsMidWrite
	s.stateTemps += o.stateTemps
	s.backupTemps += o.backupTemps
	s.partialTemps += o.partialTemps
	s.backups += o.backups
	s.final[0] += o.final[0]
	s.final[1] += o.final[1]
}

// runCrashTrial starts a helper, SIGKILLs it delay after it reports its
// start, and returns how many Writes it completed.
func runCrashTrial(t *testing.T, exe, path string, trial int, delay time.Duration) int {
	t.Helper()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), crashHelperEnv+"=1", crashPathEnv+"="+path, crashTrialEnv+"="+strconv.Itoa(trial))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("trial %d: start helper: %v", trial, err)
	}
	if _, err := io.ReadFull(out, make([]byte, 1)); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("trial %d: helper did not start: %v\n%s", trial, err, stderr.Bytes())
	}
	time.Sleep(delay)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("trial %d: kill helper: %v", trial, err)
	}
	done, _ := io.ReadAll(out)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("trial %d: helper: got %v, want a SIGKILL\n%s", trial, err, stderr.Bytes())
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("trial %d: helper ended with %v, not by SIGKILL\n%s", trial, err, stderr.Bytes())
	}
	return len(done)
}

// checkAfterCrash checks every file the killed helper left in dir, then
// removes all but the state file so the next trial starts clean.
func checkAfterCrash(t *testing.T, dir, path string, trial int, st *crashStats) {
	t.Helper()
	got, err := statefile.Read(path)
	if err != nil {
		t.Fatalf("trial %d: state file after the kill: %v", trial, err)
	}
	i := whichContent(got)
	if i < 0 {
		t.Fatalf("trial %d: state file is neither A nor B: %s", trial, describe(got))
	}
	st.final[i]++

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Base(path)
	temps := 0
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(dir, name)
		switch {
		case name == base:
			continue
		case strings.HasPrefix(name, "."+base+".") && strings.Contains(name, ".tmp-"):
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(crashContents[0], b) && !bytes.HasPrefix(crashContents[1], b) {
				t.Errorf("trial %d: temporary file %s is not a prefix of A or B: %s", trial, name, describe(b))
			}
			if whichContent(b) < 0 {
				st.partialTemps++
			}
			if strings.Contains(name, ".hotplugd-backup-") {
				st.backupTemps++
			} else {
				st.stateTemps++
			}
			temps++
		case strings.HasPrefix(name, base+".hotplugd-backup-"):
			b, err := statefile.Read(p)
			if err != nil {
				t.Fatalf("trial %d: backup: %v", trial, err)
			}
			if whichContent(b) < 0 {
				t.Errorf("trial %d: backup %s is neither A nor B: %s", trial, name, describe(b))
			}
			st.backups++
		default:
			t.Fatalf("trial %d: unexpected file %s", trial, name)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if temps > 0 {
		st.killsMidWrite++
	}
}

// whichContent returns the index of b in crashContents, or -1.
func whichContent(b []byte) int {
	for i, c := range crashContents {
		if bytes.Equal(b, c) {
			return i
		}
	}
	return -1
}

// describe says how b differs from both contents.
func describe(b []byte) string {
	s := fmt.Sprintf("%d bytes (A is %d, B is %d)", len(b), len(crashContents[0]), len(crashContents[1]))
	for i, c := range crashContents {
		n := 0
		for n < len(b) && n < len(c) && b[n] == c[n] {
			n++
		}
		s += fmt.Sprintf("; same as %c for the first %d bytes", 'A'+i, n)
	}
	return s
}
