// Command agent is the test's hand inside the node VM of test/e2e/node: a
// small HTTP server the guest's systemd starts (e2e-agent.service), reached
// from the host only through QEMU's user-mode network forward of the
// host's 127.0.0.1. It runs commands and writes files for the test, as an
// operator at the node's console would; it is part of the test image
// only, never of what hotplugd installs.
//
//	POST /exec  {"argv": [...], "stdin": "...", "timeout": "30s"}
//	            -> {"stdout": "...", "stderr": "...", "code": 0}
//	PUT  /file?path=/abs/path&mode=0644   body: the file's bytes
//	            (parent directories made, written atomically)
//	GET  /fetch?url=http://127.0.0.1:9792/metrics
//	            -> the body of a GET of a URL inside the guest (the
//	            services that listen on the guest's loopback only)
//
// Build: CGO_ENABLED=0 go build ./test/e2e/node/agent (hack/node-image.sh
// does, into the image).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

type execRequest struct {
	Argv    []string `json:"argv"`
	Stdin   string   `json:"stdin,omitempty"`
	Timeout string   `json:"timeout,omitempty"`
}

type execReply struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	Code   int    `json:"code"`
	Err    string `json:"err,omitempty"`
}

func main() {
	addr := flag.String("addr", ":7070", "listen address")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /exec", handleExec)
	mux.HandleFunc("PUT /file", handleFile)
	mux.HandleFunc("GET /fetch", handleFetch)
	mux.HandleFunc("GET /ping", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	log.Printf("agent: listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, mux))
}

func handleExec(w http.ResponseWriter, r *http.Request) {
	var req execRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Argv) == 0 {
		http.Error(w, fmt.Sprintf("want {\"argv\": [...]}: %v", err), http.StatusBadRequest)
		return
	}
	timeout := 2 * time.Minute
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		timeout = d
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, req.Argv[0], req.Argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Stdin = bytes.NewReader([]byte(req.Stdin))
	// Commands such as `systemctl start` wait for their jobs; a process
	// left running (a daemon started with &) must not hold the reply.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	rep := execReply{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		rep.Code = exit.ExitCode()
	case err != nil:
		rep.Code, rep.Err = -1, err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(rep)
}

func handleFile(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Query().Get("path")
	if !filepath.IsAbs(path) {
		http.Error(w, "path must be absolute", http.StatusBadRequest)
		return
	}
	mode := os.FileMode(0o644)
	if m := r.URL.Query().Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mode = os.FileMode(v)
	}
	if err := writeFile(path, r.Body, mode); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	io.WriteString(w, "ok\n")
}

func writeFile(path string, body io.Reader, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func handleFetch(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL.Query().Get("url"), nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}
