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
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jaild/jaild/internal/egress"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/runner"
	"github.com/jaild/jaild/internal/workspace"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"
)

// teardownTimeout bounds how long cleanup may take after a run, whatever
// happened to the caller.
const teardownTimeout = 30 * time.Second

// NewID returns a fresh random run id.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// box is one jail: its run directory, container, first process and pipes.
type box struct {
	id, runDir string
	slot       int    // which host id range is the jail's (slots)
	idBase     uint32 // host id of the jail's uid 0
	limits     Limits // what the jail was created with
	c          *libcontainer.Container
	cgroups    map[string]string // the jail's cgroup directories by controller ("" on v2)
	proc       *libcontainer.Process
	p          *pipes
	net        *egress.Run // nil: loopback only
	exited     chan exit   // receives the first process's end, once
	// peak is a warm jail's memory.peak opened and reset for its run
	// (cgroup v2, Linux 6.12+): the reset holds for this descriptor only.
	peak *os.File
}

type exit struct {
	ps  *os.ProcessState
	err error
}

// spawn is what a jail is created with.
type spawn struct {
	limits  Limits
	env     map[string]string
	command []string // nil: the runner
	files   []File
	// warm: a pool's jail. Its runner imports its own lazy modules and
	// preimport, says ready, and waits for its job.
	warm      bool
	preimport []string
	network   *Network
}

// create makes a jail and starts its first process: the runner, waiting
// for its job on fd 3, or sp.command. Files are written into the workspace
// before the process starts. On error nothing is left behind.
func (e *Engine) create(sp spawn) (_ *box, retErr error) {
	l, command := sp.limits, sp.command
	b := &box{id: NewID(), limits: l, exited: make(chan exit, 1)}
	b.runDir = filepath.Join(e.runsDir, b.id)
	var err error
	if b.slot, err = e.slots.get(); err != nil {
		return nil, err
	}
	b.idBase = e.cfg.HostIDBase + uint32(b.slot)*idMapSize
	if err := e.makeRunDir(b); err != nil {
		e.slots.put(b.slot)
		return nil, err
	}
	defer func() {
		if retErr != nil {
			e.destroy(b)
		}
	}()
	if err := writeFiles(filepath.Join(b.runDir, "work"), sp.files, b.hostID(jailUID), b.hostID(jailGID)); err != nil {
		return nil, err
	}
	if sp.network != nil {
		if e.cfg.Network == nil {
			return nil, errdefs.New(errdefs.ErrInvalidArgument, "network egress is not enabled")
		}
		if b.net, err = e.cfg.Network.Setup(b.slot, b.runDir, sp.network.Allow); err != nil {
			return nil, err
		}
		conf := "nameserver " + b.net.Nameserver().String() + "\noptions timeout:2 attempts:2\n"
		if err := os.WriteFile(filepath.Join(b.runDir, "resolv.conf"), []byte(conf), 0o444); err != nil {
			return nil, err
		}
	}
	cfg, err := e.config(b, l)
	if err != nil {
		return nil, err
	}
	if b.c, err = libcontainer.Create(e.stateDir, b.id, cfg); err != nil {
		return nil, fmt.Errorf("create jail: %w", err)
	}
	if b.p, err = newPipes(command == nil); err != nil {
		return nil, err
	}
	args := command
	envList := environ(l, sp.env)
	if args == nil {
		args = append([]string{e.image.Manifest.Init}, runnerArgs(e.image.Manifest.Runner)...)
		if sp.warm {
			envList = append(envList, "JAILD_PREIMPORT="+strings.Join(sp.preimport, ","))
		}
	}
	b.proc = &libcontainer.Process{
		Args:    args,
		Env:     envList,
		UID:     jailUID,
		GID:     jailGID,
		Cwd:     workspaceDir,
		Stdin:   b.p.stdinR,
		Stdout:  b.p.stdoutW,
		Stderr:  b.p.stderrW,
		Rlimits: rlimits(l),
		Init:    true,
	}
	if b.p.jobR != nil {
		b.proc.ExtraFiles = []*os.File{b.p.jobR, b.p.recW}
	}
	if err := b.c.Run(b.proc); err != nil {
		return nil, fmt.Errorf("start jail: %w", err)
	}
	b.p.closeChildEnds()
	go func() { ps, err := b.proc.Wait(); b.exited <- exit{ps, err} }()
	state, err := b.c.State()
	if err != nil {
		return nil, fmt.Errorf("jail state: %w", err)
	}
	b.cgroups = state.CgroupPaths
	return b, nil
}

// destroy kills whatever is left of a jail and removes its cgroup, state,
// mounts and run directory, then frees its host id range: only once every
// process of the jail is gone can another jail have those ids. It returns
// after teardownTimeout at the latest; a teardown still going on then
// keeps the range until it ends.
func (e *Engine) destroy(b *box) {
	done := make(chan bool, 1)
	go func() { done <- e.teardown(b) }()
	timer := time.NewTimer(teardownTimeout)
	defer timer.Stop()
	select {
	case free := <-done:
		if free {
			e.slots.put(b.slot)
		}
	case <-timer.C:
		// Fail closed: the slot's host id range is not handed out again
		// until the teardown really ends.
		e.log.Error("jail teardown exceeded its deadline; its host id range stays out of use until it ends", "id", b.id, "slot", b.slot, "deadline", teardownTimeout)
		go func() {
			if <-done {
				e.slots.put(b.slot)
				e.log.Info("late jail teardown ended", "id", b.id, "slot", b.slot)
			}
		}()
	}
}

// teardown destroys b's container, pipes, network and run directory, and
// reports whether its host id range is free again.
func (e *Engine) teardown(b *box) bool {
	if b.peak != nil {
		b.peak.Close()
		b.peak = nil
	}
	free := true
	if b.c != nil {
		if err := b.c.Destroy(); err != nil {
			e.log.Error("destroy jail; its host id range stays in use", "id", b.id, "slot", b.slot, "err", err)
			free = false
		}
	}
	if b.p != nil {
		b.p.closeAll()
	}
	if b.net != nil {
		b.net.Close()
	}
	e.removeRunDir(b.runDir)
	return free
}

// Run executes req in a fresh jail, a warm one from the pool when req fits
// it, else one created now. The jail is destroyed: before Run returns when
// the run failed, in the background right after when it succeeded (every
// process of the run is dead by then; Idle waits for the rest).
//
// The returned error is for failures to create or run the jail (the
// request is invalid: errdefs.ErrInvalidArgument; the engine is closed: ErrClosed; the host
// failed); whatever the program did, including crashing, timing out or
// being OOM-killed, is a Result with a nil error. Cancelling ctx kills the
// run (Result.Cancelled); teardown does not depend on ctx.
func (e *Engine) Run(ctx context.Context, req *Request) (*Result, error) {
	if err := req.Validate(); err != nil {
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

	b, warm := e.pool.take(req)
	if warm {
		// The refill is kicked after this run, not when the jail is taken:
		// a jail starting alongside the run would take CPU from it
		// (measured ~2 ms of a warm print(1) on 2 cores).
		defer e.pool.kick()
	}
	if b != nil {
		if err := e.fit(b, req); err != nil {
			e.log.Info("warm jail cannot serve the request; using a cold one", "id", b.id, "err", err)
			e.destroy(b)
			b, warm = nil, false
		}
	}
	if b == nil {
		var err error
		sp := spawn{limits: req.Limits, env: req.Env, command: req.Command, files: req.Files, network: req.Network}
		if b, err = e.create(sp); err != nil {
			return nil, err
		}
	}
	res, err := e.execute(ctx, b, req)
	if err != nil {
		e.destroy(b)
		return nil, err
	}
	res.Warm = warm
	e.teardowns.Go(func() { e.destroy(b) })
	return res, nil
}

// execute hands the job to a started jail and collects what it produced.
func (e *Engine) execute(ctx context.Context, b *box, req *Request) (*Result, error) {
	res := &Result{ID: b.id, ExitCode: -1}
	p := b.p
	var (
		once     sync.Once
		overflow = make(chan struct{})
	)
	stdout := &runner.Capture{Limit: req.Limits.OutputBytes, OnOverflow: func() { once.Do(func() { close(overflow) }) }}
	stderr := &runner.Capture{Limit: req.Limits.OutputBytes, OnOverflow: stdout.OnOverflow}
	records := &runner.Capture{Limit: runner.MaxRecordBytes}
	base := readCgroupStats(b.cgroups)
	var readers sync.WaitGroup
	readers.Go(func() { stdout.Drain(p.stdoutR) })
	readers.Go(func() { stderr.Drain(p.stderrR) })
	if p.recR != nil {
		readers.Go(func() { records.Drain(p.recR) })
		j, _ := json.Marshal(runner.Job{
			Code: req.Code, Filename: "main.py", LastLineInteractive: req.LastLineInteractive,
			FiguresDir: figuresDir, MaxFigures: workspace.MaxFigures, Env: req.Env, Rlimits: runnerRlimits(req.Limits),
		})
		go feed(p.jobW, j)
	}
	go feed(p.stdinW, req.Stdin)

	start := time.Now()
	timer := time.NewTimer(req.Limits.Timeout)
	defer timer.Stop()
	kill := func() { _ = b.c.Signal(unix.SIGKILL) }
	var outputLimit bool
	var ended exit
wait:
	for {
		select {
		case ended = <-b.exited:
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
		e.log.Error("wait for jail", "id", b.id, "err", ended.err)
	}
	setExit(res, ended.ps)

	// The run is over when its cgroup is empty, not when its first process
	// exits. The kernel kills and reaps the rest of the pid namespace
	// before its init's exit is seen, so the cgroup is normally empty at
	// once; stragglers are killed. One hierarchy's list is enough: a jail
	// cannot make cgroups of its own.
	procs := b.cgroups["pids"]
	if cgroups.IsCgroup2UnifiedMode() {
		procs = b.cgroups[""]
	}
	killDir := ""
	if cgroups.IsCgroup2UnifiedMode() {
		killDir = procs
	}
	e.waitEmptyIn(b.id, killDir, func() ([]int, error) { return cgroups.GetPids(procs) })
	readers.Wait()

	if b.net != nil {
		u := b.net.Usage()
		res.Network = &u
	}
	st := readCgroupStats(b.cgroups)
	res.CPUTime = st.cpu - base.cpu
	res.PeakMemoryBytes = st.peak
	if b.peak != nil {
		if v, ok := readPeak(b.peak); ok {
			res.PeakMemoryBytes = v
		}
	}
	res.OOMKilled = st.oomKills > base.oomKills
	res.Stdout, res.StdoutTruncated = stdout.Buf, stdout.Truncated
	res.Stderr, res.StderrTruncated = stderr.Buf, stderr.Truncated
	if p.recR != nil {
		recs := runner.ParseRecords(records.Buf, strings.Count(req.Code, "\n")+1)
		res.Exception, res.ResultRepr = recs.Exception, recs.Result
		// The jail's init (pid 1) cannot die by the signal that killed the
		// runner; it exits 128+N and says N. Believe it only when both agree
		// (user code could forge the record, but only about itself).
		if recs.Signal > 0 && res.Signal == 0 && res.ExitCode == 128+recs.Signal {
			res.Signal, res.ExitCode = recs.Signal, -1
		}
		res.Figures = workspace.ReadFigures(filepath.Join(b.runDir, "meta", "figures"))
	}
	var err error
	if res.Files, err = collectFiles(filepath.Join(b.runDir, "work"), req.ReturnFiles); err != nil {
		e.log.Warn("collect files", "id", b.id, "err", err)
		res.Files = append(res.Files, workspace.File{Path: ".", Error: "workspace could not be read completely"})
	}
	res.Status = status(res, outputLimit)
	return res, nil
}

// runnerArgs starts the runner (a clean /dir/name.py, rootfs checks) as a
// module imported from its directory, as a script's directory would be
// sys.path[0]: imported, it runs from the bytecode compiled into the image;
// a script would be compiled at every start (~5 ms).
func runnerArgs(runner string) []string {
	dir, file := filepath.Split(runner)
	mod := strings.TrimSuffix(file, ".py")
	return []string{pythonPath, "-s", "-B", "-c",
		fmt.Sprintf("import sys; sys.path[0] = '%s'; import %s; %s.main()", filepath.Clean(dir), mod, mod)}
}

// hostID is the host uid (gid) of id in the jail.
func (b *box) hostID(id int) int { return int(b.idBase) + id }

// makeRunDir mounts the run's tmpfs (the size and inode limits of the
// workspace, /tmp and /jaild together), lays out its directories, all
// owned by the jail's user, and mounts the jail's root.
func (e *Engine) makeRunDir(b *box) (retErr error) {
	dir, l := b.runDir, b.limits
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			e.removeRunDir(dir)
		}
	}()
	uid, gid := b.hostID(jailUID), b.hostID(jailGID)
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
	return e.mountRoot(dir)
}

// mountRoot mounts the jail's root at dir/root: a read-only overlay of the
// image, so that every jail has its own superblock and inodes. Concurrent
// jails then share the image's page cache but no inode state: a flock,
// POSIX or lease lock, or a dnotify watch on an image file is seen only in
// the jail that made it (with one shared squashfs mount, such state was a
// channel between runs). Read-only overlayfs needs two lower layers; the
// second is an empty directory. The layers are named relative to RunDir
// because the jail's /proc/self/mountinfo shows them as given: no host
// path or run id.
func (e *Engine) mountRoot(dir string) error {
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o555); err != nil {
		return err
	}
	image, err := filepath.Rel(e.cfg.RunDir, e.image.Root)
	if err != nil || strings.Contains(image, ":") || strings.HasPrefix(image, "..") {
		return fmt.Errorf("image mount %s is not a plain path below %s", e.image.Root, e.cfg.RunDir)
	}
	errc := make(chan error, 1)
	go func() {
		// A thread with its own working directory, which Go ends after.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("unshare(CLONE_FS): %w", err)
			return
		}
		if err := unix.Chdir(e.cfg.RunDir); err != nil {
			errc <- err
			return
		}
		opts := "lowerdir=" + image + ":" + emptyDir
		if err := unix.Mount("overlay", root, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			errc <- &os.PathError{Op: "mount overlay", Path: root, Err: err}
			return
		}
		errc <- nil
	}()
	return <-errc
}

// waitEmpty waits until pids lists no process of the run, killing any
// that remain, for at most a few seconds (Destroy is the backstop).
func (e *Engine) waitEmpty(id string, pids func() ([]int, error)) {
	e.waitEmptyIn(id, "", pids)
}

// waitEmptyIn is waitEmpty for the run whose cgroup v2 directory is dir
// ("" on v1): cgroup.kill (Linux 5.14+) kills every process in it at once,
// with no window for a fork between listing and killing, nor for a pid
// that was reused; signals to the listed pids are the fallback.
func (e *Engine) waitEmptyIn(id, dir string, pids func() ([]int, error)) {
	deadline := time.Now().Add(5 * time.Second)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		left, err := pids()
		if err != nil || len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.log.Warn("jail cgroup not empty after kill", "id", id, "pids", len(left))
			return
		}
		if dir == "" || cgroups.WriteFile(dir, "cgroup.kill", "1") != nil {
			for _, pid := range left {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
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
func readCgroupStats(paths map[string]string) cgroupStats {
	var st cgroupStats
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

// resetPeak opens a warm jail's memory.peak and resets it for that
// descriptor, so that the run's peak excludes the pool's imports (as v1's
// memory.max_usage_in_bytes reset does). Kernels before 6.12 cannot reset
// it; the run's peak then counts from the jail's start.
func resetPeak(dir string) *os.File {
	f, err := os.OpenFile(filepath.Join(dir, "memory.peak"), os.O_RDWR, 0)
	if err != nil {
		return nil
	}
	if _, err := f.WriteString("reset\n"); err != nil {
		f.Close()
		return nil
	}
	return f
}

// readPeak reads the peak since resetPeak from the same descriptor.
func readPeak(f *os.File) (uint64, bool) {
	buf := make([]byte, 32)
	n, err := f.ReadAt(buf, 0)
	if n == 0 && err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(buf[:n])), 10, 64)
	return v, err == nil
}
