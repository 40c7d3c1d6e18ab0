package tests

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vishvananda/netns"
	"golang.org/x/net/dns/dnsmessage"
)

// The main goroutine keeps the main thread: the upstream's listeners are
// made on threads that join its network namespace and then end, which Go
// can do to any thread but the main one.
func init() { runtime.LockOSThread() }

// upstream is the tests' stand-in for the internet: a network namespace
// routed from the host over a veth, holding TEST-NET-2 addresses with an
// HTTP server and a DNS zone. It also holds one address in each range a
// jail must never reach (metadata, RFC 1918, CGNAT), each routed from the
// host too, so that a refused connection proves the filter, not a missing
// route: the host itself reaches every one of them.
type upstream struct {
	ns   string
	link string
	mu   sync.Mutex
	dns  []string // names asked, in order
	lns  []net.Listener
	udp  *net.UDPConn
}

const (
	upHost = "198.51.100.1"  // host side of the veth
	upAPI  = "198.51.100.10" // api.test
	upAlt  = "198.51.100.11" // other.test
)

// forbidden are addresses the upstream serves that no jail may reach.
var forbidden = []string{"169.254.169.254", "10.99.0.1", "192.168.77.1", "172.16.5.1", "100.64.0.1"}

// zone is the upstream's DNS data.
var zone = map[string][]string{"api.test.": {upAPI}, "other.test.": {upAlt}, "www.other.test.": {upAlt}, "meta.test.": {"169.254.169.254"}}

func ipc(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

func startUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{ns: "jdup" + strconv.Itoa(os.Getpid()), link: "jdupl" + strconv.Itoa(os.Getpid()%1000)}
	t.Cleanup(u.stop)
	steps := [][]string{
		{"netns", "add", u.ns},
		{"link", "add", u.link, "type", "veth", "peer", "name", "eth0", "netns", u.ns},
		{"addr", "add", upHost + "/24", "dev", u.link},
		{"link", "set", u.link, "up"},
		{"-n", u.ns, "link", "set", "lo", "up"},
		{"-n", u.ns, "addr", "add", upAPI + "/24", "dev", "eth0"},
		{"-n", u.ns, "addr", "add", upAlt + "/24", "dev", "eth0"},
		{"-n", u.ns, "link", "set", "eth0", "up"},
		{"-n", u.ns, "route", "add", "default", "via", upHost},
	}
	for _, a := range forbidden {
		steps = append(steps, []string{"-n", u.ns, "addr", "add", a + "/32", "dev", "lo"}, []string{"route", "add", a + "/32", "via", upAPI})
	}
	for _, s := range steps {
		if err := ipc(s...); err != nil {
			t.Fatal(err)
		}
	}
	err := u.inNS(func() error {
		for _, port := range []string{"80", "81"} {
			ln, err := net.Listen("tcp4", "0.0.0.0:"+port)
			if err != nil {
				return err
			}
			u.lns = append(u.lns, ln)
		}
		ln, err := net.Listen("tcp4", "0.0.0.0:53")
		if err != nil {
			return err
		}
		u.lns = append(u.lns, ln)
		u.udp, err = net.ListenUDP("udp4", &net.UDPAddr{Port: 53})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream %s %s", strings.Split(r.Host, ":")[0], r.URL.Path)
	})
	mux.HandleFunc("/bytes/", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/bytes/"))
		w.Write(bytes.Repeat([]byte("x"), min(n, 16<<20)))
	})
	for _, ln := range u.lns[:2] {
		go http.Serve(ln, mux)
	}
	go u.serveDNSTCP(u.lns[2])
	go u.serveDNSUDP()
	return u
}

func (u *upstream) stop() {
	for _, ln := range u.lns {
		ln.Close()
	}
	if u.udp != nil {
		u.udp.Close()
	}
	for _, a := range forbidden {
		_ = ipc("route", "del", a+"/32")
	}
	_ = ipc("link", "del", u.link)
	_ = ipc("netns", "del", u.ns)
}

// inNS runs fn on a thread in the upstream's namespace; the thread ends
// afterwards (sockets made there stay in the namespace).
func (u *upstream) inNS(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		ns, err := netns.GetFromName(u.ns)
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func (u *upstream) asked() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.dns...)
}

func (u *upstream) answer(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	name := strings.ToLower(qs[0].Name.String())
	u.mu.Lock()
	u.dns = append(u.dns, name)
	u.mu.Unlock()
	addrs, ok := zone[name]
	rc := dnsmessage.RCodeSuccess
	if !ok {
		rc = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: rc})
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(qs[0])
	_ = b.StartAnswers()
	rh := dnsmessage.ResourceHeader{Name: qs[0].Name, Class: dnsmessage.ClassINET, TTL: 60}
	switch qs[0].Type {
	case dnsmessage.TypeA:
		for _, a := range addrs {
			_ = b.AResource(rh, dnsmessage.AResource{A: netip.MustParseAddr(a).As4()})
		}
	case dnsmessage.TypeAAAA:
		if ok {
			_ = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: netip.MustParseAddr("2001:db8::10").As16()})
		}
	}
	out, _ := b.Finish()
	return out
}

func (u *upstream) serveDNSUDP() {
	buf := make([]byte, 4096)
	for {
		n, from, err := u.udp.ReadFromUDP(buf)
		if err != nil {
			return
		}
		if resp := u.answer(buf[:n]); resp != nil {
			u.udp.WriteToUDP(resp, from)
		}
	}
}

func (u *upstream) serveDNSTCP(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var l [2]byte
			if _, err := c.Read(l[:]); err != nil {
				return
			}
			q := make([]byte, int(l[0])<<8|int(l[1]))
			if _, err := io.ReadFull(c, q); err != nil {
				return
			}
			resp := u.answer(q)
			c.Write(append([]byte{byte(len(resp) >> 8), byte(len(resp))}, resp...))
		}()
	}
}
