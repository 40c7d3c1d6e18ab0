package tests

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/daemontest"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/metrics/metricstest"
	"github.com/jaild/jaild/internal/tlsauth/tlsauthtest"
)

// The fleet: three daemons as three hosts behind HAProxy.
const (
	fleetTLSPort  = 7443
	fleetWorkers  = 6  // concurrent clients through the load balancer
	fleetAttempts = 50 // per request: a transport failure or a draining host's 503 is retried, this often at most
	fleetRetryGap = 100 * time.Millisecond
	// Marker pids limits of the runs sent straight to a host: the kernel's
	// pids.max finds their jail among the clients'.
	fleetKilledPids  = 37
	fleetDrainedPids = 38
)

// fleetIDBases are the hosts' host_id_base: apart from each other by at
// least config.HostIDSpan, and from the other test daemons' (1.3e9) and
// internal/jail's and the benchmark's (1.5e9 and up).
var fleetIDBases = []uint32{2_000_000_000, 2_100_000_000, 2_200_000_000}

// fleetHost is one jaild in a network namespace of its own, reached from
// the root namespace over a veth at addr.
type fleetHost struct {
	name  string // HAProxy's name for it: host<i>
	ns    string // the network namespace
	link  string // the veth's end in the root namespace
	addr  string // the daemon's address, in its namespace
	base  uint32 // its host_id_base
	d     *daemon
	cg    *jailCgroups
	ready *tlsClient // straight to its TLS listener, a new connection each request
}

func (h *fleetHost) url() string { return fmt.Sprintf("https://%s:%d", h.addr, fleetTLSPort) }

// newFleetHost makes host i's namespace, veth, directory, certificate and
// configuration; the test's cleanup removes them.
func newFleetHost(t *testing.T, i int, ca *tlsauthtest.CA, fleetLeaf *tlsauthtest.Leaf) *fleetHost {
	t.Helper()
	h := &fleetHost{name: fmt.Sprintf("host%d", i), ns: fmt.Sprintf("jdfl%d-%d", i, os.Getpid()),
		link: fmt.Sprintf("jdfl%d-%d", i, os.Getpid()%10000), addr: fmt.Sprintf("10.77.%d.2", i), base: fleetIDBases[i]}
	t.Cleanup(h.removeNetwork)
	for _, s := range [][]string{
		{"netns", "add", h.ns},
		{"link", "add", h.link, "type", "veth", "peer", "name", "eth0", "netns", h.ns},
		{"addr", "add", fmt.Sprintf("10.77.%d.1/24", i), "dev", h.link},
		{"link", "set", h.link, "up"},
		{"-n", h.ns, "link", "set", "lo", "up"},
		{"-n", h.ns, "addr", "add", h.addr + "/24", "dev", "eth0"},
		{"-n", h.ns, "link", "set", "eth0", "up"},
	} {
		if err := ipc(s...); err != nil {
			t.Fatal(err)
		}
	}

	// Room for every client and the runs sent straight to a host on any
	// one host, queue included: /v1/ready never says "full", so a host
	// leaves the balancer only when it stops or drains. No daily quota:
	// the clients run as long as the test needs. It runs in the host's
	// network namespace (and nothing else's: `ip netns exec` would also
	// give it a /sys without the cgroup hierarchies) and serves once its
	// socket and its TLS listener answer.
	d, err := prepareDaemon(daemontest.Options{DirPrefix: "jdfleet",
		Wrap: []string{"nsenter", "--net=/run/netns/" + h.ns, "--"},
		Ready: func(d *daemontest.Daemon) bool {
			_, _, err := h.ready.try("GET", "/v1/health", "")
			return daemontest.Dials(d) && err == nil
		},
		Tune: func(cfg string) string {
			return setKeys(cfg, map[string]string{
				"host_id_base": strconv.FormatUint(uint64(h.base), 10), "max_concurrent": "4", "queue_size": "16",
				"queue_wait": `"30s"`, "daily_quota": "0",
			})
		}})
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	t.Cleanup(func() { h.cleanup(t) })

	// Its own certificate: the name clients dial through the load
	// balancer (127.0.0.1), its own address, and a DNS name HAProxy
	// checks (verifyhost) to know it reached the host it meant.
	leaf := ca.Issue(t, tlsauthtest.Template{CN: "jaild " + h.name, Server: true,
		DNS: []string{h.name + ".fleet.test"}, IPs: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(h.addr)}})
	cert, key := leaf.Write(t, d.Dir, "server")
	clientCA := ca.Write(t, d.Dir, "client-ca.crt")
	if err := d.EditConfig(func(cfg string) string {
		return cfg + fmt.Sprintf("[tls]\nlisten = \"%s:%d\"\ncert = %q\nkey = %q\nclient_ca = %q\n", h.addr, fleetTLSPort, cert, key, clientCA) +
			"[[tls.clients]]\nname = \"fleet\"\n" + // the test's clients
			"[[tls.clients]]\nname = \"haproxy\"\n" // the load balancer's health checks
	}); err != nil {
		t.Fatal(err)
	}
	rc := tlsauthtest.ClientConfig(ca, fleetLeaf)
	rc.ServerName = h.addr
	h.ready = &tlsClient{base: h.url(), c: &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: rc, DisableKeepAlives: true}}}
	return h
}

// start runs the daemon and waits until it serves.
func (h *fleetHost) start() error {
	if err := h.d.Start(); err != nil {
		return fmt.Errorf("%s: %w", h.name, err)
	}
	return nil
}

// stop sends SIGTERM and waits for the daemon to exit; an error if it
// does not, or exits with a failure.
func (h *fleetHost) stop() error {
	if err := h.d.StopProcess(syscall.SIGTERM); err != nil {
		return fmt.Errorf("%s: %w", h.name, err)
	}
	return nil
}

// cleanup stops the daemon and removes its directory, unless something
// is still mounted beneath it (a failure the test reports).
func (h *fleetHost) cleanup(t *testing.T) {
	if err := h.stop(); err != nil {
		t.Error(err)
	}
	if t.Failed() {
		t.Logf("%s's log:\n%s", h.name, h.d.Log.Tail(8000))
	}
	if h.cg != nil && len(h.jailsLeft()) > 0 {
		// Killed and not restarted (the test failed in between): a start
		// sweeps what the kill left, a stop ends the daemon again.
		if err := h.start(); err == nil {
			_ = h.stop()
		}
	}
	_ = h.d.Remove() // unless something is still mounted beneath it
}

func (h *fleetHost) removeNetwork() {
	_ = ipc("link", "del", h.link) // its peer goes with it
	_ = ipc("netns", "del", h.ns)
}

// runs is how many executes the daemon ran to "ok", from its /metrics on
// its socket.
func (h *fleetHost) runs(t *testing.T) float64 {
	t.Helper()
	return okRuns(scrapeURL(t, h.d.Client, "http://jaild/metrics"))
}

func okRuns(s metricstest.Samples) float64 {
	n := 0.0
	for _, warm := range []string{"false", "true"} {
		n += s[metricstest.Key("jaild_runs_total", "operation", "execute", "status", "ok", "warm", warm)]
	}
	return n
}

// markedJail finds the live jail whose pids.max is pids (a run sent with
// that limit), started: its id and its processes.
func (h *fleetHost) markedJail(pids int) (string, []string) {
	ents, _ := os.ReadDir(h.cg.pids)
	for _, e := range ents {
		dir := filepath.Join(h.cg.pids, e.Name())
		if b, err := os.ReadFile(filepath.Join(dir, "pids.max")); err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(pids) {
			continue
		}
		// Started: processes in its cgroup, and libcontainer's state
		// saved (its init joins the cgroup before the state is written;
		// a daemon killed between the two leaves a run directory and
		// cgroups, but no jail for the sweep to destroy).
		procs, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if _, err := os.Stat(filepath.Join(h.d.Dir, "run", "state", e.Name(), "state.json")); err != nil {
			continue
		}
		if f := strings.Fields(string(procs)); len(f) > 0 {
			return e.Name(), f
		}
	}
	return "", nil
}

// jailsLeft lists the host's jail cgroups in every hierarchy.
func (h *fleetHost) jailsLeft() []string {
	var out []string
	for _, p := range h.cg.parents {
		ents, _ := os.ReadDir(p)
		for _, e := range ents {
			if e.IsDir() {
				out = append(out, filepath.Join(p, e.Name()))
			}
		}
	}
	return out
}

// fleetJailPids lists host processes with a uid in the fleet's jail
// ranges.
func fleetJailPids() []string {
	var out []string
	for _, base := range fleetIDBases {
		for _, pid := range fleetJailPidsOf(base) {
			cmd, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
			out = append(out, fmt.Sprintf("pid %s (%s)", pid, strings.ReplaceAll(string(cmd), "\x00", " ")))
		}
	}
	return out
}

// haproxy is the load balancer: TCP pass-through, so that mutual TLS is
// end to end between the clients and the daemons.
type haproxy struct {
	cmd    *exec.Cmd
	log    *daemontest.Log
	stats  string // its admin socket
	exited chan struct{}
}

// haproxyConfig balances 127.0.0.1:port over the hosts' TLS listeners,
// each checked every 300 ms with GET /v1/ready over mutual TLS: one
// failed check takes a host out, two good ones put it back.
func haproxyConfig(dir string, port int, hosts []*fleetHost, caFile, pemFile string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
	log stderr format short local0 info
	stats socket %s mode 600 level admin
	nbthread 2

defaults
	mode tcp
	log global
	option tcplog
	timeout connect 2s
	timeout client 90s
	timeout server 90s
	timeout check 5s
	# A connection a host refuses (one killed, or stopped) goes to another
	# at once: every retry may pick another server.
	retries 3
	option redispatch 1

frontend fleet
	bind 127.0.0.1:%d
	default_backend jaild

backend jaild
	balance roundrobin
	option httpchk
	http-check send meth GET uri /v1/ready ver HTTP/1.1 hdr Host jaild
	http-check expect status 200
	default-server check check-ssl verify required ca-file %s crt %s inter 300ms fall 1 rise 2
`, filepath.Join(dir, "admin.sock"), port, caFile, pemFile)
	for _, h := range hosts {
		fmt.Fprintf(&b, "\tserver %s %s:%d verifyhost %s.fleet.test\n", h.name, h.addr, fleetTLSPort, h.name)
	}
	return b.String()
}

// startHAProxy checks the configuration (haproxy -c) and runs HAProxy in
// the foreground; the test's cleanup kills it.
func startHAProxy(t *testing.T, bin, dir, cfg string) *haproxy {
	t.Helper()
	cfgFile := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-f", cfgFile).CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c -f %s: %v\n%s\n%s", cfgFile, err, out, cfg)
	}
	hp := &haproxy{log: &daemontest.Log{}, stats: filepath.Join(dir, "admin.sock"), exited: make(chan struct{})}
	hp.cmd = exec.Command(bin, "-db", "-f", cfgFile)
	hp.cmd.Stdout, hp.cmd.Stderr = hp.log, hp.log
	if err := hp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = hp.cmd.Wait()
		close(hp.exited)
	}()
	t.Cleanup(func() {
		hp.stop()
		if t.Failed() {
			t.Logf("haproxy's log:\n%s", hp.log.Tail(8000))
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := hp.servers(); err == nil {
			return hp
		}
		select {
		case <-hp.exited:
			t.Fatalf("haproxy exited (%v):\n%s", hp.cmd.ProcessState, hp.log.Tail(4000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("haproxy's admin socket did not answer:\n%s", hp.log.Tail(4000))
		}
	}
}

func (hp *haproxy) stop() {
	select {
	case <-hp.exited:
		return
	default:
	}
	_ = hp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-hp.exited:
	case <-time.After(10 * time.Second):
		_ = hp.cmd.Process.Kill()
		<-hp.exited
	}
}

// servers reads "show stat" from the admin socket: each server's fields
// (status, stot, check_status, check_code, ...) by name.
func (hp *haproxy) servers() (map[string]map[string]string, error) {
	c, err := net.DialTimeout("unix", hp.stats, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "show stat\n"); err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(c)
	if err != nil {
		return nil, err
	}
	rows, err := csv.NewReader(bytes.NewReader(bytes.TrimPrefix(raw, []byte("# ")))).ReadAll()
	if err != nil || len(rows) < 2 {
		return nil, fmt.Errorf("show stat: %v: %q", err, raw)
	}
	out := map[string]map[string]string{}
	for _, row := range rows[1:] {
		m := map[string]string{}
		for i, name := range rows[0] {
			if i < len(row) {
				m[name] = row[i]
			}
		}
		// "* L7OK": a check is in progress; the status is the last one's.
		m["check_status"] = strings.TrimPrefix(m["check_status"], "* ")
		if m["pxname"] == "jaild" && strings.HasPrefix(m["svname"], "host") {
			out[m["svname"]] = m
		}
	}
	return out, nil
}

// server is one server's stats; the test fails if they cannot be read.
func (hp *haproxy) server(t *testing.T, name string) map[string]string {
	t.Helper()
	s, err := hp.servers()
	if err != nil {
		t.Fatalf("haproxy's stats: %v\n%s", err, hp.log.Tail(4000))
	}
	if s[name] == nil {
		t.Fatalf("haproxy's stats have no server %s: %v", name, s)
	}
	return s[name]
}

// waitState waits until haproxy holds the server in state ("UP",
// "DOWN") and returns its stats then.
func (hp *haproxy) waitState(t *testing.T, name, state string) map[string]string {
	t.Helper()
	return hp.waitFor(t, name, state, func(s map[string]string) bool { return s["status"] == state })
}

// waitFor waits until the server's stats meet cond and returns them.
func (hp *haproxy) waitFor(t *testing.T, name, what string, cond func(map[string]string) bool) map[string]string {
	t.Helper()
	var last map[string]string
	waitFor(t, 60*time.Second, "haproxy to hold "+name+" "+what, func() bool {
		last = hp.server(t, name)
		return cond(last)
	})
	return last
}

// fleetLoad is the clients: workers sending executes through the load
// balancer, each with its own output.
type fleetLoad struct {
	url, cert, key, ca string
	stop               chan struct{}
	wg                 sync.WaitGroup
	ok                 atomic.Int64 // requests answered right
	transport          atomic.Int64 // attempts that failed at the transport (retried)
	draining           atomic.Int64 // attempts a draining host refused with 503 (retried)
	maxAttempts        atomic.Int64
	mu                 sync.Mutex
	failures           []string
}

func (l *fleetLoad) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures = append(l.failures, fmt.Sprintf(format, args...))
}

func (l *fleetLoad) start(workers int) {
	for w := range workers {
		l.wg.Go(func() { l.worker(w) })
	}
}

// halt stops the workers after their current request and waits for them.
func (l *fleetLoad) halt() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

func (l *fleetLoad) worker(w int) {
	for n := 0; ; n++ {
		select {
		case <-l.stop:
			return
		default:
		}
		id := int64(w+1)*1_000_000 + int64(n)
		code := fmt.Sprintf("print(%d*7)", id)
		if n%3 == 1 { // some runs last long enough to be cut by a kill
			code = "import time\ntime.sleep(0.3)\n" + code
		}
		if !l.request(id, code, fmt.Sprintf("%d\n", id*7)) {
			return
		}
	}
}

// request sends one execute until it is answered: the answer must be the
// request's own; a transport failure (a host killed or stopping under
// the connection) or a draining host's 503 "the daemon is stopping" is
// retried, anything else fails the test.
func (l *fleetLoad) request(id int64, code, want string) bool {
	var last error
	for attempt := int64(1); attempt <= fleetAttempts; attempt++ {
		// A new client, so a new connection, for every request: in TCP
		// mode a balancer picks a host per connection.
		c, err := client.NewTLS(l.url, l.cert, l.key, l.ca)
		if err != nil {
			l.fail("request %d: %v", id, err)
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		res, err := c.Execute(ctx, &api.ExecuteRequest{Code: code})
		cancel()
		var apiErr *client.Error
		switch {
		case err == nil:
			if res.Status != "ok" || res.Stdout != want || res.Stderr != "" {
				l.fail("request %d (attempt %d) answered wrongly: status %q, stdout %q (want %q), stderr %q", id, attempt, res.Status, res.Stdout, want, res.Stderr)
				return false
			}
			l.ok.Add(1)
			for m := l.maxAttempts.Load(); attempt > m && !l.maxAttempts.CompareAndSwap(m, attempt); m = l.maxAttempts.Load() {
			}
			return true
		case errors.As(err, &apiErr):
			if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(apiErr.Error(), "the daemon is stopping") {
				l.fail("request %d (attempt %d) refused: %v (HTTP %d)", id, attempt, err, apiErr.Err.Status)
				return false
			}
			l.draining.Add(1)
		default:
			l.transport.Add(1)
		}
		last = err
		time.Sleep(fleetRetryGap)
	}
	l.fail("request %d: no answer in %d attempts; the last: %v", id, fleetAttempts, last)
	return false
}

// waitProgress waits until n more requests have been answered right.
func (l *fleetLoad) waitProgress(t *testing.T, n int64, what string) {
	t.Helper()
	from := l.ok.Load()
	waitFor(t, 60*time.Second, what, func() bool {
		l.mu.Lock()
		failed := len(l.failures)
		l.mu.Unlock()
		if failed >= fleetWorkers {
			t.Fatalf("every client has failed: %v", l.failures)
		}
		return l.ok.Load() >= from+n
	})
}

// directRun is a run sent straight to one host's TLS listener, not
// through the balancer.
type directRun struct {
	res *api.ExecuteResponse
	err error
}

func sendDirect(t *testing.T, h *fleetHost, l *fleetLoad, code string, pids, timeoutMs int64) chan directRun {
	t.Helper()
	c, err := client.NewTLS(h.url(), l.cert, l.key, l.ca)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan directRun, 1)
	go func() {
		res, err := c.Execute(context.Background(), &api.ExecuteRequest{Code: code, Limits: &api.Limits{Pids: &pids, TimeoutMs: &timeoutMs}})
		out <- directRun{res, err}
	}()
	return out
}

// TestFleet: three daemons, each a "host" in a network namespace of its
// own with its mutual-TLS listener, behind HAProxy in TCP pass-through
// with health checks on /v1/ready. While clients run through the
// balancer, host 0 is killed (SIGKILL) with a run in flight, and host 1
// is stopped (SIGTERM) with a run in flight: every client request is
// answered, and right (a request cut at the transport, or refused by a
// draining host, is retried); host 1's run ends ok while its /v1/ready
// says 503 draining and the balancer's check takes it out. Host 0 restarts
// on its configuration, its start-up sweep removes what the kill left,
// and the balancer sends it work again. At the end no jail process, cgroup
// or mount of the three daemons is left, nor their namespaces and links.
func TestFleet(t *testing.T) {
	began := time.Now()
	phase := began
	step := func(what string) {
		t.Logf("%-48s %6.1fs (at %5.1fs)", what, time.Since(phase).Seconds(), time.Since(began).Seconds())
		phase = time.Now()
	}
	hapBin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatalf("HAProxy, the fleet's load balancer, is not installed (%v): `make test-deps` installs it", err)
	}
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Fatalf("nsenter (util-linux) starts the daemons in their network namespaces: %v", err)
	}

	tmp := t.TempDir()
	ca := tlsauthtest.NewCA(t, "jaild fleet CA")
	fleetLeaf, hapLeaf := ca.Client(t, "fleet"), ca.Client(t, "haproxy")
	load := &fleetLoad{stop: make(chan struct{}), ca: ca.Write(t, tmp, "ca.crt")}
	load.cert, load.key = fleetLeaf.Write(t, tmp, "fleet")
	hapPEM := filepath.Join(tmp, "haproxy.pem")
	if err := os.WriteFile(hapPEM, append(slices.Clone(hapLeaf.CertPEM), hapLeaf.KeyPEM...), 0o600); err != nil {
		t.Fatal(err)
	}

	hosts := make([]*fleetHost, len(fleetIDBases))
	for i := range hosts {
		hosts[i] = newFleetHost(t, i, ca, fleetLeaf)
	}
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() { errs[i] = h.start() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		if h.cg, err = cgroupsOf(h.d); err != nil {
			t.Fatalf("%s: %v", h.name, err)
		}
	}
	step("3 daemons up in their namespaces")

	port := freePort(t)
	load.url = fmt.Sprintf("https://127.0.0.1:%d", port)
	hp := startHAProxy(t, hapBin, tmp, haproxyConfig(tmp, port, hosts, load.ca, hapPEM))
	for _, h := range hosts {
		// A server starts UP, before its first check (INI).
		hp.waitFor(t, h.name, "UP after a check of its /v1/ready over mutual TLS", func(s map[string]string) bool {
			return s["status"] == "UP" && s["check_status"] == "L7OK" && s["check_code"] == "200"
		})
	}
	step("haproxy up, its checks of the 3 hosts pass")

	// 1. Round robin reaches every host.
	before := make([]float64, len(hosts))
	for i, h := range hosts {
		before[i] = h.runs(t)
	}
	t.Cleanup(load.halt) // before haproxy and the daemons stop
	load.start(fleetWorkers)
	waitEvery(t, 60*time.Second, 200*time.Millisecond, "every host to run client requests", func() bool {
		for i, h := range hosts {
			if h.runs(t) <= before[i] {
				return false
			}
		}
		return true
	})
	step("clients run on every host")

	// 2. SIGKILL host 0 with a run of its own in flight.
	h0 := hosts[0]
	killed := sendDirect(t, h0, load, "import time\ntime.sleep(50)\nprint('never')", fleetKilledPids, 55_000)
	var killedJail string
	var killedProcs []string
	waitFor(t, 60*time.Second, "host 0's marked run to start", func() bool {
		killedJail, killedProcs = h0.markedJail(fleetKilledPids)
		return killedJail != ""
	})
	h0.d.Kill()
	if r := <-killed; r.err == nil {
		t.Errorf("the run on the killed host 0 was answered: %+v", r.res)
	} else if errors.As(r.err, new(*client.Error)) {
		t.Errorf("the run on the killed host 0: an error response, want a broken connection: %v", r.err)
	}
	// What the kill left: the jails in flight (the marked one among
	// them), with their cgroups, processes, mounts and state.
	leftIDs := map[string]bool{}
	leftCgroups := h0.jailsLeft()
	for _, p := range leftCgroups {
		leftIDs[filepath.Base(p)] = true
	}
	if !leftIDs[killedJail] {
		t.Fatalf("the SIGKILL left no cgroup of jail %s: nothing for the sweep to prove", killedJail)
	}
	leftProcs := fleetJailPidsOf(h0.base)
	leftMounts := daemontest.MountsUnder("self", h0.d.Dir)
	t.Logf("host 0 killed with jail %s in flight: left %d jails (%d cgroups), %d jail processes, %d mounts beneath its directory",
		killedJail, len(leftIDs), len(leftCgroups), len(leftProcs), len(leftMounts))
	hp.waitState(t, h0.name, "DOWN")
	load.waitProgress(t, 2*fleetWorkers, "clients to be answered with host 0 down")
	step("host 0 killed, haproxy took it out, clients go on")

	// 3. SIGTERM host 1 with a run of its own in flight: it drains.
	h1 := hosts[1]
	drained := sendDirect(t, h1, load, "import time\ntime.sleep(3)\nprint('drained')", fleetDrainedPids, 30_000)
	waitFor(t, 60*time.Second, "host 1's marked run to start", func() bool {
		id, _ := h1.markedJail(fleetDrainedPids)
		return id != ""
	})
	if err := h1.d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var rd api.Ready
	waitFor(t, 20*time.Second, "host 1's /v1/ready to say 503", func() bool {
		status, body, err := h1.ready.try("GET", "/v1/ready", "")
		if err != nil || status != http.StatusServiceUnavailable {
			return false
		}
		rd = api.Ready{}
		return json.Unmarshal(body, &rd) == nil
	})
	if rd != (api.Ready{Reason: "draining: the daemon is stopping"}) {
		t.Errorf("host 1's /v1/ready while draining: %+v", rd)
	}
	out := hp.waitState(t, h1.name, "DOWN")
	select {
	case r := <-drained:
		t.Fatalf("host 1's run ended before haproxy took host 1 out (%+v, %v): the drain was not seen", r.res, r.err)
	default:
	}
	if out["check_status"] != "L7STS" || out["check_code"] != "503" {
		t.Errorf("haproxy took host 1 out on %s %s, want its check's 503 (L7STS 503)", out["check_status"], out["check_code"])
	}
	stot1 := out["stot"]
	if r := <-drained; r.err != nil || r.res.Status != "ok" || r.res.Stdout != "drained\n" {
		t.Errorf("host 1's run in flight during its drain: %+v, %v", r.res, r.err)
	}
	if err := h1.d.Wait(60 * time.Second); err != nil {
		t.Error(err)
	}
	load.waitProgress(t, 2*fleetWorkers, "clients to be answered with host 1 stopped")
	step("host 1 drained (ready 503, check took it out), stopped")

	// 4. Host 0 again, on the same configuration: its sweep removes what
	// the kill left.
	if err := h0.start(); err != nil {
		t.Fatal(err)
	}
	for _, p := range leftCgroups {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("after host 0's restart the killed daemon's jail cgroup %s is still there", p)
		}
	}
	for _, pid := range append(leftProcs, killedProcs...) {
		if jailProc(pid, h0.base) {
			cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			t.Errorf("after host 0's restart the killed daemon's jail process %s is still there (%q)", pid, cmd)
		}
	}
	// The host's mount table, and the daemon's (on cgroup v2 it has a
	// mount namespace of its own): no mount of a left jail, and none
	// twice (the new rootfs mount over the old one).
	for _, pid := range []string{"self", strconv.Itoa(h0.d.Cmd.Process.Pid)} {
		seen := map[string]bool{}
		for _, m := range daemontest.MountsUnder(pid, h0.d.Dir) {
			rel, _ := filepath.Rel(h0.d.Dir, m)
			id, _, _ := strings.Cut(strings.TrimPrefix(rel, "run/runs/"), "/")
			if seen[m] || (strings.HasPrefix(rel, "run/runs/") && leftIDs[id]) {
				t.Errorf("after host 0's restart a mount the killed daemon left is still there: %s (in %s's mount table)", m, pid)
			}
			seen[m] = true
		}
	}
	for id := range leftIDs {
		for _, sub := range []string{"runs", "state"} {
			if _, err := os.Lstat(filepath.Join(h0.d.Dir, "run", sub, id)); err == nil {
				t.Errorf("after host 0's restart the killed daemon's run/%s/%s is still there", sub, id)
			}
		}
	}
	metrics0 := scrapeURL(t, h0.d.Client, "http://jaild/metrics")
	if n := metrics0[metricstest.Key("jaild_sweep_jails_total")]; n < 1 || n > float64(len(leftIDs)) {
		t.Errorf("host 0's restart swept %v jails, want 1 to %d (the marked one at least)", n, len(leftIDs))
	}
	if !strings.Contains(h0.d.Log.String(), `"msg":"sweep: destroyed a jail left by a predecessor","id":"`+killedJail+`"`) {
		t.Errorf("host 0's restart did not log the sweep of jail %s", killedJail)
	}
	before0 := okRuns(metrics0)
	hp.waitState(t, h0.name, "UP")
	waitEvery(t, 60*time.Second, 200*time.Millisecond, "haproxy to send client requests to host 0 again", func() bool { return h0.runs(t) > before0 })
	step("host 0 restarted, swept, back in the balancer")

	// 5. The end.
	load.halt()
	for _, f := range load.failures {
		t.Error(f)
	}
	if s := hp.server(t, h1.name); s["stot"] != stot1 {
		t.Errorf("haproxy sent host 1 connections after it took it out: %s sessions then, %s now", stot1, s["stot"])
	}
	stats, err := hp.servers()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("clients: %d requests answered right; retries: %d at the transport, %d refused by a draining host; at most %d attempts for one; haproxy sessions per host: %s %s %s",
		load.ok.Load(), load.transport.Load(), load.draining.Load(), load.maxAttempts.Load(), stats["host0"]["stot"], stats["host1"]["stot"], stats["host2"]["stot"])
	hp.stop()
	for _, h := range []*fleetHost{hosts[0], hosts[2]} {
		if err := h.stop(); err != nil {
			t.Error(err)
		}
	}
	step("clients, haproxy and daemons stopped")

	// Nothing of the three daemons is left: jail processes, cgroups,
	// mounts, state.
	var left []string
	waitFor(t, 30*time.Second, "the daemons' jails to be gone", func() bool {
		left = fleetJailPids()
		for _, h := range hosts {
			left = append(left, h.jailsLeft()...)
			left = append(left, daemontest.MountsUnder("self", h.d.Dir)...)
			for _, sub := range []string{"runs", "state"} {
				for _, n := range dirNames(filepath.Join(h.d.Dir, "run", sub)) {
					left = append(left, filepath.Join(h.d.Dir, "run", sub, n))
				}
			}
		}
		return len(left) == 0
	})
	// Nor the hosts' namespaces and links.
	for _, h := range hosts {
		h.removeNetwork()
		if _, err := os.Stat("/run/netns/" + h.ns); err == nil {
			t.Errorf("network namespace %s is still there", h.ns)
		}
		if _, err := net.InterfaceByName(h.link); err == nil {
			t.Errorf("link %s is still there", h.link)
		}
	}
	step("nothing left")
}

// waitEvery is waitFor, testing cond every interval: for conditions that
// cost the daemons a request.
func waitEvery(t *testing.T, limit, every time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(every) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// fleetJailPidsOf lists processes with a uid in one host's jail range.
func fleetJailPidsOf(base uint32) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if jailProc(e.Name(), base) {
			out = append(out, e.Name())
		}
	}
	return out
}

// jailProc reports whether process pid runs as a uid in the jail range
// of host_id_base base. A zombie whose parent is init is not counted: it
// is dead, and once its daemon is gone (killed) only init can reap it,
// when it gets to it.
func jailProc(pid string, base uint32) bool {
	st := kvColon(filepath.Join("/proc", pid, "status"))
	f := strings.Fields(st["Uid"])
	if len(f) == 0 || (strings.HasPrefix(st["State"], "Z") && st["PPid"] == "1") {
		return false
	}
	uid, err := strconv.ParseUint(f[0], 10, 32)
	return err == nil && uid >= uint64(base) && uid < uint64(base)+config.HostIDSpan
}
