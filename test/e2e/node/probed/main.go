// Command probed is the container of test/e2e/node's Service pod (scenario
// 11): an HTTP server whose GET /ready answers 200 for the pod's readiness
// probe, so that the pod's endpoint in its Service's EndpointSlice is ready
// while the container runs. It exits 0 on SIGTERM or SIGINT.
//
// Build: the test builds it into an image (internal/testimage) and imports
// it into the node VM's containerd.
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	addr := flag.String("addr", ":18080", "where to listen (the pod is hostNetwork: the node's port)")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	srv := &http.Server{Addr: *addr, Handler: mux}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	log.Printf("listening on %s", *addr)
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Print(err)
		os.Exit(1)
	}
}
