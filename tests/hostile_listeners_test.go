package tests

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
	"github.com/jaild/jaild/internal/tlsauth/tlsauthtest"
)

// The listeners' cases (issue 27, findings 3 and 5): strangers and one
// client against the TLS listener's and metrics_listen's connection
// bounds, and a certificate two client rules match. Each runs against a
// daemon of its own with both listeners.

// listenerMaxConns is the case daemon's tls.max_connections: small, so
// that 2 × it connections are cheap.
const listenerMaxConns = 16

func listenerCases() []hcase {
	return []hcase{
		{id: "H30", cat: catDaemon, title: "a slowloris on the TLS port: 2 × max_connections plain TCP connections, idle or with a partial ClientHello, from another address, each replaced at once when closed",
			expect: "a client with a valid certificate is served within 2 s on a new connection; the daemon's memory stays bounded",
			run:    runTLSSlowloris},
		{id: "H31", cat: catDaemon, title: "one client with a valid certificate opens 2 × max_connections keep-alive connections and holds them",
			expect: "its connections past tls.max_connections_per_client get 429; another client is served within 2 s",
			run:    runTLSOneClientHoldsAll},
		{id: "H32", cat: catDaemon, title: "a slowloris on metrics_listen from another address: 2 × its 64 connections, idle or with half a request header, each replaced at once when closed",
			expect: "a scrape on a new connection is served within 2 s; the daemon's memory stays bounded",
			run:    runMetricsSlowloris},
		{id: "H33", cat: catDaemon, title: "a workload certificate (SAN of the workload rule) whose subject CN names the admin client",
			expect: "refused at the handshake, the log naming both rules; the admin's and the workload's own certificates are served as themselves",
			run:    runAmbiguousIdentity},
	}
}

// listenerEnv is a case daemon with the TLS listener (clients alice, bob,
// the admin ops and the workloads, by URI SAN) and metrics_listen.
type listenerEnv struct {
	d               *daemon
	ca              *tlsauthtest.CA
	tlsPort, mPort  int
	alice, bob, ops *tlsauthtest.Leaf
}

func (h *hostile) listenerDaemon(t *testing.T) (*listenerEnv, func()) {
	t.Helper()
	e := &listenerEnv{tlsPort: freePort(t), mPort: freePort(t)}
	d, err := prepareDaemon(daemontest.Options{Config: fmt.Sprintf("socket_mode = \"0666\"\nmetrics_listen = \"127.0.0.1:%d\"\n", e.mPort)})
	if err != nil {
		t.Fatal(err)
	}
	e.d = d
	e.ca = tlsauthtest.NewCA(t, "jaild hostile CA")
	cert, key := e.ca.Server(t).Write(t, d.Dir, "server")
	caFile := e.ca.Write(t, d.Dir, "client-ca.crt")
	e.alice, e.bob, e.ops = e.ca.Client(t, "alice"), e.ca.Client(t, "bob"), e.ca.Client(t, "ops")
	cfgPath := filepath.Join(d.Dir, "jaild.toml")
	base, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	sec := fmt.Sprintf("[tls]\nlisten = \"127.0.0.1:%d\"\ncert = %q\nkey = %q\nclient_ca = %q\nmax_connections = %d\n"+
		"[[tls.clients]]\nname = \"alice\"\ndaily_quota = 0\n[[tls.clients]]\nname = \"bob\"\ndaily_quota = 0\n[[tls.clients]]\nname = \"ops\"\nadmin = true\n"+
		"[[tls.clients]]\nname = \"workloads\"\nsan = \"spiffe://corp/workload/*\"\n", e.tlsPort, cert, key, caFile, listenerMaxConns)
	if err := os.WriteFile(cfgPath, append(bytes.Clone(base), sec...), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	cg, err := cgroupsOf(d)
	if err != nil {
		_ = d.Stop()
		t.Fatal(err)
	}
	h.extraParents = []string{cg.rel}
	alice := e.client(e.alice)
	waitFor(t, 30*time.Second, "the TLS listener", func() bool {
		_, _, err := alice.try("GET", "/v1/health", "")
		return err == nil
	})
	return e, func() {
		h.extraParents = nil
		if err := d.Stop(); err != nil {
			t.Errorf("stop the case daemon: %v", err)
		}
	}
}

// client is a TLS client of leaf that opens a new connection per request.
func (e *listenerEnv) client(leaf *tlsauthtest.Leaf) *tlsClient {
	c := newTLSClient(e.tlsPort, e.ca, leaf)
	c.c.Transport.(*http.Transport).DisableKeepAlives = true
	c.c.Timeout = 10 * time.Second
	return c
}

// print1 runs print(1) for c on a new connection and returns its latency.
func (e *listenerEnv) print1(t *testing.T, c *tlsClient) time.Duration {
	t.Helper()
	start := time.Now()
	var r api.ExecuteResponse
	status, data, err := c.try("POST", "/v1/execute", `{"code":"print(1)"}`)
	took := time.Since(start)
	if err == nil && status == 200 {
		err = strictJSON(data, &r)
	}
	if err != nil || status != 200 || r.Stdout != "1\n" {
		t.Errorf("print(1) over TLS: HTTP %d %v %s (after %v)", status, err, data, took.Round(time.Millisecond))
		return 10 * time.Second
	}
	return took
}

// median of three measures of f.
func median3(f func() time.Duration) time.Duration {
	v := []time.Duration{f(), f(), f()}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return v[1]
}

// slowloris holds n connections from address from to addr, each sending prefix(i) and then
// nothing, each replaced as soon as the daemon closes it, until stop.
// connects counts the connections made.
func slowloris(from, addr string, n int, prefix func(i int) []byte, stop <-chan struct{}) (connects *atomic.Int64, done func()) {
	dialer := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	connects = new(atomic.Int64)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := dialer.Dial("tcp", addr)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				connects.Add(1)
				_, _ = c.Write(prefix(i))
				closed := make(chan struct{})
				go func() {
					_, _ = io.Copy(io.Discard, c)
					close(closed)
				}()
				select {
				case <-stop:
					c.Close()
					return
				case <-closed:
					c.Close()
				}
			}
		})
	}
	return connects, wg.Wait
}

// A TLS record header announcing a 512-byte ClientHello, and its first 6
// bytes.
var partialHello = []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}

// latencyBound: an attacked latency must be within 2 s (the done-when
// line of issue 27) and within a generous factor of the control.
func latencyBound(t *testing.T, what string, control, got time.Duration) {
	t.Helper()
	if got > 2*time.Second || got > 10*control+time.Second {
		t.Errorf("%s: %v under attack, control %v (bound: 2 s and 10 × control + 1 s)", what, got.Round(time.Millisecond), control.Round(time.Millisecond))
	}
	t.Logf("%s: control %v, under attack %v", what, control.Round(time.Millisecond), got.Round(time.Millisecond))
}

// memoryBound: the daemon's RSS and the budget's bytes in use during the
// attack stay near what they were before it.
func memoryBound(t *testing.T, e *listenerEnv, rss0, use0 int64) {
	t.Helper()
	rss, use := vmRSS(e.d.Cmd.Process.Pid), inUseBytes(t, e.d)
	if rss > rss0+64<<20 || rss == 0 {
		t.Errorf("daemon RSS %d MiB under attack, %d MiB before (bound: +64 MiB)", rss>>20, rss0>>20)
	}
	if use > use0+16<<20 {
		t.Errorf("memory budget in use %d bytes under attack, %d before", use, use0)
	}
	t.Logf("RSS %d -> %d MiB, budget in use %d -> %d", rss0>>20, rss>>20, use0, use)
}

func runTLSSlowloris(t *testing.T, h *hostile) string {
	e, end := h.listenerDaemon(t)
	defer end()
	alice := e.client(e.alice)
	control := median3(func() time.Duration { return e.print1(t, alice) })
	rss0, use0 := vmRSS(e.d.Cmd.Process.Pid), inUseBytes(t, e.d)

	// From another address than the client's (127.0.0.2): between
	// connections of one address, a client is told from a stranger only
	// once its first message is read, which a stranger replacing each
	// closed connection at once can outpace (docs/SECURITY.md).
	stop := make(chan struct{})
	connects, done := slowloris("127.0.0.2", fmt.Sprintf("127.0.0.1:%d", e.tlsPort), 2*listenerMaxConns, func(i int) []byte {
		if i%2 == 0 {
			return nil
		}
		return partialHello
	}, stop)
	defer func() { close(stop); done() }()
	waitFor(t, 10*time.Second, "the slowloris's connections", func() bool { return connects.Load() >= 2*listenerMaxConns })
	time.Sleep(200 * time.Millisecond)
	got := median3(func() time.Duration { return e.print1(t, alice) })
	latencyBound(t, "alice's print(1) on a new TLS connection", control, got)
	memoryBound(t, e, rss0, use0)
	if t.Failed() {
		return "a client with a valid certificate was not served within 2 s (see the test log)"
	}
	return "the client with a valid certificate served within 2 s on new connections; daemon memory bounded"
}

func runTLSOneClientHoldsAll(t *testing.T, h *hostile) string {
	e, end := h.listenerDaemon(t)
	defer end()
	alice := e.client(e.alice)
	control := median3(func() time.Duration { return e.print1(t, alice) })
	rss0, use0 := vmRSS(e.d.Cmd.Process.Pid), inUseBytes(t, e.d)

	// bob opens 2 × max_connections connections, one request on each, and
	// keeps them.
	var statuses []string
	var conns []*tls.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	served := 0
	for range 2 * listenerMaxConns {
		c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", e.tlsPort), tlsauthtest.ClientConfig(e.ca, e.bob))
		if err != nil {
			statuses = append(statuses, "dial error")
			continue
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: jaild\r\n\r\n"); err != nil {
			statuses = append(statuses, "write error")
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			statuses = append(statuses, "no answer")
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses = append(statuses, resp.Status[:3])
		if resp.StatusCode == 200 {
			served++
		}
		_ = c.SetDeadline(time.Time{})
	}
	got := median3(func() time.Duration { return e.print1(t, alice) })
	latencyBound(t, "alice's print(1) while bob holds his connections", control, got)
	memoryBound(t, e, rss0, use0)
	n429 := strings.Count(strings.Join(statuses, ","), "429")
	if served != listenerMaxConns/4 || n429 != 2*listenerMaxConns-served {
		t.Errorf("bob's %d connections: %d served, %d answered 429 (%v); want %d served (a quarter of max_connections) and 429 for the rest",
			2*listenerMaxConns, served, n429, statuses, listenerMaxConns/4)
	}
	if t.Failed() {
		return "another client was not served while one client held its connections, or the per-client cap did not hold (see the test log)"
	}
	return "one client's connections past a quarter of max_connections answered 429; another client served within 2 s"
}

func runMetricsSlowloris(t *testing.T, h *hostile) string {
	e, end := h.listenerDaemon(t)
	defer end()
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", e.mPort)
	scrape := func() time.Duration {
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
		start := time.Now()
		resp, err := c.Get(url)
		if err != nil {
			t.Errorf("scrape: %v after %v", err, time.Since(start).Round(time.Millisecond))
			return 10 * time.Second
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(body, []byte("jaild_runs_total")) {
			t.Errorf("scrape: HTTP %d", resp.StatusCode)
		}
		return time.Since(start)
	}
	control := median3(scrape)
	rss0, use0 := vmRSS(e.d.Cmd.Process.Pid), inUseBytes(t, e.d)

	stop := make(chan struct{})
	// From another address than the scraper's, as in H30.
	connects, done := slowloris("127.0.0.2", fmt.Sprintf("127.0.0.1:%d", e.mPort), 2*64, func(i int) []byte {
		if i%2 == 0 {
			return nil
		}
		return []byte("GET /metrics HTTP/1.1\r\nHost: x\r\n")
	}, stop)
	defer func() { close(stop); done() }()
	waitFor(t, 10*time.Second, "the slowloris's connections", func() bool { return connects.Load() >= 2*64 })
	time.Sleep(200 * time.Millisecond)
	got := median3(scrape)
	latencyBound(t, "a scrape on a new connection", control, got)
	memoryBound(t, e, rss0, use0)
	if t.Failed() {
		return "a scrape was not served within 2 s (see the test log)"
	}
	return "a scrape served within 2 s on a new connection; daemon memory bounded"
}

func runAmbiguousIdentity(t *testing.T, h *hostile) string {
	e, end := h.listenerDaemon(t)
	defer end()
	whoAmI := func(leaf *tlsauthtest.Leaf) (api.Info, error) {
		var info api.Info
		status, data, err := e.client(leaf).try("GET", "/v1/info", "")
		if err != nil {
			return info, err
		}
		if status != 200 {
			return info, fmt.Errorf("HTTP %d %s", status, data)
		}
		return info, strictJSON(data, &info)
	}
	mixed := e.ca.Issue(t, tlsauthtest.Template{CN: "ops", URIs: []string{"spiffe://corp/workload/w1"}})
	info, err := whoAmI(mixed)
	if err == nil {
		t.Errorf("a workload certificate with CN ops: served as %q (admin %v), want a refused handshake", info.Caller.Client, info.Caller.Admin)
	}
	waitFor(t, 5*time.Second, "the refusal in the log", func() bool { return strings.Contains(e.d.Log.String(), "ambiguous") })
	log := e.d.Log.String()
	if !strings.Contains(log, `\"ops\" (subject CN \"ops\")`) || !strings.Contains(log, `\"workloads\" (san \"spiffe://corp/workload/*\")`) {
		t.Errorf("the refusal does not name both rules:\n%s", log)
	}
	if info, err := whoAmI(e.ops); err != nil || info.Caller.Client != "ops" || !info.Caller.Admin {
		t.Errorf("ops's own certificate: %+v %v", info.Caller, err)
	}
	if info, err := whoAmI(e.ca.Issue(t, tlsauthtest.Template{CN: "w2", URIs: []string{"spiffe://corp/workload/w2"}})); err != nil || info.Caller.Client != "workloads" || info.Caller.Admin {
		t.Errorf("a workload's certificate: %+v %v", info.Caller, err)
	}
	if t.Failed() {
		return "the ambiguous certificate was served, or the refusal did not name both rules (see the test log)"
	}
	return "refused at the handshake, the log naming both rules; ops and a workload served as themselves"
}
