// Package peer says who a caller is: a local account, by the credentials
// of its connection to the Unix socket (SO_PEERCRED, read when the
// connection is accepted), or a client of the TLS listener, by the
// identity its certificate maps to (tlsauth); and what the daemon's
// policy lets it do (admin, network egress), from its groups (looked up
// once per connection and cached per group for a minute). The server and
// admission know callers only as a Caller.
package peer

import (
	"fmt"
	"log/slog"
	"os/user"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/tlsauth"
)

// Caller identifies who asks: a local uid (SO_PEERCRED on the socket), or
// a client of the TLS listener, named by its certificate, with a uid of
// its own (outside the range of local uids) that its sessions, files,
// rate and quota are kept under.
type Caller struct {
	UID   uint32
	PID   int32 // -1 for a TLS client
	Admin bool
	// Network: the caller may ask for egress (the daemon's network policy).
	Network bool
	// Client names a TLS client; "" for a local caller.
	Client string
	// Limits, when set, replace the configured rate and quota for this
	// caller (a TLS client's own).
	Limits *Limits
}

// Limits are a caller's rate limit and daily quota.
type Limits struct {
	RatePerMinute float64 // 0: unlimited
	Burst         int
	DailyQuota    int64 // 0: unlimited
}

// Nobody is the least privileged caller: a connection whose credentials
// could not be read, or one that did not come through a Listener.
var Nobody = Caller{UID: 65534, PID: -1}

// Who names the caller in messages: `uid 1000` or `client "agent-a"`.
func (c Caller) Who() string {
	if c.Client != "" {
		return fmt.Sprintf("client %q", c.Client)
	}
	return fmt.Sprintf("uid %d", c.UID)
}

// Policy resolves callers under the daemon's configuration: its admin
// group and network policy.
type Policy struct {
	adminG  string // gid of the admin group, "" if it does not exist
	netG    string // gid of network.allow_group, "" if none
	network config.Network

	mu    sync.Mutex
	cache map[groupKey]member
}

type groupKey struct {
	uid   uint32
	group string
}

type member struct {
	in bool
	at time.Time
}

// NewPolicy looks up cfg's admin group and network.allow_group (a group
// that does not exist has no members; a missing allow_group is logged).
func NewPolicy(cfg config.Config, log *slog.Logger) *Policy {
	p := &Policy{network: cfg.Network, cache: map[groupKey]member{}}
	if g, err := user.LookupGroup(cfg.AdminGroup); err == nil {
		p.adminG = g.Gid
	}
	if n := cfg.Network; n.Enabled && n.AllowGroup != "" {
		if g, err := user.LookupGroup(n.AllowGroup); err == nil {
			p.netG = g.Gid
		} else {
			log.Warn("network.allow_group does not exist: only admins may ask for egress", "group", n.AllowGroup)
		}
	}
	return p
}

// Local is the caller of a local account (uid, gid and pid of its
// connection), with its group memberships looked up (cached).
func (p *Policy) Local(uid, gid uint32, pid int32) Caller {
	admin := uid == 0 || p.inGroup(uid, gid, p.adminG)
	return Caller{UID: uid, PID: pid, Admin: admin, Network: p.mayNetwork(uid, gid, admin)}
}

// Client is the caller of a TLS client's identity.
func (p *Policy) Client(id tlsauth.Identity) Caller {
	lim := Limits(id.Limits)
	return Caller{UID: id.UID, PID: -1, Admin: id.Admin, Client: id.Name, Limits: &lim,
		Network: p.network.Enabled && (id.Admin || id.Network)}
}

// KnownAdmin reports, without a user or group lookup, whether the caller
// is an admin: root, the admin group as primary group, or a membership
// found by a recent lookup.
func (p *Policy) KnownAdmin(uid, gid uint32) bool {
	if uid == 0 || (p.adminG != "" && strconv.FormatUint(uint64(gid), 10) == p.adminG) {
		return true
	}
	p.mu.Lock()
	e, ok := p.cache[groupKey{uid, p.adminG}]
	p.mu.Unlock()
	return ok && e.in && time.Since(e.at) < time.Minute
}

// mayNetwork: the network policy lets the caller ask for egress: admins,
// and members of network.allow_group (everyone when it is "").
func (p *Policy) mayNetwork(uid, gid uint32, admin bool) bool {
	if !p.network.Enabled {
		return false
	}
	return admin || p.network.AllowGroup == "" || p.inGroup(uid, gid, p.netG)
}

// inGroup: gid is group g, or uid's user is a member of g (cached for a
// minute). g "" (no such group) has no members.
func (p *Policy) inGroup(uid, gid uint32, g string) bool {
	if g == "" {
		return false
	}
	if strconv.FormatUint(uint64(gid), 10) == g {
		return true
	}
	key := groupKey{uid, g}
	p.mu.Lock()
	e, ok := p.cache[key]
	p.mu.Unlock()
	if ok && time.Since(e.at) < time.Minute {
		return e.in
	}
	in := false
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		if gids, err := u.GroupIds(); err == nil {
			in = slices.Contains(gids, g)
		}
	}
	p.mu.Lock()
	p.cache[key] = member{in, time.Now()}
	p.mu.Unlock()
	return in
}
