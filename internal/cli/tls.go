package cli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Where serve --tls-self-signed keeps its certificate and key.
const (
	selfSignedCert = "tls-cert.pem"
	selfSignedKey  = "tls-key.pem"
)

// serveTLS loads serve's certificate and key, so that a bad one stops
// serve before it makes anything: nil without TLS. With selfSigned it
// makes (once) and uses the data directory's self-signed certificate, and
// says where it is and its fingerprint.
func serveTLS(e *env, dataDir, certFile, keyFile string, selfSigned bool) (*tls.Config, error) {
	if selfSigned {
		if certFile != "" || keyFile != "" {
			return nil, errors.New("--tls-self-signed makes its own certificate: leave out --tls-cert and --tls-key")
		}
		certFile, keyFile = filepath.Join(dataDir, selfSignedCert), filepath.Join(dataDir, selfSignedKey)
		if err := ensureSelfSigned(certFile, keyFile); err != nil {
			return nil, err
		}
	}
	if certFile == "" && keyFile == "" {
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	if selfSigned {
		sum := sha256.Sum256(cert.Certificate[0])
		hexes := make([]string, len(sum))
		for i, b := range sum {
			hexes[i] = fmt.Sprintf("%02X", b)
		}
		fmt.Fprintf(e.errOut, "self-signed TLS certificate %s\n  SHA-256 %s\n  clients trust it with --ca %s (copy it to each host)\n",
			certFile, strings.Join(hexes, ":"), certFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// ensureSelfSigned writes an ECDSA P-256 key and a self-signed certificate
// for 127.0.0.1, ::1, localhost and this host's name, unless both are
// there already.
func ensureSelfSigned(certFile, keyFile string) error {
	return ensureSelfSignedFor(certFile, keyFile, "gpuslice serve "+hostName(), nil)
}

// ensureSelfSignedFor is ensureSelfSigned with a common name and DNS
// names of the caller's besides.
func ensureSelfSignedFor(certFile, keyFile, commonName string, extra []string) error {
	_, cerr := os.Stat(certFile)
	_, kerr := os.Stat(keyFile)
	if cerr == nil && kerr == nil {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return err
	}
	names := []string{"localhost"}
	if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
		names = append(names, h)
		if short := hostName(); short != h && short != "localhost" {
			names = append(names, short)
		}
	}
	names = append(names, extra...)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		DNSNames:              names,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", keyFile, err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", certFile, err)
	}
	return nil
}

// httpClientWithCA is an HTTP client that trusts the PEM certificates in
// caFile for https, besides the system's roots.
func httpClientWithCA(caFile string) (*http.Client, error) {
	pemData, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pemData) {
		return nil, fmt.Errorf("--ca %s: no PEM certificate in it", caFile)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return &http.Client{Timeout: 90 * time.Second, Transport: tr}, nil
}
