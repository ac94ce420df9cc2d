package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/hotplugd/hotplugd/pkg/control"
)

// statusSocketName is the running daemon's status socket in --state-dir.
const statusSocketName = "status.sock"

// statusOptions are the flags of `hotplugd status`.
type statusOptions struct {
	StateDir string
	Output   string
	Timeout  time.Duration
}

func (o *statusOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.StateDir, "state-dir", "/var/lib/hotplugd", "the running hotplugd's --state-dir, where it serves its status on "+statusSocketName)
	fs.StringVarP(&o.Output, "output", "o", "text", "text or json")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Second, "give up on the daemon after this long")
}

func (o *statusOptions) Validate() error {
	if o.Output != "text" && o.Output != "json" {
		return fmt.Errorf("--output must be text or json, not %q", o.Output)
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, not %v", o.Timeout)
	}
	return nil
}

func runStatus(args []string, stdout, stderr io.Writer) int {
	var o statusOptions
	if code, done := parseFlags("status", `Usage: hotplugd status [--state-dir DIR] [-o text|json]

Asks the hotplugd running on this node (or in this pod: kubectl exec) for its
view and its next step: the machine and the capacity and allocatable a kubelet
started now would report, the kubelet it found (version, configuration, root
dir), its Node beside that prediction (the condition, whether writes are held),
the drift, the remedy's next action with its reason, and its last attempts.
Exit status 0, 1 when no hotplugd answers, 2 on a usage error.

Flags:
%s`, &o, args, stderr); done {
		return code
	}
	st, raw, err := fetchStatus(filepath.Join(o.StateDir, statusSocketName), o.Timeout)
	if err != nil {
		fmt.Fprintf(stderr, "hotplugd status: %v\n", err)
		return 1
	}
	if o.Output == "json" {
		stdout.Write(raw)
		return 0
	}
	if err := st.WriteText(stdout); err != nil {
		fmt.Fprintf(stderr, "hotplugd status: %v\n", err)
		return 1
	}
	return 0
}

// fetchStatus asks the daemon on socket for its status: the decoded
// value and the JSON as served.
func fetchStatus(socket string, timeout time.Duration) (control.Status, []byte, error) {
	var st control.Status
	c := &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
	resp, err := c.Get("http://hotplugd/status")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, os.ErrNotExist) {
			return st, nil, fmt.Errorf("no hotplugd runs with this --state-dir (%s does not exist)", socket)
		}
		return st, nil, fmt.Errorf("asking the hotplugd at %s: %w (is it running, with this --state-dir?)", socket, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return st, nil, fmt.Errorf("reading the status from %s: %w", socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		return st, nil, fmt.Errorf("the hotplugd at %s answered %s: %s", socket, resp.Status, raw)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, nil, fmt.Errorf("the hotplugd at %s answered what is not a status: %w", socket, err)
	}
	return st, raw, nil
}

// serveStatus serves loop's Status on a unix socket at path (mode 0600:
// root's, as the state dir) until ctx ends. It never stops the daemon:
// a socket it cannot make is a warning.
func serveStatus(ctx context.Context, path string, loop *control.Loop, log *zap.Logger) error {
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type() == fs.ModeSocket {
		// An earlier hotplugd's, left by a crash: the state dir's lock
		// says no other hotplugd runs with it.
		os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		log.Warn("no status socket: hotplugd status cannot ask this daemon", zap.String("path", path), zap.Error(err))
		return nil
	}
	os.Chmod(path, 0o600)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		st, ok := loop.Status()
		if !ok {
			http.Error(w, "no decision yet: the daemon is starting", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(st)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	err = srv.Serve(ln)
	os.Remove(path)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	log.Warn("status socket stopped", zap.Error(err))
	return nil
}
