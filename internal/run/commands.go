package run

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/runner"
)

// A session's commands (issue 29): programs started in the session's
// jail beside its interpreter (jail.Exec: the same namespaces, user,
// filter, rlimits and cgroup limits), each in a cgroup of its own beneath
// the jail's, so that everything a command starts ends with it: when its
// program ends, when it is killed, or with the session. The interpreter's
// state is not touched; they share the session's files.
//
// A command starts between calls (the call lock held, as a call): a
// paused session is restored first. A foreground command holds the lock
// to its end. A background one returns at once and keeps running through
// later calls; while one runs the session is not frozen between calls,
// and it cannot pause, snapshot or fork (a checkpoint cannot keep a
// process the daemon holds pipes of), which then says so, naming them.

// command is one command of a session.
type command struct {
	id      string
	argv    []string
	group   string
	started time.Time
	proc    *jail.Proc
	pid     int
	stdin   *os.File // a background command's stdin while open
	stdinMu sync.Mutex

	stdout, stderr *ring
	kill           chan struct{} // closed by Kill
	killOnce       sync.Once
	done           chan struct{} // closed once ended and its group removed

	mu     sync.Mutex
	ended  time.Time
	status spec.Status
	exit   int
	signal int
	cpu    time.Duration
	killed bool // by Kill

	terminal bool // a terminal's shell (StartTerminal)
}

// ring keeps the last max bytes written to it and counts the rest.
type ring struct {
	mu      sync.Mutex
	max     int
	b       []byte // bytes dropped..dropped+len(b) of what was written
	dropped int64
	onWrite func()
	changed chan struct{} // closed (and replaced) by a write; nil until a follower asks
}

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.b = append(r.b, p...)
	if over := len(r.b) - r.max; over > 0 {
		r.dropped += int64(over)
		r.b = append(r.b[:0], r.b[over:]...)
	}
	if r.changed != nil && len(p) > 0 {
		close(r.changed)
		r.changed = nil
	}
	on := r.onWrite
	r.mu.Unlock()
	if on != nil && len(p) > 0 {
		on()
	}
	return len(p), nil
}

// from answers what was written from offset pos on that is still kept
// (skipping what was dropped), the offset after it, and a channel closed
// by the next write.
func (r *ring) from(pos int64) ([]byte, int64, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pos = max(pos, r.dropped)
	out := slices.Clone(r.b[pos-r.dropped:])
	if r.changed == nil {
		r.changed = make(chan struct{})
	}
	return out, r.dropped + int64(len(r.b)), r.changed
}

func (r *ring) snapshot() ([]byte, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.b), r.dropped
}

func newCommandID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "c-" + hex.EncodeToString(b[:])
}

// commandArgv is what the jail executes for argv: a program without a
// slash is looked up in the image's PATH by its shell.
func commandArgv(argv []string) []string {
	if strings.Contains(argv[0], "/") {
		return argv
	}
	return append([]string{"/bin/sh", "-c", `exec "$@"`, "sh"}, argv...)
}

// beginCommand takes the call lock for a command and has the session in
// a jail; the caller unlocks callMu.
func (ss *Session) beginCommand(c *spec.Command) (*jail.Jail, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if !ss.tryCall() {
		return nil, errdefs.New(errdefs.ErrConflict, "the session is running a call or a foreground command; a command starts between them")
	}
	if ss.isEnded() {
		ss.callMu.Unlock()
		return nil, ss.endedError()
	}
	if _, err := ss.resume(); err != nil {
		ss.callMu.Unlock()
		return nil, err
	}
	j := ss.st.j
	if c.Cwd != "" {
		r, err := FilesIn(j.FilesDir(), spec.FSRequest{Op: spec.FSStat, Path: c.Cwd}, 0, -1, -1)
		if err == nil && r.Entry.Type != spec.FSDir {
			err = errdefs.Field("cwd", "%s is not a directory", clipPath(c.Cwd))
		}
		if err != nil {
			ss.callMu.Unlock()
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil, errdefs.Field("cwd", "%s does not exist in the session", clipPath(c.Cwd))
			}
			return nil, err
		}
	}
	return j, nil
}

// start starts c's program in its group with the given stdio.
func (ss *Session) startCommand(j *jail.Jail, c *spec.Command, id string, stdin, stdout, stderr *os.File) (*jail.Proc, error) {
	if err := j.Thaw(); err != nil {
		return nil, fmt.Errorf("thaw session: %w", err)
	}
	env := map[string]string{}
	for k, v := range ss.env {
		env[k] = v
	}
	for k, v := range c.Env {
		env[k] = v
	}
	p, err := j.Exec(jail.Process{Args: commandArgv(c.Argv), Env: environ(ss.limits, env), Cwd: c.Cwd,
		Stdin: stdin, Stdout: stdout, Stderr: stderr, Group: id})
	if err != nil {
		ss.s.log.Warn("session command did not start", "id", ss.ID(), "err", err)
		return nil, errdefs.New(errdefs.ErrConflict, "the command could not start in the session: its processes may be at limits.pids (%d) or its memory at limits.memory_mb (%d)", ss.limits.Pids, ss.limits.MemoryBytes>>20)
	}
	return p, nil
}

// settleFrozen freezes the session again between calls once no
// background command but ending (about to end) runs; the call lock is
// held.
func (ss *Session) settleFrozen(ending *command) {
	if ss.runningCommands(ending) > 0 || ss.isEnded() || ss.st == nil {
		return
	}
	if err := freeze(ss.st.j); err != nil && !ss.isEnded() {
		ss.s.log.Error("freeze session; ending it", "id", ss.ID(), "err", err)
		ss.end(spec.EndFreezeFailed)
	}
}

// freezeUnlessCommands freezes j unless background commands run.
func (ss *Session) freezeUnlessCommands(j *jail.Jail) error {
	if ss.runningCommands(nil) > 0 {
		return nil
	}
	return freeze(j)
}

// runningCommands counts the background commands running but except.
func (ss *Session) runningCommands(except *command) int {
	ss.cmdMu.Lock()
	defer ss.cmdMu.Unlock()
	n := 0
	for _, c := range ss.cmds {
		if c == except {
			continue
		}
		select {
		case <-c.done:
		default:
			n++
		}
	}
	return n
}

// commandsBlock is the refusal of a checkpoint (what: "pause") while
// background commands run, naming them; nil when none does.
func (ss *Session) commandsBlock(what string) error {
	ss.cmdMu.Lock()
	defer ss.cmdMu.Unlock()
	var ids []string
	for _, c := range ss.cmds {
		select {
		case <-c.done:
		default:
			ids = append(ids, c.id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	return errdefs.New(errdefs.ErrConflict, "the session cannot %s while background commands run (%s): a checkpoint cannot keep them; DELETE them or let them end", what, strings.Join(ids, ", "))
}

// LastActivity is when a background command of the session last wrote
// output (zero if none ever did): the idle timeout counts from it too.
func (ss *Session) LastActivity() time.Time {
	ss.cmdMu.Lock()
	defer ss.cmdMu.Unlock()
	return ss.activity
}

// RunCommand runs a foreground command to its end (or its timeout, its
// output bound, ctx's end) and returns how it ended with its output.
func (ss *Session) RunCommand(ctx context.Context, c *spec.Command) (*spec.CommandResult, error) {
	if c.Background {
		return nil, errdefs.Field("background", "RunCommand runs foreground commands")
	}
	j, err := ss.beginCommand(c)
	if err != nil {
		return nil, err
	}
	defer ss.callMu.Unlock()
	defer ss.settleFrozen(nil)
	id := newCommandID()
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		outR.Close()
		outW.Close()
		return nil, err
	}
	overflow := make(chan struct{})
	var once sync.Once
	over := func() { once.Do(func() { close(overflow) }) }
	stdout := &runner.Capture{Limit: c.OutputBytes, OnOverflow: over}
	stderr := &runner.Capture{Limit: c.OutputBytes, OnOverflow: over}
	if c.Output != nil {
		stdout.Sink, stdout.Discard = outputSink{c.Output, 1}, true
		stderr.Sink, stderr.Discard = outputSink{c.Output, 2}, true
	}
	base := j.Stats()
	start := time.Now()
	p, err := ss.startCommand(j, c, id, inR, outW, errW)
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	if c.OnStart != nil {
		c.OnStart(id)
	}
	var drains sync.WaitGroup
	drains.Go(func() { stdout.Drain(outR) })
	drains.Go(func() { stderr.Drain(errR) })
	go func() {
		if len(c.Stdin) > 0 {
			_ = inW.SetWriteDeadline(start.Add(c.Timeout))
			_, _ = inW.Write(c.Stdin)
		}
		inW.Close()
	}()
	res := &spec.CommandResult{ID: id}
	timer := time.NewTimer(c.Timeout)
	defer timer.Stop()
	select {
	case <-p.Done():
	case <-timer.C:
		res.Status = spec.StatusTimeout
	case <-overflow:
		res.Status = spec.StatusOutputLimit
	case <-ctx.Done():
		res.Status = spec.StatusKilled
	case <-ss.done:
	}
	// The program's end ends its group: nothing it started outlives it,
	// and the output pipes reach their end.
	res.CPU = j.EndGroup(id)
	<-p.Done()
	res.Duration = time.Since(start)
	waitDrains(&drains, outR, errR)
	res.Stdout, res.Stderr = stdout.Buf, stderr.Buf
	res.StdoutTruncated, res.StderrTruncated = stdout.Truncated, stderr.Truncated
	x := p.Exit()
	res.ExitCode, res.Signal = x.Code, x.Signal
	if x.Signal != 0 {
		res.ExitCode = -1
	}
	res.OOMKilled = j.Stats().OOMKills > base.OOMKills
	res.Status = commandStatus(res.Status, res.OOMKilled, x)
	return res, nil
}

// outputSink hands a stream's kept chunks to an OutputFunc.
type outputSink struct {
	f      spec.OutputFunc
	stream int
}

func (o outputSink) Write(p []byte) (int, error) {
	o.f(o.stream, p)
	return len(p), nil
}

// waitDrains waits for the output readers; a pipe some process outside
// the group still holds (none should) is cut after a while.
func waitDrains(wg *sync.WaitGroup, files ...*os.File) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(syncWait):
		for _, f := range files {
			_ = f.SetReadDeadline(time.Now())
		}
		<-done
	}
	for _, f := range files {
		f.Close()
	}
}

// commandStatus decides a command's status: the daemon's reason first.
func commandStatus(why spec.Status, oom bool, x jail.Exit) spec.Status {
	switch {
	case why != "":
		return why
	case oom && x.Signal == int(unix.SIGKILL):
		return spec.StatusMemoryLimit
	case x.Signal == int(unix.SIGXCPU):
		return spec.StatusCPULimit
	case x.Signal != 0:
		return spec.StatusKilled
	case x.Code == 0:
		return spec.StatusOK
	}
	return spec.StatusError
}

// StartCommand starts a background command and returns at once.
func (ss *Session) StartCommand(c *spec.Command) (spec.CommandInfo, error) {
	if !c.Background {
		return spec.CommandInfo{}, errdefs.Field("background", "StartCommand starts background commands")
	}
	j, err := ss.beginCommand(c)
	if err != nil {
		return spec.CommandInfo{}, err
	}
	defer ss.callMu.Unlock()
	if n := ss.runningCommands(nil); n >= spec.MaxBackgroundCommands {
		return spec.CommandInfo{}, errdefs.New(errdefs.ErrRateLimited, "the session runs %d background commands, the most it may; DELETE one or let it end", n)
	}
	id := newCommandID()
	var files []*os.File
	pipe := func() (*os.File, *os.File) {
		r, w, perr := os.Pipe()
		if perr != nil && err == nil {
			err = perr
		}
		files = append(files, r, w)
		return r, w
	}
	inR, inW := pipe()
	outR, outW := pipe()
	errR, errW := pipe()
	if err != nil {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
		return spec.CommandInfo{}, err
	}
	active := func() {
		ss.cmdMu.Lock()
		ss.activity = time.Now()
		ss.cmdMu.Unlock()
	}
	cmd := &command{id: id, argv: slices.Clone(c.Argv), group: id, started: time.Now(), stdin: inW,
		stdout: &ring{max: spec.CommandRing, onWrite: active}, stderr: &ring{max: spec.CommandRing, onWrite: active},
		kill: make(chan struct{}), done: make(chan struct{})}
	p, err := ss.startCommand(j, c, id, inR, outW, errW)
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return spec.CommandInfo{}, err
	}
	cmd.proc, cmd.pid = p, p.JailPid()
	if len(c.Stdin) > 0 {
		_ = inW.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = inW.Write(c.Stdin)
		_ = inW.SetWriteDeadline(time.Time{})
	}
	ss.cmdMu.Lock()
	ss.cmds = append(ss.cmds, cmd)
	ss.trimCommandsLocked()
	ss.activity = time.Now()
	ss.cmdMu.Unlock()
	var drains sync.WaitGroup
	drains.Go(func() { drainTo(cmd.stdout, outR) })
	drains.Go(func() { drainTo(cmd.stderr, errR) })
	go ss.awaitCommand(j, cmd, &drains, outR, errR)
	return cmd.info(false), nil
}

func drainTo(r *ring, f *os.File) {
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			_, _ = r.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// awaitCommand ends a background command's group when its program ends
// (or the session does) and records how it ended.
func (ss *Session) awaitCommand(j *jail.Jail, cmd *command, drains *sync.WaitGroup, files ...*os.File) {
	select {
	case <-cmd.proc.Done():
	case <-cmd.kill:
	case <-ss.done:
	}
	cpu := j.EndGroup(cmd.group)
	<-cmd.proc.Done()
	waitDrains(drains, files...)
	cmd.stdinMu.Lock()
	if cmd.stdin != nil {
		cmd.stdin.Close()
		cmd.stdin = nil
	}
	cmd.stdinMu.Unlock()
	x := cmd.proc.Exit()
	cmd.mu.Lock()
	cmd.ended, cmd.cpu, cmd.exit, cmd.signal = time.Now(), cpu, x.Code, x.Signal
	if x.Signal != 0 {
		cmd.exit = -1
	}
	var why spec.Status
	if cmd.killed {
		why = spec.StatusKilled
	}
	cmd.status = commandStatus(why, false, x)
	cmd.mu.Unlock()
	ss.cmdMu.Lock()
	ss.activity = time.Now()
	ss.cmdMu.Unlock()
	// The last one gone, the session is frozen between calls again, before
	// the command is seen to end (a caller's next request then finds the
	// call lock free). Whoever holds the lock now (a call, a command)
	// freezes it at its end; if it looked before this one ended, the
	// freeze waits for the lock.
	// While it holds the lock to do so, settling has tryCall wait for it
	// rather than refuse as if a call ran.
	ss.settling.Add(1)
	if ss.callMu.TryLock() {
		ss.settleFrozen(cmd)
		close(cmd.done)
		ss.callMu.Unlock()
		ss.settling.Add(-1)
		return
	}
	ss.settling.Add(-1)
	close(cmd.done)
	go func() {
		ss.callMu.Lock()
		ss.settling.Add(1)
		defer ss.settling.Add(-1)
		defer ss.callMu.Unlock()
		ss.settleFrozen(nil)
	}()
}

// tryCall takes the call lock unless a call, a command or a checkpoint
// holds it (the caller then refuses, 409). The lock held only to freeze
// the session after its last background command ended (a few ms) is
// waited for: a request right after a command's end is not refused.
func (ss *Session) tryCall() bool {
	for {
		if ss.callMu.TryLock() {
			return true
		}
		if ss.settling.Load() == 0 {
			return false
		}
		time.Sleep(time.Millisecond)
	}
}

// trimCommandsLocked drops the oldest ended commands past
// spec.MaxCommandsKept.
func (ss *Session) trimCommandsLocked() {
	for len(ss.cmds) > spec.MaxCommandsKept {
		i := slices.IndexFunc(ss.cmds, func(c *command) bool {
			select {
			case <-c.done:
				return true
			default:
				return false
			}
		})
		if i < 0 {
			return
		}
		ss.cmds = slices.Delete(ss.cmds, i, i+1)
	}
}

func (c *command) info(output bool) spec.CommandInfo {
	in := spec.CommandInfo{ID: c.id, Argv: c.argv, Pid: c.pid, Started: c.started, State: spec.CommandRunning, Terminal: c.terminal}
	select {
	case <-c.done:
		c.mu.Lock()
		in.State, in.Status, in.Exit, in.Signal, in.Ended, in.CPU = spec.CommandExited, c.status, c.exit, c.signal, c.ended, c.cpu
		c.mu.Unlock()
	default:
	}
	if output {
		in.Stdout, in.StdoutDropped = c.stdout.snapshot()
		in.Stderr, in.StderrDropped = c.stderr.snapshot()
	}
	return in
}

func (ss *Session) lookupCommand(id string) (*command, error) {
	ss.cmdMu.Lock()
	defer ss.cmdMu.Unlock()
	for _, c := range ss.cmds {
		if c.id == id {
			return c, nil
		}
	}
	if len(id) > 64 {
		id = id[:64] + "..."
	}
	return nil, errdefs.New(errdefs.ErrNotFound, "no command %q in this session (the session lists its last %d background commands)", id, spec.MaxCommandsKept)
}

// Commands lists the session's background commands, oldest first,
// without their output.
func (ss *Session) Commands() []spec.CommandInfo {
	ss.cmdMu.Lock()
	cmds := slices.Clone(ss.cmds)
	ss.cmdMu.Unlock()
	out := make([]spec.CommandInfo, 0, len(cmds))
	for _, c := range cmds {
		out = append(out, c.info(false))
	}
	return out
}

// Command is one background command with the output it kept.
func (ss *Session) Command(id string) (spec.CommandInfo, error) {
	c, err := ss.lookupCommand(id)
	if err != nil {
		return spec.CommandInfo{}, err
	}
	return c.info(true), nil
}

// FollowCommand passes a command's output to out, the output kept so far
// first and then as it comes, until the command ends (the answer is how
// it ended), ctx ends or out fails. Output dropped from the ring before
// it was passed (a follower slower than the command) is skipped; the
// answer counts it.
func (ss *Session) FollowCommand(ctx context.Context, id string, out func(stream int, p []byte) error) (spec.CommandInfo, error) {
	c, err := ss.lookupCommand(id)
	if err != nil {
		return spec.CommandInfo{}, err
	}
	var pos [2]int64
	for {
		// done is looked at before the rings are read: once it is closed
		// the rings hold all there will be.
		ended := false
		select {
		case <-c.done:
			ended = true
		default:
		}
		var waits [2]<-chan struct{}
		for i, r := range []*ring{c.stdout, c.stderr} {
			var b []byte
			b, pos[i], waits[i] = r.from(pos[i])
			if len(b) > 0 {
				if err := out(i+1, b); err != nil {
					return spec.CommandInfo{}, err
				}
			}
		}
		if ended {
			ci := c.info(true)
			ci.Stdout, ci.Stderr = nil, nil
			return ci, nil
		}
		select {
		case <-waits[0]:
		case <-waits[1]:
		case <-c.done:
		case <-ctx.Done():
			return spec.CommandInfo{}, ctx.Err()
		}
	}
}

// CommandStdin writes data to a running command's stdin, then closes it
// when eof. A command that does not read gets at most a second.
func (ss *Session) CommandStdin(id string, data []byte, eof bool) error {
	c, err := ss.lookupCommand(id)
	if err != nil {
		return err
	}
	if len(data) > spec.MaxCommandStdin {
		return errdefs.Field("data", "at most %d bytes, got %d", spec.MaxCommandStdin, len(data))
	}
	if c.terminal {
		return errdefs.New(errdefs.ErrConflict, "command %s is a terminal's shell: its input is the terminal's", c.id)
	}
	c.stdinMu.Lock()
	defer c.stdinMu.Unlock()
	if c.stdin == nil {
		return errdefs.New(errdefs.ErrConflict, "command %s has ended or its stdin was closed", c.id)
	}
	if len(data) > 0 {
		_ = c.stdin.SetWriteDeadline(time.Now().Add(time.Second))
		n, err := c.stdin.Write(data)
		if err != nil {
			return errdefs.New(errdefs.ErrConflict, "command %s took %d of %d bytes of stdin (it does not read, or ended)", c.id, n, len(data))
		}
	}
	if eof {
		c.stdin.Close()
		c.stdin = nil
	}
	return nil
}

// Signals a command may be sent.
var commandSignals = map[string]unix.Signal{
	"SIGTERM": unix.SIGTERM, "SIGINT": unix.SIGINT, "SIGHUP": unix.SIGHUP, "SIGKILL": unix.SIGKILL,
	"SIGQUIT": unix.SIGQUIT, "SIGUSR1": unix.SIGUSR1, "SIGUSR2": unix.SIGUSR2,
	"SIGSTOP": unix.SIGSTOP, "SIGCONT": unix.SIGCONT,
}

// CommandSignalNames are the names SignalCommand takes.
func CommandSignalNames() []string {
	out := make([]string, 0, len(commandSignals))
	for k := range commandSignals {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// SignalCommand sends a signal (by name) to a running command's program.
func (ss *Session) SignalCommand(id, name string) error {
	sig, ok := commandSignals[name]
	if !ok {
		return errdefs.Field("signal", "must be one of %s", strings.Join(CommandSignalNames(), ", "))
	}
	c, err := ss.lookupCommand(id)
	if err != nil {
		return err
	}
	if err := c.proc.Signal(sig); err != nil {
		return errdefs.New(errdefs.ErrConflict, "command %s has ended", c.id)
	}
	return nil
}

// KillCommand kills a command and everything it started, and forgets it:
// the answer is its last state and output.
func (ss *Session) KillCommand(id string) (spec.CommandInfo, error) {
	c, err := ss.lookupCommand(id)
	if err != nil {
		return spec.CommandInfo{}, err
	}
	c.mu.Lock()
	c.killed = true
	c.mu.Unlock()
	c.killOnce.Do(func() { close(c.kill) })
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		return spec.CommandInfo{}, fmt.Errorf("command %s did not end within 10 s of SIGKILL", c.id)
	}
	ss.cmdMu.Lock()
	ss.cmds = slices.DeleteFunc(ss.cmds, func(x *command) bool { return x == c })
	ss.cmdMu.Unlock()
	return c.info(true), nil
}
