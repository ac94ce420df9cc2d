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
	servingCert, servingKey string // self-signed, for 127.0.0.1 and localhost
	serviceAccountKey       string // RSA private key (PKCS#1 PEM): signs and verifies service account tokens
	tokenFile               string // --token-auth-file: the admin token
}

// writeCredentials writes the serving certificate and key, the service
// account key and the static token file into dir and returns the admin token.
func writeCredentials(dir string) (files, string, error) {
	f := files{
		servingCert:       filepath.Join(dir, "serving.crt"),
		servingKey:        filepath.Join(dir, "serving.key"),
		serviceAccountKey: filepath.Join(dir, "sa.key"),
		tokenFile:         filepath.Join(dir, "tokens.csv"),
	}
	certPEM, keyPEM, err := selfSignedCert()
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
	} {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
			return files{}, "", fmt.Errorf("kubeapitest: %w", err)
		}
	}
	return f, token, nil
}

// selfSignedCert is a serving certificate for 127.0.0.1 and localhost that
// is its own CA, so clients can verify the server with it alone.
func selfSignedCert() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeapitest: serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, fmt.Errorf("kubeapitest: serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kubeapitest"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeapitest: serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeapitest: serving key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), nil
}
