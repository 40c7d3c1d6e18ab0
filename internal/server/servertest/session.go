package servertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/server"
	"github.com/jaild/jaild/internal/sessions"
)

// Session is a fake session: each call "prints" its code and ends ok,
// unless ExecFunc says otherwise.
type Session struct {
	Spec     run.SessionSpec
	ExecFunc func(ctx context.Context, c *run.Call) (*run.CallResult, error)

	mu          sync.Mutex
	calls       int
	interrupts  int
	done        chan struct{}
	closeOnce   sync.Once
	reason      string
	interrupted chan struct{}
	pausedAt    time.Time // zero: not paused
	filesDir    string    // FS's directory, once made
	cmdSeq      uint64
	cmds        []*fakeCommand
	e           *Engine // its Ports
}

// NewSession makes a fake session and keeps it in Sessions.
func (e *Engine) NewSession(spec run.SessionSpec) (server.Session, error) {
	if err := spec.Limits.Validate(); err != nil {
		return nil, err
	}
	s := &Session{Spec: spec, done: make(chan struct{}), interrupted: make(chan struct{}, 16), e: e}
	e.mu.Lock()
	if err := e.sessionErr; err != nil {
		e.mu.Unlock()
		return nil, err
	}
	e.sessions = append(e.sessions, s)
	f := e.SessionExec
	e.mu.Unlock()
	s.ExecFunc = f
	return s, nil
}

// ForkSession makes n fake sessions of h's spec (the real fork is tested
// with real jails in internal/run and tests/).
func (e *Engine) ForkSession(h server.Session, n int) ([]server.Session, error) {
	p, ok := h.(*Session)
	if !ok {
		return nil, fmt.Errorf("fork: a session of type %T", h)
	}
	out := make([]server.Session, 0, n)
	for range n {
		k, err := e.NewSession(p.Spec)
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

// fakeSnapshot is a snapshot of a fake session: its spec and count of
// calls.
type fakeSnapshot struct {
	spec    run.SessionSpec
	calls   int
	created time.Time
	removed bool
}

func (f *fakeSnapshot) Bytes() int64       { return 4096 }
func (f *fakeSnapshot) Created() time.Time { return f.created }
func (f *fakeSnapshot) Image() string      { return f.spec.Image }
func (f *fakeSnapshot) Remove()            { f.removed = true }

// SnapshotSession "snapshots" a fake session (the real ones are tested
// with real jails in internal/run and tests/).
func (e *Engine) SnapshotSession(h server.Session, _ []byte) (sessions.SnapshotHandle, error) {
	p, ok := h.(*Session)
	if !ok {
		return nil, fmt.Errorf("snapshot: a session of type %T", h)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return &fakeSnapshot{spec: p.Spec, calls: p.calls, created: time.Now()}, nil
}

// RollbackSession "rolls back" a fake session: its count of calls.
func (e *Engine) RollbackSession(h server.Session, sn sessions.SnapshotHandle) (time.Duration, int, error) {
	p, ok := h.(*Session)
	f, ok2 := sn.(*fakeSnapshot)
	if !ok || !ok2 {
		return 0, 0, fmt.Errorf("rollback: a session of type %T, a snapshot of type %T", h, sn)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = f.calls
	return time.Millisecond, f.calls, nil
}

// SessionFromSnapshot makes a fake session of a snapshot's spec.
func (e *Engine) SessionFromSnapshot(sn sessions.SnapshotHandle) (server.Session, error) {
	f, ok := sn.(*fakeSnapshot)
	if !ok {
		return nil, fmt.Errorf("from snapshot: a snapshot of type %T", sn)
	}
	return e.NewSession(f.spec)
}

// FailSessions makes every session made after fail with err (as a jail
// that cannot start); nil: succeed again.
func (e *Engine) FailSessions(err error) {
	e.mu.Lock()
	e.sessionErr = err
	e.mu.Unlock()
}

// Sessions returns the sessions made so far.
func (e *Engine) Sessions() []*Session {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*Session(nil), e.sessions...)
}

// Exec answers a call.
func (s *Session) Exec(ctx context.Context, c *run.Call) (*run.CallResult, error) {
	s.mu.Lock()
	s.calls++
	n, f := s.calls, s.ExecFunc
	resumed := !s.pausedAt.IsZero()
	s.pausedAt = time.Time{}
	s.mu.Unlock()
	if f != nil {
		return f(ctx, c)
	}
	res := &run.CallResult{Count: n, Result: run.Result{ID: jail.NewID(), Status: spec.StatusOK, Stdout: []byte(c.Code)}}
	if resumed {
		res.Resumed, res.Restore = true, time.Millisecond
	}
	return res, nil
}

// Interrupt counts interrupts and signals Interrupted.
func (s *Session) Interrupt() {
	s.mu.Lock()
	s.interrupts++
	s.mu.Unlock()
	select {
	case s.interrupted <- struct{}{}:
	default:
	}
}

// Interrupted receives one value per Interrupt.
func (s *Session) Interrupted() <-chan struct{} { return s.interrupted }

// End ends the session by itself with reason (as repeated losses would).
func (s *Session) End(reason string) {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.reason = reason
		s.mu.Unlock()
		close(s.done)
	})
}

// Close ends the session.
func (s *Session) Close() { s.End(spec.EndClosed) }

// Closed reports whether the session ended.
func (s *Session) Closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Done is closed when the session ended.
func (s *Session) Done() <-chan struct{} { return s.done }

// EndReason says why.
func (s *Session) EndReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// Warm reports false.
func (s *Session) Warm() bool { return false }

// Pause "pauses" the session in memory (the real pause is tested with
// real jails in internal/run and tests/): a paused fake answers its next
// call resumed.
func (s *Session) Pause(record []byte) (spec.PauseInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pausedAt.IsZero() {
		s.pausedAt = time.Now()
		return spec.PauseInfo{At: s.pausedAt, Bytes: 4096, Took: time.Millisecond}, nil
	}
	return spec.PauseInfo{At: s.pausedAt, Bytes: 4096}, nil
}

// Resume "restores" a paused fake.
func (s *Session) Resume() (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pausedAt.IsZero() {
		return 0, nil
	}
	s.pausedAt = time.Time{}
	return time.Millisecond, nil
}

// Detach ends the fake as a daemon's stop would (its "checkpoint" is
// memory: it does not outlive the harness).
func (s *Session) Detach() { s.End(spec.EndShutdown) }

// Paused says whether the fake is paused.
func (s *Session) Paused() (spec.PauseInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return spec.PauseInfo{At: s.pausedAt, Bytes: 4096}, !s.pausedAt.IsZero()
}

// FS runs a file operation on the fake's own files: a temporary
// directory with the trees of a jail's (work and tmp), made at the first
// operation and removed when the fake ends, through run's own code
// (run.FilesIn; the jail's side is tested with real jails in tests/).
func (s *Session) FS(r spec.FSRequest) (spec.FSResult, error) {
	s.mu.Lock()
	if s.filesDir == "" {
		dir, err := os.MkdirTemp("", "jaild-fake-files-")
		if err == nil {
			err = errors.Join(os.Mkdir(filepath.Join(dir, "work"), 0o755), os.Mkdir(filepath.Join(dir, "tmp"), 0o1777))
		}
		if err != nil {
			s.mu.Unlock()
			return spec.FSResult{}, err
		}
		s.filesDir = dir
		go func() { <-s.done; os.RemoveAll(dir) }()
	}
	dir := s.filesDir
	s.mu.Unlock()
	return run.FilesIn(dir, r, s.Spec.Limits.WorkspaceBytes, -1, -1)
}
