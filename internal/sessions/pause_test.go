package sessions

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
)

// fakePauser is a handle that pauses: fail makes Pause refuse.
type fakePauser struct {
	*fakeHandle
	mu     sync.Mutex
	paused bool
	at     time.Time
	fail   error
	pauses int
}

func (f *fakePauser) Pause() (spec.PauseInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses++
	if f.fail != nil {
		return spec.PauseInfo{}, f.fail
	}
	if f.paused {
		return spec.PauseInfo{At: f.at, Bytes: 100}, nil
	}
	f.paused = true
	return spec.PauseInfo{At: f.at, Bytes: 100, Took: time.Millisecond}, nil
}

func (f *fakePauser) Resume() (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.paused {
		return 0, nil
	}
	f.paused = false
	return 2 * time.Millisecond, nil
}

func (f *fakePauser) Paused() (spec.PauseInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return spec.PauseInfo{At: f.at, Bytes: 100}, f.paused
}

func addPauser(t *testing.T, m *Manager, c *clock, owner uint32, mem int64) (Info, *fakePauser) {
	t.Helper()
	r, err := m.Reserve(Caller{UID: owner}, mem)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakePauser{fakeHandle: newFake(), at: c.now()}
	info, err := m.Add(r, h, time.Minute, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	return info, h
}

// Pause and resume through the table: the state, the checkpoint's
// figures, the owner check, a paused session's memory not counted, a
// call on a paused session (Begin) allowed.
func TestPauseResume(t *testing.T) {
	m, c := newManager(t)
	info, h := addPauser(t, m, c, 1, 64<<20)
	if _, _, err := m.Pause(info.ID, Caller{UID: 2}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another uid's pause: %v, want not found", err)
	}
	got, took, err := m.Pause(info.ID, Caller{UID: 1})
	if err != nil || took != time.Millisecond || got.State != StatePaused || got.PausedBytes != 100 || !got.PausedAt.Equal(c.now()) {
		t.Fatalf("pause: %+v %v %v", got, took, err)
	}
	if reserved, _, _ := m.Memory(); reserved != 0 {
		t.Errorf("a paused session's memory counted: %d", reserved)
	}
	if live, _ := m.Counts(); live != 0 || m.PausedCount() != 1 {
		t.Errorf("live %d, paused %d; want 0 and 1", live, m.PausedCount())
	}
	if _, took, err := m.Pause(info.ID, Caller{UID: 1}); err != nil || took != 0 {
		t.Errorf("pause of a paused session: %v %v", took, err)
	}
	_, _, done, err := m.Begin(info.ID, Caller{UID: 1})
	if err != nil {
		t.Fatalf("a call on a paused session: %v", err)
	}
	if _, _, err := m.Pause(info.ID, Caller{UID: 1}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("pause during a call: %v, want a conflict", err)
	}
	h.Resume() // what the call does
	done(1)
	if g, _ := m.Get(info.ID, Caller{UID: 1}); g.State != StateIdle || g.PausedAt != (time.Time{}) {
		t.Errorf("after the call: %+v", g)
	}
	m.Pause(info.ID, Caller{UID: 1})
	c.add(time.Hour - time.Second)
	got, took, err = m.Resume(info.ID, Caller{UID: 1})
	if err != nil || took != 2*time.Millisecond || got.State != StateIdle || !got.LastUsed.Equal(c.now()) {
		t.Errorf("resume: %+v %v %v", got, took, err)
	}
	// The hour on disk does not count against its ttl of an hour.
	if want := info.Expires.Add(time.Hour - time.Second); !got.Expires.Equal(want) {
		t.Errorf("expires %v after the resume, want %v", got.Expires, want)
	}
}

// A session without pausing (the fake engine's) is 503, not a silent
// nothing.
func TestPauseUnsupported(t *testing.T) {
	m, _ := newManager(t)
	info, _ := add(t, m, 1, time.Minute, time.Hour)
	if _, _, err := m.Pause(info.ID, Caller{UID: 1}); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("pause: %v, want unavailable", err)
	}
}

// The idle timeout pauses (PauseOnIdle); a session that cannot pause
// ends as an idle one; a paused one ends after PausedTTL.
func TestIdlePauses(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	m := New(Config{MaxPerUID: 4, MaxTotal: 4, KeepEnded: time.Minute, Tick: time.Hour, Now: c.now, PauseOnIdle: true, PausedTTL: 24 * time.Hour})
	t.Cleanup(m.Close)
	a, _ := addPauser(t, m, c, 1, 0)
	b, hb := addPauser(t, m, c, 1, 0)
	hb.fail = errdefs.New(errdefs.ErrConflict, "cannot")
	c.add(2 * time.Minute)
	m.ReapNow()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ga, _ := m.Get(a.ID, Caller{UID: 1})
		gb, _ := m.Get(b.ID, Caller{UID: 1})
		if ga.State == StatePaused && gb.State == StateEnded {
			if gb.EndReason != EndIdle {
				t.Errorf("the session that could not pause ended %q, want %q", gb.EndReason, EndIdle)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the idle timeout: %s and %s", ga.State, gb.State)
		}
		time.Sleep(time.Millisecond)
	}
	c.add(23 * time.Hour)
	m.ReapNow()
	if g, _ := m.Get(a.ID, Caller{UID: 1}); g.State != StatePaused {
		t.Errorf("paused 23 h: %s", g.State)
	}
	c.add(2 * time.Hour) // past the paused TTL
	m.ReapNow()
	if g, _ := m.Get(a.ID, Caller{UID: 1}); g.State != StateEnded || g.EndReason != EndPausedTTL {
		t.Errorf("paused 25 h: %s (%s), want ended (%s)", g.State, g.EndReason, EndPausedTTL)
	}
}
