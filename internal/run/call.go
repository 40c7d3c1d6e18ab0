package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/egress"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/runner"
	"github.com/jaild/jaild/internal/workspace"
)

// Exec runs one call. Errors: errdefs.ErrConflict while another call runs
// or after the session ended; of class errdefs.ErrInvalidArgument for a
// bad call; others are the host's. Whatever the code did is a CallResult.
func (ss *Session) Exec(ctx context.Context, c *Call) (*CallResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if !ss.tryCall() {
		return nil, errdefs.New(errdefs.ErrConflict, "another call of this session is running")
	}
	defer ss.callMu.Unlock()
	// An interrupt left unanswered ends with its call.
	defer func() {
		select {
		case <-ss.interrupt:
		default:
		}
	}()
	if ss.isEnded() {
		return nil, ss.endedError()
	}
	restored, err := ss.resume()
	if err != nil {
		return nil, err
	}
	sc := &sessionCall{ss: ss, c: c, j: ss.st.j, status: -1}
	if err := sc.begin(); err != nil {
		return nil, err
	}
	defer sc.uncount()
	if err := sc.prepare(); err != nil {
		return nil, err
	}
	sc.attach()
	defer sc.detach()
	if err := sc.thaw(); err != nil {
		return nil, err
	}
	sc.send()
	sc.wait(ctx)
	if sc.neverBegan() {
		if err := sc.again(); err != nil {
			return nil, err
		}
		sc.wait(ctx)
	}
	sc.collect()
	sc.settle()
	sc.finish()
	sc.res.Resumed, sc.res.Restore = restored > 0, restored
	return sc.res, nil
}

// sessionCall is one call on its way through Exec's phases, in order:
// begin (number it), prepare (the job and the files, the session frozen),
// attach (the output captures), thaw, send (the job), wait (for its end,
// interrupting and killing on the way), collect (output, figures of
// usage, records), settle (the interpreter lost or kept) and finish
// (freeze, figures and files, status).
type sessionCall struct {
	ss  *Session
	c   *Call
	j   *jail.Jail
	cs  *callState
	res *CallResult

	lostBefore string // a Lost* reason: the interpreter ended between calls
	fresh      bool   // the interpreter has had no job: this one carries the rlimits
	committed  bool   // the call ran: its number is its own
	frame      []byte // the job, encoded
	figs       string // the jail's figures directory, on the host
	outputs    []spec.OutputRef

	stdout, stderr *runner.Capture
	overflow       chan struct{} // closed when a capture went past the call's bound
	base           jail.Stats
	start          time.Time
	wrote          chan error // the job's write; nil once it returned

	// What wait saw and did.
	grace, killWait     <-chan time.Time
	interrupted, killed bool
	cause               string        // why the daemon interrupted: a Lost* reason
	started             chan struct{} // the call's start record; nil once it came
	pending             bool          // SIGINT waits for the start record
	exit                *runner.Report
	status              int // the call's end record's; -1 without one
}

// endedError is Exec's error after the session ended.
func (ss *Session) endedError() error {
	return errdefs.New(errdefs.ErrConflict, "the session has ended (%s)", ss.EndReason())
}

// begin refuses a call of an ended session and numbers the call. The
// interpreter may have ended between calls (a background thread's
// os._exit as the last call ended, before the freeze): this call gets a
// fresh one, and says so.
func (sc *sessionCall) begin() error {
	ss := sc.ss
	if ss.isEnded() {
		return ss.endedError()
	}
	select {
	case rep := <-ss.events:
		if rep.Kind == runner.ReportExit {
			sc.lostBefore = spec.LostExited
			if rep.Signal != 0 {
				sc.lostBefore = spec.LostCrashed
			}
			if err := sc.restartThawed(); err != nil {
				return err
			}
		}
	default:
	}
	ss.mu.Lock()
	ss.calls++
	sc.cs = &callState{n: ss.calls, end: make(chan int, 1), started: make(chan struct{})}
	sc.fresh = ss.fresh
	ss.mu.Unlock()
	return nil
}

// restartThawed starts a fresh interpreter for a session frozen since its
// last call: init, frozen too, could neither start it nor report it
// started. The session is left thawed, as a new one is: init killed
// everything of the old interpreter before it reported the exit, so what
// runs is init and the fresh runner, no user code.
func (sc *sessionCall) restartThawed() error {
	ss := sc.ss
	if err := sc.j.Thaw(); err != nil {
		if ss.isEnded() {
			return ss.endedError()
		}
		return fmt.Errorf("thaw session: %w", err)
	}
	ss.restart()
	if ss.isEnded() {
		return ss.endedError()
	}
	return nil
}

// uncount gives the call's number back unless the call ran: the number is
// the call's only once it runs.
func (sc *sessionCall) uncount() {
	if !sc.committed {
		sc.ss.mu.Lock()
		sc.ss.calls--
		sc.ss.mu.Unlock()
	}
}

// prepare encodes the job and writes the call's files. The session is
// frozen (or, before its first call or after begin's restart, runs no user
// code): nothing of it changes the workspace meanwhile.
func (sc *sessionCall) prepare() error {
	c, ss, j := sc.c, sc.ss, sc.j
	if err := sc.encode(); err != nil {
		return err
	}
	if err := writeFiles(j, c.Files, true); err != nil {
		// The workspace is the session's to shape: a path taken by a
		// directory, link or other non-file it made is the caller's
		// state (a full workspace is already the caller's invalid
		// argument, from workspace.Write); anything else is the daemon's.
		// Either way the details name host paths: they go to the log.
		if workspaceStateError(err) {
			ss.s.log.Info("session files not written", "id", j.ID(), "err", err)
			return errdefs.New(errdefs.ErrConflict, "files: could not be written into the session's workspace (a path is taken by a directory, link or other non-file made there)")
		}
		return fmt.Errorf("write session files: %w", err)
	}
	sc.figs = filepath.Join(j.MetaHostDir(), "figures")
	clearDir(sc.figs)
	sc.res = &CallResult{Count: sc.cs.n, Result: Result{ID: j.ID(), ExitCode: -1}}
	return nil
}

// encode makes the call's job, with the rlimits for a fresh interpreter.
func (sc *sessionCall) encode() error {
	c, ss := sc.c, sc.ss
	stdin := runner.Latin1(c.Stdin)
	job := runner.Job{
		Code: c.Code, Filename: fmt.Sprintf("call-%d.py", sc.cs.n), LastLineInteractive: c.LastLineInteractive,
		FiguresDir: figuresDir, MaxFigures: workspace.MaxFigures, MaxOutputs: workspace.MaxOutputs, Env: ss.env,
		Session: true, Call: sc.cs.n, Stdin: &stdin, CPUSeconds: int((c.Timeout+spec.InterruptGrace+time.Second-1)/time.Second) + 1,
	}
	ss.mu.Lock()
	job.Records = ss.recordsIno
	ss.mu.Unlock()
	if sc.fresh {
		// RLIMIT_CPU among them: its hard limit bounds the interpreter's
		// life (a warm jail's is higher); the call's soft limit is then
		// set from CPUSeconds.
		job.Rlimits = ss.limits.RlimitsByName()
	}
	sc.frame = runner.EncodeJob(job)
	if len(sc.frame) > runner.MaxJobBytes {
		return errdefs.New(errdefs.ErrInvalidArgument, "code and stdin take %d bytes as a job, more than the %d a call can carry", len(sc.frame), runner.MaxJobBytes)
	}
	return nil
}

// attach makes the call the one the session's readers deliver to.
func (sc *sessionCall) attach() {
	var once sync.Once
	overflow := make(chan struct{})
	sc.overflow = overflow
	sc.stdout = &runner.Capture{Limit: sc.c.OutputBytes, OnOverflow: func() { once.Do(func() { close(overflow) }) }}
	sc.stderr = &runner.Capture{Limit: sc.c.OutputBytes, OnOverflow: sc.stdout.OnOverflow}
	attachOutput(sc.c.Output, sc.stdout, sc.stderr)
	sc.ss.stdout.Attach(sc.stdout)
	sc.ss.stderr.Attach(sc.stderr)
	sc.ss.mu.Lock()
	sc.ss.cur = sc.cs
	sc.ss.mu.Unlock()
}

func (sc *sessionCall) detach() {
	sc.ss.stdout.Attach(nil)
	sc.ss.stderr.Attach(nil)
	sc.ss.mu.Lock()
	sc.ss.cur = nil
	sc.ss.mu.Unlock()
}

// thaw lets the session run. The stream's head goes out while the session
// is still frozen: a client slow to take it costs no running time of the
// call.
func (sc *sessionCall) thaw() error {
	ss, j := sc.ss, sc.j
	if sc.c.OnStart != nil {
		sc.c.OnStart(j.ID(), ss.warm)
	}
	j.ResetPeak()
	sc.base = j.Stats()
	if err := j.Thaw(); err != nil {
		if ss.isEnded() {
			return ss.endedError()
		}
		return fmt.Errorf("thaw session: %w", err)
	}
	sc.committed = true
	ss.mu.Lock()
	ss.fresh = false // the job that carries the rlimits is on its way
	ss.mu.Unlock()
	return nil
}

// send writes the job in the background, within a deadline past the
// call's timeout and grace.
func (sc *sessionCall) send() {
	sc.start = time.Now()
	wrote := make(chan error, 1)
	deadline := sc.start.Add(sc.c.Timeout + spec.InterruptGrace + time.Second)
	go func() {
		w := sc.ss.st.p.jobW
		_ = w.SetWriteDeadline(deadline)
		_, err := w.Write(sc.frame)
		wrote <- err
	}()
	sc.wrote = wrote
}

// wait returns at the call's end record, init's exit report or the
// session's end. Meanwhile the timeout, the output bound, the client's
// going and Interrupt interrupt the code, and an interpreter that would
// not stop within spec.InterruptGrace is killed.
func (sc *sessionCall) wait(ctx context.Context) {
	ss := sc.ss
	timer := time.NewTimer(sc.c.Timeout)
	defer timer.Stop()
	sc.started = sc.cs.started
	for {
		select {
		case status := <-sc.cs.end:
			sc.endRecord(status)
			return
		case rep := <-ss.events:
			if rep.Kind == runner.ReportExit {
				sc.exit = &rep
				return
			}
		case <-ss.done:
			return
		case err := <-sc.wrote:
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				ss.s.log.Warn("session job write", "id", sc.j.ID(), "err", err)
			}
			sc.wrote = nil
		case <-timer.C:
			sc.res.TimedOut = true
			sc.interruptFor(spec.LostTimeout)
		case <-sc.overflow:
			sc.overflow = nil
			sc.interruptFor(spec.LostOutput)
		case <-ctx.Done():
			sc.res.Cancelled = true
			sc.interruptFor(spec.LostCancelled)
			ctx = context.Background()
		case <-ss.interrupt:
			sc.sigint()
		case <-sc.started:
			sc.started = nil
			if sc.pending {
				sc.pending = false
				ss.command(ss.ctl.Interrupt)
			}
		case <-sc.grace:
			sc.grace = nil
			if !sc.killed {
				sc.killed = true
				ss.command(ss.ctl.Kill)
				sc.killWait = time.After(restartTimeout)
			}
		case <-sc.killWait:
			// init neither reported the kill nor ended: give up the jail.
			ss.s.log.Error("session interpreter not reported dead after SIGKILL; ending the session", "id", sc.j.ID())
			ss.end(spec.EndRestartError)
			sc.killWait = nil
		}
	}
}

// neverBegan reports whether the interpreter the job went to ended before
// the call's code began, of its own accord: init's exit report came, and
// no start record of the call (nor its end). That interpreter had run the
// session's code before (a fresh one runs none before its job: its end
// before the start is the job's, and the call's to report); it ended
// after the last call's end record, its exit report held by the freeze
// until this call thawed the jail. Nothing of this call ran.
//
// Init writes the exit report only once every process of the old
// interpreter is dead, so its records are all in the pipe by then: they
// are drained before the check. A drain that cannot be confirmed counts
// as begun (the loss is then the call's to report, the answer of old).
func (sc *sessionCall) neverBegan() bool {
	if sc.exit == nil || sc.fresh || sc.interrupted || sc.killed || sc.status >= 0 {
		return false
	}
	ss, begun := sc.ss, true
	drained := ss.records.drained(syncWait, ss.done, func() {
		ss.mu.Lock()
		begun = sc.cs.begun || len(sc.cs.end) > 0
		ss.mu.Unlock()
	})
	return drained && !begun
}

// again runs the call in a fresh interpreter after neverBegan: the loss
// is said as one found before the call (as begin does), and the call's
// job, output, records and figures of usage start afresh. Output streamed
// to the client meanwhile (the old interpreter's last, if any) has gone.
// A session that ends on the restart (losses in a row) ends the call.
func (sc *sessionCall) again() error {
	ss, j := sc.ss, sc.j
	if sc.wrote != nil {
		// The job's write ends before init empties the job pipe for the
		// fresh interpreter: none of it is left for that one to read.
		_ = ss.st.p.jobW.SetWriteDeadline(time.Now())
		<-sc.wrote
		sc.wrote = nil
	}
	if sc.lostBefore == "" {
		sc.lostBefore = spec.LostExited
		if sc.exit.Signal != 0 {
			sc.lostBefore = spec.LostCrashed
		}
	}
	sc.exit = nil
	ss.restart() // the session stays thawed: init and the fresh runner
	if ss.isEnded() {
		return nil // wait returns at once
	}
	sc.fresh = true
	if err := sc.encode(); err != nil {
		sc.committed = false // nothing of the call ran
		return err
	}
	// What the old interpreter wrote is no part of the call.
	ss.stdout.Sync(syncWait)
	ss.stderr.Sync(syncWait)
	sc.attach()
	ss.mu.Lock()
	sc.cs.records = nil
	ss.fresh = false // this job carries the rlimits
	ss.mu.Unlock()
	j.ResetPeak()
	sc.base = j.Stats()
	sc.send()
	return nil
}

// endRecord takes the call's end record. After a SIGKILL, init's exit
// report follows (the end came just before it): the state is lost either
// way.
func (sc *sessionCall) endRecord(status int) {
	sc.status = status
	if !sc.killed {
		return
	}
	select {
	case rep := <-sc.ss.events:
		if rep.Kind == runner.ReportExit {
			sc.exit, sc.status = &rep, -1
		}
	case <-sc.ss.done:
	case <-time.After(restartTimeout):
	}
}

// sigint interrupts the code. SIGINT goes only to a call whose code has
// begun (its start record): before that the runner ignores it. One asked
// for earlier waits.
func (sc *sessionCall) sigint() {
	if sc.started == nil {
		sc.ss.command(sc.ss.ctl.Interrupt)
	} else {
		sc.pending = true
	}
}

// interruptFor interrupts the code for the daemon's reason why, once, and
// starts the grace it has to stop.
func (sc *sessionCall) interruptFor(why string) {
	if sc.interrupted {
		return
	}
	sc.interrupted, sc.cause = true, why
	sc.sigint()
	sc.grace = time.After(spec.InterruptGrace)
}

// collect takes the call's output, its figures of usage and its records.
func (sc *sessionCall) collect() {
	ss, j, res := sc.ss, sc.j, sc.res
	res.Duration = time.Since(sc.start)
	if sc.wrote != nil {
		// A job not taken whole by now never will be; a fresh
		// interpreter must not read its rest.
		_ = ss.st.p.jobW.SetWriteDeadline(time.Now())
		<-sc.wrote
	}
	ss.stdout.Sync(syncWait)
	ss.stderr.Sync(syncWait)
	// What comes later is no call's (and the buffers are read below).
	ss.stdout.Attach(nil)
	ss.stderr.Attach(nil)
	after := j.Stats()
	res.CPUTime = max(after.CPU-sc.base.CPU, 0) // 0 when the jail is gone
	res.PeakMemoryBytes = after.PeakMemoryBytes
	res.OOMKilled = after.OOMKills > sc.base.OOMKills
	res.Stdout, res.StdoutTruncated = sc.stdout.Buf, sc.stdout.Truncated
	res.Stderr, res.StderrTruncated = sc.stderr.Buf, sc.stderr.Truncated
	if u := j.NetworkUsage(); u != nil {
		// The jail's counters are the session's; the call's is the
		// difference.
		ss.mu.Lock()
		prev := ss.net
		ss.net = *u
		ss.mu.Unlock()
		res.Network = &egress.Usage{BytesSent: u.BytesSent - min(prev.BytesSent, u.BytesSent), BytesReceived: u.BytesReceived - min(prev.BytesReceived, u.BytesReceived)}
	}
	ss.mu.Lock()
	recs := runner.ParseRecords(sc.cs.records, strings.Count(sc.c.Code, "\n")+1)
	ss.mu.Unlock()
	res.Exception, res.ResultRepr = recs.Exception, recs.Result
	sc.outputs = recs.Outputs
}

// settle says what became of the interpreter: kept (the call's end
// record), lost (init's exit report: a fresh one is started), or gone
// with the session.
func (sc *sessionCall) settle() {
	ss, res := sc.ss, sc.res
	switch {
	case sc.status >= 0:
		res.ExitCode = sc.status
		ss.mu.Lock()
		ss.losses = 0
		ss.mu.Unlock()
	case sc.exit != nil:
		sig := sc.exit.Signal
		res.ExitCode, res.Signal = sc.exit.Code, sig
		if sig != 0 {
			res.ExitCode = -1
		}
		res.StateLost = true
		switch {
		case res.OOMKilled:
			res.LostReason = spec.LostMemory
		case sc.killed:
			res.LostReason = sc.cause
		case sig == int(unix.SIGXCPU) || sig == int(unix.SIGKILL) && res.CPUTime >= sc.c.Timeout:
			res.LostReason = spec.LostCPU
		case sig != 0:
			res.LostReason = spec.LostCrashed
		default:
			res.LostReason = spec.LostExited
		}
		ss.restart()
	default: // the session ended under the call
		res.Signal = int(unix.SIGKILL)
	}
	if sc.lostBefore != "" && !res.StateLost {
		res.StateLost, res.LostReason = true, sc.lostBefore
	}
}

// finish freezes the session and reads the call's figures and files, or
// says the session ended; then the call's status.
func (sc *sessionCall) finish() {
	ss, j, c, res := sc.ss, sc.j, sc.c, sc.res
	if ss.isEnded() {
		res.Ended, res.EndReason = true, ss.EndReason()
	}
	if !res.Ended {
		// Frozen before its files are read: nothing of the session writes
		// meanwhile, and between calls it uses no CPU. A session that
		// cannot be frozen ends (fail closed): its processes would run
		// between calls.
		// A session whose background commands run stays thawed
		// (commands.go): its files are read as they are.
		frozen := true
		if err := ss.freezeUnlessCommands(j); err != nil && !ss.isEnded() {
			ss.s.log.Error("freeze session; ending it", "id", j.ID(), "err", err)
			ss.end(spec.EndFreezeFailed)
			frozen = false
		}
		switch {
		case !frozen:
			// Its processes may still run: nothing of its workspace is
			// read (fail closed).
			res.Ended, res.EndReason = true, ss.EndReason()
			for _, p := range c.ReturnFiles {
				res.Files = append(res.Files, workspace.File{Path: p, Error: "not returned: the session could not be frozen and has ended"})
			}
		default:
			res.Figures = workspace.ReadFigures(sc.figs)
			res.Outputs = workspace.ReadOutputs(sc.figs, sc.outputs, res.Figures, res.ResultRepr)
		}
		if frozen && len(c.ReturnFiles) > 0 {
			files, err := collect(j, c.ReturnFiles, c.Hooks, ss.s.log)
			if err != nil {
				ss.s.log.Warn("collect files", "id", j.ID(), "err", err)
				files = append(files, workspace.File{Path: ".", Error: "workspace could not be read completely"})
			}
			res.Files = files
		}
	}
	res.Status = callStatus(res, sc.cause)
}
