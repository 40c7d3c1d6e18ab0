package cli

import (
	"bufio"
	"context"
	"io"
	"log"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/tlsauth"
	"github.com/jaild/jaild/internal/tlsauth/tlsauthtest"
)

// tlsFake is servertest's daemon on a TLS listener as jaild's (tlsauth's
// configuration: TLS 1.3, client certificates of its client CA that match
// the client agent-a), recording "METHOD /path CLIENT-CN" of each request
// there; sock is the same daemon's socket.
type tlsFake struct {
	url, sock            string
	cert, key, ca        string // agent-a's certificate and key, and the daemon's CA
	strangerCert, strKey string // a certificate of the client CA that no client matches
	mu                   sync.Mutex
	seen                 []string
}

func newTLSFake(t *testing.T) *tlsFake {
	t.Helper()
	dir := t.TempDir()
	serverCA, clientCA := tlsauthtest.NewCA(t, "server CA"), tlsauthtest.NewCA(t, "client CA")
	cfg := config.Default()
	cfg.TLS.Cert, cfg.TLS.Key = serverCA.Server(t).Write(t, dir, "server")
	cfg.TLS.ClientCA = clientCA.Write(t, dir, "client-ca.crt")
	cfg.TLS.Clients = []config.TLSClient{{Name: "agent-a"}}
	st, err := tlsauth.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := &tlsFake{ca: serverCA.Write(t, dir, "ca.crt")}
	f.cert, f.key = clientCA.Client(t, "agent-a").Write(t, dir, "agent-a")
	f.strangerCert, f.strKey = clientCA.Client(t, "stranger").Write(t, dir, "stranger")
	h := newDaemon(t, func(c *config.Config) { *c = cfg })
	f.sock = h.Socket
	f.url = "https://" + h.ServeTLS(t, tlsauth.New(st), func(hs *http.Server) {
		next := hs.Handler
		hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.seen = append(f.seen, r.Method+" "+r.URL.Path+" "+r.TLS.PeerCertificates[0].Subject.CommonName)
			f.mu.Unlock()
			next.ServeHTTP(w, r)
		})
		hs.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are some tests' point
	})
	return f
}

// take returns the requests seen since the last take.
func (f *tlsFake) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.seen
	f.seen = nil
	return s
}

// clearTargetEnv unsets the variables that choose the daemon.
func clearTargetEnv(t *testing.T) {
	for _, v := range []string{"JAILD_SOCKET", "JAILD_HOST", "JAILD_CERT", "JAILD_KEY", "JAILD_CA"} {
		t.Setenv(v, "")
	}
}

// TestTLSTarget: --host, --cert, --key and --ca, given to the command or
// to jailctl, or taken from the environment, reach the daemon's TLS
// listener as the client of the certificate; flags win over the
// environment, a command's over jailctl's.
func TestTLSTarget(t *testing.T) {
	f := newTLSFake(t)
	flags := []string{"--host", f.url, "--cert", f.cert, "--key", f.key, "--ca", f.ca}
	env := func(t *testing.T) {
		t.Setenv("JAILD_HOST", f.url)
		t.Setenv("JAILD_CERT", f.cert)
		t.Setenv("JAILD_KEY", f.key)
		t.Setenv("JAILD_CA", f.ca)
	}
	tests := []struct {
		name   string
		env    func(*testing.T)
		args   []string
		seen   string // the TLS listener's request; "" for none
		stdout string
	}{
		{name: "command flags", args: append([]string{"health"}, flags...), seen: "GET /v1/health agent-a", stdout: "ok\n"},
		{name: "jailctl's flags", args: append(slices.Clone(flags), "info", "--json"), seen: "GET /v1/info agent-a", stdout: `"client":"agent-a"`},
		{name: "info names the client", args: append(slices.Clone(flags), "info"), seen: "GET /v1/info agent-a", stdout: `client "agent-a" (uid `},
		{name: "environment", env: env, args: []string{"health"}, seen: "GET /v1/health agent-a", stdout: "ok\n"},
		{name: "flags over the environment", env: func(t *testing.T) {
			t.Setenv("JAILD_HOST", "https://127.0.0.1:1")
			t.Setenv("JAILD_CERT", f.strangerCert)
			t.Setenv("JAILD_KEY", f.strKey)
			t.Setenv("JAILD_CA", "/nonexistent/ca.crt")
		}, args: append([]string{"health"}, flags...), seen: "GET /v1/health agent-a", stdout: "ok\n"},
		{name: "the environment completes the flags", env: func(t *testing.T) {
			t.Setenv("JAILD_KEY", f.key)
			t.Setenv("JAILD_CA", f.ca)
		}, args: []string{"health", "--host", f.url, "--cert", f.cert}, seen: "GET /v1/health agent-a", stdout: "ok\n"},
		{name: "a command's flag over jailctl's", args: []string{"--host", "https://127.0.0.1:1", "--cert", f.strangerCert, "--key", f.strKey, "--ca", f.ca,
			"health", "--host", f.url, "--cert", f.cert, "--key", f.key}, seen: "GET /v1/health agent-a", stdout: "ok\n"},
		{name: "--socket over JAILD_HOST", env: env, args: []string{"health", "--socket", f.sock}, stdout: "ok\n"},
		{name: "--host over JAILD_SOCKET", env: func(t *testing.T) { t.Setenv("JAILD_SOCKET", "/nonexistent/jaild.sock") },
			args: append([]string{"health"}, flags...), seen: "GET /v1/health agent-a", stdout: "ok\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearTargetEnv(t)
			if tt.env != nil {
				tt.env(t)
			}
			f.take()
			r := jailctl(t, "", "", tt.args...)
			if r.code != exitOK || !strings.Contains(r.stdout, tt.stdout) {
				t.Fatalf("%q: exit %d, stdout %q, stderr %q; want 0 and %q", tt.args, r.code, r.stdout, r.stderr, tt.stdout)
			}
			var want []string
			if tt.seen != "" {
				want = []string{tt.seen}
			}
			if got := f.take(); !slices.Equal(got, want) {
				t.Errorf("the TLS listener saw %q, want %q", got, want)
			}
		})
	}
}

// TestTLSTargetMCPAndWeb: mcp and web reach the daemon with the same
// client, so --host takes them to the TLS listener too.
func TestTLSTargetMCPAndWeb(t *testing.T) {
	clearTargetEnv(t)
	f := newTLSFake(t)
	flags := []string{"--host", f.url, "--cert", f.cert, "--key", f.key, "--ca", f.ca}

	// mcp asks for /v1/info at its start; stdin at its end stops it.
	r := jailctl(t, "", "", append([]string{"mcp"}, flags...)...)
	if r.code != exitOK {
		t.Errorf("mcp: exit %d, stderr %q", r.code, r.stderr)
	}
	if got := f.take(); !slices.Contains(got, "GET /v1/info agent-a") {
		t.Errorf("mcp: the TLS listener saw %q, want GET /v1/info from agent-a", got)
	}

	// web checks the daemon's health before it prints its URL.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	var stderr strings.Builder
	go func() {
		done <- Main(ctx, append([]string{"web", "--http", "127.0.0.1:0"}, flags...), strings.NewReader(""), outW, &stderr)
		outW.Close()
	}()
	if _, err := bufio.NewReader(outR).ReadString('\n'); err != nil {
		t.Fatalf("web printed no URL: %v", err)
	}
	cancel()
	go io.Copy(io.Discard, outR)
	if code := <-done; code != exitOK {
		t.Errorf("web: exit %d, stderr %q", code, stderr.String())
	}
	if got := f.take(); !slices.Equal(got, []string{"GET /v1/health agent-a"}) {
		t.Errorf("web: the TLS listener saw %q, want GET /v1/health from agent-a", got)
	}
}

// TestTLSTargetErrors: contradicting or incomplete choices of the daemon
// are usage errors naming the flags and variables at fault; a file that
// does not load and a refused certificate are errors naming them.
func TestTLSTargetErrors(t *testing.T) {
	f := newTLSFake(t)
	missing := filepath.Join(t.TempDir(), "missing.crt")
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"--host and --socket", nil, []string{"health", "--host", f.url, "--socket", "/run/x.sock", "--cert", f.cert, "--key", f.key, "--ca", f.ca},
			"jailctl: --host and --socket: give one"},
		{"--host and jailctl's --socket", nil, []string{"--socket", "/run/x.sock", "health", "--host", f.url},
			"jailctl: --host and --socket: give one"},
		{"--host alone", nil, []string{"health", "--host", f.url},
			"jailctl: --host " + f.url + " needs the client's certificate and key and the CA of the daemon's certificate: missing --cert (or $JAILD_CERT), --key (or $JAILD_KEY), --ca (or $JAILD_CA)"},
		{"--host without --ca", nil, []string{"health", "--host", f.url, "--cert", f.cert, "--key", f.key},
			"missing --ca (or $JAILD_CA)\n"},
		{"JAILD_HOST without a key", map[string]string{"JAILD_HOST": f.url, "JAILD_CERT": f.cert, "JAILD_CA": f.ca}, []string{"health"},
			"jailctl: $JAILD_HOST " + f.url + " needs the client's certificate and key and the CA of the daemon's certificate: missing --key (or $JAILD_KEY)\n"},
		{"http://", nil, []string{"health", "--host", "http://127.0.0.1:7443", "--cert", f.cert, "--key", f.key, "--ca", f.ca},
			`jailctl: --host "http://127.0.0.1:7443": not an https:// URL; want https://HOST:PORT`},
		{"no scheme", map[string]string{"JAILD_HOST": "127.0.0.1:7443", "JAILD_CERT": f.cert, "JAILD_KEY": f.key, "JAILD_CA": f.ca}, []string{"health"},
			`jailctl: $JAILD_HOST "127.0.0.1:7443": not an https:// URL`},
		{"a path", nil, []string{"health", "--host", f.url + "/v1", "--cert", f.cert, "--key", f.key, "--ca", f.ca},
			"a path, query or fragment is not used; want https://HOST:PORT"},
		{"both variables", map[string]string{"JAILD_HOST": f.url, "JAILD_SOCKET": "/run/x.sock"}, []string{"health"},
			"jailctl: $JAILD_HOST and $JAILD_SOCKET are both set"},
		{"--cert with a socket", nil, []string{"health", "--socket", "/run/x.sock", "--cert", f.cert},
			"jailctl: --cert is for --host (a daemon's TLS listener), not for a socket"},
		{"a missing file", nil, []string{"health", "--host", f.url, "--cert", missing, "--key", f.key, "--ca", f.ca},
			"jailctl: client certificate: open " + missing + ": no such file or directory\n"},
		{"a key that is no key", nil, []string{"health", "--host", f.url, "--cert", f.cert, "--key", f.ca, "--ca", f.ca},
			"jailctl: client key " + f.ca + ": no PEM private key in it\n"},
		{"a certificate no client matches", nil, []string{"health", "--host", f.url, "--cert", f.strangerCert, "--key", f.strKey, "--ca", f.ca},
			"jailctl: cannot connect to jaild at " + f.url + ": remote error: tls: bad certificate (the daemon refused this client's certificate"},
		{"doctor", nil, []string{"--host", f.url, "doctor"},
			"jailctl: doctor checks this host and the daemon on its socket: --host, --cert, --key and --ca are not for it"},
		{"doctor has no --host", nil, []string{"doctor", "--host", f.url},
			"flag provided but not defined: -host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearTargetEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			f.take()
			r := jailctl(t, "", "", tt.args...)
			if r.code != exitError || !strings.Contains(r.stderr, tt.want) || r.stdout != "" {
				t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", tt.args, r.code, r.stdout, r.stderr, tt.want)
			}
			if got := f.take(); len(got) > 0 {
				t.Errorf("the TLS listener answered %q", got)
			}
		})
	}
}
