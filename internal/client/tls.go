package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// The environment variables jailctl reads to reach a daemon's TLS
// listener instead of its socket.
const (
	HostEnv = "JAILD_HOST" // https://HOST:PORT
	CertEnv = "JAILD_CERT" // the client's certificate (PEM)
	KeyEnv  = "JAILD_KEY"  // its private key (PEM)
	CAEnv   = "JAILD_CA"   // the CA certificates that signed the daemon's (PEM)
)

// maxPEMBytes bounds each certificate, key or CA file read: they are a
// few KiB.
const maxPEMBytes = 1 << 20

// NewTLS returns a client of the TLS listener of a daemon at baseURL
// (https://HOST:PORT; the port defaults to 443). It speaks TLS 1.3 only,
// presents the client certificate in certFile with its private key in
// keyFile, and trusts only the CA certificates in caFile to have signed
// the daemon's certificate, which must name HOST. It reads the files now:
// an error names the URL or the file at fault (a missing or unreadable
// file, no PEM certificate or key in it, a key that is not the
// certificate's, a certificate not valid now). It does not connect until
// the first request.
func NewTLS(baseURL, certFile, keyFile, caFile string) (*Client, error) {
	base, addr, serverName, err := parseBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	certPEM, err := readPEM("client certificate", certFile, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM("client key", keyFile, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("client certificate %s and key %s: %w", certFile, keyFile, err)
	}
	// The daemon would refuse a certificate out of its validity with a
	// bare alert; saying so here names the file.
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("client certificate %s: %w", certFile, err)
	}
	if now := time.Now(); now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("client certificate %s: expired at %s", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	} else if now.Before(leaf.NotBefore) {
		return nil, fmt.Errorf("client certificate %s: not valid before %s", certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	caPEM, err := readPEM("CA certificate", caFile, "CERTIFICATE")
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("CA certificate %s: no valid PEM certificate in it", caFile)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		RootCAs:      roots,
		ServerName:   serverName,
		NextProtos:   []string{"http/1.1"},
	}
	dialer := &net.Dialer{Timeout: dialTimeout}
	return newClient("", base, &http.Transport{
		// The handshake is done here, not by the transport, so that its
		// failures are ConnectErrors like the dial's.
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, "tcp", addr)
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				return nil, &ConnectError{Host: base, Err: err}
			}
			hctx, cancel := context.WithTimeout(ctx, dialTimeout)
			defer cancel()
			tc := tls.Client(conn, cfg)
			if err := tc.HandshakeContext(hctx); err != nil {
				conn.Close()
				switch {
				case ctx.Err() != nil:
					return nil, err
				case hctx.Err() != nil:
					err = fmt.Errorf("no TLS handshake within %s", dialTimeout)
				}
				return nil, &ConnectError{Host: base, Err: err}
			}
			return tc, nil
		},
	}), nil
}

// parseBaseURL checks a TLS listener's URL: https, a host, nothing but an
// optional "/" after it. It returns the URL requests are made under, the
// address to dial and the name the daemon's certificate must have.
func parseBaseURL(s string) (base, addr, serverName string, err error) {
	bad := func(why string) error {
		return fmt.Errorf("jaild URL %q: %s; want https://HOST:PORT", s, why)
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", "", "", bad(err.Error())
	case u.Scheme != "https":
		return "", "", "", bad("not https://")
	case u.Hostname() == "":
		return "", "", "", bad("no host")
	case u.User != nil:
		return "", "", "", bad("a user name is not used")
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "", u.Opaque != "":
		return "", "", "", bad("a path, query or fragment is not used")
	}
	port := u.Port()
	if port == "" {
		if strings.HasSuffix(u.Host, ":") {
			return "", "", "", bad("empty port")
		}
		port = "443"
	}
	addr = net.JoinHostPort(u.Hostname(), port)
	return "https://" + addr, addr, u.Hostname(), nil
}

// readPEM reads what (a file of PEM blocks) of at most maxPEMBytes and
// checks that it has a block whose type ends in blockType.
func readPEM(what, file, blockType string) ([]byte, error) {
	if file == "" {
		return nil, fmt.Errorf("%s: no file given", what)
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPEMBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(b) > maxPEMBytes {
		return nil, fmt.Errorf("%s %s: larger than %d bytes", what, file, maxPEMBytes)
	}
	for rest := b; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("%s %s: no PEM %s in it", what, file, strings.ToLower(blockType))
		}
		if strings.HasSuffix(block.Type, blockType) {
			return b, nil
		}
	}
}
