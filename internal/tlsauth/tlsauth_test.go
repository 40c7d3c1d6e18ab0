package tlsauth_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/tlsauth"
	"github.com/jaild/jaild/internal/tlsauth/tlsauthtest"
)

// fixture is a CA with a server certificate and its files, and a second
// CA that the listener does not trust.
type fixture struct {
	dir                 string
	ca, other           *tlsauthtest.CA
	server              *tlsauthtest.Leaf
	cert, key, clientCA string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), ca: tlsauthtest.NewCA(t, "client and server CA"), other: tlsauthtest.NewCA(t, "another CA")}
	f.server = f.ca.Server(t)
	f.cert, f.key = f.server.Write(t, f.dir, "server")
	f.clientCA = f.ca.Write(t, f.dir, "client-ca.crt")
	return f
}

// config is the daemon's configuration with f's files and clients.
func (f *fixture) config(clients ...config.TLSClient) config.Config {
	cfg := config.Default()
	cfg.TLS.Listen, cfg.TLS.Cert, cfg.TLS.Key, cfg.TLS.ClientCA, cfg.TLS.Clients = "127.0.0.1:0", f.cert, f.key, f.clientCA, clients
	cfg.Admission.RatePerMinute, cfg.Admission.Burst, cfg.Admission.DailyQuota = 120, 30, 10_000
	return cfg
}

func (f *fixture) load(t *testing.T, clients ...config.TLSClient) *tlsauth.State {
	t.Helper()
	st, err := tlsauth.Load(f.config(clients...))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func ptr[T any](v T) *T { return &v }

func TestLoadErrors(t *testing.T) {
	f := newFixture(t)
	otherServer := f.other.Server(t)
	_, otherKey := otherServer.Write(t, f.dir, "other")
	noCert := filepath.Join(f.dir, "no-cert.pem")
	if err := os.WriteFile(noCert, append([]byte("not a certificate\n"), f.server.KeyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	// A certificate file padded to the bound loads; one byte more is
	// refused before it is parsed.
	atBound := filepath.Join(f.dir, "at-bound.crt")
	if err := os.WriteFile(atBound, append(bytes.Clone(f.server.CertPEM), bytes.Repeat([]byte("\n"), 1<<20-len(f.server.CertPEM))...), 0o600); err != nil {
		t.Fatal(err)
	}
	tooBig := filepath.Join(f.dir, "too-big.crt")
	if err := os.WriteFile(tooBig, append(bytes.Clone(f.server.CertPEM), bytes.Repeat([]byte("\n"), 1<<20+1-len(f.server.CertPEM))...), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(f.dir, "missing.pem")
	for _, tc := range []struct {
		name      string
		mod       func(*config.TLS)
		wantInErr []string // what the error names
		loads     bool
	}{
		{"valid", func(*config.TLS) {}, nil, true},
		{"cert padded to 1 MiB", func(c *config.TLS) { c.Cert = atBound }, nil, true},
		{"missing cert", func(c *config.TLS) { c.Cert = missing }, []string{"tls.cert", missing}, false},
		{"missing key", func(c *config.TLS) { c.Key = missing }, []string{"tls.key", missing}, false},
		{"missing client CA", func(c *config.TLS) { c.ClientCA = missing }, []string{"tls.client_ca", missing}, false},
		{"key of another certificate", func(c *config.TLS) { c.Key = otherKey }, []string{"tls.cert and tls.key", otherKey, f.cert}, false},
		{"client CA without a certificate", func(c *config.TLS) { c.ClientCA = noCert }, []string{"tls.client_ca", noCert, "no PEM certificate"}, false},
		{"cert above 1 MiB", func(c *config.TLS) { c.Cert = tooBig }, []string{"tls.cert", tooBig, "larger than 1048576 bytes"}, false},
		{"client CA above 1 MiB", func(c *config.TLS) { c.ClientCA = tooBig }, []string{"tls.client_ca", tooBig, "larger than 1048576 bytes"}, false},
		{"key is a directory", func(c *config.TLS) { c.Key = f.dir }, []string{"tls.key"}, false},
	} {
		cfg := f.config(config.TLSClient{Name: "alice"})
		tc.mod(&cfg.TLS)
		st, err := tlsauth.Load(cfg)
		if tc.loads {
			if err != nil || st == nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: loaded, want an error", tc.name)
			continue
		}
		for _, s := range tc.wantInErr {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q does not name %q", tc.name, err, s)
			}
		}
	}
}

func TestMatch(t *testing.T) {
	f := newFixture(t)
	st := f.load(t,
		config.TLSClient{Name: "alice"},
		config.TLSClient{Name: "bob", Subject: "Bob Builder"},
		config.TLSClient{Name: "agents", SAN: "spiffe://corp/agent/*", RatePerMinute: ptr(5.0), DailyQuota: ptr[int64](7)},
		config.TLSClient{Name: "web", SAN: "*.corp.example", Burst: ptr(3), Network: true},
		config.TLSClient{Name: "ops", Admin: true, Network: true, DailyQuota: ptr[int64](0)},
	)
	inherit := tlsauth.Limits{RatePerMinute: 120, Burst: 30, DailyQuota: 10_000}
	for _, tc := range []struct {
		name   string
		tm     tlsauthtest.Template
		want   string // "" = no client
		admin  bool
		net    bool
		limits tlsauth.Limits
	}{
		{"CN is the name", tlsauthtest.Template{CN: "alice"}, "alice", false, false, inherit},
		{"a CN rule and a SAN rule: ambiguous", tlsauthtest.Template{CN: "alice", DNS: []string{"x.corp.example"}}, "", false, false, tlsauth.Limits{}},
		{"a workload with an admin's CN: ambiguous", tlsauthtest.Template{CN: "ops", URIs: []string{"spiffe://corp/agent/a1"}}, "", false, false, tlsauth.Limits{}},
		{"two SAN rules: ambiguous", tlsauthtest.Template{DNS: []string{"a.corp.example"}, URIs: []string{"spiffe://corp/agent/a1"}}, "", false, false, tlsauth.Limits{}},
		{"subject replaces the name", tlsauthtest.Template{CN: "Bob Builder"}, "bob", false, false, inherit},
		{"the name is no subject when one is set", tlsauthtest.Template{CN: "bob"}, "", false, false, tlsauth.Limits{}},
		{"subject is exact", tlsauthtest.Template{CN: "Bob Builder "}, "", false, false, tlsauth.Limits{}},
		{"subject is case-sensitive", tlsauthtest.Template{CN: "ALICE"}, "", false, false, tlsauth.Limits{}},
		{"URI SAN pattern", tlsauthtest.Template{CN: "whoever", URIs: []string{"spiffe://corp/agent/a1"}}, "agents", false, false,
			tlsauth.Limits{RatePerMinute: 5, Burst: 30, DailyQuota: 7}},
		{"any of the SANs", tlsauthtest.Template{URIs: []string{"spiffe://corp/db/x", "spiffe://corp/agent/a2"}}, "agents", false, false,
			tlsauth.Limits{RatePerMinute: 5, Burst: 30, DailyQuota: 7}},
		{"* stays within a segment", tlsauthtest.Template{URIs: []string{"spiffe://corp/agent/a1/sub"}}, "", false, false, tlsauth.Limits{}},
		{"another path", tlsauthtest.Template{URIs: []string{"spiffe://corp/db/a1"}}, "", false, false, tlsauth.Limits{}},
		{"a SAN client is not matched by its name as CN", tlsauthtest.Template{CN: "agents"}, "", false, false, tlsauth.Limits{}},
		{"a SAN pattern is not matched by the CN", tlsauthtest.Template{CN: "spiffe://corp/agent/a1"}, "", false, false, tlsauth.Limits{}},
		{"DNS SAN pattern", tlsauthtest.Template{DNS: []string{"api.corp.example"}}, "web", false, true,
			tlsauth.Limits{RatePerMinute: 120, Burst: 3, DailyQuota: 10_000}},
		{"admin, network, quota 0 (unlimited) overrides", tlsauthtest.Template{CN: "ops"}, "ops", true, true,
			tlsauth.Limits{RatePerMinute: 120, Burst: 30, DailyQuota: 0}},
		{"nobody", tlsauthtest.Template{CN: "mallory"}, "", false, false, tlsauth.Limits{}},
	} {
		id, err := st.Match(f.ca.Issue(t, tc.tm).Cert)
		if tc.want == "" {
			ambiguous := strings.HasSuffix(tc.name, "ambiguous")
			if err == nil || errors.Is(err, tlsauth.ErrAmbiguous) != ambiguous || errors.Is(err, tlsauth.ErrUnknownClient) == ambiguous {
				t.Errorf("%s: matched %+v (%v), want no client (ambiguous: %v)", tc.name, id, err, ambiguous)
			}
			continue
		}
		want := tlsauth.Identity{Name: tc.want, UID: config.TLSClientUID(tc.want), Admin: tc.admin, Network: tc.net, Limits: tc.limits}
		if err != nil || id != want {
			t.Errorf("%s: got %+v %v, want %+v", tc.name, id, err, want)
		}
	}
	// The refusal names both rules.
	_, err := st.Match(f.ca.Issue(t, tlsauthtest.Template{CN: "ops", URIs: []string{"spiffe://corp/agent/a1"}}).Cert)
	for _, want := range []string{`"agents" (san "spiffe://corp/agent/*")`, `"ops" (subject CN "ops")`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ambiguous: error %v does not name %s", err, want)
		}
	}
	// [admission]'s values are the State's: a state loaded with other
	// ones gives them to the clients that inherit.
	cfg := f.config(config.TLSClient{Name: "alice"})
	cfg.Admission.RatePerMinute, cfg.Admission.Burst, cfg.Admission.DailyQuota = 0, 1, 0
	st2, err := tlsauth.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := st2.Match(f.ca.Client(t, "alice").Cert); err != nil || id.Limits != (tlsauth.Limits{Burst: 1}) {
		t.Errorf("alice with unlimited [admission]: %+v %v", id, err)
	}
}

// listener serves auth's TLS configuration on 127.0.0.1: each connection
// that completes its handshake gets the name of the client it maps to, and
// the server's side of each handshake goes to results.
type listener struct {
	addr    string
	results chan error
}

func serve(t *testing.T, auth *tlsauth.Auth) *listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &listener{addr: ln.Addr().String(), results: make(chan error, 16)}
	tln := tls.NewListener(ln, auth.TLSConfig())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tc := c.(*tls.Conn)
				_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
				err := tc.Handshake()
				if err == nil {
					id, err := auth.Match(tc.ConnectionState().PeerCertificates[0])
					if err != nil {
						id.Name = "?"
					}
					_, err = tc.Write([]byte(id.Name + "\n"))
				}
				l.results <- err
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	return l
}

// connect makes one connection with cfg and returns the client name the
// server sent, the connection's state, and the client's error.
func (l *listener) connect(t *testing.T, cfg *tls.Config) (string, tls.ConnectionState, error) {
	t.Helper()
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", l.addr, cfg)
	if err != nil {
		return "", tls.ConnectionState{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// In TLS 1.3 the client's handshake ends before the server has
	// checked its certificate: a refusal arrives at the first read.
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSuffix(line, "\n"), c.ConnectionState(), err
}

// serverResult is the server's side of the last handshake.
func (l *listener) serverResult(t *testing.T) error {
	t.Helper()
	select {
	case err := <-l.results:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not finish a handshake")
		return nil
	}
}

func TestHandshakes(t *testing.T) {
	f := newFixture(t)
	auth := tlsauth.New(f.load(t, config.TLSClient{Name: "alice"}, config.TLSClient{Name: "agents", SAN: "spiffe://corp/agent/*"}))
	l := serve(t, auth)

	cfg := tlsauthtest.ClientConfig(f.ca, f.ca.Client(t, "alice"))
	cfg.NextProtos = []string{"h2", "http/1.1"}
	name, cs, err := l.connect(t, cfg)
	if err != nil || name != "alice" {
		t.Fatalf("alice: %q %v", name, err)
	}
	if err := l.serverResult(t); err != nil {
		t.Errorf("server side of alice's handshake: %v", err)
	}
	if cs.Version != tls.VersionTLS13 || cs.NegotiatedProtocol != "http/1.1" || cs.PeerCertificates[0].SerialNumber.Cmp(f.server.Cert.SerialNumber) != 0 {
		t.Errorf("alice's connection: version %x, protocol %q, server serial %v", cs.Version, cs.NegotiatedProtocol, cs.PeerCertificates[0].SerialNumber)
	}
	if name, _, err := l.connect(t, tlsauthtest.ClientConfig(f.ca, f.ca.Issue(t, tlsauthtest.Template{URIs: []string{"spiffe://corp/agent/7"}}))); err != nil || name != "agents" {
		t.Errorf("an agent: %q %v", name, err)
	}
	if err := l.serverResult(t); err != nil {
		t.Errorf("server side of the agent's handshake: %v", err)
	}

	tls12 := tlsauthtest.ClientConfig(f.ca, f.ca.Client(t, "alice"))
	tls12.MinVersion, tls12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	for _, tc := range []struct {
		name      string
		cfg       *tls.Config
		serverErr error // the server's handshake error wraps it, when set
	}{
		{"no client certificate", tlsauthtest.ClientConfig(f.ca, nil), nil},
		{"signed by another CA", tlsauthtest.ClientConfig(f.ca, f.other.Client(t, "alice")), nil},
		{"expired", tlsauthtest.ClientConfig(f.ca, f.ca.Issue(t, tlsauthtest.Template{CN: "alice",
			NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})), nil},
		{"not yet valid", tlsauthtest.ClientConfig(f.ca, f.ca.Issue(t, tlsauthtest.Template{CN: "alice",
			NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(48 * time.Hour)})), nil},
		{"a CN that matches no client", tlsauthtest.ClientConfig(f.ca, f.ca.Client(t, "mallory")), tlsauth.ErrUnknownClient},
		{"alice's CN with an agent's SAN", tlsauthtest.ClientConfig(f.ca, f.ca.Issue(t, tlsauthtest.Template{CN: "alice", URIs: []string{"spiffe://corp/agent/7"}})), tlsauth.ErrAmbiguous},
		{"a server certificate of the CA", tlsauthtest.ClientConfig(f.ca, f.ca.Issue(t, tlsauthtest.Template{CN: "alice", Server: true})), nil},
		{"TLS 1.2", tls12, nil},
	} {
		name, _, err := l.connect(t, tc.cfg)
		if err == nil {
			t.Errorf("%s: served as %q, want a handshake error", tc.name, name)
		}
		serr := l.serverResult(t)
		if serr == nil {
			t.Errorf("%s: the server completed the handshake", tc.name)
		} else if tc.serverErr != nil && !errors.Is(serr, tc.serverErr) {
			t.Errorf("%s: server error %v, want %v", tc.name, serr, tc.serverErr)
		}
	}
}

// A reload (Set) applies to every connection after it, resumed ones too:
// a client that has a session ticket from before is judged by the new
// clients and CA.
func TestSetAppliesToTheNextConnection(t *testing.T) {
	f := newFixture(t)
	auth := tlsauth.New(f.load(t, config.TLSClient{Name: "alice"}, config.TLSClient{Name: "bob"}))
	l := serve(t, auth)
	alice := tlsauthtest.ClientConfig(f.ca, f.ca.Client(t, "alice"))
	bob := tlsauthtest.ClientConfig(f.ca, f.ca.Client(t, "bob"))
	alice.ClientSessionCache, bob.ClientSessionCache = tls.NewLRUClientSessionCache(4), tls.NewLRUClientSessionCache(4)
	for _, c := range []struct {
		name string
		cfg  *tls.Config
	}{{"alice", alice}, {"bob", bob}} {
		if name, _, err := l.connect(t, c.cfg); err != nil || name != c.name {
			t.Fatalf("%s before the reload: %q %v", c.name, name, err)
		}
		if err := l.serverResult(t); err != nil {
			t.Fatal(err)
		}
	}

	auth.Set(f.load(t, config.TLSClient{Name: "bob"}))
	if _, err := auth.Match(alice.Certificates[0].Leaf); err == nil {
		t.Error("Auth.Match still maps alice after the reload")
	}
	if name, _, err := l.connect(t, alice); err == nil {
		t.Errorf("alice after her removal: served as %q", name)
	}
	if err := l.serverResult(t); !errors.Is(err, tlsauth.ErrUnknownClient) {
		t.Errorf("alice after her removal: server error %v, want ErrUnknownClient", err)
	}
	name, cs, err := l.connect(t, bob)
	if err != nil || name != "bob" {
		t.Fatalf("bob after alice's removal: %q %v", name, err)
	}
	if !cs.DidResume {
		t.Error("bob's second connection did not resume: the test does not prove a resumed session is judged by the new clients")
	}
	if err := l.serverResult(t); err != nil {
		t.Fatal(err)
	}

	// A new client CA: bob's certificate of the old CA is refused, even
	// with a session ticket from before; bob's of the new CA is served.
	f.clientCA = f.other.Write(t, f.dir, "client-ca-2.crt")
	auth.Set(f.load(t, config.TLSClient{Name: "bob"}))
	if name, _, err := l.connect(t, bob); err == nil {
		t.Errorf("bob of the old CA after the CA changed: served as %q", name)
	}
	if err := l.serverResult(t); err == nil {
		t.Error("bob of the old CA after the CA changed: the server completed the handshake")
	}
	if name, _, err := l.connect(t, tlsauthtest.ClientConfig(f.ca, f.other.Client(t, "bob"))); err != nil || name != "bob" {
		t.Errorf("bob of the new CA: %q %v", name, err)
	}
	if err := l.serverResult(t); err != nil {
		t.Error(err)
	}
}

func TestSetRotatesTheServerCertificate(t *testing.T) {
	f := newFixture(t)
	auth := tlsauth.New(f.load(t, config.TLSClient{Name: "alice"}))
	l := serve(t, auth)
	alice := f.ca.Client(t, "alice")
	_, cs, err := l.connect(t, tlsauthtest.ClientConfig(f.ca, alice))
	if err != nil || cs.PeerCertificates[0].SerialNumber.Cmp(f.server.Cert.SerialNumber) != 0 {
		t.Fatalf("before the rotation: %v", err)
	}
	if err := l.serverResult(t); err != nil {
		t.Fatal(err)
	}
	// The new certificate comes from another CA: a client that trusts
	// only the old one now fails to verify the server.
	next := f.other.Server(t)
	f.cert, f.key = next.Write(t, f.dir, "server-2")
	auth.Set(f.load(t, config.TLSClient{Name: "alice"}))
	name, cs, err := l.connect(t, tlsauthtest.ClientConfig(f.other, alice))
	if err != nil || name != "alice" || cs.PeerCertificates[0].SerialNumber.Cmp(next.Cert.SerialNumber) != 0 {
		t.Errorf("after the rotation: %q %v, want the new certificate", name, err)
	}
	if err := l.serverResult(t); err != nil {
		t.Error(err)
	}
	if _, _, err := l.connect(t, tlsauthtest.ClientConfig(f.ca, alice)); err == nil {
		t.Error("a client trusting only the old server CA verified the new certificate")
	}
	_ = l.serverResult(t) // the server's side of the refused one
}
