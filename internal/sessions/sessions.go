// Package sessions keeps the daemon's table of stateful sessions: who owns
// each, the per-caller and total caps (of sessions, and of the memory
// their jails may hold), one call at a time, and the reaper
// that ends idle and expired sessions on a timer of its own (it never
// waits on a client). Ended sessions stay visible to their owner for a
// while with the reason they ended, then vanish. The sessions themselves
// (jails) are behind Handle; this package needs no root.
package sessions

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
)

// Handle is a live session of the engine (*run.Session).
type Handle interface {
	// Interrupt sends SIGINT to the call in progress, if any.
	Interrupt()
	// Close ends the session and tears its jail down.
	Close()
	// Done is closed when the session ended by itself or by Close.
	Done() <-chan struct{}
	// EndReason says why, once Done is closed.
	EndReason() string
}

// Active is a Handle whose processes may be busy between calls (run.Session's
// background commands): the idle timeout counts from LastActivity too.
type Active interface {
	LastActivity() time.Time
}

// lastUse is when e was last called or, later, active.
func lastUse(e *entry) time.Time {
	if a, ok := e.h.(Active); ok {
		if t := a.LastActivity(); t.After(e.LastUsed) {
			return t
		}
	}
	return e.LastUsed
}

// Pauser is a Handle that can pause to disk (run.Session): Pause
// checkpoints it, Resume restores it (a call does too), Paused says
// whether it is on disk.
//
// Pause keeps record (the table's, see Adopt) with the checkpoint, for a
// later daemon. Detach forgets a paused session in this process and
// leaves its checkpoint on disk for the next daemon (a live one is ended).
type Pauser interface {
	Pause(record []byte) (spec.PauseInfo, error)
	Resume() (time.Duration, error)
	Paused() (spec.PauseInfo, bool)
	Detach()
}

// Reasons a session ended, besides the engine's own (spec.End*).
const (
	EndDeleted   = "deleted"
	EndIdle      = "idle_timeout"
	EndExpired   = "expired"
	EndShutdown  = "daemon_shutdown"
	EndRestart   = "daemon_restart" // named to a call on an earlier daemon's session
	EndPausedTTL = "paused_ttl"     // paused longer than Config.PausedTTL
)

// States of a session.
const (
	StateIdle    = "idle"
	StateRunning = "running"
	StateEnded   = "ended"
	StatePaused  = "paused" // on disk (Pauser); its next call restores it
)

// Config configures a Manager.
type Config struct {
	MaxPerUID int
	MaxTotal  int
	// MaxMemoryPerUID and MaxMemoryTotal bound the memory limits of the
	// sessions live and being made: one caller's (admins are not bound by
	// it) and everyone's; 0: no bound.
	MaxMemoryPerUID int64
	MaxMemoryTotal  int64
	// KeepEnded is how long an ended session stays listed.
	KeepEnded time.Duration
	// Tick is the reaper's period; 0 means one second.
	Tick time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// PauseOnIdle: a session past its idle timeout is paused (a Pauser
	// whose Pause succeeds) rather than ended; PausedTTL then bounds how
	// long it stays paused (0: no bound but its TTL).
	PauseOnIdle bool
	PausedTTL   time.Duration
	// PauseOnShutdown: Close pauses idle sessions (Pausers), within
	// ShutdownPause in all, and leaves every paused session on disk for
	// the next daemon (Pauser.Detach); the others end (daemon_shutdown).
	PauseOnShutdown bool
	ShutdownPause   time.Duration
	// MaxCheckpointBytesPerUID and MaxCheckpointBytesTotal bound the
	// bytes on disk of paused sessions and snapshots: one caller's (413
	// beyond) and everyone's (507); 0: no bound. A pause is refused once a
	// bound is reached (its own size is known only once it is made); a
	// snapshot that would pass one is removed and refused.
	MaxCheckpointBytesPerUID int64
	MaxCheckpointBytesTotal  int64
	// SnapshotTTL is how long a snapshot is kept; 0: until deleted.
	SnapshotTTL time.Duration
	// EncodeMeta turns an Info.Meta into JSON for the record a paused
	// session keeps (Adopt's decode turns it back); nil: paused sessions
	// keep no record and do not outlive the daemon.
	EncodeMeta func(meta any) ([]byte, error)
}

// Caller is who asks.
type Caller struct {
	UID   uint32
	Admin bool
}

// Info is a session's record, as a snapshot.
type Info struct {
	ID          string
	Owner       uint32
	Created     time.Time
	Expires     time.Time
	LastUsed    time.Time
	IdleTimeout time.Duration
	State       string
	EndReason   string
	Calls       int
	// Memory is the session's memory limit, reserved while it lives
	// (not while it is paused: its jail is gone).
	Memory int64
	// PausedAt and PausedBytes describe a paused session's checkpoint.
	PausedAt    time.Time
	PausedBytes int64
	// Meta is the caller's business (limits, network, ...), kept as given.
	Meta any
}

type entry struct {
	Info
	h       Handle
	endedAt time.Time
}

// Manager is the table. Create it with New and Close it.
type Manager struct {
	cfg      Config
	instance string // this daemon's ids start with it
	started  time.Time

	mu       sync.Mutex
	byID     map[string]*entry
	reserved map[uint32]pending // creations in progress, by owner
	closed   bool
	created  uint64            // sessions added since the start
	ended    map[string]uint64 // sessions ended since the start, by reason
	snaps    map[string]*snapEntry

	stop chan struct{}
	wg   sync.WaitGroup
}

// New returns a Manager and starts its reaper.
func New(cfg Config) *Manager {
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	now := cfg.Now()
	m := &Manager{
		cfg: cfg, started: now,
		// The daemon's start time leads every id: an id of an earlier
		// daemon is told apart from one that never existed.
		instance: strconv.FormatInt(now.UnixMilli(), 36),
		byID:     map[string]*entry{}, reserved: map[uint32]pending{}, stop: make(chan struct{}),
	}
	m.wg.Go(m.reap)
	return m
}

func newID(instance string) string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "s-" + instance + "-" + hex.EncodeToString(b[:])
}

// pending are an owner's creations in progress and the memory they
// reserved.
type pending struct {
	n   int
	mem int64
}

// Reservation is a place held for a session being created, with its
// memory.
type Reservation struct {
	m     *Manager
	owner uint32
	mem   int64
	once  sync.Once
}

// Release gives the place back (the creation failed); after Add it does
// nothing.
func (r *Reservation) Release() { r.once.Do(func() { r.m.unreserve(r.owner, r.mem) }) }

// Reserve holds a place for a session who is about to create with a
// memory limit of memory bytes, before its jail is made, checking the
// caps: the caller's count and memory (errdefs.ErrRateLimited: 429; an
// admin's memory is not bound per caller) and the daemon's
// (errdefs.ErrUnavailable: 503); a session that alone exceeds a memory
// bound is an invalid limits.memory_mb (400). Release it when the
// creation failed, or pass it to Add: the memory stays reserved until the
// session ends, however it ends.
func (m *Manager) Reserve(who Caller, memory int64) (*Reservation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errdefs.New(errdefs.ErrUnavailable, "the daemon is shutting down")
	}
	owner := who.UID
	if err := m.roomLocked(owner, who.Admin, memory, ""); err != nil {
		return nil, err
	}
	p := m.reserved[owner]
	p.n++
	p.mem += memory
	m.reserved[owner] = p
	return &Reservation{m: m, owner: owner, mem: memory}, nil
}

// roomLocked checks, under m.mu, that owner may hold one more live
// session of memory bytes (admin: not bound per caller): the caps Reserve
// documents. resuming, when not empty, is the paused session whose
// restore asks for the room: the messages say it stays paused.
func (m *Manager) roomLocked(owner uint32, admin bool, memory int64, resuming string) error {
	mine, total := m.usage(owner)
	perUID, most := m.cfg.MaxMemoryPerUID, m.cfg.MaxMemoryTotal
	if admin {
		perUID = 0
	}
	another, endOne, later := "another", "; end one with DELETE /v1/sessions/{id}", "; try again later"
	if resuming != "" {
		another = "resuming session " + resuming
		endOne = "; session " + resuming + " stays paused: end another with DELETE /v1/sessions/{id}, then call it again"
		later = "; session " + resuming + " stays paused: try again later"
	}
	switch {
	case perUID > 0 && memory > perUID:
		return errdefs.Field("limits.memory_mb", "a session of %d MiB is more than one caller's sessions may hold together (sessions.max_memory_per_uid_mb, %d MiB)", mib(memory), mib(perUID))
	case most > 0 && memory > most:
		return errdefs.Field("limits.memory_mb", "a session of %d MiB is more than the daemon's sessions may hold together (sessions.max_memory_total_mb, %d MiB)", mib(memory), mib(most))
	case mine.n >= m.cfg.MaxPerUID:
		return errdefs.New(errdefs.ErrRateLimited, "uid %d has %d live sessions, the most one caller may have (sessions.max_per_uid)%s", owner, mine.n, endOne)
	case total.n >= m.cfg.MaxTotal:
		return errdefs.New(errdefs.ErrUnavailable, "the daemon has %d live sessions, its most (sessions.max_total)%s", total.n, later)
	case perUID > 0 && mine.mem+memory > perUID:
		return errdefs.New(errdefs.ErrRateLimited, "uid %d's live sessions hold %d MiB of memory; %s of %d MiB would pass the most one caller's may hold (sessions.max_memory_per_uid_mb, %d MiB)%s", owner, mib(mine.mem), another, mib(memory), mib(perUID), endOne+orLess(resuming))
	case most > 0 && total.mem+memory > most:
		return errdefs.New(errdefs.ErrUnavailable, "the daemon's live sessions hold %d MiB of memory; %s of %d MiB would pass their most (sessions.max_memory_total_mb, %d MiB)%s", mib(total.mem), another, mib(memory), mib(most), later+orLess(resuming))
	}
	return nil
}

// orLess is the hint to ask for less memory, for a creation only.
func orLess(resuming string) string {
	if resuming != "" {
		return ""
	}
	return " or ask for less limits.memory_mb"
}

// usage counts, under m.mu, owner's sessions (live and being made) and
// everyone's, with the memory they hold. It is counted from the table
// each time, so an ended session can hold nothing.
func (m *Manager) usage(owner uint32) (mine, total pending) {
	mine = m.reserved[owner]
	for _, p := range m.reserved {
		total.n += p.n
		total.mem += p.mem
	}
	for _, e := range m.byID {
		m.refresh(e)
		if e.State == StateEnded || e.State == StatePaused {
			continue
		}
		total.n++
		total.mem += e.Memory
		if e.Owner == owner {
			mine.n++
			mine.mem += e.Memory
		}
	}
	return mine, total
}

// Memory returns the memory limits of the sessions live and being made,
// all callers', and the bounds on them (0: none).
func (m *Manager) Memory() (reserved, perUID, total int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, all := m.usage(0)
	return all.mem, m.cfg.MaxMemoryPerUID, m.cfg.MaxMemoryTotal
}

func mib(n int64) int64 { return (n + 1<<20 - 1) >> 20 }

// unreserveLocked, under m.mu, drops a creation in progress.
func (m *Manager) unreserveLocked(owner uint32, mem int64) {
	p := m.reserved[owner]
	p.n--
	p.mem -= mem
	if p.n <= 0 {
		delete(m.reserved, owner)
		return
	}
	m.reserved[owner] = p
}

func (m *Manager) unreserve(owner uint32, mem int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unreserveLocked(owner, mem)
}

// Add records a session created under a reservation (which it takes
// over) and returns its snapshot with its id. After Close it closes h.
func (m *Manager) Add(r *Reservation, h Handle, idle, ttl time.Duration, meta any) (Info, error) {
	now := m.cfg.Now()
	e := &entry{h: h, Info: Info{
		ID: newID(m.instance), Owner: r.owner, Created: now, Expires: now.Add(ttl), LastUsed: now,
		IdleTimeout: idle, State: StateIdle, Memory: r.mem, Meta: meta,
	}}
	added := false
	r.once.Do(func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.unreserveLocked(r.owner, r.mem)
		if !m.closed {
			m.byID[e.ID] = e
			m.created++
			added = true
		}
	})
	if !added {
		h.Close()
		return Info{}, errdefs.New(errdefs.ErrUnavailable, "the daemon is shutting down")
	}
	return e.Info, nil
}

// lookup finds id for who under m.mu: another caller's session is not
// found, as one that never existed.
func (m *Manager) lookup(id string, who Caller) (*entry, error) {
	e, ok := m.byID[id]
	if !ok || (e.Owner != who.UID && !who.Admin) {
		if inst, known := instanceOf(id); !ok && known && inst != m.instance {
			if t, err := strconv.ParseInt(inst, 36, 64); err == nil && time.UnixMilli(t).Before(m.started) {
				return nil, errdefs.New(errdefs.ErrConflict, "session %s has ended (%s): the daemon restarted at %s, and only paused sessions outlive the daemon that made them", id, EndRestart, m.started.UTC().Format(time.RFC3339))
			}
		}
		return nil, errdefs.New(errdefs.ErrNotFound, "no session %s (sessions are visible to the uid that made them; ended ones stay listed for %v)", clip(id), m.cfg.KeepEnded)
	}
	m.refresh(e)
	return e, nil
}

// instanceOf returns the instance part of a well-formed id.
func instanceOf(id string) (string, bool) {
	parts := strings.Split(id, "-")
	if len(parts) != 3 || parts[0] != "s" || len(parts[2]) != 24 || len(parts[1]) == 0 || len(parts[1]) > 12 {
		return "", false
	}
	if _, err := hex.DecodeString(parts[2]); err != nil {
		return "", false
	}
	return parts[1], true
}

func clip(id string) string {
	if len(id) > 64 {
		return strconv.Quote(id[:64]) + "..."
	}
	return strconv.Quote(id)
}

// refresh notices, under m.mu, a session that ended by itself.
func (m *Manager) refresh(e *entry) {
	if e.State == StateEnded {
		return
	}
	select {
	case <-e.h.Done():
		m.markEnded(e, e.h.EndReason())
		return
	default:
	}
	if p, ok := e.h.(Pauser); ok && e.State != StateRunning {
		pi, paused := p.Paused()
		switch {
		case paused:
			e.State, e.PausedAt, e.PausedBytes = StatePaused, pi.At, pi.Bytes
		case !e.PausedAt.IsZero():
			// Resumed: the ttl counts the time in a jail, not on disk.
			if d := m.cfg.Now().Sub(e.PausedAt); d > 0 {
				e.Expires = e.Expires.Add(d)
			}
			if e.State == StatePaused {
				e.State = StateIdle
			}
			e.PausedAt, e.PausedBytes = time.Time{}, 0
		}
	}
}

func (m *Manager) markEnded(e *entry, reason string) {
	if e.State == StateEnded {
		return
	}
	e.State, e.EndReason, e.endedAt = StateEnded, reason, m.cfg.Now()
	if m.ended == nil {
		m.ended = map[string]uint64{}
	}
	m.ended[reason]++
}

// Totals are the sessions added since the start and those that ended, by
// reason. A session that ended by itself is counted when the table next
// looks at it (every reaper tick, and every Counts).
func (m *Manager) Totals() (created uint64, ended map[string]uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.byID {
		m.refresh(e)
	}
	ended = make(map[string]uint64, len(m.ended))
	for k, v := range m.ended {
		ended[k] = v
	}
	return m.created, ended
}

// Get returns the snapshot of id as who may see it.
func (m *Manager) Get(id string, who Caller) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.lookup(id, who)
	if err != nil {
		return Info{}, err
	}
	return e.Info, nil
}

// List returns who's sessions (an admin's: everyone's), oldest first.
func (m *Manager) List(who Caller) []Info {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Info
	for _, e := range m.byID {
		if e.Owner == who.UID || who.Admin {
			m.refresh(e)
			out = append(out, e.Info)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Created.Before(out[j].Created) || out[i].Created.Equal(out[j].Created) && out[i].ID < out[j].ID
	})
	return out
}

// Begin starts a call of id for who: errdefs.ErrConflict while another
// call runs or after the session ended. done ends the call with the
// session's count of calls that ran (0: this one did not run).
func (m *Manager) Begin(id string, who Caller) (h Handle, info Info, done func(calls int), err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.lookup(id, who)
	if err != nil {
		return nil, Info{}, nil, err
	}
	switch e.State {
	case StateEnded:
		return nil, Info{}, nil, errdefs.New(errdefs.ErrConflict, "session %s has ended (%s)", id, e.EndReason)
	case StateRunning:
		return nil, Info{}, nil, errdefs.New(errdefs.ErrConflict, "session %s is running another call; wait for it or POST /v1/sessions/%s/interrupt", id, id)
	case StatePaused:
		// Its call restores it: a paused session holds no room, and
		// counts again once it is back in a jail.
		if err := m.roomLocked(e.Owner, who.Admin, e.Memory, id); err != nil {
			return nil, Info{}, nil, err
		}
	}
	e.State, e.LastUsed = StateRunning, m.cfg.Now()
	var once sync.Once
	return e.h, e.Info, func(calls int) {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			e.Calls = max(e.Calls, calls)
			e.LastUsed = m.cfg.Now()
			if e.State == StateRunning {
				e.State = StateIdle
			}
			m.refresh(e)
		})
	}, nil
}

// Interrupt interrupts id's call in progress; it reports whether one ran.
func (m *Manager) Interrupt(id string, who Caller) (bool, Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.lookup(id, who)
	if err != nil {
		return false, Info{}, err
	}
	if e.State != StateRunning {
		return false, e.Info, nil
	}
	e.h.Interrupt()
	return true, e.Info, nil
}

// Pause pauses id to disk (Pauser) and returns its snapshot and how long
// the pause took. A session running a call is a conflict; one paused
// already answers as it is.
func (m *Manager) Pause(id string, who Caller) (Info, time.Duration, error) {
	return m.busy(id, who, false, func(p Pauser, record []byte) (time.Duration, error) {
		if _, paused := p.Paused(); !paused {
			m.mu.Lock()
			err := m.checkpointRoom(m.byID[id].Owner, 0, "another paused session")
			m.mu.Unlock()
			if err != nil {
				return 0, err
			}
		}
		pi, err := p.Pause(record)
		return pi.Took, err
	})
}

// Fork makes count sessions of id for who, each reserved as a creation
// is (the caller's caps of sessions and memory: 429 and 503 as Reserve's,
// each child with id's memory limit), with id's idle timeout and what is
// left of its lifetime (at least a minute); fork makes the children's
// handles from id's (the parent is busy meanwhile: no call begins), meta
// the Meta of each. The children are who's.
func (m *Manager) Fork(id string, who Caller, count int, fork func(parent Handle, n int) ([]Handle, error), meta func(parent any, child Handle) any) ([]Info, error) {
	m.mu.Lock()
	e, err := m.lookup(id, who)
	if err != nil {
		m.mu.Unlock()
		return nil, err
	}
	switch e.State {
	case StateEnded:
		m.mu.Unlock()
		return nil, errdefs.New(errdefs.ErrConflict, "session %s has ended (%s)", id, e.EndReason)
	case StateRunning:
		m.mu.Unlock()
		return nil, errdefs.New(errdefs.ErrConflict, "session %s is running a call; wait for it or POST /v1/sessions/%s/interrupt", id, id)
	}
	prev := e.State
	e.State = StateRunning
	parent := e.Info
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		if e.State == StateRunning {
			e.State = prev
		}
		m.refresh(e)
		m.mu.Unlock()
	}()
	var res []*Reservation
	release := func() {
		for _, r := range res {
			r.Release()
		}
	}
	for range count {
		r, err := m.Reserve(who, parent.Memory)
		if err != nil {
			release()
			return nil, err
		}
		res = append(res, r)
	}
	kids, err := fork(e.h, count)
	if err != nil {
		release()
		return nil, err
	}
	ttl := max(parent.Expires.Sub(m.cfg.Now()), time.Minute)
	if prev == StatePaused {
		ttl = max(parent.Expires.Sub(parent.PausedAt), time.Minute) // its ttl stopped at the pause
	}
	out := make([]Info, 0, len(kids))
	for i, k := range kids {
		info, err := m.Add(res[i], k, parent.IdleTimeout, ttl, meta(parent.Meta, k))
		if err != nil {
			for _, r := range res[i+1:] {
				r.Release()
			}
			for _, k := range kids[i+1:] {
				k.Close()
			}
			return nil, err
		}
		m.mu.Lock()
		if c := m.byID[info.ID]; c != nil {
			c.Calls = parent.Calls
			info.Calls = parent.Calls
		}
		m.mu.Unlock()
		out = append(out, info)
	}
	return out, nil
}

// record is what a paused session keeps of its entry, for Adopt.
type record struct {
	V           int             `json:"v"`
	ID          string          `json:"id"`
	Owner       uint32          `json:"owner"`
	Created     time.Time       `json:"created"`
	Expires     time.Time       `json:"expires"`
	IdleTimeout time.Duration   `json:"idle_timeout"`
	Calls       int             `json:"calls"`
	Memory      int64           `json:"memory"`
	Meta        json.RawMessage `json:"meta,omitempty"`
}

// recordOf is e's record under m.mu; nil without Config.EncodeMeta, or
// when its Meta cannot be encoded.
func (m *Manager) recordOf(e *entry) []byte {
	if m.cfg.EncodeMeta == nil {
		return nil
	}
	meta, err := m.cfg.EncodeMeta(e.Meta)
	if err != nil {
		return nil
	}
	b, err := json.Marshal(record{V: 1, ID: e.ID, Owner: e.Owner, Created: e.Created, Expires: e.Expires,
		IdleTimeout: e.IdleTimeout, Calls: e.Calls, Memory: e.Memory, Meta: meta})
	if err != nil {
		return nil
	}
	return b
}

// Adopt adds a paused session of an earlier daemon (h, a Pauser paused)
// with the record its Pause was given; decode turns the record's Meta
// back into an Info.Meta for h. The session keeps its id, owner,
// lifetime and count of calls; it is not counted as created.
func (m *Manager) Adopt(h Handle, rec []byte, decode func(meta json.RawMessage, h Handle) (any, error)) (Info, error) {
	p, ok := h.(Pauser)
	if !ok {
		return Info{}, errors.New("adopt: the session cannot pause")
	}
	pi, paused := p.Paused()
	if !paused {
		return Info{}, errors.New("adopt: the session is not paused")
	}
	var r record
	if err := json.Unmarshal(rec, &r); err != nil {
		return Info{}, fmt.Errorf("adopt: the record: %w", err)
	}
	if _, ok := instanceOf(r.ID); !ok || r.V != 1 || r.IdleTimeout <= 0 {
		return Info{}, fmt.Errorf("adopt: a record of version %d, id %s", r.V, clip(r.ID))
	}
	meta, err := decode(r.Meta, h)
	if err != nil {
		return Info{}, fmt.Errorf("adopt: the record's meta: %w", err)
	}
	e := &entry{h: h, Info: Info{
		ID: r.ID, Owner: r.Owner, Created: r.Created, Expires: r.Expires, LastUsed: pi.At, IdleTimeout: r.IdleTimeout,
		State: StatePaused, Calls: r.Calls, Memory: r.Memory, PausedAt: pi.At, PausedBytes: pi.Bytes, Meta: meta,
	}}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return Info{}, errdefs.New(errdefs.ErrUnavailable, "the daemon is shutting down")
	case m.byID[r.ID] != nil:
		return Info{}, fmt.Errorf("adopt: session %s is in the table already", r.ID)
	}
	m.byID[r.ID] = e
	return e.Info, nil
}

// Resume restores a paused id and returns its snapshot and how long the
// restore took (0: it was not paused).
func (m *Manager) Resume(id string, who Caller) (Info, time.Duration, error) {
	return m.busy(id, who, true, func(p Pauser, _ []byte) (time.Duration, error) { return p.Resume() })
}

// busy runs f on id's Pauser with the session marked running, so that no
// call begins meanwhile. When f restores a paused session (restores), the
// session must have room again (the caps of Reserve) first.
func (m *Manager) busy(id string, who Caller, restores bool, f func(p Pauser, record []byte) (time.Duration, error)) (Info, time.Duration, error) {
	m.mu.Lock()
	e, err := m.lookup(id, who)
	if err != nil {
		m.mu.Unlock()
		return Info{}, 0, err
	}
	p, ok := e.h.(Pauser)
	switch {
	case e.State == StateEnded:
		m.mu.Unlock()
		return Info{}, 0, errdefs.New(errdefs.ErrConflict, "session %s has ended (%s)", id, e.EndReason)
	case e.State == StateRunning:
		m.mu.Unlock()
		return Info{}, 0, errdefs.New(errdefs.ErrConflict, "session %s is running a call; wait for it or POST /v1/sessions/%s/interrupt", id, id)
	case !ok:
		m.mu.Unlock()
		return Info{}, 0, errdefs.New(errdefs.ErrUnavailable, "sessions cannot pause on this daemon")
	case restores && e.State == StatePaused:
		if err := m.roomLocked(e.Owner, who.Admin, e.Memory, id); err != nil {
			m.mu.Unlock()
			return Info{}, 0, err
		}
	}
	prev := e.State
	e.State = StateRunning
	rec := m.recordOf(e)
	m.mu.Unlock()
	took, err := f(p, rec)
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.State == StateRunning {
		e.State = prev
	}
	if err == nil && took > 0 && prev == StatePaused {
		e.LastUsed = m.cfg.Now() // resumed: idle from now
	}
	m.refresh(e)
	return e.Info, took, err
}

// Delete ends id at once (a call in progress is killed) and returns its
// last snapshot. Deleting an ended session is not an error.
func (m *Manager) Delete(id string, who Caller) (Info, error) {
	return m.end(id, who, EndDeleted)
}

func (m *Manager) end(id string, who Caller, reason string) (Info, error) {
	m.mu.Lock()
	e, err := m.lookup(id, who)
	if err != nil {
		m.mu.Unlock()
		return Info{}, err
	}
	live := e.State != StateEnded
	m.markEnded(e, reason)
	info := e.Info
	m.mu.Unlock()
	if live {
		e.h.Close()
	}
	return info, nil
}

// Close stops the reaper and ends every session (daemon_shutdown): with
// Config.PauseOnShutdown, idle sessions are paused first (those that
// cannot, or not within ShutdownPause, end), and paused sessions are left
// on disk for the next daemon (Pauser.Detach).
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	m.mu.Unlock()
	close(m.stop)
	m.wg.Wait() // the reaper, and its pauses of idle sessions
	m.mu.Lock()
	var live []Handle
	var pausing []pauseJob
	var keep []Pauser
	for _, e := range m.byID {
		m.refresh(e)
		p, ok := e.h.(Pauser)
		switch {
		case e.State == StateEnded:
			continue
		case ok && m.cfg.EncodeMeta != nil && e.State == StatePaused:
			keep = append(keep, p)
			continue
		case ok && m.cfg.EncodeMeta != nil && m.cfg.PauseOnShutdown && e.State == StateIdle && m.checkpointRoom(e.Owner, 0, "") == nil:
			if rec := m.recordOf(e); rec != nil {
				pausing = append(pausing, pauseJob{e: e, p: p, record: rec})
				continue
			}
		}
		m.markEnded(e, EndShutdown)
		live = append(live, e.h)
	}
	m.mu.Unlock()
	for _, h := range live {
		h.Close() // their teardown starts while the others pause
	}
	deadline := m.cfg.Now().Add(m.cfg.ShutdownPause)
	for _, j := range pausing {
		if m.cfg.Now().Before(deadline) {
			if _, err := j.p.Pause(j.record); err == nil {
				keep = append(keep, j.p)
				continue
			}
		}
		m.mu.Lock()
		m.markEnded(j.e, EndShutdown)
		m.mu.Unlock()
		j.e.h.Close()
	}
	m.mu.Lock()
	for _, e := range m.byID {
		if e.State != StateEnded {
			m.markEnded(e, EndShutdown)
		}
	}
	m.mu.Unlock()
	for _, p := range keep {
		p.Detach()
	}
}

// Counts are the live sessions and those running a call.
func (m *Manager) Counts() (live, running int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.byID {
		m.refresh(e)
		switch e.State {
		case StateRunning:
			running++
			live++
		case StateIdle:
			live++
		}
	}
	return live, running
}

// PausedCount is the number of paused sessions.
func (m *Manager) PausedCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.byID {
		m.refresh(e)
		if e.State == StatePaused {
			n++
		}
	}
	return n
}

func (m *Manager) reap() {
	t := time.NewTicker(m.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.ReapNow()
		}
	}
}

// ReapNow ends the sessions past their idle timeout or lifetime and drops
// ended ones kept long enough. The reaper calls it every tick.
func (m *Manager) ReapNow() {
	now := m.cfg.Now()
	var closing []Handle
	var pausing []pauseJob
	m.mu.Lock()
	for id, e := range m.byID {
		m.refresh(e)
		switch {
		case e.State == StateEnded:
			if now.Sub(e.endedAt) >= m.cfg.KeepEnded {
				delete(m.byID, id)
			}
		case e.State == StatePaused:
			// Its ttl stops while it is on disk (refresh moves Expires
			// on at the resume); paused_ttl bounds the time on disk.
			if m.cfg.PausedTTL > 0 && now.Sub(e.PausedAt) >= m.cfg.PausedTTL {
				m.markEnded(e, EndPausedTTL)
				closing = append(closing, e.h)
			}
		case !now.Before(e.Expires):
			m.markEnded(e, EndExpired)
			closing = append(closing, e.h)
		case e.State == StateIdle && now.Sub(lastUse(e)) >= e.IdleTimeout:
			if p, ok := e.h.(Pauser); ok && m.cfg.PauseOnIdle && m.checkpointRoom(e.Owner, 0, "") == nil {
				e.State = StateRunning // no call begins while it pauses
				pausing = append(pausing, pauseJob{e: e, p: p, record: m.recordOf(e)})
				continue
			}
			m.markEnded(e, EndIdle)
			closing = append(closing, e.h)
		}
	}
	expired := m.reapSnapshots(now)
	m.mu.Unlock()
	for _, h := range expired {
		h.Remove()
	}
	if len(pausing) > 0 {
		// In the background: the reaper never waits on a jail. A session
		// that cannot pause ends as an idle one always did.
		m.wg.Go(func() { m.pauseIdle(pausing) })
	}
	// Closing only starts the teardown (run.Session.Close): the reaper
	// never waits on a jail either.
	for _, h := range closing {
		h.Close()
	}
}

type pauseJob struct {
	e      *entry
	p      Pauser
	record []byte
}

// pauseIdle pauses sessions past their idle timeout, one at a time.
func (m *Manager) pauseIdle(jobs []pauseJob) {
	for _, j := range jobs {
		_, err := j.p.Pause(j.record)
		m.mu.Lock()
		if j.e.State == StateRunning {
			j.e.State = StateIdle
		}
		if err != nil && j.e.State != StateEnded {
			m.markEnded(j.e, EndIdle)
			m.mu.Unlock()
			j.e.h.Close()
			continue
		}
		m.refresh(j.e)
		m.mu.Unlock()
	}
}

// Describe is a one-line summary for logs.
func (i Info) Describe() string {
	return fmt.Sprintf("session %s uid %d state %s calls %d", i.ID, i.Owner, i.State, i.Calls)
}
