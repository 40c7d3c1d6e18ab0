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
	r, err := m.Reserve(owner)
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
	r, err := m.Reserve(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reserve(1); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Fatalf("third of uid 1 (one in creation): %v", err)
	}
	r.Release()
	r.Release() // twice is once
	r, _ = m.Reserve(1)
	if _, err := m.Reserve(2); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reserve(3); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("beyond the total: %v", err)
	}
	r.Release()
	// Ended sessions do not count.
	info, _ := add(t, m, 4, time.Hour, time.Hour)
	if _, err := m.Delete(info.ID, Caller{UID: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Reserve(5); err != nil {
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
	if _, err := m.Reserve(1); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("reserve after close: %v", err)
	}
}
