package sessions

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
)

type fakeHandle struct {
	mu         sync.Mutex
	done       chan struct{}
	once       sync.Once
	reason     string
	interrupts int
}

func newFake() *fakeHandle { return &fakeHandle{done: make(chan struct{})} }

func (f *fakeHandle) Interrupt() { f.mu.Lock(); f.interrupts++; f.mu.Unlock() }
func (f *fakeHandle) Close()     { f.end("deleted") }
func (f *fakeHandle) end(r string) {
	f.once.Do(func() { f.mu.Lock(); f.reason = r; f.mu.Unlock(); close(f.done) })
}
func (f *fakeHandle) Done() <-chan struct{} { return f.done }
func (f *fakeHandle) EndReason() string     { f.mu.Lock(); defer f.mu.Unlock(); return f.reason }
func (f *fakeHandle) closed() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newManager(t *testing.T) (*Manager, *clock) {
	c := &clock{t: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	m := New(Config{MaxPerUID: 2, MaxTotal: 3, KeepEnded: time.Minute, Tick: time.Hour, Now: c.now})
	t.Cleanup(m.Close)
	return m, c
}

func add(t *testing.T, m *Manager, owner uint32, idle, ttl time.Duration) (Info, *fakeHandle) {
	t.Helper()
	r, err := m.Reserve(Caller{UID: owner}, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := newFake()
	info, err := m.Add(r, h, idle, ttl, nil)
	if err != nil {
		t.Fatal(err)
	}
	return info, h
}

func TestCaps(t *testing.T) {
	m, _ := newManager(t)
	add(t, m, 1, time.Hour, time.Hour)
	r, err := m.Reserve(Caller{UID: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reserve(Caller{UID: 1}, 0); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Fatalf("third of uid 1 (one in creation): %v", err)
	}
	r.Release()
	r.Release() // twice is once
	r, _ = m.Reserve(Caller{UID: 1}, 0)
	if _, err := m.Reserve(Caller{UID: 2}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reserve(Caller{UID: 3}, 0); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("beyond the total: %v", err)
	}
	r.Release()
	// Ended sessions do not count.
	info, _ := add(t, m, 4, time.Hour, time.Hour)
	if _, err := m.Delete(info.ID, Caller{UID: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reserve(Caller{UID: 5}, 0); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}

func TestOwnersAndCalls(t *testing.T) {
	m, c := newManager(t)
	info, h := add(t, m, 1000, time.Hour, time.Hour)
	if !strings.HasPrefix(info.ID, "s-") || info.State != StateIdle {
		t.Fatalf("%+v", info)
	}
	other := Caller{UID: 1001}
	for name, err := range map[string]error{
		"get":    func() error { _, err := m.Get(info.ID, other); return err }(),
		"begin":  func() error { _, _, _, err := m.Begin(info.ID, other); return err }(),
		"delete": func() error { _, err := m.Delete(info.ID, other); return err }(),
		"intr":   func() error { _, _, err := m.Interrupt(info.ID, other); return err }(),
	} {
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s by another uid: %v, want not found", name, err)
		}
	}
	if got := m.List(other); len(got) != 0 {
		t.Errorf("another uid lists %v", got)
	}
	if got := m.List(Caller{UID: 0, Admin: true}); len(got) != 1 {
		t.Errorf("admin lists %v", got)
	}
	owner := Caller{UID: 1000}
	_, _, done, err := m.Begin(info.ID, owner)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := m.Begin(info.ID, owner); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("second call: %v", err)
	}
	if ok, _, _ := m.Interrupt(info.ID, owner); !ok || h.interrupts != 1 {
		t.Errorf("interrupt while running: %v %d", ok, h.interrupts)
	}
	c.add(time.Minute)
	done(1)
	done(5) // once
	got, _ := m.Get(info.ID, owner)
	if got.State != StateIdle || got.Calls != 1 || !got.LastUsed.Equal(c.now()) {
		t.Errorf("after the call: %+v", got)
	}
	if ok, _, _ := m.Interrupt(info.ID, owner); ok {
		t.Errorf("interrupt while idle said it interrupted")
	}
	// The engine ends it (repeated losses): the reason is the engine's.
	h.end("repeated_losses")
	if _, _, _, err := m.Begin(info.ID, owner); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "repeated_losses") {
		t.Errorf("call on an ended session: %v", err)
	}
}

func TestReaper(t *testing.T) {
	m, c := newManager(t)
	idle, hIdle := add(t, m, 1, 10*time.Second, time.Hour)
	busy, hBusy := add(t, m, 1, 10*time.Second, 30*time.Second)
	_, _, done, err := m.Begin(busy.ID, Caller{UID: 1})
	if err != nil {
		t.Fatal(err)
	}
	c.add(11 * time.Second)
	m.ReapNow()
	if !hIdle.closed() {
		t.Error("idle session not ended")
	}
	if hBusy.closed() {
		t.Error("a session running a call ended for idleness")
	}
	got, _ := m.Get(idle.ID, Caller{UID: 1})
	if got.State != StateEnded || got.EndReason != EndIdle {
		t.Errorf("%+v", got)
	}
	c.add(20 * time.Second)
	m.ReapNow()
	if !hBusy.closed() {
		t.Error("a session past its TTL lives on")
	}
	done(0)
	got, _ = m.Get(busy.ID, Caller{UID: 1})
	if got.State != StateEnded || got.EndReason != EndExpired {
		t.Errorf("%+v", got)
	}
	c.add(2 * time.Minute)
	m.ReapNow()
	if _, err := m.Get(idle.ID, Caller{UID: 1}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("an ended session outlived keep_ended: %v", err)
	}
}

func TestRestartedDaemonsIDs(t *testing.T) {
	old, _ := newManager(t)
	info, _ := add(t, old, 1, time.Hour, time.Hour)
	time.Sleep(2 * time.Millisecond)
	m := New(Config{MaxPerUID: 2, MaxTotal: 3, KeepEnded: time.Minute})
	defer m.Close()
	_, _, _, err := m.Begin(info.ID, Caller{UID: 1})
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), EndRestart) {
		t.Errorf("an earlier daemon's session: %v", err)
	}
	for _, id := range []string{"nope", "s-zz-123", "s-" + strings.Repeat("z", 13) + "-000000000000000000000000"} {
		if _, err := m.Get(id, Caller{UID: 1}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%q: %v", id, err)
		}
	}
}

func TestCloseEndsAll(t *testing.T) {
	c := &clock{t: time.Now()}
	m := New(Config{MaxPerUID: 2, MaxTotal: 3, KeepEnded: time.Minute, Now: c.now})
	_, h := add(t, m, 1, time.Hour, time.Hour)
	m.Close()
	if !h.closed() {
		t.Error("Close left a session")
	}
	if _, err := m.Reserve(Caller{UID: 1}, 0); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("reserve after close: %v", err)
	}
}

// TestMemoryReservation: the memory of the sessions live and being made
// is bounded per caller (429) and in total (503), reserved before the
// jail is made, and back to zero once every session ended, however it
// ended: a failed creation, DELETE, the idle timeout, the lifetime, the
// engine, a creation after shutdown began, and the shutdown.
func TestMemoryReservation(t *testing.T) {
	const mb = 1 << 20
	c := &clock{t: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	m := New(Config{MaxPerUID: 8, MaxTotal: 16, MaxMemoryPerUID: 256 * mb, MaxMemoryTotal: 384 * mb, KeepEnded: time.Minute, Tick: time.Hour, Now: c.now})
	defer m.Close()
	reserved := func(want int64) {
		t.Helper()
		if got, _, limit := m.Memory(); got != want || limit != 384*mb {
			t.Fatalf("reserved %d MiB of %d, want %d MiB of 384", got/mb, limit/mb, want/mb)
		}
	}
	one, two, admin := Caller{UID: 1}, Caller{UID: 2}, Caller{UID: 0, Admin: true}

	// Creations in progress count: the third of uid 1 while two are being
	// made is refused, naming the bound.
	r1, err := m.Reserve(one, 128*mb)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := m.Reserve(one, 128*mb)
	if err != nil {
		t.Fatal(err)
	}
	reserved(256 * mb)
	_, err = m.Reserve(one, 64*mb)
	if !errors.Is(err, errdefs.ErrRateLimited) || !strings.Contains(err.Error(), "sessions.max_memory_per_uid_mb, 256 MiB") {
		t.Fatalf("past uid 1's bound: %v", err)
	}
	// Another uid meets the total.
	r3, err := m.Reserve(two, 128*mb)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Reserve(two, 64*mb)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "sessions.max_memory_total_mb, 384 MiB") {
		t.Fatalf("past the total: %v", err)
	}
	// An admin is not bound per caller, but is by the total.
	if _, err := m.Reserve(admin, 64*mb); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("admin past the total: %v", err)
	}
	// A session that could never fit is a bad limits.memory_mb.
	var fe *errdefs.FieldError
	if _, err := m.Reserve(two, 512*mb); !errors.As(err, &fe) || fe.Field != "limits.memory_mb" || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a session above the per-uid bound: %v", err)
	}
	if _, err := m.Reserve(admin, 512*mb); !errors.As(err, &fe) || !strings.Contains(err.Error(), "max_memory_total_mb") {
		t.Fatalf("an admin's session above the total: %v", err)
	}

	// A failed creation gives its memory back (twice is once).
	r3.Release()
	r3.Release()
	reserved(256 * mb)
	// Added sessions keep what their reservation held.
	h1, h2 := newFake(), newFake()
	i1, err := m.Add(r1, h1, 10*time.Second, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Add(r2, h2, time.Hour, 30*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	r2.Release() // after Add: nothing
	reserved(256 * mb)
	if i1.Memory != 128*mb {
		t.Errorf("session memory %d", i1.Memory)
	}
	// Idle timeout, then the lifetime.
	c.add(11 * time.Second)
	m.ReapNow()
	reserved(128 * mb)
	c.add(20 * time.Second)
	m.ReapNow()
	if !h1.closed() || !h2.closed() {
		t.Fatal("reaper left a session")
	}
	reserved(0)

	// DELETE, and an end of the engine's own (seen without a reaper tick).
	_, hd := addMem(t, m, one, 128*mb)
	id, he := addMem(t, m, two, 128*mb)
	reserved(256 * mb)
	if _, err := m.Delete(id.ID, two); err != nil {
		t.Fatal(err)
	}
	he.end("jail_ended") // after the DELETE: nothing more
	hd.end("repeated_losses")
	reserved(0)
	// A freed place is usable again at once.
	addMem(t, m, one, 256*mb)
	reserved(256 * mb)

	// Shutdown: a creation under way when it began is closed by Add and
	// holds nothing.
	r, err := m.Reserve(two, 64*mb)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	late := newFake()
	if _, err := m.Add(r, late, time.Hour, time.Hour, nil); !errors.Is(err, errdefs.ErrUnavailable) || !late.closed() {
		t.Fatalf("add after close: %v", err)
	}
	reserved(0)
}

// TestMemoryReservationConcurrent: creations at once never pass the
// bounds together, and every one given back leaves zero.
func TestMemoryReservationConcurrent(t *testing.T) {
	const mb = 1 << 20
	m := New(Config{MaxPerUID: 64, MaxTotal: 64, MaxMemoryPerUID: 256 * mb, MaxMemoryTotal: 512 * mb, KeepEnded: time.Minute, Tick: time.Hour})
	defer m.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := map[uint32]int{}
	var held []*Reservation
	for i := range 64 {
		wg.Go(func() {
			uid := uint32(i % 4)
			r, err := m.Reserve(Caller{UID: uid}, 64*mb)
			if err != nil {
				if !errors.Is(err, errdefs.ErrRateLimited) && !errors.Is(err, errdefs.ErrUnavailable) {
					t.Errorf("refusal of another class: %v", err)
				}
				return
			}
			mu.Lock()
			granted[uid]++
			held = append(held, r)
			mu.Unlock()
		})
	}
	wg.Wait()
	total := 0
	for uid, n := range granted {
		if n > 4 {
			t.Errorf("uid %d got %d × 64 MiB past its 256", uid, n)
		}
		total += n
	}
	if total != 8 {
		t.Errorf("%d × 64 MiB granted, want the 512 MiB total exactly", total)
	}
	if got, _, _ := m.Memory(); got != 512*mb {
		t.Errorf("reserved %d MiB", got/mb)
	}
	for _, r := range held {
		r.Release()
	}
	if got, _, _ := m.Memory(); got != 0 {
		t.Errorf("reserved %d MiB after every release", got/mb)
	}
}

func addMem(t *testing.T, m *Manager, who Caller, memory int64) (Info, *fakeHandle) {
	t.Helper()
	r, err := m.Reserve(who, memory)
	if err != nil {
		t.Fatal(err)
	}
	h := newFake()
	info, err := m.Add(r, h, time.Hour, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	return info, h
}

// activeHandle is a session whose background work was last active at a
// time of the test's choosing.
type activeHandle struct {
	*fakeHandle
	mu   sync.Mutex
	last time.Time
}

func (a *activeHandle) LastActivity() time.Time { a.mu.Lock(); defer a.mu.Unlock(); return a.last }

// A session whose background commands write output is not idle: its idle
// timeout counts from that output too; its ttl still applies.
func TestReaperCountsActivity(t *testing.T) {
	m, c := newManager(t)
	r, err := m.Reserve(Caller{UID: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := &activeHandle{fakeHandle: newFake()}
	if _, err := m.Add(r, h, 10*time.Second, 25*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	c.add(8 * time.Second)
	h.mu.Lock()
	h.last = c.now()
	h.mu.Unlock()
	c.add(8 * time.Second) // 16 s after the last call, 8 after the output
	m.ReapNow()
	if h.closed() {
		t.Fatal("a session with recent background output ended for idleness")
	}
	c.add(3 * time.Second) // 11 s after the output
	m.ReapNow()
	if !h.closed() || h.EndReason() != "deleted" {
		t.Fatalf("a session idle past its timeout since its last output lives on")
	}
}
