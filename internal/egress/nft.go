package egress

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Expression builders for the few matches the ruleset uses. Every match
// that reads the IPv4 header is preceded by a meta nfproto check: the table
// is of the inet family and sees IPv6 too.

func ifname(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

// ifPrefix matches an interface name starting with p (nft's "p*").
func ifPrefix(key expr.MetaKey, p string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(p)},
	}
}

func ifIs(key expr.MetaKey, name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

func nfproto(op expr.CmpOp, proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: []byte{proto}},
	}
}

func l4proto(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

func dport(port uint16) []expr.Any {
	b := make([]byte, 2)
	binary.BigEndian.PutUint16(b, port)
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
	}
}

// ipMatch matches the IPv4 source (src) or destination address against p.
func ipMatch(src bool, op expr.CmpOp, p netip.Prefix) []expr.Any {
	off := uint32(16)
	if src {
		off = 12
	}
	out := append(nfproto(expr.CmpOpEq, unix.NFPROTO_IPV4),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: 4})
	if p.Bits() < 32 {
		mask := make([]byte, 4)
		binary.BigEndian.PutUint32(mask, ^uint32(0)<<(32-p.Bits()))
		out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)})
	}
	a := p.Masked().Addr().As4()
	return append(out, &expr.Cmp{Op: op, Register: 1, Data: a[:]})
}

func ctState(bits uint32) []expr.Any {
	mask := make([]byte, 4)
	binary.NativeEndian.PutUint32(mask, bits)
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// overRate matches traffic above bytesPerSec (one second of burst).
func overRate(bytesPerSec int64) []expr.Any {
	return []expr.Any{&expr.Limit{Type: expr.LimitTypePktBytes, Rate: uint64(bytesPerSec), Unit: expr.LimitTimeSecond, Burst: uint32(min(bytesPerSec, 1<<31)), Over: true}}
}

var (
	accept = &expr.Verdict{Kind: expr.VerdictAccept}
	drop   = &expr.Verdict{Kind: expr.VerdictDrop}
	// reject answers TCP with a reset and the rest with ICMP "administratively
	// prohibited": a refused connection fails at once instead of timing out.
	reject = &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}
	// countRefused counts, in the table's named counter refusedCounter,
	// a packet about to be rejected (a UDP datagram, a TCP SYN and any
	// retry of it).
	countRefused = &expr.Objref{Type: int(nftables.ObjTypeCounter), Name: refusedCounter}
)

// refusedCounter names the table's counter of refused packets.
const refusedCounter = "refused"

func jump(chain string) *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictJump, Chain: chain} }

func rule(parts ...any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		switch v := p.(type) {
		case expr.Any:
			out = append(out, v)
		case []expr.Any:
			out = append(out, v...)
		}
	}
	return out
}

// baseChains are the daemon's chains in its own table, created at start.
// Per-run rules go only into the regular chains dns, ingress and runs
// (appended; their order does not matter), so the fixed rules around them
// never move.
type baseChains struct {
	table                    *nftables.Table
	dns, ingress, runs       *nftables.Chain
	input, forward, postrout *nftables.Chain
}

// buildTable creates the daemon's table: every jail's host-side interface
// starts with prefix, every jail address is in subnet.
//
//	input:       iifname prefix* jump dns; iifname prefix* count reject
//	dns:         per run: iifname, saddr jail, daddr gateway, udp/tcp 53: accept
//	forward:     iifname prefix* jump egress (which always decides);
//	             oifname prefix* jump ingress; oifname prefix* drop;
//	             [drop: when the host did not forward before the daemon]
//	ingress:     per run: oifname jump i<slot>
//	egress:      not IPv4: drop; each denied prefix: count reject; jump runs; drop
//	runs:        per run: iifname jump r<slot>
//	postrouting: saddr in subnet, oifname not prefix*: masquerade
func buildTable(c *nftables.Conn, name, prefix string, subnet netip.Prefix, deny []netip.Prefix, dropOther bool) *baseChains {
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
	pol := nftables.ChainPolicyAccept
	b := &baseChains{table: t}
	b.input = c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &pol})
	b.forward = c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &pol})
	b.postrout = c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	b.dns = c.AddChain(&nftables.Chain{Name: "dns", Table: t})
	b.ingress = c.AddChain(&nftables.Chain{Name: "ingress", Table: t})
	egress := c.AddChain(&nftables.Chain{Name: "egress", Table: t})
	b.runs = c.AddChain(&nftables.Chain{Name: "runs", Table: t})

	c.AddObj(&nftables.CounterObj{Table: t, Name: refusedCounter})

	add := func(ch *nftables.Chain, e []expr.Any) { c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e}) }
	add(b.input, rule(ifPrefix(expr.MetaKeyIIFNAME, prefix), jump("dns")))
	add(b.input, rule(ifPrefix(expr.MetaKeyIIFNAME, prefix), countRefused, reject))

	add(b.forward, rule(ifPrefix(expr.MetaKeyIIFNAME, prefix), jump("egress")))
	add(b.forward, rule(ifPrefix(expr.MetaKeyOIFNAME, prefix), jump("ingress")))
	add(b.forward, rule(ifPrefix(expr.MetaKeyOIFNAME, prefix), drop))
	if dropOther {
		add(b.forward, rule(drop))
	}

	add(egress, rule(nfproto(expr.CmpOpNeq, unix.NFPROTO_IPV4), drop))
	for _, p := range deny {
		add(egress, rule(ipMatch(false, expr.CmpOpEq, p), countRefused, reject))
	}
	add(egress, rule(jump("runs")))
	add(egress, rule(drop))

	add(b.postrout, rule(ipMatch(true, expr.CmpOpEq, subnet),
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(prefix)},
		&expr.Masq{}))
	return b
}
