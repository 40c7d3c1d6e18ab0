package run

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/egress"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/runner"
	"github.com/jaild/jaild/internal/workspace"
)

// A session is one jail whose Python interpreter lives across calls. Its
// first process is the image's init in session mode (rootfs/runner/init.c)
// and, as its child, the runner taking one job per call (runner.py). The
// daemon talks to init over two pipes the interpreter has no access to
// (runner.Control): commands on fd 5 (interrupt, kill, start afresh) and
// init's reports on fd 6 that the interpreter ended or started afresh.
// The user's stdout, stderr and records pipes live as long as the
// session; a call's share of them is what was written between its job and
// its end record (see runner.Stream).
//
// Between calls the session's cgroup is frozen: no process of it runs.

// The session's vocabulary, in spec with the run's.
type (
	SessionSpec = spec.SessionSpec
	Call        = spec.Call
	CallResult  = spec.CallResult
)

// Session tunables.
const (
	// MaxLosses in a row end a session.
	MaxLosses = 3
	// restartTimeout bounds a fresh interpreter's start by init.
	restartTimeout = 10 * time.Second
	// syncWait bounds the wait for a call's output already in the pipes.
	syncWait = 2 * time.Second
)

// Session is a live session. Its methods are safe for concurrent use;
// Exec runs one call at a time (a second gets errdefs.ErrConflict).
type Session struct {
	s      *Service
	id     string   // the first jail's id, for logs
	st     *started // nil while paused (callMu held to change it)
	egress bool     // the session's jail has a network of its own
	limits jail.Limits
	env    map[string]string
	warm   bool
	image  string

	ctl            *runner.Control // init's control channel
	stdout, stderr *runner.Stream
	records        *recordsPipe
	events         chan runner.Report // init's reports
	interrupt      chan struct{}

	callMu sync.Mutex // held by the call in progress
	// settling counts holders of callMu that only freeze the session
	// after its last background command ended (tryCall waits for them).
	settling atomic.Int32

	cmdMu     sync.Mutex
	cmds      []*command // background commands, oldest first (commands.go)
	activity  time.Time  // a background command's last output
	portConns int        // proxied connections open (ports.go)

	mu      sync.Mutex
	paused  *pausedState // set while the session is on disk
	pausing bool         // a checkpoint is being made: the jail's end is not the session's
	// recordsIno is the records pipe's inode after a restore (the
	// runner is told it: runner.Job.Records); 0 before any.
	recordsIno uint64
	// reexeced: the restored init executed afresh (reexecInit), so that
	// the session can pause again.
	reexeced bool
	calls    int
	fresh    bool // the interpreter has had no job yet
	losses   int  // in a row
	cur      *callState
	net      egress.Usage // the jail's traffic at the end of the last call
	// cpuPast is the CPU time of the session's earlier jails (before a
	// pause); cpuSeen the most CPU() has answered, kept once the jail is
	// gone.
	cpuPast, cpuSeen time.Duration
	ended            bool
	endReason        string
	done             chan struct{} // closed when the session ended
	closeOnce        sync.Once
}

// callState is what the readers deliver to the call in progress.
type callState struct {
	n       int
	records []byte
	end     chan int      // the call's end record's status
	started chan struct{} // closed at the call's start record
	begun   bool
}

// NewSession makes a session: a warm jail of the pool when one fits, else
// a jail started for it. The interpreter starts in the background; the
// first call waits for it.
func (s *Service) NewSession(sp SessionSpec) (_ *Session, retErr error) {
	if err := sp.Limits.Validate(); err != nil {
		return nil, err
	}
	if err := spec.ValidateEnv(sp.Env); err != nil {
		return nil, err
	}
	im, err := s.image(sp.Image)
	if err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.running.Done()

	var st *started
	warm := false
	if sp.Network == nil {
		st, warm = s.takeWarm(im, &Request{Limits: sp.Limits, Env: sp.Env})
		if warm {
			defer s.pool.Kick()
			if err := s.fit(st, &Request{Limits: sp.Limits, Files: sp.Files}); err != nil {
				s.log.Info("warm jail cannot serve the session; using a cold one", "id", st.j.ID(), "err", err)
				st.Destroy()
				st, warm = nil, false
			}
		}
	}
	if st == nil {
		if st, err = s.start(im.name, sp.Limits, sp.Network, sp.Files, nil, sp.Env, false, nil, true); err != nil {
			return nil, err
		}
	}
	defer func() {
		if retErr != nil {
			st.Destroy()
		}
	}()
	if st.p.ctlW == nil {
		return nil, errors.New("session jail has no control pipe")
	}
	ctl := runner.NewControl(st.p.ctlW, st.p.statR)
	records, err := newRecordsPipe(st.p.recR)
	if err != nil {
		return nil, fmt.Errorf("session records: %w", err)
	}
	// Session mode before anything can end the runner.
	if err := ctl.SessionMode(); err != nil {
		return nil, fmt.Errorf("session mode: %w", err)
	}
	ss := &Session{
		s: s, id: st.j.ID(), egress: sp.Network != nil, limits: sp.Limits, env: sp.Env, warm: warm, image: im.name, fresh: true,
		interrupt: make(chan struct{}, 1),
		done:      make(chan struct{}),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, jail.ErrClosed
	}
	if s.sessions == nil {
		s.sessions = map[*Session]struct{}{}
	}
	s.sessions[ss] = struct{}{}
	s.mu.Unlock()
	ss.wire(st, ctl, records)
	// Not frozen yet: no user code has run in it, and its interpreter
	// (starting, or waiting for its job) uses no CPU of its own accord. A
	// freeze now would often meet a cold jail's Python mid-start, when the
	// v1 freezer can take hundreds of milliseconds. Every call ends frozen.
	return ss, nil
}

// wire makes st the session's jail, with its control channel and records
// pipe, and starts their readers; the caller holds callMu (or the
// session is new).
func (ss *Session) wire(st *started, ctl *runner.Control, records *recordsPipe) {
	// Nothing reads the jail's stdin: each call's is in its job.
	st.p.stdinW.Close()
	st.p.stdinW = nil
	events := make(chan runner.Report, 8)
	ss.mu.Lock()
	ss.st, ss.ctl, ss.records, ss.events = st, ctl, records, events
	ss.stdout, ss.stderr = runner.NewStream(st.p.stdoutR), runner.NewStream(st.p.stderrR)
	ss.mu.Unlock()
	go ss.stdout.Run()
	go ss.stderr.Run()
	go records.readLines(ss.deliverRecord)
	go ss.readReports(ctl, events)
	go func() {
		<-st.j.Done()
		ss.mu.Lock()
		mine := ss.st == st && !ss.pausing
		ss.mu.Unlock()
		if mine {
			ss.end(spec.EndJailEnded)
		}
	}()
}

// ID is the session's first jail's id, for logs.
func (ss *Session) ID() string { return ss.id }

// Calls is the session's count of calls.
func (ss *Session) Calls() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.calls
}

// Warm says the session took a warm jail.
func (ss *Session) Warm() bool { return ss.warm }

// Image is the name of the session's image.
func (ss *Session) Image() string { return ss.image }

// Done is closed when the session has ended (Close, repeated losses, or
// its jail ended); EndReason says why.
func (ss *Session) Done() <-chan struct{} { return ss.done }

// EndReason is why the session ended; "" while it lives.
func (ss *Session) EndReason() string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.endReason
}

// end marks the session ended (the first reason wins) and destroys its
// jail in the background, and its checkpoint (see removeCheckpoint).
func (ss *Session) end(reason string) { ss.finish(reason, false) }

// finish ends the session; keep leaves a paused session's checkpoint on
// disk, for the next daemon (Detach).
func (ss *Session) finish(reason string, keep bool) {
	ss.mu.Lock()
	first := !ss.ended
	if first {
		ss.ended, ss.endReason = true, reason
	}
	ss.mu.Unlock()
	if first {
		ss.closeOnce.Do(func() {
			close(ss.done)
			ss.mu.Lock()
			st, paused := ss.st, ss.paused
			ss.paused = nil
			ss.mu.Unlock()
			if st != nil {
				ss.noteCPU(st.j.Stats().CPU)
				ss.s.teardowns.Go(st.Destroy)
			}
			if paused != nil && !keep && !paused.shared {
				ss.s.removeCheckpoint(paused.dir, ss.ID())
			}
			ss.s.mu.Lock()
			delete(ss.s.sessions, ss)
			ss.s.mu.Unlock()
		})
	}
}

// CPU is the CPU time the session's processes have used in all (its
// interpreter, commands and terminals, in every jail it had), as its
// cgroups count it.
func (ss *Session) CPU() time.Duration {
	ss.mu.Lock()
	st := ss.st
	ss.mu.Unlock()
	var cur time.Duration
	if st != nil {
		cur = st.j.Stats().CPU
	}
	return ss.noteCPU(cur)
}

// noteCPU notes the current jail's CPU time and answers the session's.
func (ss *Session) noteCPU(cur time.Duration) time.Duration {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.cpuSeen = max(ss.cpuSeen, ss.cpuPast+cur)
	return ss.cpuSeen
}

// Close ends the session: every process is killed and the jail torn down
// (Service.Idle waits for the teardown).
func (ss *Session) Close() { ss.end(spec.EndClosed) }

// Interrupt sends SIGINT to the call in progress, as Ctrl-C would; it
// does nothing when no call runs.
func (ss *Session) Interrupt() {
	select {
	case ss.interrupt <- struct{}{}:
	default:
	}
}

// workspaceStateError reports whether err writing files into a session's
// workspace comes of what the session made there.
func workspaceStateError(err error) bool {
	for _, e := range []syscall.Errno{unix.EEXIST, unix.ENOTDIR, unix.EISDIR, unix.ELOOP, unix.EXDEV, unix.EMLINK} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// freeze freezes j, trying again a few times: the cgroup v1 freezer can
// fail while processes are being created.
func freeze(j *jail.Jail) error {
	var err error
	for i := range 5 {
		if err = j.Freeze(); err == nil {
			return nil
		}
		time.Sleep(time.Duration(i+1) * 10 * time.Millisecond)
	}
	return err
}

// callStatus is the call's status: the daemon's reason to interrupt comes
// first, whether or not the code stopped at the interrupt.
func callStatus(r *CallResult, cause string) Status {
	switch {
	case r.TimedOut:
		return spec.StatusTimeout
	case r.OOMKilled:
		return spec.StatusMemoryLimit
	case cause == spec.LostOutput:
		return spec.StatusOutputLimit
	case r.Cancelled || r.Ended && r.Signal != 0:
		return spec.StatusKilled
	case r.LostReason == spec.LostCPU:
		return spec.StatusCPULimit
	case r.Signal != 0:
		return spec.StatusKilled
	case r.ExitCode == 0:
		return spec.StatusOK
	}
	return spec.StatusError
}

// restart has init start a fresh interpreter after a loss, or ends the
// session after MaxLosses in a row or when the restart fails.
func (ss *Session) restart() {
	ss.mu.Lock()
	ss.losses++
	losses := ss.losses
	ss.fresh = true
	ss.mu.Unlock()
	if losses >= MaxLosses {
		ss.end(spec.EndLosses)
		return
	}
	ss.command(ss.ctl.Restart)
	timer := time.NewTimer(restartTimeout)
	defer timer.Stop()
	for {
		select {
		case rep := <-ss.events:
			if rep.Kind == runner.ReportStarted {
				return
			}
		case <-ss.done:
			return
		case <-timer.C:
			ss.s.log.Error("session interpreter did not restart", "id", ss.ID())
			ss.end(spec.EndRestartError)
			return
		}
	}
}

func (ss *Session) isEnded() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.ended
}

// command sends one command to init; a failure means the jail is going,
// which its Done reports.
func (ss *Session) command(send func() error) {
	if err := send(); err != nil {
		ss.s.log.Warn("session command", "id", ss.ID(), "err", err)
	}
}

// readReports passes init's reports on. Init is not user code (see
// init.c), but it runs in the jail: a report it cannot have written ends
// the session (fail closed: the daemon no longer knows the interpreter's
// state), as an unanswered kill does. The pipe's end is the jail's, which
// its Done reports.
func (ss *Session) readReports(ctl *runner.Control, events chan<- runner.Report) {
	for {
		rep, err := ctl.ReadReport()
		if errors.Is(err, runner.ErrBadReport) {
			ss.s.log.Error("session init's report; ending the session", "id", ss.ID(), "err", err)
			ss.end(spec.EndRestartError)
			return
		}
		if err != nil {
			return
		}
		select {
		case events <- rep:
		case <-ss.done:
			return
		}
	}
}

// deliverRecord gives the call in progress its records, each line bounded
// (recordsPipe.readLines), and its end record (by call number: a late or
// forged end of another call is dropped). Records between calls are
// dropped.
func (ss *Session) deliverRecord(line []byte) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	cs := ss.cur
	if cs == nil {
		return
	}
	if call, ok := runner.StartOf(line); ok {
		if call == cs.n && !cs.begun {
			cs.begun = true
			close(cs.started)
		}
		return
	}
	if status, call, ok := runner.EndOf(line); ok {
		if call == cs.n {
			select {
			case cs.end <- status:
			default:
			}
		}
		return
	}
	if len(cs.records)+len(line)+1 <= runner.MaxRecordBytes {
		cs.records = append(append(cs.records, line...), '\n')
	}
}

// clearDir removes the entries of dir (the session's figures directory),
// never following a link: a call's figures are its own.
func clearDir(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	d := os.NewFile(uintptr(fd), dir)
	defer d.Close()
	names, _ := d.Readdirnames(workspace.MaxFigures * 64)
	for _, n := range names {
		if unix.Unlinkat(fd, n, 0) != nil {
			_ = unix.Unlinkat(fd, n, unix.AT_REMOVEDIR)
		}
	}
}
