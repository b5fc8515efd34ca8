package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// pki holds the files kube-apiserver is started with and the client
// credentials the tests use. Everything is ECDSA P-256: generating it takes
// milliseconds.
type pki struct {
	caFile, servingCert, servingKey string // serving and client CA is the same
	saKey, saPub                    string // service-account signing key pair

	caPEM, clientCertPEM, clientKeyPEM []byte
	clientCert, clientKey              string // the admin client pair, as files (the API server's kubelet client)

	ca     *x509.Certificate
	caKey  crypto.Signer
	serial int64
	mu     sync.Mutex
}

// writePKI writes the CA, the serving pair (valid for 127.0.0.1 and
// localhost, and for servingIPs), the admin client pair and the
// service-account keys into dir.
func writePKI(dir string, servingIPs ...net.IP) (*pki, error) {
	p := &pki{
		caFile:      filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		saKey:       filepath.Join(dir, "sa.key"),
		saPub:       filepath.Join(dir, "sa.pub"),
		clientCert:  filepath.Join(dir, "admin.crt"),
		clientKey:   filepath.Join(dir, "admin.key"),
		serial:      100,
	}
	now := time.Now().Add(-time.Hour)
	notAfter := now.Add(10 * 24 * time.Hour)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gpuslice-apitest-ca"},
		NotBefore:             now,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	p.ca, p.caKey = ca, caKey

	leaf := func(serial int64, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = now, notAfter
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
		if err != nil {
			return nil, nil, err
		}
		keyPEM, err = encodeKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, err
	}

	servingPEM, servingKeyPEM, err := leaf(2, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: append([]net.IP{net.IPv4(127, 0, 0, 1)}, servingIPs...),
		DNSNames:    []string{"localhost"},
	})
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	// system:masters bypasses authorization, so RBAC stays on for anything
	// else a test wants to try.
	p.clientCertPEM, p.clientKeyPEM, err = leaf(3, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "gpuslice-apitest-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("client certificate: %w", err)
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := encodeKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return nil, err
	}

	for _, f := range []struct {
		path string
		data []byte
	}{
		{p.caFile, p.caPEM},
		{p.servingCert, servingPEM},
		{p.servingKey, servingKeyPEM},
		{p.saKey, saKeyPEM},
		{p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})},
		{p.clientCert, p.clientCertPEM},
		{p.clientKey, p.clientKeyPEM},
	} {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// issue signs a new leaf certificate for tmpl with the CA and returns the
// PEM pair. Serial numbers are unique per pki.
func (p *pki) issue(tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	p.serial++
	tmpl.SerialNumber = big.NewInt(p.serial)
	p.mu.Unlock()
	tmpl.NotBefore, tmpl.NotAfter = p.ca.NotBefore, p.ca.NotAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, key.Public(), p.caKey)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = encodeKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, err
}

// ClientCert issues a client certificate the API server trusts, for the user
// cn in the groups orgs (a kubelet is "system:node:NAME" in "system:nodes").
func (s *Server) ClientCert(cn string, orgs ...string) (certPEM, keyPEM []byte, err error) {
	return s.pki.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// ServingCert issues a serving certificate for ips and names, signed by the
// CA the API server's clients trust.
func (s *Server) ServingCert(cn string, ips []net.IP, names []string) (certPEM, keyPEM []byte, err error) {
	return s.pki.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: ips,
		DNSNames:    names,
	})
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
