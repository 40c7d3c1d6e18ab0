package jail

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"
)

// teardownTimeout bounds how long cleanup may take after a run, whatever
// happened to the caller.
const teardownTimeout = 30 * time.Second

// job is what the runner reads from fd 3.
type job struct {
	Code                string `json:"code"`
	Filename            string `json:"filename"`
	LastLineInteractive bool   `json:"last_line_interactive"`
	FiguresDir          string `json:"figures_dir"`
	MaxFigures          int    `json:"max_figures"`
}

// NewID returns a fresh random run id.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Run executes req in a fresh jail and destroys the jail: before returning
// when the run failed, in the background right after when it succeeded
// (every process of the run is dead by then; Idle waits for the rest).
// The returned error is for failures to create or run the jail (the
// request is invalid: ErrInvalid; the engine is closed: ErrClosed; the
// host failed); whatever the program did, including crashing, timing out
// or being OOM-killed, is a Result with a nil error. Cancelling ctx kills
// the run (Result.Cancelled); teardown does not depend on ctx.
func (e *Engine) Run(ctx context.Context, id string, req *Request) (*Result, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := validateID(id); err != nil {
		return nil, err
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	e.running.Add(1)
	e.mu.Unlock()
	defer e.running.Done()

	runDir := filepath.Join(e.runsDir, id)
	if err := e.makeRunDir(runDir, req.Limits); err != nil {
		return nil, err
	}
	// Teardown always happens, whatever the caller does; on success it
	// happens after Run returns, off the response path (see Idle).
	var c *libcontainer.Container
	async := false
	teardown := func() {
		if c != nil {
			// Destroy kills whatever is left and removes the cgroup and state.
			if err := c.Destroy(); err != nil {
				e.log.Error("destroy jail", "id", id, "err", err)
			}
		}
		e.removeRunDir(runDir)
	}
	defer func() {
		if async {
			e.teardowns.Go(teardown)
		} else {
			teardown()
		}
	}()
	if err := writeFiles(filepath.Join(runDir, "work"), req.Files, e.jailHostID(jailUID), e.jailHostID(jailGID)); err != nil {
		return nil, fmt.Errorf("%w: files: %v", ErrInvalid, err)
	}

	cfg, err := e.config(id, runDir, req.Limits)
	if err != nil {
		return nil, err
	}
	if c, err = libcontainer.Create(e.stateDir, id, cfg); err != nil {
		return nil, fmt.Errorf("create jail: %w", err)
	}

	p, err := newPipes(req.Command == nil)
	if err != nil {
		return nil, err
	}
	defer p.closeAll()

	args := req.Command
	if args == nil {
		args = []string{pythonPath, "-s", "-B", e.image.Manifest.Runner}
	}
	proc := &libcontainer.Process{
		Args:    args,
		Env:     environ(req.Limits, req.Env),
		UID:     jailUID,
		GID:     jailGID,
		Cwd:     workspaceDir,
		Stdin:   p.stdinR,
		Stdout:  p.stdoutW,
		Stderr:  p.stderrW,
		Rlimits: rlimits(req.Limits),
		Init:    true,
	}
	if p.jobR != nil {
		proc.ExtraFiles = []*os.File{p.jobR, p.recW}
	}
	res := &Result{ID: id, ExitCode: -1}
	start := time.Now()
	if err := c.Run(proc); err != nil {
		return nil, fmt.Errorf("start jail: %w", err)
	}
	p.closeChildEnds()

	var (
		once     sync.Once
		overflow = make(chan struct{})
	)
	stdout := &capture{limit: req.Limits.OutputBytes, onOverflow: func() { once.Do(func() { close(overflow) }) }}
	stderr := &capture{limit: req.Limits.OutputBytes, onOverflow: stdout.onOverflow}
	records := &capture{limit: maxRecordBytes}
	var readers sync.WaitGroup
	readers.Go(func() { stdout.readFrom(p.stdoutR) })
	readers.Go(func() { stderr.readFrom(p.stderrR) })
	if p.recR != nil {
		readers.Go(func() { records.readFrom(p.recR) })
		j, _ := json.Marshal(job{
			Code: req.Code, Filename: "main.py", LastLineInteractive: req.LastLineInteractive,
			FiguresDir: figuresDir, MaxFigures: MaxFigures,
		})
		go feed(p.jobW, j)
	}
	go feed(p.stdinW, req.Stdin)

	type exit struct {
		ps  *os.ProcessState
		err error
	}
	waited := make(chan exit, 1)
	go func() { ps, err := proc.Wait(); waited <- exit{ps, err} }()
	timer := time.NewTimer(req.Limits.Timeout)
	defer timer.Stop()
	kill := func() { _ = c.Signal(unix.SIGKILL) }
	var outputLimit bool
	var ended exit
wait:
	for {
		select {
		case ended = <-waited:
			break wait
		case <-timer.C:
			res.TimedOut = true
			kill()
		case <-overflow:
			overflow = nil
			outputLimit = true
			kill()
		case <-ctx.Done():
			res.Cancelled = true
			kill()
		}
	}
	res.Duration = time.Since(start)
	if ended.ps == nil {
		e.log.Error("wait for jail", "id", id, "err", ended.err)
	}
	setExit(res, ended.ps)

	// The run is over when its cgroup is empty, not when its first process
	// exits: the pid namespace dies with its init, so wait for the kernel
	// to finish killing the rest, and kill stragglers ourselves.
	e.waitEmpty(c)
	readers.Wait()

	st := readCgroupStats(c)
	res.CPUTime, res.PeakMemoryBytes, res.OOMKilled = st.cpu, st.peak, st.oomKills > 0
	res.Stdout, res.StdoutTruncated = stdout.buf, stdout.truncated
	res.Stderr, res.StderrTruncated = stderr.buf, stderr.truncated
	if p.recR != nil {
		recs := parseRecords(records.buf, strings.Count(req.Code, "\n")+1)
		res.Exception, res.ResultRepr = recs.exc, recs.result
		// The runner (pid 1) cannot die by the signal that killed the user's
		// process; it exits 128+N and says N. Believe it only when both agree
		// (user code could forge the record, but only about itself).
		if recs.signal > 0 && res.Signal == 0 && res.ExitCode == 128+recs.signal {
			res.Signal, res.ExitCode = recs.signal, -1
		}
		res.Figures = readFigures(filepath.Join(runDir, "meta", "figures"))
	}
	if res.Files, err = collectFiles(filepath.Join(runDir, "work"), req.ReturnFiles); err != nil {
		e.log.Warn("collect files", "id", id, "err", err)
		res.Files = append(res.Files, OutFile{Path: ".", Error: "workspace could not be read completely"})
	}
	res.Status = status(res, outputLimit)
	async = true
	return res, nil
}

func validateID(id string) error {
	if len(id) == 0 || len(id) > 64 {
		return fmt.Errorf("%w: run id must be 1..64 characters", ErrInvalid)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return fmt.Errorf("%w: run id %q may only hold a-z, 0-9 and -", ErrInvalid, id)
		}
	}
	return nil
}

func (e *Engine) jailHostID(id int) int { return int(e.cfg.HostIDBase) + id }

// makeRunDir mounts the run's tmpfs (the size and inode limits of the
// workspace, /tmp and /jaild together) and lays out its directories, all
// owned by the jail's user.
func (e *Engine) makeRunDir(dir string, l Limits) (retErr error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			e.removeRunDir(dir)
		}
	}()
	uid, gid := e.jailHostID(jailUID), e.jailHostID(jailGID)
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700,uid=%d,gid=%d", l.WorkspaceBytes, l.WorkspaceInodes, uid, gid)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return &os.PathError{Op: "mount tmpfs", Path: dir, Err: err}
	}
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"work", 0o755}, {"tmp", 0o1777}, {"meta", 0o755}, {"meta/figures", 0o755}} {
		p := filepath.Join(dir, d.name)
		if err := os.Mkdir(p, d.mode); err != nil {
			return err
		}
		if err := os.Chmod(p, d.mode); err != nil { // umask-proof
			return err
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

// waitEmpty waits until no process is left in the run's cgroup, killing
// any that remain, for at most a few seconds (Destroy is the backstop).
func (e *Engine) waitEmpty(c *libcontainer.Container) {
	deadline := time.Now().Add(5 * time.Second)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		pids, err := c.Processes()
		if err != nil || len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.log.Warn("jail cgroup not empty after kill", "id", c.ID(), "pids", len(pids))
			return
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(delay)
	}
}

// setExit records how the first process ended.
func setExit(res *Result, ps *os.ProcessState) {
	if ps == nil {
		return
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Exited():
			res.ExitCode = ws.ExitStatus()
		case ws.Signaled():
			res.Signal = int(ws.Signal())
		}
	}
}

// status decides the run's status from what happened, most specific first.
func status(r *Result, outputLimit bool) Status {
	switch {
	case r.TimedOut:
		return StatusTimeout
	case r.OOMKilled:
		return StatusMemoryLimit
	case outputLimit:
		return StatusOutputLimit
	case r.Cancelled:
		return StatusKilled
	case r.Signal == int(unix.SIGXCPU):
		return StatusCPULimit
	case r.Signal != 0:
		return StatusKilled
	case r.ExitCode == 0:
		return StatusOK
	}
	return StatusError
}

// feed writes data to w and closes it. A jail that exits without reading
// makes the write fail with EPIPE, which is fine.
func feed(w *os.File, data []byte) {
	if len(data) > 0 {
		_, _ = w.Write(data)
	}
	_ = w.Close()
}

// pipes are the only files a jail inherits: stdio and, for the runner,
// the job (fd 3) and records (fd 4) channels.
type pipes struct {
	stdinR, stdinW, stdoutR, stdoutW, stderrR, stderrW *os.File
	jobR, jobW, recR, recW                             *os.File
}

func newPipes(runner bool) (_ *pipes, retErr error) {
	p := &pipes{}
	defer func() {
		if retErr != nil {
			p.closeAll()
		}
	}()
	var err error
	mk := func(r, w **os.File) {
		if err == nil {
			*r, *w, err = os.Pipe()
		}
	}
	mk(&p.stdinR, &p.stdinW)
	mk(&p.stdoutR, &p.stdoutW)
	mk(&p.stderrR, &p.stderrW)
	if runner {
		mk(&p.jobR, &p.jobW)
		mk(&p.recR, &p.recW)
	}
	return p, err
}

// closeChildEnds closes our copies of the ends the jail holds, so that
// readers see EOF when the jail's processes are gone.
func (p *pipes) closeChildEnds() {
	for _, f := range []*os.File{p.stdinR, p.stdoutW, p.stderrW, p.jobR, p.recW} {
		if f != nil {
			f.Close()
		}
	}
}

func (p *pipes) closeAll() {
	for _, f := range []*os.File{p.stdinR, p.stdinW, p.stdoutR, p.stdoutW, p.stderrR, p.stderrW, p.jobR, p.jobW, p.recR, p.recW} {
		if f != nil {
			f.Close()
		}
	}
}

type cgroupStats struct {
	cpu      time.Duration
	peak     uint64
	oomKills uint64
}

// readCgroupStats reads CPU time, peak memory and the OOM-kill count
// straight from the run's cgroup files (cheaper than a full Stats call, and
// the OOM count is not in it).
func readCgroupStats(c *libcontainer.Container) cgroupStats {
	var st cgroupStats
	state, err := c.State()
	if err != nil {
		return st
	}
	paths := state.CgroupPaths
	if dir := paths[""]; cgroups.IsCgroup2UnifiedMode() {
		st.cpu = time.Duration(keyed(filepath.Join(dir, "cpu.stat"), "usage_usec")) * time.Microsecond
		st.peak = single(filepath.Join(dir, "memory.peak"))
		st.oomKills = keyed(filepath.Join(dir, "memory.events"), "oom_kill")
		return st
	}
	st.cpu = time.Duration(single(filepath.Join(paths["cpuacct"], "cpuacct.usage")))
	st.peak = single(filepath.Join(paths["memory"], "memory.max_usage_in_bytes"))
	st.oomKills = keyed(filepath.Join(paths["memory"], "memory.oom_control"), "oom_kill")
	return st
}

func single(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v
}

func keyed(path, key string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}
