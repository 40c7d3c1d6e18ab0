// Package tlsauthtest makes certificate authorities, server and client
// certificates for tests of the mutual-TLS listener, and the files and
// client configurations that use them.
package tlsauthtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	PEM  []byte // Cert, PEM-encoded
	key  *ecdsa.PrivateKey
}

// Leaf is a certificate a CA signed, with its key.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
	TLS     tls.Certificate
}

// Template describes a leaf. A zero NotBefore means an hour ago, a zero
// NotAfter a day from now.
type Template struct {
	CN        string
	DNS       []string
	URIs      []string
	IPs       []net.IP
	NotBefore time.Time
	NotAfter  time.Time
	Server    bool // a server certificate (else a client's)
}

// NewCA makes a self-signed CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Cert: cert, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}
}

// Issue signs a leaf described by tm.
func (ca *CA) Issue(t testing.TB, tm Template) *Leaf {
	t.Helper()
	key := newKey(t)
	if tm.NotBefore.IsZero() {
		tm.NotBefore = time.Now().Add(-time.Hour)
	}
	if tm.NotAfter.IsZero() {
		tm.NotAfter = time.Now().Add(24 * time.Hour)
	}
	usage := x509.ExtKeyUsageClientAuth
	if tm.Server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: tm.CN},
		DNSNames:     tm.DNS,
		IPAddresses:  tm.IPs,
		NotBefore:    tm.NotBefore,
		NotAfter:     tm.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, s := range tm.URIs {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, u)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	l := &Leaf{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})}
	if l.TLS, err = tls.X509KeyPair(l.CertPEM, l.KeyPEM); err != nil {
		t.Fatal(err)
	}
	return l
}

// Server issues a server certificate for 127.0.0.1, ::1 and localhost.
func (ca *CA) Server(t testing.TB) *Leaf {
	t.Helper()
	return ca.Issue(t, Template{CN: "jaild", Server: true, DNS: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}})
}

// Client issues a client certificate with subject common name cn.
func (ca *CA) Client(t testing.TB, cn string) *Leaf {
	t.Helper()
	return ca.Issue(t, Template{CN: cn})
}

// Write writes the CA's certificate to dir/name and returns its path.
func (ca *CA) Write(t testing.TB, dir, name string) string {
	t.Helper()
	return write(t, filepath.Join(dir, name), ca.PEM)
}

// Write writes the leaf's certificate and key to dir/name.crt and
// dir/name.key (mode 0600) and returns their paths.
func (l *Leaf) Write(t testing.TB, dir, name string) (cert, key string) {
	t.Helper()
	return write(t, filepath.Join(dir, name+".crt"), l.CertPEM), write(t, filepath.Join(dir, name+".key"), l.KeyPEM)
}

// ClientConfig is a TLS 1.3 client configuration that trusts server (the
// CA of the server's certificate) and presents leaf (none when nil).
func ClientConfig(server *CA, leaf *Leaf) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(server.Cert)
	c := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13}
	if leaf != nil {
		c.Certificates = []tls.Certificate{leaf.TLS}
	}
	return c
}

func write(t testing.TB, p string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
