package journal

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLockOneHotplugdPerNode: a second holder of the state directory's
// lock is refused with ErrLocked, naming the holder's PID and what to do;
// once the first lets go, it is taken again.
func TestLockOneHotplugdPerNode(t *testing.T) {
	dir := t.TempDir()
	release, err := Lock(dir)
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to the open file: a second open in this process
	// conflicts as another process's would.
	_, err = Lock(dir)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Lock = %v, want ErrLocked", err)
	}
	for _, want := range []string{"process " + strconv.Itoa(os.Getpid()), filepath.Join(dir, LockFile), "not both"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	release()
	again, err := Lock(dir)
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	again()
}

// TestLockAcrossProcesses: flock(1) in another process holds the lock; Lock
// refuses while it does.
func TestLockAcrossProcesses(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) is not installed (util-linux): " + err.Error())
	}
	dir := t.TempDir()
	path := filepath.Join(dir, LockFile)
	cmd := exec.Command("flock", "-n", path, "sh", "-c", "echo held; read x")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("Lock while flock(1) holds it = %v, want ErrLocked", err)
	}
}
