package egress

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// The resolver of one run listens on the run's gateway (UDP and TCP port
// 53; the input chain lets only that jail reach it). It forwards the
// queries the run may make to the upstream servers and, when the run has
// an allowlist, lets the run reach exactly the IPv4 addresses it hands out
// for allowed names. AAAA queries get an empty answer (no IPv6 egress),
// so clients go straight to IPv4.
type resolver struct {
	r    *Run
	udp  *net.UDPConn
	tcp  *net.TCPListener
	wg   sync.WaitGroup
	conn chan struct{} // TCP connection slots
	done chan struct{} // closed by close
}

const (
	upstreamTimeout = 2 * time.Second
	tcpConns        = 4
	tcpIdle         = 5 * time.Second
	maxMsg          = 65535
)

func startResolver(r *Run) (*resolver, error) {
	addr := netip.AddrPortFrom(r.gw, 53)
	u, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, fmt.Errorf("egress: resolver: %w", err)
	}
	t, err := net.ListenTCP("tcp4", net.TCPAddrFromAddrPort(addr))
	if err != nil {
		u.Close()
		return nil, fmt.Errorf("egress: resolver: %w", err)
	}
	s := &resolver{r: r, udp: u, tcp: t, conn: make(chan struct{}, tcpConns), done: make(chan struct{})}
	s.wg.Go(s.serveUDP)
	s.wg.Go(s.serveTCP)
	return s, nil
}

func (s *resolver) close() {
	close(s.done)
	s.udp.Close()
	s.tcp.Close()
	s.wg.Wait()
}

func (s *resolver) serveUDP() {
	buf := make([]byte, maxMsg)
	for {
		n, from, err := s.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if from.Addr() != s.r.jail {
			continue
		}
		if resp := s.answer(buf[:n], false); resp != nil {
			_, _ = s.udp.WriteToUDPAddrPort(resp, from)
		}
	}
}

func (s *resolver) serveTCP() {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, err := s.tcp.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		select {
		case s.conn <- struct{}{}:
		default:
			c.Close() // too many at once
			continue
		}
		conns.Go(func() {
			defer func() { <-s.conn }()
			defer c.Close()
			stop := make(chan struct{})
			defer close(stop)
			go func() { // close with the resolver
				select {
				case <-stop:
				case <-s.done:
					c.Close()
				}
			}()
			for range 16 {
				_ = c.SetDeadline(time.Now().Add(tcpIdle))
				q, err := readTCPMsg(c)
				if err != nil {
					return
				}
				resp := s.answer(q, true)
				if resp == nil || writeTCPMsg(c, resp) != nil {
					return
				}
			}
		})
	}
}

func readTCPMsg(r io.Reader) ([]byte, error) {
	var l [2]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint16(l[:]))
	_, err := io.ReadFull(r, b)
	return b, err
}

func writeTCPMsg(w io.Writer, m []byte) error {
	b := make([]byte, 2+len(m))
	binary.BigEndian.PutUint16(b, uint16(len(m)))
	copy(b[2:], m)
	_, err := w.Write(b)
	return err
}

// answer builds the reply to one query, or nil to stay silent (a message
// that is not a query).
func (s *resolver) answer(q []byte, tcp bool) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 || h.OpCode != 0 {
		return reply(h, qs, dnsmessage.RCodeFormatError)
	}
	question := qs[0]
	name := strings.TrimSuffix(strings.ToLower(question.Name.String()), ".")
	ports, ok := s.portsFor(name)
	switch {
	case !ok:
		return reply(h, qs, dnsmessage.RCodeNameError)
	case question.Class != dnsmessage.ClassINET:
		return reply(h, qs, dnsmessage.RCodeRefused)
	case question.Type == dnsmessage.TypeAAAA:
		return reply(h, qs, dnsmessage.RCodeSuccess)
	}
	resp, err := s.forward(q, h.ID, question, tcp)
	if err != nil {
		s.r.m.log.Debug("egress: resolver upstream", "link", s.r.link, "name", name, "err", err)
		return reply(h, qs, dnsmessage.RCodeServerFailure)
	}
	if addrs := aRecords(resp); len(addrs) > 0 && !s.r.allowResolved(addrs, ports) {
		return reply(h, qs, dnsmessage.RCodeServerFailure)
	}
	return resp
}

// portsFor reports whether the run may resolve name, and for which ports
// (0: any) its addresses are then allowed.
func (s *resolver) portsFor(name string) ([]uint16, bool) {
	if len(s.r.allow) == 0 {
		return []uint16{0}, true
	}
	var ports []uint16
	for _, a := range s.r.allow {
		if a.Matches(name) {
			if a.Port == 0 {
				return []uint16{0}, true
			}
			ports = append(ports, a.Port)
		}
	}
	return ports, len(ports) > 0
}

func reply(h dnsmessage.Header, qs []dnsmessage.Question, rc dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rc})
	_ = b.StartQuestions()
	for _, q := range qs {
		_ = b.Question(q)
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// forward asks the upstream servers in turn, under a fresh random id,
// and returns the first well-formed answer to this question, with the
// client's id.
func (s *resolver) forward(q []byte, id uint16, question dnsmessage.Question, tcp bool) ([]byte, error) {
	var idb [2]byte
	_, _ = rand.Read(idb[:])
	up := append([]byte(nil), q...)
	copy(up, idb[:])
	var errs []error
	for _, srv := range s.r.m.cfg.DNS {
		resp, err := exchange(srv, up, tcp)
		if err == nil {
			err = check(resp, binary.BigEndian.Uint16(idb[:]), question)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", srv, err))
			continue
		}
		binary.BigEndian.PutUint16(resp, id)
		return resp, nil
	}
	return nil, errors.Join(errs...)
}

func exchange(srv netip.AddrPort, q []byte, tcp bool) ([]byte, error) {
	network := "udp4"
	if tcp {
		network = "tcp4"
	}
	c, err := net.DialTimeout(network, srv.String(), upstreamTimeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(upstreamTimeout))
	if tcp {
		if err := writeTCPMsg(c, q); err != nil {
			return nil, err
		}
		return readTCPMsg(c)
	}
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, maxMsg)
	n, err := c.Read(buf)
	return buf[:n], err
}

// check verifies that resp answers question under id.
func check(resp []byte, id uint16, question dnsmessage.Question) error {
	var p dnsmessage.Parser
	h, err := p.Start(resp)
	if err != nil {
		return err
	}
	if !h.Response || h.ID != id {
		return errors.New("not a response to the query")
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 || qs[0].Type != question.Type || !strings.EqualFold(qs[0].Name.String(), question.Name.String()) {
		return errors.New("response is for another question")
	}
	return nil
}

// aRecords returns the IPv4 addresses in resp's answer section.
func aRecords(resp []byte) []netip.Addr {
	var p dnsmessage.Parser
	if _, err := p.Start(resp); err != nil {
		return nil
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil
	}
	var out []netip.Addr
	for {
		h, err := p.AnswerHeader()
		if err != nil {
			return out
		}
		if h.Type != dnsmessage.TypeA || h.Class != dnsmessage.ClassINET {
			if err := p.SkipAnswer(); err != nil {
				return out
			}
			continue
		}
		a, err := p.AResource()
		if err != nil {
			return out
		}
		out = append(out, netip.AddrFrom4(a.A))
	}
}
