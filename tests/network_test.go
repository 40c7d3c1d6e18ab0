package tests

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
	"github.com/jaild/jaild/internal/metrics/metricstest"
)

// netSection is the [network] configuration of the test daemons with
// egress: the upstream namespace is their only resolver, and the group
// that may ask for egress does not exist (only root, an admin, may).
func netSection(table, prefix string) string {
	return fmt.Sprintf(`
[network]
enabled = true
allow_group = "jaild-test-no-such-group"
subnet = "10.232.0.0/16"
dns = [%q]
max_connections = 8
max_bytes_per_second = 0
table = %q
interface_prefix = %q
`, upAPI, table, prefix)
}

func startNetDaemon(t *testing.T, table, prefix string) *daemon {
	t.Helper()
	return startDaemon(t, daemontest.Options{Config: "socket_mode = \"0666\"\n", Tune: func(c string) string { return c + netSection(table, prefix) }})
}

// execNet runs code with the given network fields and returns the answer.
func execNet(t *testing.T, d *daemon, code string, fields api.ExecuteRequest) *api.ExecuteResponse {
	t.Helper()
	req := fields
	req.Code, req.Limits = code, &api.Limits{TimeoutMs: ptr(int64(20000))}
	var raw json.RawMessage
	status, _ := d.call(t, "POST", "/v1/execute", req, &raw)
	if status != http.StatusOK {
		t.Fatalf("execute: HTTP %d: %s", status, raw)
	}
	var r api.ExecuteResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if r.Status != "ok" {
		t.Fatalf("run: status %s\nstdout: %s\nstderr: %s", r.Status, r.Stdout, r.Stderr)
	}
	return &r
}

// probeCode defines probe(host, port): CONNECTED, TIMEOUT (3 s) or the
// errno name of the failure, and how long it took.
const probeCode = `import errno, json, socket, time
def probe(h, p=80):
    t = time.monotonic()
    try:
        socket.create_connection((h, p), timeout=3).close(); r = 'CONNECTED'
    except socket.timeout: r = 'TIMEOUT'
    except socket.gaierror as e: r = 'GAIERROR'
    except OSError as e: r = errno.errorcode.get(e.errno, str(e.errno))
    return r
`

// hostAddr is a global IPv4 address of the host outside the test ranges.
func hostAddr(t *testing.T) string {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		ip := a.IP.String()
		if a.IP.IsGlobalUnicast() && !strings.HasPrefix(ip, "198.51.100.") && !strings.HasPrefix(ip, "10.232.") {
			return ip
		}
	}
	t.Fatal("no global IPv4 address on the host")
	return ""
}

// checkNoNetLeaks: no link with the prefix, no per-run chain and no
// per-run rule in the daemon's table.
func checkNoNetLeaks(t *testing.T, table, prefix string) {
	t.Helper()
	var why string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		why = netLeaks(table, prefix)
		if why == "" {
			return
		}
	}
	t.Errorf("network leak: %s", why)
}

func netLeaks(table, prefix string) string {
	links, _ := netlink.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, prefix) {
			return "link " + l.Attrs().Name + " left"
		}
	}
	c, err := nftables.New()
	if err != nil {
		return err.Error()
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return err.Error()
	}
	for _, ch := range chains {
		if ch.Table.Name != table {
			continue
		}
		switch ch.Name {
		case "input", "forward", "postrouting", "egress":
		case "dns", "ingress", "runs":
			rules, err := c.GetRules(ch.Table, ch)
			if err != nil {
				return err.Error()
			}
			if len(rules) > 0 {
				return fmt.Sprintf("%d per-run rules left in chain %s", len(rules), ch.Name)
			}
		default:
			return "chain " + ch.Name + " left"
		}
	}
	return ""
}

func tableExists(table string) bool {
	c, err := nftables.New()
	if err != nil {
		return false
	}
	t, _ := c.ListTableOfFamily(table, nftables.TableFamilyINet)
	return t != nil
}

func TestNetworkEgress(t *testing.T) {
	up := startUpstream(t)
	const table, prefix = "jaildtest", "jt"
	d := startNetDaemon(t, table, prefix)
	defer func() {
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
		if tableExists(table) {
			t.Errorf("table %s still exists after the daemon stopped", table)
		}
		checkNoNetLeaks(t, table, prefix)
	}()
	internet := api.ExecuteRequest{Network: "internet"}

	t.Run("info", func(t *testing.T) {
		var info api.Info
		d.call(t, "GET", "/v1/info", nil, &info)
		if !info.Network.Available || !info.Network.Allowed || info.Network.MaxConnections != 8 {
			t.Errorf("info.network = %+v, want available and allowed for root, 8 connections", info.Network)
		}
	})

	t.Run("requests by name and by address", func(t *testing.T) {
		r := execNet(t, d, `import requests
print(requests.get('http://api.test/a', timeout=5).text)
print(requests.get('http://198.51.100.11/b', timeout=5).text)`, internet)
		if r.Stdout != "upstream api.test /a\nupstream 198.51.100.11 /b\n" {
			t.Errorf("stdout %q", r.Stdout)
		}
		if r.Network == nil || r.Network.BytesSent == 0 || r.Network.BytesReceived == 0 {
			t.Errorf("network usage %+v, want bytes both ways", r.Network)
		}
		checkNoNetLeaks(t, table, prefix)
	})

	t.Run("aiohttp by name and by address", func(t *testing.T) {
		r := execNet(t, d, `import aiohttp, asyncio
async def main():
    async with aiohttp.ClientSession() as s:
        for u in ('http://other.test/c', 'http://198.51.100.10/d'):
            async with s.get(u) as resp: print(await resp.text())
asyncio.run(main())`, internet)
		if r.Stdout != "upstream other.test /c\nupstream 198.51.100.10 /d\n" {
			t.Errorf("stdout %q", r.Stdout)
		}
	})

	t.Run("IPv4 only", func(t *testing.T) {
		// The upstream has an AAAA record for api.test; the run's resolver
		// answers AAAA with nothing, and the jail has no IPv6 address.
		r := execNet(t, d, `import socket
print(sorted({a[4][0] for a in socket.getaddrinfo('api.test', 80)}))
print(sorted(l.split()[-1] for l in open('/proc/net/if_inet6')))
try: socket.create_connection(('2001:db8::10', 80), timeout=2); print('v6 connected')
except OSError as e: print('v6', type(e).__name__)`, internet)
		if !strings.HasPrefix(r.Stdout, "['198.51.100.10']\n['lo']\nv6 ") || strings.Contains(r.Stdout, "connected") {
			t.Errorf("stdout %q, want only the IPv4 address, IPv6 on lo only, and no IPv6 route", r.Stdout)
		}
	})

	t.Run("none fails fast", func(t *testing.T) {
		r := execNet(t, d, probeCode+`import time, requests
t = time.monotonic()
try: requests.get('http://198.51.100.10/', timeout=5); print('reached')
except requests.ConnectionError as e: print('ConnectionError')
print(probe('api.test'), probe('198.51.100.10'), time.monotonic() - t < 1.5)`, api.ExecuteRequest{})
		if r.Stdout != "ConnectionError\nGAIERROR ENETUNREACH True\n" {
			t.Errorf("stdout %q, want a fast ConnectionError, no name resolution and ENETUNREACH", r.Stdout)
		}
		if r.Network != nil {
			t.Errorf("network usage %+v for a run without egress, want null", r.Network)
		}
	})

	t.Run("allow_hosts", func(t *testing.T) {
		before := len(up.asked())
		r := execNet(t, d, probeCode+`import requests
print(requests.get('http://api.test/ok', timeout=5).text)
print(probe('other.test'), probe('www.other.test'), probe('198.51.100.11'), probe('api.test', 81))`,
			api.ExecuteRequest{Network: "internet", AllowHosts: []string{"api.test:80"}})
		if r.Stdout != "upstream api.test /ok\nGAIERROR GAIERROR EHOSTUNREACH EHOSTUNREACH\n" {
			t.Errorf("stdout %q, want api.test:80 only: other names unresolved, other addresses and ports refused", r.Stdout)
		}
		for _, n := range up.asked()[before:] {
			if n != "api.test." {
				t.Errorf("the upstream was asked %q: names outside the allowlist must not leave the host", n)
			}
		}
		r = execNet(t, d, probeCode+`print(probe('www.other.test'), probe('other.test'), probe('198.51.100.11'), probe('198.51.100.10'))`,
			api.ExecuteRequest{Network: "internet", AllowHosts: []string{"*.other.test", "198.51.100.10/32"}})
		if r.Stdout != "CONNECTED GAIERROR CONNECTED CONNECTED\n" {
			t.Errorf("stdout %q, want the wildcard's subdomain (and its address) and the prefix", r.Stdout)
		}
	})

	t.Run("never reachable", func(t *testing.T) {
		// A listener on the host, and the upstream's forbidden addresses:
		// the host reaches each of them, a jail none.
		ln, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		host := hostAddr(t)
		targets := [][2]string{{host, strconv.Itoa(port)}, {upHost, strconv.Itoa(port)}, {"10.232.0.1", strconv.Itoa(port)}, {"127.0.0.1", strconv.Itoa(port)}}
		for _, a := range forbidden {
			targets = append(targets, [2]string{a, "80"})
		}
		var calls []string
		for _, tg := range targets {
			c, err := net.DialTimeout("tcp4", net.JoinHostPort(tg[0], tg[1]), 2*time.Second)
			if tg[0] == "10.232.0.1" || tg[0] == "127.0.0.1" {
				// not addresses of the host until a jail exists / the
				// jail's own loopback: no control
			} else if err != nil {
				t.Fatalf("control: the host cannot reach %s:%s: %v", tg[0], tg[1], err)
			} else {
				c.Close()
			}
			calls = append(calls, fmt.Sprintf("probe(%q, %s)", tg[0], tg[1]))
		}
		code := probeCode + "import os\nprint(json.dumps([" + strings.Join(calls, ", ") + "]))\n" +
			"print(os.path.exists(" + strconv.Quote(d.Socket) + "), probe('meta.test'))\n"
		r := execNet(t, d, code, internet)
		lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
		var got []string
		if len(lines) != 2 || json.Unmarshal([]byte(lines[0]), &got) != nil || len(got) != len(targets) {
			t.Fatalf("stdout %q", r.Stdout)
		}
		t.Logf("never reachable: %s", r.Stdout)
		for i, g := range got {
			if g == "CONNECTED" || g == "TIMEOUT" {
				t.Errorf("%s:%s from a networked jail: %s, want refused at once", targets[i][0], targets[i][1], g)
			}
		}
		if lines[1] != "False EHOSTUNREACH" {
			t.Errorf("daemon socket visible / metadata by name: %q, want False EHOSTUNREACH", lines[1])
		}
	})

	t.Run("another run's address", func(t *testing.T) {
		// Run A listens on every address; run B, concurrently, tries every
		// other jail address of the subnet's first slots and A's gateway.
		a := make(chan *api.ExecuteResponse, 1)
		go func() {
			a <- execNet(t, d, `import os, socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 8080)); s.listen(8); s.settimeout(6)
open('/workspace/listening', 'w').close()
try: s.accept(); print('ACCEPTED')
except socket.timeout: print('nobody')`, internet)
		}()
		time.Sleep(1500 * time.Millisecond) // A is up (jail start is ~100 ms)
		var calls []string
		for slot := range 8 {
			calls = append(calls, fmt.Sprintf("probe('10.232.0.%d', 8080)", slot*4+2), fmt.Sprintf("probe('10.232.0.%d', 53)", slot*4+1))
		}
		r := execNet(t, d, probeCode+"me = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); me.connect(('198.51.100.10', 9)); print(me.getsockname()[0])\nprint(json.dumps(["+strings.Join(calls, ", ")+"]))", internet)
		ra := <-a
		t.Logf("run B: %s", r.Stdout)
		lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
		var got []string
		if len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &got) != nil {
			t.Fatalf("stdout %q", r.Stdout)
		}
		self := lines[0]
		for i, g := range got {
			target := strings.SplitN(calls[i], "'", 3)[1]
			ownGW := strings.HasSuffix(calls[i], ", 53)") && gwOf(self) == target
			if ownGW {
				continue // its own resolver
			}
			if g == "CONNECTED" || g == "TIMEOUT" {
				t.Errorf("%s from run B (%s): %s, want refused at once", calls[i], self, g)
			}
		}
		if ra.Stdout != "nobody\n" {
			t.Errorf("run A: %q, want no connection from another run", ra.Stdout)
		}
	})

	t.Run("connection cap", func(t *testing.T) {
		r := execNet(t, d, probeCode+`socks, res = [], []
for i in range(12):
    try: socks.append(socket.create_connection(('198.51.100.10', 80), timeout=3)); res.append('ok')
    except OSError as e: res.append(errno.errorcode.get(e.errno, 'timeout'))
print(res.count('ok'), sorted(set(res) - {'ok'}))`, internet)
		if r.Stdout != "8 ['EHOSTUNREACH']\n" {
			t.Errorf("stdout %q, want 8 connections (max_connections) and the rest refused", r.Stdout)
		}
	})

	t.Run("refused packets are counted", func(t *testing.T) {
		// Four UDP datagrams to three denied destinations and a port of
		// the host: each is one refused packet, and the counter moves by
		// exactly four (no other run is in flight). A refused TCP
		// connection is one SYN or more (the kernel may retry once when
		// the refusal arrives while connect() holds the socket), so it
		// only has to move the counter.
		key := metricstest.Key("jaild_egress_refused_packets_total")
		before := scrapeURL(t, d.Client, "http://jaild/metrics")[key]
		code := fmt.Sprintf(`import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for a in (%q, %q, %q, %q):
    s.sendto(b'x', (a, 9))
`, forbidden[0], forbidden[1], forbidden[2], hostAddr(t))
		if r := execNet(t, d, code, internet); r.Status != "ok" {
			t.Fatalf("status %s, stderr %q", r.Status, r.Stderr)
		}
		mid := scrapeURL(t, d.Client, "http://jaild/metrics")[key]
		if got := mid - before; got != 4 {
			t.Errorf("jaild_egress_refused_packets_total moved by %g for four datagrams, want 4", got)
		}
		r := execNet(t, d, probeCode+fmt.Sprintf("print(probe(%q))", forbidden[3]), internet)
		if r.Stdout != "EHOSTUNREACH\n" {
			t.Fatalf("stdout %q, want a refusal", r.Stdout)
		}
		if got := scrapeURL(t, d.Client, "http://jaild/metrics")[key] - mid; got < 1 || got > 6 {
			t.Errorf("jaild_egress_refused_packets_total moved by %g for one refused connection, want 1 to 6 SYNs", got)
		}
	})

	t.Run("usage", func(t *testing.T) {
		r := execNet(t, d, `import requests
print(len(requests.get('http://api.test/bytes/1048576', timeout=10).content))`, internet)
		if r.Stdout != "1048576\n" || r.Network == nil || r.Network.BytesReceived < 1<<20 || r.Network.BytesSent > 1<<20 {
			t.Errorf("stdout %q network %+v, want 1 MiB received", r.Stdout, r.Network)
		}
	})

	t.Run("jailctl", func(t *testing.T) {
		out, errOut, code := jailctlAt(t, d.Socket, "", "exec", "--allow-host", "api.test", "-c",
			"import requests, socket\nprint(requests.get('http://api.test/j', timeout=5).text)\ntry: socket.getaddrinfo('other.test', 80)\nexcept socket.gaierror: print('other.test: no')")
		if out != "upstream api.test /j\nother.test: no\n" || code != 0 {
			t.Errorf("jailctl exec --allow-host: %q %q exit %d", out, errOut, code)
		}
		out, errOut, code = jailctl(t, "", "exec", "--network", "internet", "-c", "print(1)")
		if code == 0 || out != "" || !strings.Contains(errOut, "network.enabled") {
			t.Errorf("jailctl exec --network internet on a daemon without egress: %q %q exit %d, want the 403's message", out, errOut, code)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for _, c := range []struct {
			body   api.ExecuteRequest
			status int
			has    string
		}{
			{api.ExecuteRequest{Network: "wifi"}, 400, `network: must be "none" or "internet"`},
			{api.ExecuteRequest{AllowHosts: []string{"api.test"}}, 400, `allow_hosts needs "network": "internet"`},
			{api.ExecuteRequest{Network: "internet", AllowHosts: []string{"2001:db8::1"}}, 400, "IPv6"},
			{api.ExecuteRequest{Network: "internet", AllowHosts: []string{"exa mple"}}, 400, "allow_hosts"},
			{api.ExecuteRequest{Network: "internet", AllowHosts: []string{"10.0.0.0/33"}}, 400, "allow_hosts"},
		} {
			body := c.body
			body.Code = "print(1)"
			var e api.ErrorBody
			if st, _ := d.call(t, "POST", "/v1/execute", body, &e); st != c.status || !strings.Contains(e.Error.Message, c.has) {
				t.Errorf("%v: HTTP %d %q, want %d mentioning %q", c.body, st, e.Error.Message, c.status, c.has)
			}
		}
		// Egress disabled (the shared daemon), and a caller not allowed it.
		var e api.ErrorBody
		if st, _ := shared.call(t, "POST", "/v1/execute", api.ExecuteRequest{Code: "print(1)", Network: "internet"}, &e); st != 403 || e.Error.Type != "forbidden" || !strings.Contains(e.Error.Message, "network.enabled") {
			t.Errorf("egress disabled: HTTP %d %+v, want 403 forbidden naming network.enabled", st, e.Error)
		}
		cmd := exec.Command("curl", "-s", "--unix-socket", d.Socket, "http://jaild/v1/execute", "-H", "Content-Type: application/json", "-d", `{"code":"print(1)","network":"internet"}`, "-w", "\n%{http_code}")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil || !strings.HasSuffix(string(out), "\n403") || !strings.Contains(string(out), "jaild-test-no-such-group") {
			t.Errorf("uid 65534 asking for egress: %v %s, want 403 naming the group", err, out)
		}
	})
	checkNoNetLeaks(t, table, prefix)
}

// gwOf is the gateway of a jail address (x.y.z.4n+2 -> 4n+1).
func gwOf(jail string) string {
	i := strings.LastIndexByte(jail, '.')
	n, _ := strconv.Atoi(jail[i+1:])
	return jail[:i+1] + strconv.Itoa(n-1)
}

// A daemon killed with networked runs in flight leaves links and rules;
// the next one on the same configuration removes them before serving.
func TestNetworkSweepAfterCrash(t *testing.T) {
	startUpstream(t)
	const table, prefix = "jaildcrash", "jc"
	d := startNetDaemon(t, table, prefix)
	done := make(chan struct{})
	go func() {
		defer close(done)
		body := api.ExecuteRequest{Code: "import time; time.sleep(30)", Network: "internet", Limits: &api.Limits{TimeoutMs: ptr(int64(40000))}}
		req, _ := json.Marshal(body)
		resp, err := d.Client.Post("http://jaild/v1/execute", "application/json", strings.NewReader(string(req)))
		if err == nil {
			resp.Body.Close()
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); netLeaks(table, prefix) == ""; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the networked run never got its link")
		}
	}
	d.Kill()
	<-done
	if netLeaks(table, prefix) == "" {
		t.Fatal("control: kill -9 left nothing behind")
	}
	// Restart on the same directory and configuration.
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if why := netLeaks(table, prefix); why != "" {
		t.Errorf("after restart: %s", why)
	}
	r := execNet(t, d, `import requests; print(requests.get('http://api.test/', timeout=5).status_code)`, api.ExecuteRequest{Network: "internet"})
	if r.Stdout != "200\n" {
		t.Errorf("after restart: %q", r.Stdout)
	}
	checkNoNetLeaks(t, table, prefix)
}
