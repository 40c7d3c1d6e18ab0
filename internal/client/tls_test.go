package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/tlsauth"
	"github.com/jaild/jaild/internal/tlsauth/tlsauthtest"
)

// tlsDaemon is a TLS listener as jaild's: tlsauth's configuration (TLS
// 1.3, client certificates of caName's CA that match a client named
// agent-a), serving h.
type tlsDaemon struct {
	url      string
	dir      string
	serverCA *tlsauthtest.CA // signed the daemon's certificate
	clientCA *tlsauthtest.CA // signs the clients'
}

func newTLSDaemon(t *testing.T, h http.Handler, server func(*tlsauthtest.CA) *tlsauthtest.Leaf) *tlsDaemon {
	t.Helper()
	d := &tlsDaemon{dir: t.TempDir(), serverCA: tlsauthtest.NewCA(t, "server CA"), clientCA: tlsauthtest.NewCA(t, "client CA")}
	if server == nil {
		server = func(ca *tlsauthtest.CA) *tlsauthtest.Leaf { return ca.Server(t) }
	}
	cfg := config.Default()
	cfg.TLS.Cert, cfg.TLS.Key = server(d.serverCA).Write(t, d.dir, "server")
	cfg.TLS.ClientCA = d.clientCA.Write(t, d.dir, "client-ca.crt")
	cfg.TLS.Clients = []config.TLSClient{{Name: "agent-a"}}
	st, err := tlsauth.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0)} // refused handshakes are the tests' point
	go func() { _ = srv.Serve(tls.NewListener(ln, tlsauth.New(st).TLSConfig())) }()
	t.Cleanup(func() { srv.Close() })
	d.url = "https://" + ln.Addr().String()
	return d
}

// files writes a client certificate of ca with common name cn, its key,
// and the daemon's CA, and returns their paths.
func (d *tlsDaemon) files(t *testing.T, ca *tlsauthtest.CA, cn string) (cert, key, caFile string) {
	t.Helper()
	cert, key = ca.Client(t, cn).Write(t, d.dir, "client-"+cn)
	return cert, key, d.serverCA.Write(t, d.dir, "server-ca.crt")
}

// TestTLS: a client of NewTLS reaches the daemon over TLS 1.3 with its
// certificate, and every request (typed or Do) goes to the daemon's URL.
func TestTLS(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	d := newTLSDaemon(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.TLS.PeerCertificates[0].Subject.CommonName+" "+tls.VersionName(r.TLS.Version)+" "+r.Proto)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/health":
			io.WriteString(w, `{"status":"ok"}`)
		case "/v1/execute":
			io.WriteString(w, `{"run_id":"r1","status":"ok","exit_code":0,"signal":null,"stdout":"1\n","stderr":"","files":[],"figures":[],"usage":{"duration_ms":1}}`)
		default:
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"type":"not_found","message":"no endpoint"}}`)
		}
	}), nil)
	cert, key, ca := d.files(t, d.clientCA, "agent-a")
	c, err := NewTLS(d.url+"/", cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	if c.Socket() != "" {
		t.Errorf("Socket() = %q for a TLS client", c.Socket())
	}
	ctx := context.Background()
	if h, err := c.Health(ctx); err != nil || h.Status != "ok" {
		t.Fatalf("Health = %+v, %v", h, err)
	}
	if r, err := c.Execute(ctx, &api.ExecuteRequest{Code: "print(1)"}); err != nil || r.Stdout != "1\n" {
		t.Errorf("Execute = %+v, %v", r, err)
	}
	_, err = c.Do(ctx, http.MethodGet, "/v1/nope", nil)
	var ce *Error
	if !errors.As(err, &ce) || ce.Err.Status != 404 {
		t.Errorf("Do /v1/nope: %v; want the daemon's 404", err)
	}
	want := []string{
		"GET /v1/health agent-a TLS 1.3 HTTP/1.1",
		"POST /v1/execute agent-a TLS 1.3 HTTP/1.1",
		"GET /v1/nope agent-a TLS 1.3 HTTP/1.1",
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("the daemon saw\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}

// TestTLSConnectErrors: each way of failing to reach a TLS listener is a
// *ConnectError naming the URL, whose hint says what to fix.
func TestTLSConnectErrors(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"status":"ok"}`) })
	d := newTLSDaemon(t, ok, nil)
	other := tlsauthtest.NewCA(t, "another CA")
	misnamed := newTLSDaemon(t, ok, func(ca *tlsauthtest.CA) *tlsauthtest.Leaf {
		return ca.Issue(t, tlsauthtest.Template{CN: "jaild", Server: true, DNS: []string{"jaild.example"}})
	})
	expired := newTLSDaemon(t, ok, func(ca *tlsauthtest.CA) *tlsauthtest.Leaf {
		return ca.Issue(t, tlsauthtest.Template{CN: "jaild", Server: true, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
			NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	})
	plain := httptest.NewServer(ok)
	defer plain.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURL := "https://" + closed.Addr().String()
	closed.Close()

	cert, key, ca := d.files(t, d.clientCA, "agent-a")
	tests := []struct {
		name           string
		url            string
		cert, key, ca  string
		hint           string
		is             error
		unknownAuthErr bool
	}{
		{name: "a client no [[tls.clients]] names", url: d.url, hint: "the daemon refused this client's certificate"},
		{name: "a client certificate of another CA", url: d.url, hint: "the daemon refused this client's certificate"},
		{name: "a daemon certificate of a CA not in --ca", url: d.url, hint: "not signed by a CA of JAILD_CA or --ca", unknownAuthErr: true},
		{name: "a daemon certificate for another name", url: misnamed.url, hint: "does not name the host of the URL"},
		{name: "an expired daemon certificate", url: expired.url, hint: "not valid now"},
		{name: "nothing listening", url: closedURL, hint: "with its tls.listen on that address", is: syscall.ECONNREFUSED},
		{name: "not TLS", url: "https://" + plain.Listener.Addr().String(), hint: "does not speak TLS"},
	}
	tests[0].cert, tests[0].key, tests[0].ca = d.files(t, d.clientCA, "stranger")
	tests[1].cert, tests[1].key, tests[1].ca = d.files(t, other, "agent-a")
	tests[2].cert, tests[2].key, tests[2].ca = cert, key, other.Write(t, d.dir, "other-ca.crt")
	tests[3].cert, tests[3].key, tests[3].ca = misnamed.files(t, misnamed.clientCA, "agent-a")
	tests[4].cert, tests[4].key, tests[4].ca = expired.files(t, expired.clientCA, "agent-a")
	for i := 5; i < len(tests); i++ {
		tests[i].cert, tests[i].key, tests[i].ca = cert, key, ca
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewTLS(tt.url, tt.cert, tt.key, tt.ca)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Health(context.Background())
			var ce *ConnectError
			if !errors.As(err, &ce) || ce.Host != tt.url || ce.Socket != "" {
				t.Fatalf("err = %#v (%v); want a ConnectError for %s", err, err, tt.url)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "cannot connect to jaild at "+tt.url+": ") || !strings.Contains(msg, tt.hint) {
				t.Errorf("message %q; want the URL and the hint %q", msg, tt.hint)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err %v is not %v", err, tt.is)
			}
			if tt.unknownAuthErr && !errors.As(err, &x509.UnknownAuthorityError{}) {
				t.Errorf("err %v does not unwrap to x509.UnknownAuthorityError", err)
			}
		})
	}
}

// TestNewTLSErrors: a bad URL or file is refused before any connection,
// naming the URL or the file and what is wrong with it.
func TestNewTLSErrors(t *testing.T) {
	dir := t.TempDir()
	ca := tlsauthtest.NewCA(t, "CA")
	cert, key := ca.Client(t, "agent-a").Write(t, dir, "client")
	_, otherKey := ca.Client(t, "agent-b").Write(t, dir, "other")
	caFile := ca.Write(t, dir, "ca.crt")
	oldCert, oldKey := ca.Issue(t, tlsauthtest.Template{CN: "agent-a", NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)}).Write(t, dir, "old")
	futureCert, futureKey := ca.Issue(t, tlsauthtest.Template{CN: "agent-a", NotBefore: time.Now().Add(time.Hour)}).Write(t, dir, "future")
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.pem")
	if err := os.WriteFile(big, make([]byte, maxPEMBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.crt")
	const url = "https://jaild.example:7443"
	tests := []struct {
		url, cert, key, ca string
		want               string
	}{
		{"http://jaild.example:7443", cert, key, caFile, `jaild URL "http://jaild.example:7443": not https://; want https://HOST:PORT`},
		{"jaild.example:7443", cert, key, caFile, "not https://"},
		{"https://:7443", cert, key, caFile, "no host"},
		{"https://jaild.example:", cert, key, caFile, "empty port"},
		{"https://jaild.example:7443/v1", cert, key, caFile, "a path, query or fragment is not used"},
		{"https://jaild.example:7443?x=1", cert, key, caFile, "a path, query or fragment is not used"},
		{"https://u:p@jaild.example:7443", cert, key, caFile, "a user name is not used"},
		{"https://jaild.example:port", cert, key, caFile, `invalid port ":port"`},
		{url, missing, key, caFile, "client certificate: open " + missing + ": no such file or directory"},
		{url, "", key, caFile, "client certificate: no file given"},
		{url, junk, key, caFile, "client certificate " + junk + ": no PEM certificate in it"},
		{url, key, key, caFile, "client certificate " + key + ": no PEM certificate in it"},
		{url, big, key, caFile, "client certificate " + big + ": larger than 1048576 bytes"},
		{url, cert, missing, caFile, "client key: open " + missing},
		{url, cert, cert, caFile, "client key " + cert + ": no PEM private key in it"},
		{url, cert, otherKey, caFile, "client certificate " + cert + " and key " + otherKey + ": tls: private key does not match public key"},
		{url, oldCert, oldKey, caFile, "client certificate " + oldCert + ": expired at "},
		{url, futureCert, futureKey, caFile, "client certificate " + futureCert + ": not valid before "},
		{url, cert, key, missing, "CA certificate: open " + missing},
		{url, cert, key, key, "CA certificate " + key + ": no PEM certificate in it"},
	}
	for _, tt := range tests {
		c, err := NewTLS(tt.url, tt.cert, tt.key, tt.ca)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewTLS(%q, %q, %q, %q) = %v, %v; want an error with %q", tt.url, tt.cert, tt.key, tt.ca, c, err, tt.want)
		}
	}
	// An IPv6 literal and the default port.
	for in, want := range map[string]string{"https://[::1]:7443": "https://[::1]:7443", "https://jaild.example": "https://jaild.example:443"} {
		c, err := NewTLS(in, cert, key, caFile)
		if err != nil {
			t.Errorf("NewTLS(%q): %v", in, err)
		} else if c.base != want {
			t.Errorf("NewTLS(%q): base %s, want %s", in, c.base, want)
		}
	}
}
