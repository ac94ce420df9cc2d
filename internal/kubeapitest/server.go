package kubeapitest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"
)

// AdminUser is the user of Server.AdminToken, a member of system:masters.
const AdminUser = "kubeapitest-admin"

// Timeouts. A start takes 3-5 s on 2 cores; the limits leave room for a
// loaded CI machine.
const (
	etcdTimeout  = 30 * time.Second
	readyTimeout = 90 * time.Second
	stopGrace    = 10 * time.Second // SIGTERM to SIGKILL
	pollInterval = 50 * time.Millisecond
	bindAttempts = 3 // a free port can be taken between picking and binding
)

// Options configures Start.
type Options struct {
	// BinDir holds kube-apiserver and etcd; "" means BinDir().
	BinDir string
	// NodeAuthorization adds the Node authorizer and the NodeRestriction
	// admission plugin, as a cluster's API server has them: a kubelet with
	// a ClientCert of system:node:<name> may then write its own Node only.
	NodeAuthorization bool
	// ServingIPs are addresses besides 127.0.0.1 that the serving
	// certificate names, for clients that reach the server through a
	// forward and verify it by address: e.g. a pod's in-cluster
	// configuration, which has the address of KUBERNETES_SERVICE_HOST and no
	// server name to set.
	ServingIPs []net.IP
	// KubeletHosts names nodes whose kubelet listens on 127.0.0.1 only (a
	// test's kubelet), so that the API server reaches them for what it
	// proxies to a kubelet (pods/exec, pods/log): kube-apiserver then runs
	// in a mount namespace of its own where /etc/hosts (a copy, with these
	// names as 127.0.0.1; the machine's file is not touched) resolves them,
	// and dials a kubelet by the Node's Hostname address. A kubelet refuses
	// a loopback --node-ip, so a Node's InternalIP cannot say 127.0.0.1.
	// Needs root and unshare(1).
	KubeletHosts []string
	// Log receives both servers' output; nil writes etcd.log and
	// kube-apiserver.log in Server.Dir (removed by Stop). Start's errors
	// quote the end of those files.
	Log io.Writer
}

// Server is a running etcd and kube-apiserver on 127.0.0.1.
type Server struct {
	// URL is the API server, https://127.0.0.1:<port>.
	URL string
	// AdminToken is a static bearer token of AdminUser, in system:masters.
	AdminToken string
	// Dir is the temporary directory with the certificates, keys, token
	// file, logs and etcd's data; Stop removes it.
	Dir string
	// CACertFile is the API server's self-signed serving certificate (for
	// 127.0.0.1, localhost and Options.ServingIPs), which clients verify it
	// with.
	CACertFile string

	binDir  string
	files   files
	caPEM   []byte
	logw    io.Writer // nil: per-process files in Dir
	etcdURL string
	port    int
	client  kubernetes.Interface
	// nodeAuthz is Options.NodeAuthorization.
	nodeAuthz bool
	// servingIPs is Options.ServingIPs.
	servingIPs []net.IP
	// hostsFile is the /etc/hosts of kube-apiserver's mount namespace
	// (Options.KubeletHosts); "" for the machine's.
	hostsFile string

	mu          sync.Mutex
	etcd        *proc
	apiserver   *proc
	controllers []*proc // StartControllers'
}

// Start starts etcd and kube-apiserver on free ports of 127.0.0.1 in a new
// temporary directory and returns once /readyz answers ok. On error it
// stops whatever it started and removes the directory.
func Start(o Options) (*Server, error) {
	bin := o.BinDir
	if bin == "" {
		var err error
		if bin, err = BinDir(); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "kubeapitest-")
	if err != nil {
		return nil, fmt.Errorf("kubeapitest: %w", err)
	}
	s := &Server{Dir: dir, binDir: bin, nodeAuthz: o.NodeAuthorization, servingIPs: o.ServingIPs}
	if len(o.KubeletHosts) > 0 {
		hosts, err := os.ReadFile("/etc/hosts")
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("kubeapitest: %w", err)
		}
		hosts = append(hosts, "\n# kubeapitest: the test's kubelets\n127.0.0.1 "+strings.Join(o.KubeletHosts, " ")+"\n"...)
		s.hostsFile = filepath.Join(dir, "hosts")
		if err := os.WriteFile(s.hostsFile, hosts, 0o644); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("kubeapitest: %w", err)
		}
	}
	if o.Log != nil {
		s.logw = &lockedWriter{w: o.Log}
	}
	if err := s.start(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

func (s *Server) start() error {
	var err error
	if s.files, s.AdminToken, err = writeCredentials(s.Dir, s.servingIPs); err != nil {
		return err
	}
	s.CACertFile = s.files.servingCert
	if s.caPEM, err = os.ReadFile(s.CACertFile); err != nil {
		return fmt.Errorf("kubeapitest: %w", err)
	}
	if err := os.Mkdir(filepath.Join(s.Dir, "etcd"), 0o700); err != nil {
		return fmt.Errorf("kubeapitest: %w", err)
	}
	for attempt := 1; ; attempt++ {
		err = s.startEtcd()
		if err == nil || !errors.Is(err, errAddrInUse) || attempt == bindAttempts {
			break
		}
	}
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		ports, perr := freePorts(1)
		if perr != nil {
			return perr
		}
		s.port = ports[0]
		s.URL = "https://127.0.0.1:" + strconv.Itoa(s.port)
		err = s.StartAPIServer()
		if err == nil || !errors.Is(err, errAddrInUse) || attempt == bindAttempts {
			break
		}
	}
	if err != nil {
		return err
	}
	if s.client, err = kubernetes.NewForConfig(s.RestConfig()); err != nil {
		return fmt.Errorf("kubeapitest: %w", err)
	}
	return nil
}

func (s *Server) startEtcd() error {
	ports, err := freePorts(2)
	if err != nil {
		return err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	p, err := s.run("etcd",
		"--name=kubeapitest",
		"--data-dir="+filepath.Join(s.Dir, "etcd"),
		"--listen-client-urls="+client,
		"--advertise-client-urls="+client,
		"--listen-peer-urls="+peer,
		"--initial-advertise-peer-urls="+peer,
		"--initial-cluster=kubeapitest="+peer,
		// A test's data need not survive a power cut; without fsync a
		// write costs microseconds instead of milliseconds.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.etcd = p
	s.mu.Unlock()
	if err := p.waitFor(etcdTimeout, func() bool {
		resp, err := http.Get(client + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK && bytes.Contains(b, []byte(`"health":"true"`))
	}); err != nil {
		p.stop()
		return err
	}
	s.etcdURL = client
	return nil
}

// apiserverArgs are kube-apiserver's flags. They depend only on what Start
// chose, so StartAPIServer brings back the same server.
func (s *Server) apiserverArgs() []string {
	authz := "RBAC"
	var admission []string
	if s.nodeAuthz {
		authz = "Node,RBAC"
		admission = []string{"--enable-admission-plugins=NodeRestriction"}
	}
	return append([]string{
		"--etcd-servers=" + s.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.port),
		"--tls-cert-file=" + s.files.servingCert,
		"--tls-private-key-file=" + s.files.servingKey,
		// Unused while the serving certificate is given; set so nothing
		// is ever written outside Dir.
		"--cert-dir=" + filepath.Join(s.Dir, "pki"),
		"--token-auth-file=" + s.files.tokenFile,
		"--client-ca-file=" + s.files.clientCA,
		"--authorization-mode=" + authz,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + s.files.serviceAccountKey,
		"--service-account-signing-key-file=" + s.files.serviceAccountKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		// No Endpoints for the kubernetes Service: nothing here routes
		// to it, and the reconciler would write every 10 s.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}, append(admission, s.kubeletArgs()...)...)
}

// kubeletArgs are kube-apiserver's flags for reaching kubelets: by the
// Node's Hostname address first when Options.KubeletHosts resolves them.
func (s *Server) kubeletArgs() []string {
	if s.hostsFile == "" {
		return nil
	}
	return []string{"--kubelet-preferred-address-types=Hostname,InternalIP,ExternalIP"}
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same port with the same certificates, keys and tokens (and the same etcd,
// so every object is still there), and waits until /readyz answers ok.
func (s *Server) StartAPIServer() error {
	s.mu.Lock()
	if s.apiserver != nil && !s.apiserver.exited() {
		s.mu.Unlock()
		return errors.New("kubeapitest: kube-apiserver is already running")
	}
	s.mu.Unlock()
	p, err := s.run("kube-apiserver", s.apiserverArgs()...)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.apiserver = p
	s.mu.Unlock()
	hc, err := s.httpClient()
	if err != nil {
		p.stop()
		return err
	}
	if err := p.waitFor(readyTimeout, func() bool { return s.ready(hc) }); err != nil {
		p.stop()
		return err
	}
	return nil
}

// StopAPIServer stops kube-apiserver (SIGTERM, SIGKILL after 10 s); etcd
// keeps running. Clients get connection refused until StartAPIServer.
func (s *Server) StopAPIServer() error {
	s.mu.Lock()
	p := s.apiserver
	s.mu.Unlock()
	if p == nil || p.exited() {
		return errors.New("kubeapitest: kube-apiserver is not running")
	}
	p.stop()
	return nil
}

// Stop stops kube-apiserver and etcd and removes Dir. It may be called
// more than once.
func (s *Server) Stop() {
	s.StopControllers()
	s.mu.Lock()
	api, etcd := s.apiserver, s.etcd
	s.mu.Unlock()
	if api != nil {
		api.stop()
	}
	if etcd != nil {
		etcd.stop()
	}
	if s.Dir != "" {
		os.RemoveAll(s.Dir)
	}
}

func (s *Server) ready(hc *http.Client) bool {
	req, err := http.NewRequest(http.MethodGet, s.URL+"/readyz", nil)
	if err != nil {
		return false
	}
	req.Header.Set("Authorization", "Bearer "+s.AdminToken)
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && strings.TrimSpace(string(b)) == "ok"
}

func (s *Server) httpClient() (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.caPEM) {
		return nil, errors.New("kubeapitest: no certificate in " + s.CACertFile)
	}
	return &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true},
	}, nil
}

// RestConfig is a client configuration of AdminUser.
func (s *Server) RestConfig() *rest.Config {
	return s.TokenConfig(s.AdminToken)
}

// TokenConfig is a client configuration that authenticates with token
// (e.g. a service account token from the TokenRequest API). Client-side
// rate limiting is off: tests count and pace their own requests.
func (s *Server) TokenConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            s.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), s.caPEM...)},
		QPS:             -1,
		UserAgent:       "kubeapitest",
	}
}

// Client is a clientset of AdminUser.
func (s *Server) Client() kubernetes.Interface {
	return s.client
}

// WriteKubeconfig writes a kubeconfig file (mode 0600) that reaches the
// server with token, for programs such as hotplugd's --kubeconfig.
func (s *Server) WriteKubeconfig(path, token string) error {
	const name = "kubeapitest"
	cfg := clientcmdv1.Config{
		Kind:       "Config",
		APIVersion: "v1",
		Clusters: []clientcmdv1.NamedCluster{{Name: name, Cluster: clientcmdv1.Cluster{
			Server:                   s.URL,
			CertificateAuthorityData: s.caPEM,
		}}},
		AuthInfos:      []clientcmdv1.NamedAuthInfo{{Name: name, AuthInfo: clientcmdv1.AuthInfo{Token: token}}},
		Contexts:       []clientcmdv1.NamedContext{{Name: name, Context: clientcmdv1.Context{Cluster: name, AuthInfo: name}}},
		CurrentContext: name,
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("kubeapitest: kubeconfig: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("kubeapitest: %w", err)
	}
	return nil
}

// errAddrInUse marks a start that failed because a port picked as free was
// taken before the server bound it.
var errAddrInUse = errors.New("address already in use")

// proc is one started server process.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string // "" when logging to Options.Log
	done    chan struct{}
	err     error // cmd.Wait's, once done is closed
}

// run starts the named binary of binDir in its own process group, with its
// output to the log.
func (s *Server) run(name string, args ...string) (*proc, error) {
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(s.binDir, name), args...)
	if name == "kube-apiserver" && s.hostsFile != "" {
		// unshare and sh exec in turn: the process started is the API
		// server's, whose PID stops it.
		p.cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c",
			`mount --bind "$0" /etc/hosts && exec "$@"`, s.hostsFile, filepath.Join(s.binDir, name)}, args...)...)
	}
	p.cmd.Dir = s.Dir
	p.cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own process group: a terminal's Ctrl-C reaches only the
		// test, which then stops it.
		Setpgid: true,
		// A test binary killed outright (go test -timeout panics, SIGKILL)
		// takes its servers with it.
		Pdeathsig: syscall.SIGKILL,
	}
	var logFile *os.File
	if s.logw != nil {
		p.cmd.Stdout, p.cmd.Stderr = s.logw, s.logw
	} else {
		p.logPath = filepath.Join(s.Dir, name+".log")
		var err error
		logFile, err = os.OpenFile(p.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("kubeapitest: %w", err)
		}
		defer logFile.Close() // the child has its own copy
		p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	}
	if logFile != nil {
		// Restarts append; mark where this run's output begins.
		fmt.Fprintf(logFile, "==== kubeapitest: %s %s\n", name, strings.Join(args, " "))
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("kubeapitest: start %s: %w", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitFor polls ok until it returns true, the process exits or timeout
// passes.
func (p *proc) waitFor(timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if p.exited() {
			err := fmt.Errorf("kubeapitest: %s exited (%v)%s", p.name, p.err, p.logTail())
			if strings.Contains(p.logTail(), "address already in use") {
				err = fmt.Errorf("%w: %w", err, errAddrInUse)
			}
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubeapitest: %s not ready after %v%s", p.name, timeout, p.logTail())
		}
		time.Sleep(pollInterval)
	}
	return nil
}

// stop sends SIGTERM to the process (by PID: os.Process holds a pidfd), and
// SIGKILL if it is still running after stopGrace; it returns once the
// process is gone.
func (p *proc) stop() {
	if p.exited() {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.cmd.Process.Kill()
		<-p.done
	}
}

// logTail is the end of this run's log, for errors.
func (p *proc) logTail() string {
	if p.logPath == "" {
		return "; its output went to Options.Log"
	}
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return ""
	}
	if i := bytes.LastIndex(b, []byte("==== kubeapitest: ")); i >= 0 {
		b = b[i:]
	}
	const max = 4000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return "; end of " + p.logPath + ":\n" + string(b)
}

// freePorts returns n distinct ports of 127.0.0.1 that were free just now.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("kubeapitest: free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// lockedWriter serialises the writes of both processes' output copiers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(b)
}
