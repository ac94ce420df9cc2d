// Command workload is the container of the end-to-end tests' pinned pod: it
// prints the CPUs it may run on (Cpus_allowed_list of /proc/self/status)
// when it starts and whenever they change, and exits 0 on SIGTERM or
// SIGINT.
package main

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last := ""
	for {
		if cpus := allowedCPUs(); cpus != last {
			fmt.Printf("%s cpus allowed: %s\n", time.Now().UTC().Format(time.RFC3339), cpus)
			last = cpus
		}
		select {
		case <-sigs:
			return
		case <-tick.C:
		}
	}
}

func allowedCPUs() string {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return "unknown: " + err.Error()
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
