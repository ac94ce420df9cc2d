package kubeapitest

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"
)

// StartControllers starts kube-controller-manager and kube-scheduler
// against the server, which make it a cluster: Deployments and DaemonSets
// get Pods, Pods get a node, Nodes get their lifecycle taints, and every
// namespace the kube-root-ca.crt ConfigMap that a Pod's projected service
// account volume reads (the serving certificate, --root-ca-file). Both run
// with the admin credentials, without leader election, serving /healthz on
// free loopback ports; StartControllers returns once both answer ok, and
// Stop (or StopControllers) stops them by PID.
func (s *Server) StartControllers() error {
	kubeconfig := filepath.Join(s.Dir, "controllers.kubeconfig")
	if err := s.WriteKubeconfig(kubeconfig, s.AdminToken); err != nil {
		return err
	}
	type component struct {
		name string
		args []string
	}
	comps := []component{
		{"kube-controller-manager", []string{
			"--root-ca-file=" + s.files.servingCert,
			"--service-account-private-key-file=" + s.files.serviceAccountKey,
			"--use-service-account-credentials=false",
			// A node the test restarts the kubelet of is not marked
			// unreachable within the restart.
			"--node-monitor-grace-period=50s",
		}},
		{"kube-scheduler", nil},
	}
	for _, c := range comps {
		var err error
		for attempt := 1; ; attempt++ {
			err = s.startComponent(c.name, kubeconfig, c.args)
			if err == nil || !errors.Is(err, errAddrInUse) || attempt == bindAttempts {
				break
			}
		}
		if err != nil {
			s.StopControllers()
			return err
		}
	}
	return nil
}

func (s *Server) startComponent(name, kubeconfig string, extra []string) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--cert-dir=" + filepath.Join(s.Dir, name+"-pki"),
		"--profiling=false",
	}, extra...)
	p, err := s.run(name, args...)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.controllers = append(s.controllers, p)
	s.mu.Unlock()
	// Its self-signed serving certificate is not what the test trusts;
	// /healthz carries nothing secret.
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true,
	}}
	url := fmt.Sprintf("https://127.0.0.1:%d/healthz", ports[0])
	return p.waitFor(readyTimeout, func() bool {
		resp, err := hc.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// StopControllers stops kube-scheduler and kube-controller-manager; the
// API server and etcd keep running. It may be called more than once.
func (s *Server) StopControllers() {
	s.mu.Lock()
	cs := s.controllers
	s.controllers = nil
	s.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i].stop()
	}
}
