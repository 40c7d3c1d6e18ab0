// Package egress gives a jail a network on request: a veth pair into a
// network namespace the daemon makes, NAT and filtering in an nftables
// table the daemon owns, and a resolver that answers only what the run may
// reach. Everything a run gets is removed with the run, and a new Manager
// removes whatever a crashed predecessor left.
package egress

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/allowlist"
	"github.com/jaild/jaild/internal/run/spec"
)

// AlwaysDenied are destinations no run reaches, whatever its allowlist:
// "this network", loopback, RFC 1918, CGNAT, link-local (the cloud metadata
// service), IETF protocol assignments, multicast, reserved and broadcast.
// The host's own addresses are not forwarded at all (the input chain drops
// everything from a jail but DNS to its own gateway), and other runs'
// addresses are the jail subnet, denied as well.
var AlwaysDenied = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// Config configures a Manager.
type Config struct {
	// Subnet holds every jail's addresses: a /30 per slot (gateway .1,
	// jail .2). It must hold MaxSlots /30s.
	Subnet netip.Prefix
	// MaxSlots is the number of jails that can exist at once.
	MaxSlots int
	// Table is the name of the daemon's nftables table (family inet).
	Table string
	// IfPrefix starts the name of every host-side interface (at most 8
	// bytes); the sweep deletes every veth whose name starts with it.
	IfPrefix string
	// DNS are the upstream resolvers (IPv4, with port).
	DNS []netip.AddrPort
	// Deny are destinations denied on top of AlwaysDenied.
	Deny []netip.Prefix
	// MaxConns bounds a run's tracked connections (0: no bound).
	MaxConns int
	// BytesPerSec bounds each direction of a run's traffic (0: no bound).
	BytesPerSec int64
	Logger      *slog.Logger
}

// Manager sets up and tears down runs' networks.
type Manager struct {
	cfg  Config
	log  *slog.Logger
	mu   sync.Mutex // one nftables batch at a time
	nft  *nftables.Conn
	base *baseChains
}

// New checks cfg, removes what a predecessor left (the table, veths with
// the prefix), turns on IPv4 forwarding and creates the table.
func New(cfg Config) (*Manager, error) {
	if !cfg.Subnet.IsValid() || !cfg.Subnet.Addr().Is4() || cfg.Subnet != cfg.Subnet.Masked() {
		return nil, fmt.Errorf("egress: subnet %s must be an IPv4 prefix without host bits", cfg.Subnet)
	}
	if cfg.MaxSlots < 1 || cfg.Subnet.Bits() > 30 || 1<<(30-cfg.Subnet.Bits()) < cfg.MaxSlots {
		return nil, fmt.Errorf("egress: subnet %s holds fewer than %d /30 networks (one per jail): use a /%d or larger", cfg.Subnet, cfg.MaxSlots, 30-bitsFor(cfg.MaxSlots))
	}
	if cfg.IfPrefix == "" || len(cfg.IfPrefix) > 8 || strings.ContainsAny(cfg.IfPrefix, "/ \t\n:") {
		return nil, fmt.Errorf("egress: interface prefix %q must be 1..8 plain bytes", cfg.IfPrefix)
	}
	if cfg.Table == "" || len(cfg.Table) > 64 {
		return nil, fmt.Errorf("egress: table name %q must be 1..64 bytes", cfg.Table)
	}
	if len(cfg.DNS) == 0 {
		return nil, errors.New("egress: no upstream DNS server")
	}
	m := &Manager{cfg: cfg, log: cfg.Logger}
	if m.log == nil {
		m.log = slog.Default()
	}
	var err error
	if m.nft, err = nftables.New(); err != nil {
		return nil, fmt.Errorf("egress: nftables: %w", err)
	}
	if err := m.sweep(); err != nil {
		return nil, err
	}
	dropOther, err := hostForwarding.enable()
	if err != nil {
		return nil, err
	}
	deny := append(append([]netip.Prefix{cfg.Subnet}, AlwaysDenied...), cfg.Deny...)
	m.base = buildTable(m.nft, cfg.Table, cfg.IfPrefix, cfg.Subnet, deny, dropOther)
	if err := m.nft.Flush(); err != nil {
		return nil, fmt.Errorf("egress: create nftables table %s: %w", cfg.Table, err)
	}
	return m, nil
}

func bitsFor(n int) int {
	b := 0
	for 1<<b < n {
		b++
	}
	return b
}

// sweep deletes the daemon's table and every veth named with the prefix.
func (m *Manager) sweep() error {
	tables, err := m.nft.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return fmt.Errorf("egress: list nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == m.cfg.Table {
			m.nft.DelTable(t)
			if err := m.nft.Flush(); err != nil {
				return fmt.Errorf("egress: delete leftover table %s: %w", t.Name, err)
			}
			m.log.Info("swept leftover nftables table", "table", t.Name)
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("egress: list links: %w", err)
	}
	for _, l := range links {
		if l.Type() == "veth" && strings.HasPrefix(l.Attrs().Name, m.cfg.IfPrefix) {
			if err := netlink.LinkDel(l); err != nil {
				return fmt.Errorf("egress: delete leftover link %s: %w", l.Attrs().Name, err)
			}
			m.log.Info("swept leftover jail link", "link", l.Attrs().Name)
		}
	}
	return nil
}

// Close deletes the daemon's table. Runs must be closed first.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nft.DelTable(m.base.table)
	return m.nft.Flush()
}

// Leftovers lists what exists of runs that should be gone: per-run rules
// and chains in the table and host-side links (for leak checks).
func (m *Manager) Leftovers() ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	chains, err := m.nft.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return nil, err
	}
	for _, c := range chains {
		if c.Table.Name == m.cfg.Table && len(c.Name) > 1 && strings.ContainsRune("ria", rune(c.Name[0])) && isDigits(c.Name[1:]) {
			out = append(out, "chain "+c.Name)
		}
	}
	for _, ch := range []*nftables.Chain{m.base.dns, m.base.ingress, m.base.runs} {
		rules, err := m.nft.GetRules(m.base.table, ch)
		if err != nil {
			return nil, err
		}
		for _, r := range rules {
			out = append(out, fmt.Sprintf("rule in %s: %s", ch.Name, r.UserData))
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, m.cfg.IfPrefix) {
			out = append(out, "link "+l.Attrs().Name)
		}
	}
	return out, nil
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// Run is one run's network.
type Run struct {
	m          *Manager
	slot       int
	link       string
	gw, jail   netip.Addr
	allow      []allowlist.Allow
	nsPath     string
	dns        *resolver
	allowChain *nftables.Chain
	mu         sync.Mutex
	allowed    map[allowKey]bool // rules in allowChain
	closeOnce  sync.Once
}

type allowKey struct {
	addr netip.Addr
	port uint16
}

// NetnsPath is the network namespace to give the jail.
func (r *Run) NetnsPath() string { return r.nsPath }

// Nameserver is the address the jail's resolv.conf names.
func (r *Run) Nameserver() netip.Addr { return r.gw }

// Addr is the jail's address.
func (r *Run) Addr() netip.Addr { return r.jail }

func (m *Manager) addrs(slot int) (gw, jail netip.Addr) {
	base := m.cfg.Subnet.Addr().As4()
	n := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	n += uint32(slot) * 4
	gw = netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n + 1)})
	jail = netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n + 2)})
	return gw, jail
}

// Setup gives slot's jail a network: a namespace bound at dir/netns, a
// veth pair (host side <prefix><slot>, jail side eth0), the run's rules
// and a resolver on its gateway. allow empty means every destination but
// the denied ones. On error nothing is left.
func (m *Manager) Setup(slot int, dir string, allow []allowlist.Allow) (_ *Run, retErr error) {
	if slot < 0 || slot >= m.cfg.MaxSlots {
		return nil, fmt.Errorf("egress: slot %d out of range", slot)
	}
	r := &Run{m: m, slot: slot, link: m.cfg.IfPrefix + strconv.Itoa(slot), allow: allow,
		nsPath: filepath.Join(dir, "netns"), allowed: map[allowKey]bool{}}
	r.gw, r.jail = m.addrs(slot)
	defer func() {
		if retErr != nil {
			r.Close()
		}
	}()
	if err := newNetns(r.nsPath); err != nil {
		return nil, err
	}
	if err := r.wire(); err != nil {
		return nil, err
	}
	if err := m.addRunRules(r); err != nil {
		return nil, err
	}
	var err error
	if r.dns, err = startResolver(r); err != nil {
		return nil, err
	}
	return r, nil
}

// newNetns makes a network namespace and binds it at path. The thread
// that made it never leaves it, so Go ends that thread (never the main
// thread: internal/jail keeps it for the main goroutine).
func newNetns(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("egress: %w", err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("egress: unshare net namespace: %w", err)
			return
		}
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
			errc <- fmt.Errorf("egress: bind net namespace: %w", err)
			return
		}
		errc <- nil
	}()
	return <-errc
}

// inNetns runs fn on a thread in the namespace at path, a thread that
// ends afterwards.
func inNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		ns, err := netns.GetFromPath(path)
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

// wire creates the veth pair and the addresses and routes on both sides.
// IPv6 is off on both ends of the veth: no link-local address to reach the
// host by.
func (r *Run) wire() error {
	ns, err := netns.GetFromPath(r.nsPath)
	if err != nil {
		return fmt.Errorf("egress: open net namespace: %w", err)
	}
	defer ns.Close()
	inside, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("egress: netlink in jail namespace: %w", err)
	}
	defer inside.Close()
	// "default" applies to eth0, made below; lo keeps ::1, as in a jail
	// without egress.
	if err := inNetns(r.nsPath, func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0)
	}); err != nil {
		return fmt.Errorf("egress: disable IPv6 in the jail namespace: %w", err)
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: r.link, MTU: 1500}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("egress: create veth %s: %w", r.link, err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+r.link+"/disable_ipv6", []byte("1"), 0); err != nil {
		return fmt.Errorf("egress: disable IPv6 on %s: %w", r.link, err)
	}
	host, err := netlink.LinkByName(r.link)
	if err != nil {
		return fmt.Errorf("egress: %s: %w", r.link, err)
	}
	if err := netlink.AddrAdd(host, &netlink.Addr{IPNet: prefixNet(r.gw)}); err != nil {
		return fmt.Errorf("egress: address on %s: %w", r.link, err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fmt.Errorf("egress: %s up: %w", r.link, err)
	}
	for _, name := range []string{"lo", "eth0"} {
		l, err := inside.LinkByName(name)
		if err != nil {
			return fmt.Errorf("egress: jail %s: %w", name, err)
		}
		if name == "eth0" {
			if err := inside.AddrAdd(l, &netlink.Addr{IPNet: prefixNet(r.jail)}); err != nil {
				return fmt.Errorf("egress: jail address: %w", err)
			}
		}
		if err := inside.LinkSetUp(l); err != nil {
			return fmt.Errorf("egress: jail %s up: %w", name, err)
		}
		if name == "eth0" {
			if err := inside.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: r.gw.AsSlice()}); err != nil {
				return fmt.Errorf("egress: jail default route: %w", err)
			}
		}
	}
	return nil
}

func prefixNet(a netip.Addr) *netIPNet {
	return &netIPNet{IP: a.AsSlice(), Mask: cidrMask30}
}

// Usage is a run's traffic, read from the host side of its veth.
type Usage = spec.NetworkUsage

// Refused is the number of runs' packets refused so far (a datagram, a
// TCP SYN and any retry of it):
// to a denied destination, to the host other than its resolver, past a
// run's connection bound or outside its allowlist.
func (m *Manager) Refused() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, err := m.nft.GetObject(&nftables.CounterObj{Table: m.base.table, Name: refusedCounter})
	if err != nil {
		return 0, fmt.Errorf("egress: read the refused counter: %w", err)
	}
	c, ok := o.(*nftables.CounterObj)
	if !ok {
		return 0, fmt.Errorf("egress: refused counter: unexpected %T", o)
	}
	return c.Packets, nil
}

// Usage reads the run's traffic counters.
func (r *Run) Usage() Usage {
	l, err := netlink.LinkByName(r.link)
	if err != nil || l.Attrs().Statistics == nil {
		return Usage{}
	}
	s := l.Attrs().Statistics
	return Usage{BytesSent: s.RxBytes, BytesReceived: s.TxBytes}
}

// Close removes everything of the run: resolver, rules, chains, link and
// namespace. It is safe to call more than once and on a half-made run.
func (r *Run) Close() {
	r.closeOnce.Do(func() {
		if r.dns != nil {
			r.dns.close()
		}
		if err := r.m.delRunRules(r); err != nil {
			r.m.log.Error("egress: remove run rules", "slot", r.slot, "err", err)
		}
		if l, err := netlink.LinkByName(r.link); err == nil {
			if err := netlink.LinkDel(l); err != nil {
				r.m.log.Error("egress: delete link", "link", r.link, "err", err)
			}
		}
		if err := unix.Unmount(r.nsPath, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			r.m.log.Warn("egress: unmount net namespace", "path", r.nsPath, "err", err)
		}
		_ = os.Remove(r.nsPath)
	})
}

// Run rules: the run's chains r<slot> (egress), a<slot> (allowlist) and
// i<slot> (ingress), and one tagged rule in each of dns, ingress and runs.

func (r *Run) tag() []byte { return []byte("jail " + r.link) }

func (m *Manager) addRunRules(r *Run) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, t, s := m.nft, m.base.table, strconv.Itoa(r.slot)
	add := func(ch *nftables.Chain, e []expr.Any, tag []byte) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: e, UserData: tag})
	}
	rc := c.AddChain(&nftables.Chain{Name: "r" + s, Table: t})
	ic := c.AddChain(&nftables.Chain{Name: "i" + s, Table: t})
	jail, gw := netip.PrefixFrom(r.jail, 32), netip.PrefixFrom(r.gw, 32)

	// Ingress: bandwidth, then only replies.
	if m.cfg.BytesPerSec > 0 {
		add(ic, rule(overRate(m.cfg.BytesPerSec), drop), nil)
	}
	add(ic, rule(ctState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), accept), nil)
	add(ic, rule(drop), nil)

	// Egress: its own source only, connection and bandwidth caps, then the
	// allowlist (when there is one).
	add(rc, rule(ipMatch(true, expr.CmpOpNeq, jail), drop), nil)
	if m.cfg.MaxConns > 0 {
		add(rc, rule(ctState(expr.CtStateBitNEW), &expr.Connlimit{Count: uint32(m.cfg.MaxConns), Flags: connlimitInvert}, countRefused, reject), nil)
	}
	if m.cfg.BytesPerSec > 0 {
		add(rc, rule(overRate(m.cfg.BytesPerSec), drop), nil)
	}
	if len(r.allow) == 0 {
		add(rc, rule(accept), nil)
	} else {
		r.allowChain = c.AddChain(&nftables.Chain{Name: "a" + s, Table: t})
		for _, a := range r.allow {
			if a.Name == "" {
				for _, e := range allowExprs(a.Prefix, a.Port) {
					add(r.allowChain, e, nil)
				}
			}
		}
		add(rc, rule(jump(r.allowChain.Name)), nil)
		add(rc, rule(countRefused, reject), nil)
	}

	tag := r.tag()
	for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
		add(m.base.dns, rule(ifIs(expr.MetaKeyIIFNAME, r.link), ipMatch(true, expr.CmpOpEq, jail), ipMatch(false, expr.CmpOpEq, gw), l4proto(proto), dport(53), accept), tag)
	}
	add(m.base.ingress, rule(ifIs(expr.MetaKeyOIFNAME, r.link), jump(ic.Name)), tag)
	add(m.base.runs, rule(ifIs(expr.MetaKeyIIFNAME, r.link), jump(rc.Name)), tag)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("egress: add rules of %s: %w", r.link, err)
	}
	return nil
}

// connlimitInvert makes the connlimit expression match above the count
// (nft's "ct count over").
const connlimitInvert = 1

// allowExprs are the accept rules for a prefix and port (0: any).
func allowExprs(p netip.Prefix, port uint16) [][]expr.Any {
	if port == 0 {
		return [][]expr.Any{rule(ipMatch(false, expr.CmpOpEq, p), accept)}
	}
	return [][]expr.Any{
		rule(ipMatch(false, expr.CmpOpEq, p), l4proto(unix.IPPROTO_TCP), dport(port), accept),
		rule(ipMatch(false, expr.CmpOpEq, p), l4proto(unix.IPPROTO_UDP), dport(port), accept),
	}
}

// maxResolved bounds the addresses a run's resolver adds to its allowlist.
const maxResolved = 256

// allowResolved lets the run reach addresses its resolver handed out for
// an allowed name. It returns false when the run's bound is reached.
func (r *Run) allowResolved(addrs []netip.Addr, ports []uint16) bool {
	if r.allowChain == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var add []allowKey
	for _, a := range addrs {
		for _, p := range ports {
			k := allowKey{a, p}
			if !r.allowed[k] {
				add = append(add, k)
			}
		}
	}
	if len(add) == 0 {
		return true
	}
	if len(r.allowed)+len(add) > maxResolved {
		return false
	}
	m := r.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range add {
		for _, e := range allowExprs(netip.PrefixFrom(k.addr, 32), k.port) {
			m.nft.AddRule(&nftables.Rule{Table: m.base.table, Chain: r.allowChain, Exprs: e})
		}
	}
	if err := m.nft.Flush(); err != nil {
		m.log.Error("egress: allow resolved addresses", "link", r.link, "err", err)
		return false
	}
	for _, k := range add {
		r.allowed[k] = true
	}
	return true
}

func (m *Manager) delRunRules(r *Run) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, t, s := m.nft, m.base.table, strconv.Itoa(r.slot)
	tag := string(r.tag())
	n := 0
	for _, ch := range []*nftables.Chain{m.base.dns, m.base.ingress, m.base.runs} {
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return err
		}
		for _, rl := range rules {
			if string(rl.UserData) == tag {
				if err := c.DelRule(rl); err != nil {
					return err
				}
				n++
			}
		}
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return err
	}
	var mine []*nftables.Chain
	for _, ch := range chains {
		if ch.Table.Name == t.Name && (ch.Name == "r"+s || ch.Name == "i"+s || ch.Name == "a"+s) {
			mine = append(mine, ch)
		}
	}
	// Empty every chain before deleting any: r<slot> jumps to a<slot>.
	for _, ch := range mine {
		c.FlushChain(ch)
	}
	for _, ch := range mine {
		c.DelChain(ch)
		n++
	}
	if n == 0 {
		return nil
	}
	return c.Flush()
}

// Available reports whether the kernel's nf_tables answers this process
// (which needs CAP_NET_ADMIN): egress needs it, loopback-only runs do not.
func Available() error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	_, err = c.ListTablesOfFamily(nftables.TableFamilyINet)
	return err
}
