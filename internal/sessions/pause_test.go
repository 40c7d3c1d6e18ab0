package sessions

import (
	"encoding/json"
	"errors"
	"strings"
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
	record []byte // the last Pause's
	kept   bool   // detached paused: its checkpoint left for the next daemon
}

func (f *fakePauser) Pause(record []byte) (spec.PauseInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pauses++
	f.record = record
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

func (f *fakePauser) Detach() {
	f.mu.Lock()
	f.kept = f.paused
	f.mu.Unlock()
	f.end("daemon_shutdown")
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

type testMeta struct {
	Image string `json:"image"`
}

func encodeTestMeta(m any) ([]byte, error) { return json.Marshal(m) }

// A paused session's record carries what the table knows of it; a later
// table adopts it from that record with the same id, owner, lifetime,
// count of calls and meta; its owner alone sees it; an id of the earlier
// daemon that was not kept still says the daemon restarted.
func TestPausedSessionAdopted(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	cfg := Config{MaxPerUID: 4, MaxTotal: 4, KeepEnded: time.Minute, Tick: time.Hour, Now: c.now, EncodeMeta: encodeTestMeta, PauseOnShutdown: true, ShutdownPause: time.Minute}
	m := New(cfg)
	r, err := m.Reserve(Caller{UID: 7}, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	h := &fakePauser{fakeHandle: newFake(), at: c.now()}
	info, err := m.Add(r, h, 3*time.Minute, time.Hour, &testMeta{Image: "python-ml"})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := add(t, m, 7, time.Minute, time.Hour) // cannot pause: ends at Close
	_, _, done, err := m.Begin(info.ID, Caller{UID: 7})
	if err != nil {
		t.Fatal(err)
	}
	done(5)
	if _, _, err := m.Pause(info.ID, Caller{UID: 7}); err != nil {
		t.Fatal(err)
	}
	m.Close()
	if !h.kept || h.pauses != 1 {
		t.Fatalf("a paused session at Close: kept %v after %d pauses", h.kept, h.pauses)
	}

	c.add(time.Hour)
	m2 := New(cfg)
	t.Cleanup(m2.Close)
	h2 := &fakePauser{fakeHandle: newFake(), at: h.at, paused: true}
	got, err := m2.Adopt(h2, h.record, func(raw json.RawMessage, _ Handle) (any, error) {
		var tm testMeta
		err := json.Unmarshal(raw, &tm)
		return &tm, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != info.ID || got.Owner != 7 || !got.Created.Equal(info.Created) || !got.Expires.Equal(info.Expires) ||
		got.IdleTimeout != 3*time.Minute || got.Calls != 5 || got.Memory != 64<<20 || got.State != StatePaused || got.Meta.(*testMeta).Image != "python-ml" {
		t.Errorf("adopted: %+v, from %+v", got, info)
	}
	if _, err := m2.Get(info.ID, Caller{UID: 8}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another uid's adopted session: %v, want not found", err)
	}
	if _, err := m2.Get(other.ID, Caller{UID: 7}); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), EndRestart) {
		t.Errorf("a session of the earlier daemon that was not kept: %v, want %s", err, EndRestart)
	}
	if _, err := m2.Adopt(h2, h.record, func(json.RawMessage, Handle) (any, error) { return nil, nil }); err == nil {
		t.Error("the same session adopted twice")
	}
	// A call resumes it; the lifetime counts only the time in a jail.
	_, _, done, err = m2.Begin(info.ID, Caller{UID: 7})
	if err != nil {
		t.Fatal(err)
	}
	h2.Resume()
	done(6)
	if g, _ := m2.Get(info.ID, Caller{UID: 7}); g.State != StateIdle || g.Calls != 6 || !g.Expires.Equal(info.Expires.Add(time.Hour)) {
		t.Errorf("after its call: %+v", g)
	}
}

// Close with PauseOnShutdown pauses idle sessions and keeps them; one
// that cannot pause, or whose turn comes after ShutdownPause, ends.
func TestClosePausesIdle(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	m := New(Config{MaxPerUID: 4, MaxTotal: 4, KeepEnded: time.Minute, Tick: time.Hour, Now: c.now, EncodeMeta: encodeTestMeta, PauseOnShutdown: true, ShutdownPause: time.Minute})
	_, a := addPauser(t, m, c, 1, 0)
	_, b := addPauser(t, m, c, 1, 0)
	b.fail = errdefs.New(errdefs.ErrConflict, "cannot")
	m.Close()
	if !a.kept || len(a.record) == 0 {
		t.Errorf("an idle session at Close: kept %v, record %q", a.kept, a.record)
	}
	if b.kept || b.EndReason() != "deleted" {
		t.Errorf("a session that cannot pause at Close: kept %v, ended %q", b.kept, b.EndReason())
	}
	// No time left: nothing pauses.
	m2 := New(Config{MaxPerUID: 4, MaxTotal: 4, KeepEnded: time.Minute, Tick: time.Hour, Now: c.now, EncodeMeta: encodeTestMeta, PauseOnShutdown: true})
	_, d := addPauser(t, m2, c, 1, 0)
	m2.Close()
	if d.kept || d.pauses != 0 {
		t.Errorf("past ShutdownPause: kept %v after %d pauses", d.kept, d.pauses)
	}
}

// A paused session holds no room, so a caller may open others in its
// place; restoring it (a call, Resume, a snapshot or a rollback) asks for
// the room again and is refused, the session left paused, when the caps
// are full: pausing is no way around them.
func TestResumeNeedsRoom(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	m := New(Config{MaxPerUID: 2, MaxTotal: 3, MaxMemoryPerUID: 128 << 20, MaxMemoryTotal: 192 << 20, KeepEnded: time.Minute, Tick: time.Hour, Now: c.now})
	t.Cleanup(m.Close)
	a, _ := addPauser(t, m, c, 1, 64<<20)
	b, _ := addPauser(t, m, c, 2, 64<<20)
	for _, s := range []Info{a, b} {
		if _, _, err := m.Pause(s.ID, Caller{UID: s.Owner}); err != nil {
			t.Fatal(err)
		}
	}
	// Uid 1 opens two more in their place; uid 2 takes the last 64 MiB.
	addPauser(t, m, c, 1, 64<<20)
	addPauser(t, m, c, 1, 64<<20)
	addPauser(t, m, c, 2, 64<<20)
	restores := map[string]func() error{
		"a call": func() error { _, _, _, err := m.Begin(a.ID, Caller{UID: 1}); return err },
		"resume": func() error { _, _, err := m.Resume(a.ID, Caller{UID: 1}); return err },
		"snapshot": func() error {
			_, err := m.TakeSnapshot(a.ID, Caller{UID: 1}, func(Handle, []byte) (SnapshotHandle, error) {
				t.Error("a snapshot taken past the caps")
				return nil, errors.New("no")
			})
			return err
		},
	}
	for what, f := range restores {
		err := f()
		if !errors.Is(err, errdefs.ErrRateLimited) || !strings.Contains(err.Error(), "sessions.max_per_uid") || !strings.Contains(err.Error(), "stays paused") {
			t.Errorf("%s of a paused session past uid 1's caps: %v, want 429 naming sessions.max_per_uid and that it stays paused", what, err)
		}
		if g, _ := m.Get(a.ID, Caller{UID: 1}); g.State != StatePaused {
			t.Errorf("after the refused %s: %s, want paused", what, g.State)
		}
	}
	// Uid 2 is within its own caps, but the daemon's are full.
	_, _, _, err := m.Begin(b.ID, Caller{UID: 2})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "sessions.max_total") || !strings.Contains(err.Error(), "stays paused") {
		t.Errorf("a call on a paused session past the daemon's caps: %v, want 503 naming sessions.max_total", err)
	}
	if reserved, _, _ := m.Memory(); reserved != 192<<20 {
		t.Errorf("reserved %d MiB, want 192: nothing past the caps", reserved>>20)
	}
}

// fakeSnap is a snapshot's handle that counts its removals.
type fakeSnap struct {
	mu      sync.Mutex
	at      time.Time
	removed int
}

func (f *fakeSnap) Bytes() int64       { return 10 }
func (f *fakeSnap) Created() time.Time { return f.at }
func (f *fakeSnap) Image() string      { return "python" }
func (f *fakeSnap) Remove() {
	f.mu.Lock()
	f.removed++
	f.mu.Unlock()
}

func (f *fakeSnap) removals() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.removed
}

// A snapshot deleted while a rollback or a new session restores from it
// leaves the table at once (a second delete is 404) and its files stay
// until the restore ends, then go, once.
func TestSnapshotDeletedDuringRestore(t *testing.T) {
	m, c := newManager(t)
	info, _ := addPauser(t, m, c, 1, 0)
	owner := Caller{UID: 1}
	snap := &fakeSnap{at: c.now()}
	sn, err := m.TakeSnapshot(info.ID, owner, func(Handle, []byte) (SnapshotHandle, error) { return snap, nil })
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = m.Rollback(info.ID, sn.ID, owner, func(Handle, SnapshotHandle) (time.Duration, int, error) {
		if _, err := m.DeleteSnapshot(sn.ID, owner); err != nil {
			t.Errorf("delete during the rollback: %v", err)
		}
		if _, err := m.DeleteSnapshot(sn.ID, owner); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("a second delete: %v, want not found", err)
		}
		if n := snap.removals(); n != 0 {
			t.Errorf("the snapshot's files removed during the rollback from it (%d)", n)
		}
		return time.Millisecond, 1, nil
	})
	if err != nil || snap.removals() != 1 {
		t.Fatalf("rollback: %v; the files removed %d times after it, want once", err, snap.removals())
	}

	snap2 := &fakeSnap{at: c.now()}
	sn2, err := m.TakeSnapshot(info.ID, owner, func(Handle, []byte) (SnapshotHandle, error) { return snap2, nil })
	if err != nil {
		t.Fatal(err)
	}
	_, _, release, err := m.SnapshotHandleOf(sn2.ID, owner)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.DeleteSnapshot(sn2.ID, owner); err != nil || snap2.removals() != 0 {
		t.Errorf("delete while a session is made from it: %v, removed %d times, want 0", err, snap2.removals())
	}
	release()
	release()
	if n := snap2.removals(); n != 1 {
		t.Errorf("after the session was made: removed %d times, want 1", n)
	}
	// Not held: removed at once.
	snap3 := &fakeSnap{at: c.now()}
	sn3, _ := m.TakeSnapshot(info.ID, owner, func(Handle, []byte) (SnapshotHandle, error) { return snap3, nil })
	if _, err := m.DeleteSnapshot(sn3.ID, owner); err != nil || snap3.removals() != 1 {
		t.Errorf("delete: %v, removed %d times, want 1", err, snap3.removals())
	}
}
