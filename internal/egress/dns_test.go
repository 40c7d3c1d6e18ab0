package egress

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/jaild/jaild/internal/allowlist"
)

func query(t testing.TB, id uint16, name string, typ dnsmessage.Type, class dnsmessage.Class) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	_ = b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: typ, Class: class}); err != nil {
		t.Fatal(err)
	}
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// upstream is a UDP DNS server on loopback that answers every A query with
// 192.0.2.7 and echoes the question (or, with lie, another question).
func upstream(t *testing.T, lie bool) netip.AddrPort {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, maxMsg)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			if lie {
				q.Name = dnsmessage.MustNewName("other.example.")
			}
			b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true})
			_ = b.StartQuestions()
			_ = b.Question(q)
			_ = b.StartAnswers()
			_ = b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: [4]byte{192, 0, 2, 7}})
			out, _ := b.Finish()
			_, _ = c.WriteToUDP(out, from)
		}
	}()
	return c.LocalAddr().(*net.UDPAddr).AddrPort()
}

func testResolver(t *testing.T, allow []string, up ...netip.AddrPort) *resolver {
	t.Helper()
	list, err := allowlist.ParseList(allow)
	if err != nil {
		t.Fatal(err)
	}
	m := &Manager{cfg: Config{DNS: up}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return &resolver{r: &Run{m: m, link: "test", allow: list}}
}

func rcodeOf(t *testing.T, resp []byte) (dnsmessage.Header, []netip.Addr) {
	t.Helper()
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		t.Fatalf("reply does not parse: %v", err)
	}
	return h, aRecords(resp)
}

func TestResolverAnswers(t *testing.T) {
	up := upstream(t, false)
	s := testResolver(t, []string{"allowed.example"}, up)
	for _, tc := range []struct {
		name  string
		q     []byte
		rcode dnsmessage.RCode
		addrs int
	}{
		{"allowed A is forwarded", query(t, 7, "allowed.example.", dnsmessage.TypeA, dnsmessage.ClassINET), dnsmessage.RCodeSuccess, 1},
		{"name case is ignored", query(t, 8, "ALLOWED.Example.", dnsmessage.TypeA, dnsmessage.ClassINET), dnsmessage.RCodeSuccess, 1},
		{"other names do not exist", query(t, 9, "denied.example.", dnsmessage.TypeA, dnsmessage.ClassINET), dnsmessage.RCodeNameError, 0},
		{"AAAA is empty (no IPv6 egress)", query(t, 10, "allowed.example.", dnsmessage.TypeAAAA, dnsmessage.ClassINET), dnsmessage.RCodeSuccess, 0},
		{"class CHAOS is refused", query(t, 11, "allowed.example.", dnsmessage.TypeA, dnsmessage.ClassCHAOS), dnsmessage.RCodeRefused, 0},
	} {
		resp := s.answer(tc.q, false)
		h, addrs := rcodeOf(t, resp)
		if h.RCode != tc.rcode || len(addrs) != tc.addrs || !h.Response || h.ID != uint16(tc.q[0])<<8|uint16(tc.q[1]) {
			t.Errorf("%s: rcode %v, %d addresses, id %d", tc.name, h.RCode, len(addrs), h.ID)
		}
	}
	// A response, or bytes that are no message, get no answer at all.
	resp := s.answer(query(t, 1, "allowed.example.", dnsmessage.TypeA, dnsmessage.ClassINET), false)
	if s.answer(resp, false) != nil || s.answer([]byte{1, 2, 3}, false) != nil {
		t.Error("answered a response or garbage")
	}
}

// An upstream that answers another question is not believed.
func TestResolverChecksUpstream(t *testing.T) {
	s := testResolver(t, nil, upstream(t, true))
	h, addrs := rcodeOf(t, s.answer(query(t, 3, "a.example.", dnsmessage.TypeA, dnsmessage.ClassINET), false))
	if h.RCode != dnsmessage.RCodeServerFailure || len(addrs) != 0 {
		t.Errorf("rcode %v with %v; want SERVFAIL", h.RCode, addrs)
	}
}

func TestTCPFraming(t *testing.T) {
	var buf bytes.Buffer
	msg := []byte("hello")
	if err := writeTCPMsg(&buf, msg); err != nil {
		t.Fatal(err)
	}
	got, err := readTCPMsg(&buf)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("round trip = %q, %v", got, err)
	}
	if _, err := readTCPMsg(bytes.NewReader([]byte{0xff, 0xff, 1})); err == nil {
		t.Error("a truncated message was accepted")
	}
}

// FuzzResolverAnswer: whatever a jail sends the resolver, it does not
// panic, it asks no upstream for a name outside the allowlist (there is no
// upstream here: a forwarded query would be SERVFAIL), and what it sends
// back is a well-formed response.
func FuzzResolverAnswer(f *testing.F) {
	f.Add(query(f, 1, "allowed.example.", dnsmessage.TypeA, dnsmessage.ClassINET))
	f.Add(query(f, 2, "x.example.", dnsmessage.TypeAAAA, dnsmessage.ClassINET))
	f.Add([]byte{0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, q []byte) {
		s := testResolver(t, []string{"allowed.example"})
		resp := s.answer(q, false)
		if resp == nil {
			return
		}
		var p dnsmessage.Parser
		h, err := p.Start(resp)
		if err != nil || !h.Response {
			t.Fatalf("reply %x to %x is not a response: %v", resp, q, err)
		}
		if len(aRecords(resp)) != 0 {
			t.Fatalf("addresses without an upstream: %x", resp)
		}
	})
}

// FuzzARecords: upstream answers are parsed without panicking.
func FuzzARecords(f *testing.F) {
	f.Add([]byte{0, 1, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, resp []byte) {
		for _, a := range aRecords(resp) {
			if !a.Is4() {
				t.Fatalf("non-IPv4 address %v", a)
			}
		}
		_ = check(resp, 1, dnsmessage.Question{Name: dnsmessage.MustNewName("a."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	})
}
