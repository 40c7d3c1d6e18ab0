package run

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/egress"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/runner"
	"github.com/jaild/jaild/internal/workspace"
)

// A session is one jail whose Python interpreter lives across calls. Its
// first process is the image's init in session mode (rootfs/runner/init.c)
// and, as its child, the runner taking one job per call (runner.py). The
// daemon talks to init over two pipes the interpreter has no access to:
// commands on fd 5 (interrupt, kill, start afresh) and init's word on fd 6
// that the interpreter ended. The user's stdout, stderr and records pipes
// live as long as the session; a call's share of them is what was written
// between its job and its end record (see stream.sync).
//
// Between calls the session's cgroup is frozen: no process of it runs.

// The session's vocabulary, in spec with the run's.
type (
	SessionSpec = spec.SessionSpec
	Call        = spec.Call
	CallResult  = spec.CallResult
)

// Reasons a session's interpreter was lost or the session ended.
const (
	LostTimeout     = spec.LostTimeout
	LostMemory      = spec.LostMemory
	LostCPU         = spec.LostCPU
	LostOutput      = spec.LostOutput
	LostCancelled   = spec.LostCancelled
	LostCrashed     = spec.LostCrashed
	LostExited      = spec.LostExited
	EndLosses       = spec.EndLosses
	EndJailEnded    = spec.EndJailEnded
	EndClosed       = spec.EndClosed
	EndShutdown     = spec.EndShutdown
	EndFreezeFailed = spec.EndFreezeFailed
	EndRestartError = spec.EndRestartError
)

// Session tunables.
const (
	// InterruptGrace is how long code has to get back to the prompt
	// after SIGINT before its interpreter is killed.
	InterruptGrace = spec.InterruptGrace
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
	st     *started
	limits jail.Limits
	env    map[string]string
	warm   bool
	image  string

	stdout, stderr *stream
	events         chan string // init's status lines
	interrupt      chan struct{}

	callMu sync.Mutex // held by the call in progress

	mu        sync.Mutex
	calls     int
	fresh     bool // the interpreter has had no job yet
	losses    int  // in a row
	cur       *callState
	net       egress.Usage // the jail's traffic at the end of the last call
	ended     bool
	endReason string
	done      chan struct{} // closed when the session ended
	closeOnce sync.Once
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
func (s *Service) NewSession(spec SessionSpec) (_ *Session, retErr error) {
	if err := spec.Limits.Validate(); err != nil {
		return nil, err
	}
	if err := ValidateEnv(spec.Env); err != nil {
		return nil, err
	}
	im, err := s.image(spec.Image)
	if err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.running.Done()

	var st *started
	warm := false
	if spec.Network == nil {
		st, warm = s.takeWarm(im, &Request{Limits: spec.Limits, Env: spec.Env})
		if warm {
			defer s.pool.Kick()
			if err := s.fit(st, &Request{Limits: spec.Limits, Files: spec.Files}); err != nil {
				s.log.Info("warm jail cannot serve the session; using a cold one", "id", st.j.ID(), "err", err)
				st.Destroy()
				st, warm = nil, false
			}
		}
	}
	if st == nil {
		if st, err = s.start(im.name, spec.Limits, spec.Network, spec.Files, nil, spec.Env, false, nil, true); err != nil {
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
	// Session mode before anything can end the runner.
	if _, err := st.p.ctlW.Write([]byte{'s'}); err != nil {
		return nil, fmt.Errorf("session mode: %w", err)
	}
	ss := &Session{
		s: s, st: st, limits: spec.Limits, env: spec.Env, warm: warm, image: im.name, fresh: true,
		stdout:    newStream(st.p.stdoutR),
		stderr:    newStream(st.p.stderrR),
		events:    make(chan string, 8),
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
	// Nothing reads the jail's stdin: each call's is in its job.
	st.p.stdinW.Close()
	st.p.stdinW = nil
	go ss.stdout.loop()
	go ss.stderr.loop()
	go ss.readRecords(st.p.recR)
	go ss.readEvents(st.p.statR)
	go func() {
		<-st.j.Done()
		ss.end(EndJailEnded)
	}()
	// Not frozen yet: no user code has run in it, and its interpreter
	// (starting, or waiting for its job) uses no CPU of its own accord. A
	// freeze now would often meet a cold jail's Python mid-start, when the
	// v1 freezer can take hundreds of milliseconds. Every call ends frozen.
	return ss, nil
}

// ID is the session's jail's id.
func (ss *Session) ID() string { return ss.st.j.ID() }

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
// jail in the background.
func (ss *Session) end(reason string) {
	ss.mu.Lock()
	first := !ss.ended
	if first {
		ss.ended, ss.endReason = true, reason
	}
	ss.mu.Unlock()
	if first {
		ss.closeOnce.Do(func() {
			close(ss.done)
			ss.s.teardowns.Go(ss.st.Destroy)
			ss.s.mu.Lock()
			delete(ss.s.sessions, ss)
			ss.s.mu.Unlock()
		})
	}
}

// Close ends the session: every process is killed and the jail torn down
// (Service.Idle waits for the teardown).
func (ss *Session) Close() { ss.end(EndClosed) }

// Interrupt sends SIGINT to the call in progress, as Ctrl-C would; it
// does nothing when no call runs.
func (ss *Session) Interrupt() {
	select {
	case ss.interrupt <- struct{}{}:
	default:
	}
}

// Exec runs one call. Errors: errdefs.ErrConflict while another call runs
// or after the session ended; of class errdefs.ErrInvalidArgument for a
// bad call; others are the host's. Whatever the code did is a CallResult.
func (ss *Session) Exec(ctx context.Context, c *Call) (*CallResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if !ss.callMu.TryLock() {
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
	ended := func() error {
		return errdefs.New(errdefs.ErrConflict, "the session has ended (%s)", ss.EndReason())
	}
	if ss.isEnded() {
		return nil, ended()
	}
	// The interpreter may have ended between calls (a background thread's
	// os._exit as the last call ended): this call gets a fresh one, and
	// says so.
	var lostBefore string
	select {
	case line := <-ss.events:
		if strings.HasPrefix(line, "exit ") {
			_, sig := parseExit(line)
			lostBefore = LostExited
			if sig != 0 {
				lostBefore = LostCrashed
			}
			ss.restart()
			if ss.isEnded() {
				return nil, ended()
			}
		}
	default:
	}
	ss.mu.Lock()
	ss.calls++
	cs := &callState{n: ss.calls, end: make(chan int, 1), started: make(chan struct{})}
	fresh := ss.fresh
	ss.mu.Unlock()
	// The number is the call's only once it runs.
	committed := false
	defer func() {
		if !committed {
			ss.mu.Lock()
			ss.calls--
			ss.mu.Unlock()
		}
	}()

	stdin := runner.Latin1(c.Stdin)
	job := runner.Job{
		Code: c.Code, Filename: fmt.Sprintf("call-%d.py", cs.n), LastLineInteractive: c.LastLineInteractive,
		FiguresDir: figuresDir, MaxFigures: workspace.MaxFigures, Env: ss.env,
		Session: true, Call: cs.n, Stdin: &stdin, CPUSeconds: int((c.Timeout+InterruptGrace+time.Second-1)/time.Second) + 1,
	}
	if fresh {
		// RLIMIT_CPU among them: its hard limit bounds the interpreter's
		// life (a warm jail's is higher); the call's soft limit is then
		// set from CPUSeconds.
		job.Rlimits = ss.limits.RlimitsByName()
	}
	frame := runner.EncodeJob(job)
	if len(frame) > runner.MaxJobBytes {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "code and stdin take %d bytes as a job, more than the %d a call can carry", len(frame), runner.MaxJobBytes)
	}
	j := ss.st.j
	// Frozen (or, before the first call, with no user code run yet):
	// nothing of the session changes the workspace meanwhile.
	if err := writeFiles(j, c.Files, true); err != nil {
		// The workspace is the session's to shape: a path taken by a
		// directory, link or other non-file it made is the caller's
		// state (a full workspace is already the caller's invalid
		// argument, from workspace.Write); anything else is the daemon's.
		// Either way the details name host paths: they go to the log.
		if workspaceStateError(err) {
			ss.s.log.Info("session files not written", "id", j.ID(), "err", err)
			return nil, errdefs.New(errdefs.ErrConflict, "files: could not be written into the session's workspace (a path is taken by a directory, link or other non-file made there)")
		}
		return nil, fmt.Errorf("write session files: %w", err)
	}
	figs := filepath.Join(j.MetaHostDir(), "figures")
	clearDir(figs)

	res := &CallResult{Count: cs.n, Result: Result{ID: j.ID(), ExitCode: -1}}
	var (
		once     sync.Once
		overflow = make(chan struct{})
	)
	stdout := &runner.Capture{Limit: c.OutputBytes, OnOverflow: func() { once.Do(func() { close(overflow) }) }}
	stderr := &runner.Capture{Limit: c.OutputBytes, OnOverflow: stdout.OnOverflow}
	attachOutput(c.Output, stdout, stderr)
	ss.stdout.attach(stdout)
	ss.stderr.attach(stderr)
	ss.mu.Lock()
	ss.cur = cs
	ss.mu.Unlock()
	defer func() {
		ss.stdout.attach(nil)
		ss.stderr.attach(nil)
		ss.mu.Lock()
		ss.cur = nil
		ss.mu.Unlock()
	}()

	// The stream's head goes out while the session is still frozen: a
	// client slow to take it costs no running time of the call.
	if c.OnStart != nil {
		c.OnStart(j.ID(), ss.warm)
	}
	j.ResetPeak()
	base := j.Stats()
	if err := j.Thaw(); err != nil {
		if ss.isEnded() {
			return nil, ended()
		}
		return nil, fmt.Errorf("thaw session: %w", err)
	}
	committed = true
	ss.mu.Lock()
	ss.fresh = false // the job that carries the rlimits is on its way
	ss.mu.Unlock()
	start := time.Now()
	wrote := make(chan error, 1)
	go func() {
		w := ss.st.p.jobW
		_ = w.SetWriteDeadline(start.Add(c.Timeout + InterruptGrace + time.Second))
		_, err := w.Write(frame)
		wrote <- err
	}()

	timer := time.NewTimer(c.Timeout)
	defer timer.Stop()
	var grace, killWait <-chan time.Time
	interrupted, killed := false, false
	cause := "" // why the daemon interrupted: a Lost* reason
	// SIGINT goes only to a call whose code has begun (its start record):
	// before that the runner ignores it. One asked for earlier waits.
	started, pending := cs.started, false
	sigint := func() {
		if started == nil {
			ss.command('i')
		} else {
			pending = true
		}
	}
	interruptFor := func(why string) {
		if interrupted {
			return
		}
		interrupted, cause = true, why
		sigint()
		grace = time.After(InterruptGrace)
	}
	var exitLine string
	status := -1
wait:
	for {
		select {
		case st := <-cs.end:
			status = st
			if !killed {
				break wait
			}
			// SIGKILL was sent: its exit report follows (the end came
			// just before it); the state is lost either way.
			select {
			case line := <-ss.events:
				if strings.HasPrefix(line, "exit ") {
					exitLine, status = line, -1
				}
			case <-ss.done:
			case <-time.After(restartTimeout):
			}
			break wait
		case line := <-ss.events:
			if strings.HasPrefix(line, "exit ") {
				exitLine = line
				break wait
			}
		case <-ss.done:
			break wait
		case err := <-wrote:
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				ss.s.log.Warn("session job write", "id", j.ID(), "err", err)
			}
			wrote = nil
		case <-timer.C:
			res.TimedOut = true
			interruptFor(LostTimeout)
		case <-overflow:
			overflow = nil
			interruptFor(LostOutput)
		case <-ctx.Done():
			res.Cancelled = true
			interruptFor(LostCancelled)
			ctx = context.Background()
		case <-ss.interrupt:
			sigint()
		case <-started:
			started = nil
			if pending {
				pending = false
				ss.command('i')
			}
		case <-grace:
			grace = nil
			if !killed {
				killed = true
				ss.command('k')
				killWait = time.After(restartTimeout)
			}
		case <-killWait:
			// init neither reported the kill nor ended: give up the jail.
			ss.s.log.Error("session interpreter not reported dead after SIGKILL; ending the session", "id", j.ID())
			ss.end(EndRestartError)
			killWait = nil
		}
	}
	res.Duration = time.Since(start)
	if wrote != nil {
		// A job not taken whole by now never will be; a fresh
		// interpreter must not read its rest.
		_ = ss.st.p.jobW.SetWriteDeadline(time.Now())
		<-wrote
	}
	ss.stdout.sync()
	ss.stderr.sync()
	// What comes later is no call's (and the buffers are read below).
	ss.stdout.attach(nil)
	ss.stderr.attach(nil)
	after := j.Stats()
	res.CPUTime = max(after.CPU-base.CPU, 0) // 0 when the jail is gone
	res.PeakMemoryBytes = after.PeakMemoryBytes
	res.OOMKilled = after.OOMKills > base.OOMKills
	res.Stdout, res.StdoutTruncated = stdout.Buf, stdout.Truncated
	res.Stderr, res.StderrTruncated = stderr.Buf, stderr.Truncated
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
	recs := runner.ParseRecords(cs.records, strings.Count(c.Code, "\n")+1)
	ss.mu.Unlock()
	res.Exception, res.ResultRepr = recs.Exception, recs.Result

	switch {
	case status >= 0:
		res.ExitCode = status
		ss.mu.Lock()
		ss.losses = 0
		ss.mu.Unlock()
	case exitLine != "":
		code, sig := parseExit(exitLine)
		res.ExitCode, res.Signal = code, sig
		if sig != 0 {
			res.ExitCode = -1
		}
		res.StateLost = true
		switch {
		case res.OOMKilled:
			res.LostReason = LostMemory
		case killed:
			res.LostReason = cause
		case sig == int(unix.SIGXCPU) || sig == int(unix.SIGKILL) && res.CPUTime >= c.Timeout:
			res.LostReason = LostCPU
		case sig != 0:
			res.LostReason = LostCrashed
		default:
			res.LostReason = LostExited
		}
		ss.restart()
	default: // the session ended under the call
		res.Signal = int(unix.SIGKILL)
	}
	if lostBefore != "" && !res.StateLost {
		res.StateLost, res.LostReason = true, lostBefore
	}
	if ss.isEnded() {
		res.Ended, res.EndReason = true, ss.EndReason()
	}
	if !res.Ended {
		// Frozen before its files are read: nothing of the session writes
		// meanwhile, and between calls it uses no CPU. A session that
		// cannot be frozen ends (fail closed): its processes would run
		// between calls.
		frozen := true
		if err := freeze(j); err != nil && !ss.isEnded() {
			ss.s.log.Error("freeze session; ending it", "id", j.ID(), "err", err)
			ss.end(EndFreezeFailed)
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
			res.Figures = workspace.ReadFigures(figs)
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
	res.Status = callStatus(res, cause)
	return res, nil
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
		return StatusTimeout
	case r.OOMKilled:
		return StatusMemoryLimit
	case cause == LostOutput:
		return StatusOutputLimit
	case r.Cancelled || r.Ended && r.Signal != 0:
		return StatusKilled
	case r.LostReason == LostCPU:
		return StatusCPULimit
	case r.Signal != 0:
		return StatusKilled
	case r.ExitCode == 0:
		return StatusOK
	}
	return StatusError
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
		ss.end(EndLosses)
		return
	}
	ss.command('r')
	timer := time.NewTimer(restartTimeout)
	defer timer.Stop()
	for {
		select {
		case line := <-ss.events:
			if line == "started" {
				return
			}
		case <-ss.done:
			return
		case <-timer.C:
			ss.s.log.Error("session interpreter did not restart", "id", ss.ID())
			ss.end(EndRestartError)
			return
		}
	}
}

func (ss *Session) isEnded() bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.ended
}

// command writes one command byte to init; a failure means the jail is
// going, which its Done reports.
func (ss *Session) command(c byte) {
	if _, err := ss.st.p.ctlW.Write([]byte{c}); err != nil {
		ss.s.log.Warn("session command", "id", ss.ID(), "command", string(c), "err", err)
	}
}

// parseExit reads init's "exit CODE SIGNAL".
func parseExit(line string) (code, sig int) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return -1, 0
	}
	code, _ = strconv.Atoi(f[1])
	sig, _ = strconv.Atoi(f[2])
	if sig < 0 || sig > 64 {
		sig = 0
	}
	return code, sig
}

// readEvents passes init's status lines on. Init is not user code (see
// init.c), but its lines are bounded all the same.
func (ss *Session) readEvents(f *os.File) {
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64), 64)
	for sc.Scan() {
		select {
		case ss.events <- sc.Text():
		case <-ss.done:
			return
		}
	}
}

// readRecords gives the call in progress its records, each line bounded,
// and its end record (by call number: a late or forged end of another
// call is dropped). Records between calls are dropped.
func (ss *Session) readRecords(f *os.File) {
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := readBoundedLine(r, runner.MaxRecordBytes)
		if len(line) > 0 {
			ss.deliverRecord(line)
		}
		if err != nil {
			return
		}
	}
}

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

// readBoundedLine reads one line without its newline; a longer line than
// limit is read to its end and returned empty.
func readBoundedLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	over := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !over {
			if len(line)+len(chunk) > limit+1 {
				over, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if over {
			line = nil
		}
		return bytes.TrimSuffix(line, []byte{'\n'}), err
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

// stream drains one of a session's output pipes for its whole life into
// the call in progress (nothing between calls).
type stream struct {
	f    *os.File
	mu   sync.Mutex
	cap  *runner.Capture
	acks chan chan struct{} // a sync waiting for the loop
	eof  chan struct{}      // closed when the loop ended
}

func newStream(f *os.File) *stream {
	return &stream{f: f, acks: make(chan chan struct{}, 1), eof: make(chan struct{})}
}

func (s *stream) attach(c *runner.Capture) {
	s.mu.Lock()
	s.cap = c
	s.mu.Unlock()
}

func (s *stream) deliver(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cap != nil {
		s.cap.Add(p)
	}
}

func (s *stream) loop() {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.f.Read(buf)
		if n > 0 {
			s.deliver(buf[:n])
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			close(s.eof) // the session is over
			return
		}
		// A sync: what is in the pipe now is the call's.
		if rc, err := s.f.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) {
				for {
					n, err := unix.Read(int(fd), buf)
					if n > 0 {
						s.deliver(buf[:n])
					}
					if n <= 0 || err != nil {
						return
					}
				}
			})
		}
		_ = s.f.SetReadDeadline(time.Time{})
		select {
		case ack := <-s.acks:
			close(ack)
		default:
		}
	}
}

// sync returns once everything written to the pipe before the call is
// delivered (the runner flushes before its end record).
func (s *stream) sync() {
	select {
	case <-s.acks: // left by a sync that gave up
	default:
	}
	ack := make(chan struct{})
	s.acks <- ack
	_ = s.f.SetReadDeadline(time.Now())
	t := time.NewTimer(syncWait)
	defer t.Stop()
	select {
	case <-ack:
	case <-s.eof:
	case <-t.C:
	}
}
