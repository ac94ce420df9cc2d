package kubeapitest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// files are the credentials one Server is started with; a restarted
// kube-apiserver gets the same ones.
type files struct {
	servingCert, servingKey string // self-signed, for 127.0.0.1, localhost and Options.ServingIPs
	serviceAccountKey       string // RSA private key (PKCS#1 PEM): signs and verifies service account tokens
	tokenFile               string // --token-auth-file: the admin token
	// clientCA signs client certificates (ClientCert): --client-ca-file,
	// with its key beside it.
	clientCA, clientCAKey string
}

// writeCredentials writes the serving certificate (for 127.0.0.1,
// localhost and ips) and key, the service account key and the static token
// file into dir and returns the admin token.
func writeCredentials(dir string, ips []net.IP) (files, string, error) {
	f := files{
		servingCert:       filepath.Join(dir, "serving.crt"),
		servingKey:        filepath.Join(dir, "serving.key"),
		serviceAccountKey: filepath.Join(dir, "sa.key"),
		tokenFile:         filepath.Join(dir, "tokens.csv"),
		clientCA:          filepath.Join(dir, "client-ca.crt"),
		clientCAKey:       filepath.Join(dir, "client-ca.key"),
	}
	certPEM, keyPEM, err := selfSignedCert(ips)
	if err != nil {
		return files{}, "", err
	}
	caPEM, caKeyPEM, err := newCert(&x509.Certificate{
		Subject:  pkix.Name{CommonName: "kubeapitest-client-ca"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		IsCA:     true,
	}, nil, nil)
	if err != nil {
		return files{}, "", err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return files{}, "", fmt.Errorf("kubeapitest: service account key: %w", err)
	}
	saPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)})
	tok := make([]byte, 32)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	// token,user,uid,"group,group"
	tokens := fmt.Sprintf("%s,%s,%s,%q\n", token, AdminUser, AdminUser, "system:masters")
	for _, w := range []struct {
		path string
		data []byte
	}{
		{f.servingCert, certPEM},
		{f.servingKey, keyPEM},
		{f.serviceAccountKey, saPEM},
		{f.tokenFile, []byte(tokens)},
		{f.clientCA, caPEM},
		{f.clientCAKey, caKeyPEM},
	} {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
			return files{}, "", fmt.Errorf("kubeapitest: %w", err)
		}
	}
	return f, token, nil
}

// selfSignedCert is a serving certificate for 127.0.0.1, localhost and ips
// that is its own CA, so clients can verify the server with it alone.
func selfSignedCert(ips []net.IP) (certPEM, keyPEM []byte, err error) {
	return newCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kubeapitest"},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:        true,
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1)}, ips...),
		DNSNames:    []string{"localhost"},
	}, nil, nil)
}

// newCert makes a P-256 key and a certificate of tmpl (a serial and a
// validity of an hour ago to a day from now added) for it, signed by
// parent with parentKey, or self-signed when parent is nil.
func newCert(tmpl *x509.Certificate, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeapitest: key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, fmt.Errorf("kubeapitest: serial: %w", err)
	}
	now := time.Now()
	tmpl.SerialNumber = serial
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Hour), now.Add(24*time.Hour)
	tmpl.BasicConstraintsValid = true
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeapitest: certificate %s: %w", tmpl.Subject.CommonName, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeapitest: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}

// ClientCert issues a client certificate for user in groups (the
// certificate's CN and O, as the API server reads them), signed by the
// server's client CA: e.g. a kubelet's "system:node:<name>" in
// "system:nodes", which the Node authorizer (Options.NodeAuthorization)
// lets write only its own Node.
func (s *Server) ClientCert(user string, groups ...string) (certPEM, keyPEM []byte, err error) {
	caPEM, err := os.ReadFile(s.files.clientCA)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeapitest: %w", err)
	}
	caKeyPEM, err := os.ReadFile(s.files.clientCAKey)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeapitest: %w", err)
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(caKeyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("kubeapitest: %s or its key is not PEM", s.files.clientCA)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeapitest: client CA: %w", err)
	}
	caKey, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeapitest: client CA key: %w", err)
	}
	return newCert(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, ca, caKey)
}
