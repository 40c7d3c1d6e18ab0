// Package tlsauth is the TCP listener's authentication: TLS 1.3 with
// client certificates signed by the configured client CA (mutual TLS),
// each mapped to a configured client, or refused at the handshake, before
// any HTTP. The certificate, key, CA and clients are reloaded without a
// restart: a new connection gets what was loaded last, so a rotated
// certificate is served at once and a client removed from the
// configuration is refused at its next connection.
package tlsauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sync/atomic"

	"github.com/jaild/jaild/internal/config"
)

// maxPEMBytes bounds each file read: certificates, keys and CA bundles
// are a few KiB.
const maxPEMBytes = 1 << 20

// Identity is the caller a client certificate maps to.
type Identity struct {
	Name    string
	UID     uint32 // config.TLSClientUID(Name)
	Admin   bool
	Network bool
	// Limits are the client's rate and quota: its own, or [admission]'s.
	Limits Limits
}

// Limits are a client's rate limit and daily quota.
type Limits struct {
	RatePerMinute float64 // 0: unlimited
	Burst         int
	DailyQuota    int64 // 0: unlimited
}

// State is one load of the configuration's TLS material and clients.
type State struct {
	cert    tls.Certificate
	pool    *x509.CertPool
	clients []config.TLSClient
	adm     config.Admission
}

// Load reads cfg.TLS's files and checks them: the key matches the
// certificate, the CA file holds at least one certificate. Errors name
// the key and the file.
func Load(cfg config.Config) (*State, error) {
	t := cfg.TLS
	certPEM, err := readPEM("tls.cert", t.Cert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM("tls.key", t.Key)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls.cert and tls.key (%s, %s): %w", t.Cert, t.Key, err)
	}
	caPEM, err := readPEM("tls.client_ca", t.ClientCA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("tls.client_ca (%s): no PEM certificate in it", t.ClientCA)
	}
	return &State{cert: cert, pool: pool, clients: t.Clients, adm: cfg.Admission}, nil
}

func readPEM(key, p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPEMBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if len(b) > maxPEMBytes {
		return nil, fmt.Errorf("%s (%s): larger than %d bytes", key, p, maxPEMBytes)
	}
	return b, nil
}

// Match maps a verified leaf certificate to the one configured client it
// matches: by its subject common name (the client's subject, or its
// name), or, for a client with a san pattern, by one of its DNS or URI
// subject alternative names. Rules are not ordered: a certificate that
// two clients' rules match (a CN rule and a SAN rule, say: a workload
// certificate whose CN names an admin client) is refused with an error
// wrapping ErrAmbiguous that names both; one that none matches, with
// ErrUnknownClient.
func (s *State) Match(cert *x509.Certificate) (Identity, error) {
	var sans []string
	sans = append(sans, cert.DNSNames...)
	for _, u := range cert.URIs {
		sans = append(sans, u.String())
	}
	var found *config.TLSClient
	for i := range s.clients {
		c := &s.clients[i]
		if !matches(c, cert.Subject.CommonName, sans) {
			continue
		}
		if found != nil {
			return Identity{}, fmt.Errorf("%w: clients %q (%s) and %q (%s) both match it; make their rules disjoint (see docs/DEPLOY.md: pin identities to SANs)",
				ErrAmbiguous, found.Name, rule(found), c.Name, rule(c))
		}
		found = c
	}
	if found == nil {
		return Identity{}, ErrUnknownClient
	}
	return s.identity(*found), nil
}

// matches says whether client c's rule matches a certificate of common
// name cn and subject alternative names sans.
func matches(c *config.TLSClient, cn string, sans []string) bool {
	if c.SAN != "" {
		for _, v := range sans {
			if m, _ := path.Match(c.SAN, v); m {
				return true
			}
		}
		return false
	}
	return cn == c.CN()
}

// rule describes a client's rule for messages.
func rule(c *config.TLSClient) string {
	if c.SAN != "" {
		return fmt.Sprintf("san %q", c.SAN)
	}
	return fmt.Sprintf("subject CN %q", c.CN())
}

func (s *State) identity(c config.TLSClient) Identity {
	id := Identity{Name: c.Name, UID: config.TLSClientUID(c.Name), Admin: c.Admin, Network: c.Network,
		Limits: Limits{RatePerMinute: s.adm.RatePerMinute, Burst: s.adm.Burst, DailyQuota: s.adm.DailyQuota}}
	if c.RatePerMinute != nil {
		id.Limits.RatePerMinute = *c.RatePerMinute
	}
	if c.Burst != nil {
		id.Limits.Burst = *c.Burst
	}
	if c.DailyQuota != nil {
		id.Limits.DailyQuota = *c.DailyQuota
	}
	return id
}

// Auth serves the state loaded last to every new connection.
type Auth struct{ cur atomic.Pointer[State] }

// New returns an Auth serving st.
func New(st *State) *Auth {
	a := &Auth{}
	a.cur.Store(st)
	return a
}

// Set makes st the state of the connections from now on.
func (a *Auth) Set(st *State) { a.cur.Store(st) }

// Match maps a client certificate with the current clients.
func (a *Auth) Match(cert *x509.Certificate) (Identity, error) { return a.cur.Load().Match(cert) }

// Authorize checks a connection's client certificate again for a request
// on it, with what was loaded last: its chain against the current client
// CA, at the current time (an expired certificate or a removed CA no
// longer serves on a connection made before), and its match with the
// current clients (a removed client neither).
func (a *Auth) Authorize(cs *tls.ConnectionState) (Identity, error) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return Identity{}, errors.New("a client certificate is required")
	}
	st := a.cur.Load()
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: st.pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return Identity{}, errors.New("this client certificate is no longer valid for this daemon (expired, or its CA was replaced)")
	}
	id, err := st.Match(leaf)
	if errors.Is(err, ErrAmbiguous) {
		return Identity{}, err
	}
	if err != nil {
		return Identity{}, errors.New("this client certificate is no longer authorized")
	}
	return id, nil
}

// ErrUnknownClient refuses a certificate the CA signed but no configured
// client matches.
var ErrUnknownClient = errors.New("the client certificate matches no configured client")

// ErrAmbiguous refuses a certificate that the rules of two configured
// clients match.
var ErrAmbiguous = errors.New("the client certificate is ambiguous")

// TLSConfig is the listener's configuration: each handshake takes the
// current state's certificate, CA and clients. TLS 1.3 only; a client
// must present a certificate the CA signed that matches a client; HTTP/1.1
// only.
func (a *Auth) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			st := a.cur.Load()
			return &tls.Config{
				MinVersion:   tls.VersionTLS13,
				Certificates: []tls.Certificate{st.cert},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    st.pool,
				NextProtos:   []string{"http/1.1"},
				VerifyConnection: func(cs tls.ConnectionState) error {
					if len(cs.PeerCertificates) == 0 {
						return errors.New("no client certificate")
					}
					_, err := st.Match(cs.PeerCertificates[0])
					return err
				},
			}, nil
		},
	}
}
