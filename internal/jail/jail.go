package jail

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/egress"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/rootfs"
)

// The view from inside every jail.
const (
	// WorkspaceDir is the workspace: writable, on the jail's tmpfs, the
	// first process's working directory.
	WorkspaceDir = "/workspace"
	// MetaDir is a directory for the daemon's side channels with the
	// program it runs: writable, on the same tmpfs, noexec.
	MetaDir = "/jaild"
	// UID and GID are the ids every process of a jail runs as.
	UID = 1000
	GID = 1000
)

// teardownTimeout bounds how long Destroy may take, whatever happened to
// the caller.
const teardownTimeout = 30 * time.Second

// NewID returns a fresh random jail id.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Spec is what a jail is created with.
type Spec struct {
	// Limits are the jail's cgroup limits, tmpfs size and rlimits.
	Limits Limits
	// Network, when set, gives the jail egress (the engine needs a
	// Config.Network); nil means loopback only.
	Network *Network
	// Image names the image the jail's root is (Engine.ImageNames); ""
	// is the default image.
	Image string
	// InitLoadsFilter: the jail's first process will be the image's init
	// (its manifest's Init), which then loads the jail's seccomp filter
	// itself, compiled once by the engine (see filterfd.go), where the
	// engine has the program and the image's init can (runner feature
	// "seccomp_fd"); elsewhere libcontainer loads it, as for any jail.
	// Such a jail's Start takes only the image's init; Exec starts its
	// processes under a second copy of that init, which loads the filter
	// and runs the program as its child (see Exec).
	InitLoadsFilter bool
}

// Jail is one live jail: its run directory, container and first process.
// Create it with Engine.Create and always Destroy it. Its methods are safe
// for concurrent use.
type Jail struct {
	e          *Engine
	id, runDir string
	slot       int    // which host id range is the jail's (slots)
	idBase     uint32 // host id of the jail's uid 0
	c          *libcontainer.Container
	image      *image            // the jail's root's image, held until its teardown ends
	cgroups    map[string]string // the jail's cgroup directories by controller ("" on v2)
	net        *egress.Run       // nil: loopback only

	mu     sync.Mutex
	limits Limits // what the jail has now (Resize changes them)
	// resizeFailed: the last Resize failed part way.
	resizeFailed bool
	// filterByInit: libcontainer loads no filter; the first process, the
	// image's init, loads the engine's program (Spec.InitLoadsFilter).
	filterByInit bool
	started      bool
	peak         *os.File // memory.peak opened and reset by Resize (cgroup v2, Linux 6.12+)
	// mntns holds the jail's mount namespace from its start to its
	// teardown (see holdMountNamespace); nil if it could not be opened.
	mntns *os.File
	// tmpfsCharged is the tmpfs size counted in the daemon's memory.high
	// for this jail (Engine.chargeTmpfs).
	tmpfsCharged int64

	done      chan struct{} // closed when the first process has ended
	exit      Exit
	destroyed sync.Once
}

// Exit is how a jail's first process ended.
type Exit struct {
	Code   int   // exit status; -1 when killed by a signal or unknown
	Signal int   // the signal that killed it; 0 when it exited
	Err    error // set when the end could not be observed
}

// Process is a program to start in a jail, as UID:GID in WorkspaceDir with
// the jail's rlimits and nothing of the daemon's environment.
type Process struct {
	Args []string
	Env  []string
	// Stdin, Stdout and Stderr are the process's fds 0-2; ExtraFiles are
	// 3 onwards. The caller closes its copies of them after Start.
	Stdin, Stdout, Stderr *os.File
	ExtraFiles            []*os.File
	// Cwd is the working directory; "" is WorkspaceDir.
	Cwd string
	// Group (Exec only) names a cgroup beneath the jail's, made for the
	// process: it and every descendant stay there (a jail cannot move its
	// processes), so KillGroup ends all of them. "" is the jail's own.
	Group string
}

// Create makes a jail (its tmpfs, root, cgroups, namespaces, network) with
// no process in it yet: the caller may write into WorkDir before Start. On
// error nothing is left behind. Errors: ErrClosed after Close; of class
// errdefs.ErrUnavailable when every host id range is in use; of class
// errdefs.ErrInvalidArgument for a Spec the engine cannot honour; others
// are the host's.
func (e *Engine) Create(sp Spec) (_ *Jail, retErr error) {
	if err := sp.Limits.Validate(); err != nil {
		return nil, err
	}
	if sp.Network != nil && e.cfg.Network == nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "network egress is not enabled")
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	im, err := e.takeImage(sp.Image)
	if err != nil {
		e.mu.Unlock()
		return nil, err
	}
	e.live.Add(1)
	e.alive.Add(1)
	e.mu.Unlock()
	j := &Jail{e: e, id: NewID(), limits: sp.Limits, image: im, done: make(chan struct{})}
	j.runDir = filepath.Join(e.runsDir, j.id)
	if j.slot, err = e.slots.get(); err != nil {
		e.releaseImage(im)
		e.alive.Add(-1)
		e.live.Done()
		return nil, err
	}
	j.idBase = e.cfg.HostIDBase + uint32(j.slot)*idMapSize
	if err := e.makeRunDir(j); err != nil {
		e.slots.put(j.slot)
		e.releaseImage(im)
		e.alive.Add(-1)
		e.live.Done()
		return nil, err
	}
	defer func() {
		if retErr != nil {
			j.Destroy()
		}
	}()
	if sp.Network != nil {
		if j.net, err = e.cfg.Network.Setup(j.slot, j.runDir, sp.Network.Allow); err != nil {
			return nil, err
		}
		conf := "nameserver " + j.net.Nameserver().String() + "\noptions timeout:2 attempts:2\n"
		if err := os.WriteFile(filepath.Join(j.runDir, "resolv.conf"), []byte(conf), 0o444); err != nil {
			return nil, err
		}
	}
	cfg, err := e.config(j, sp.Limits)
	if err != nil {
		return nil, err
	}
	if sp.InitLoadsFilter && e.filterProg != nil && im.img.Manifest.RunnerCan(FeatureSeccompFD) {
		cfg.Seccomp = nil
		j.filterByInit = true
	}
	if j.c, err = libcontainer.Create(e.stateDir, j.id, cfg); err != nil {
		return nil, fmt.Errorf("create jail: %w", err)
	}
	return j, nil
}

// ID is the jail's id (random, unique on this host).
func (j *Jail) ID() string { return j.id }

// Manifest is the verified manifest of the jail's image.
func (j *Jail) Manifest() *rootfs.Manifest { return j.image.img.Manifest }

// WorkDir is the host path of the jail's WorkspaceDir. Its contents are
// the jail's: open them only beneath it, without following links
// (package workspace).
func (j *Jail) WorkDir() string { return filepath.Join(j.runDir, "work") }

// MetaHostDir is the host path of the jail's MetaDir; the same care
// applies.
func (j *Jail) MetaHostDir() string { return filepath.Join(j.runDir, "meta") }

// FilesDir is the host's directory of the jail's tmpfs: its trees work
// (the jail's WorkspaceDir) and tmp (its /tmp), among others only the
// daemon's. Reach it only beneath, without following links.
func (j *Jail) FilesDir() string { return j.runDir }

// HostUID and HostGID are the host ids of UID and GID, for files the
// daemon writes into the jail.
func (j *Jail) HostUID() int { return int(j.idBase) + UID }

// HostGID: see HostUID.
func (j *Jail) HostGID() int { return int(j.idBase) + GID }

// Limits returns the jail's limits as it has them now.
func (j *Jail) Limits() Limits {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.limits
}

// Start starts the jail's first process, its pid 1; the jail lives until
// that process ends (Done). It can be called once.
func (j *Jail) Start(p Process) error {
	j.mu.Lock()
	if j.started {
		j.mu.Unlock()
		return fmt.Errorf("jail %s: started already", j.id)
	}
	j.started = true
	l := j.limits
	j.mu.Unlock()
	if j.filterByInit {
		// Fail closed: no process but the image's init, told where the
		// filter is, runs in a jail whose filter libcontainer does not load.
		if len(p.Args) == 0 || p.Args[0] != j.Manifest().Init {
			err := fmt.Errorf("jail %s: its filter is loaded by the image's init, not by %q", j.id, p.Args)
			j.exit = Exit{Code: -1, Err: err}
			close(j.done)
			return err
		}
		f, err := j.e.filterFile()
		if err != nil {
			j.exit = Exit{Code: -1, Err: err}
			close(j.done)
			return fmt.Errorf("start jail: %w", err)
		}
		defer f.Close()
		fd := 3 + len(p.ExtraFiles)
		p.ExtraFiles = append(slices.Clip(p.ExtraFiles), f)
		p.Args = append([]string{p.Args[0], "--seccomp-fd", strconv.Itoa(fd)}, p.Args[1:]...)
	}
	proc := p.process(l)
	proc.Init = true
	if err := j.c.Run(proc); err != nil {
		j.exit = Exit{Code: -1, Err: err}
		close(j.done)
		return fmt.Errorf("start jail: %w", err)
	}
	j.holdMountNamespace(proc)
	go func() {
		ps, err := proc.Wait()
		j.exit = exitOf(ps, err)
		close(j.done)
	}()
	state, err := j.c.State()
	if err != nil {
		return fmt.Errorf("jail state: %w", err)
	}
	j.mu.Lock()
	j.cgroups = state.CgroupPaths
	j.mu.Unlock()
	return nil
}

// holdMountNamespace opens the mount namespace of the jail's first
// process, which the daemon then holds until the teardown. Otherwise the
// last of the jail's processes to exit (its pid 1) tears the namespace
// down in its own exit, before its parent (the daemon) is told: every
// mount of the jail unmounted, an expedited RCU grace period waited for,
// the superblocks of its /proc, /dev and /dev/shm shut down (~0.4 ms
// measured, on the path of every run's result). Held, that work is the
// teardown's, done after the result is sent. The process is the daemon's
// child and not reaped yet, so its pid is its own; if it has exited
// already, nothing is held.
func (j *Jail) holdMountNamespace(proc *libcontainer.Process) {
	pid, err := proc.Pid()
	if err != nil {
		return
	}
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/mnt")
	if err != nil {
		return
	}
	j.mu.Lock()
	j.mntns = f
	j.mu.Unlock()
}

func ptr[T any](v T) *T { return &v }

// process is p in libcontainer's form, as UID:GID in WorkspaceDir with
// the rlimits of l.
func (p Process) process(l Limits) *libcontainer.Process {
	proc := &libcontainer.Process{
		Args:       p.Args,
		Env:        p.Env,
		UID:        UID,
		GID:        GID,
		Cwd:        cmp.Or(p.Cwd, WorkspaceDir),
		ExtraFiles: p.ExtraFiles,
		Rlimits:    rlimits(l),
	}
	// A nil *os.File in an io.Reader would not be a nil interface.
	if p.Stdin != nil {
		proc.Stdin = p.Stdin
	}
	if p.Stdout != nil {
		proc.Stdout = p.Stdout
	}
	if p.Stderr != nil {
		proc.Stderr = p.Stderr
	}
	return proc
}

func exitOf(ps *os.ProcessState, err error) Exit {
	if ps == nil {
		return Exit{Code: -1, Err: err}
	}
	x := Exit{Code: -1} // err is only "exit status N" now
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
		switch {
		case ws.Exited():
			x.Code = ws.ExitStatus()
		case ws.Signaled():
			x.Signal = int(ws.Signal())
		}
	}
	return x
}

// Done is closed when the first process has ended (or could not start).
func (j *Jail) Done() <-chan struct{} { return j.done }

// Exit is how the first process ended; valid once Done is closed.
func (j *Jail) Exit() Exit {
	<-j.done
	return j.exit
}

// Kill sends SIGKILL to the first process: the kernel then kills every
// process of the jail's pid namespace.
func (j *Jail) Kill() { _ = j.c.Signal(unix.SIGKILL) }

// Signal sends sig to the first process.
func (j *Jail) Signal(sig os.Signal) error { return j.c.Signal(sig) }

// Freeze stops every process of the jail (cgroup freezer); Thaw resumes
// them. Both are idempotent: a jail frozen already is frozen, one thawed
// by anyone (libcontainer thaws a cgroup v1 freezer it could not freeze)
// is thawed.
//
// They write the cgroup's freezer files themselves: libcontainer checks
// the container's state first and, when a freeze is not done at once,
// sleeps 10 ms between checks (a session's call paid that one time in ten
// here). libcontainer reads the freezer's state back whenever it needs it,
// so the two agree. A freeze that does not complete within freezeWait
// falls back to libcontainer's Pause, which thaws and tries again.
func (j *Jail) Freeze() error {
	j.mu.Lock()
	paths := j.cgroups
	j.mu.Unlock()
	if err := freezeCgroup(paths, true); err == nil {
		return nil
	}
	err := j.c.Pause()
	if err != nil {
		if st, serr := j.c.Status(); serr == nil && st == libcontainer.Paused {
			return nil
		}
	}
	return err
}

// Thaw: see Freeze.
func (j *Jail) Thaw() error {
	j.mu.Lock()
	paths := j.cgroups
	j.mu.Unlock()
	if err := freezeCgroup(paths, false); err == nil {
		return nil
	}
	if err := j.c.Resume(); err != nil && !errors.Is(err, libcontainer.ErrNotPaused) {
		return err
	}
	return nil
}

// freezeWait bounds a freeze by the freezer files.
const freezeWait = 100 * time.Millisecond

// freezeCgroup freezes or thaws the jail's cgroup through its freezer
// file and, for a freeze, waits until the kernel says it is frozen.
func freezeCgroup(paths map[string]string, freeze bool) error {
	file, on, off, done := "freezer.state", "FROZEN", "THAWED", func(b []byte) bool { return strings.TrimSpace(string(b)) == "FROZEN" }
	dir := paths["freezer"]
	if cgroups.IsCgroup2UnifiedMode() {
		file, on, off = "cgroup.freeze", "1", "0"
		dir = paths[""]
		done = func(b []byte) bool {
			for _, line := range strings.Split(string(b), "\n") {
				if line == "frozen 1" {
					return true
				}
			}
			return false
		}
	}
	if dir == "" {
		return errors.New("no freezer cgroup")
	}
	if !freeze {
		return cgroups.WriteFile(dir, file, off)
	}
	events := file
	if cgroups.IsCgroup2UnifiedMode() {
		events = "cgroup.events"
	}
	deadline := time.Now().Add(freezeWait)
	wait := 20 * time.Microsecond
	for i := 0; ; i++ {
		// Written again each time: on v1 that moves a FREEZING cgroup on.
		if err := cgroups.WriteFile(dir, file, on); err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(dir, events))
		if err != nil {
			return err
		}
		if done(b) {
			return nil
		}
		if time.Now().After(deadline) {
			_ = cgroups.WriteFile(dir, file, off)
			return errors.New("the cgroup did not freeze in time")
		}
		// A few checks at once (a freeze usually completes within
		// microseconds), then sleeps that grow.
		if i >= 16 {
			time.Sleep(wait)
			wait = min(2*wait, 2*time.Millisecond)
		}
	}
}

// KillAll waits until the jail's cgroup holds no process, killing any that
// remain (stragglers of a pid 1 that ended), for at most a few seconds
// (Destroy is the backstop). Call it after Done.
func (j *Jail) KillAll() {
	j.mu.Lock()
	paths := j.cgroups
	j.mu.Unlock()
	// One hierarchy's list is enough: a jail cannot make cgroups of its
	// own. Exec's groups are beneath it.
	procs, killDir := paths["pids"], ""
	if cgroups.IsCgroup2UnifiedMode() {
		procs, killDir = paths[""], paths[""]
	}
	if procs == "" {
		return
	}
	j.e.waitEmptyIn(j.id, killDir, func() ([]int, error) { return cgroups.GetAllPids(procs) })
}

// Stats are a jail's resource counters.
type Stats struct {
	CPU time.Duration // CPU time of every process, ever
	// PeakMemoryBytes is the cgroup's peak since the jail started, or
	// since Resize where the kernel can reset it.
	PeakMemoryBytes uint64
	OOMKills        uint64 // processes the OOM killer ended in the jail
}

// Stats reads the jail's counters straight from its cgroup files (cheaper
// than libcontainer's Stats, and the OOM count is not in that).
func (j *Jail) Stats() Stats {
	j.mu.Lock()
	defer j.mu.Unlock()
	st := readCgroupStats(j.cgroups)
	if j.peak != nil {
		if v, ok := readPeak(j.peak); ok {
			st.PeakMemoryBytes = v
		}
	}
	return st
}

// AnonMemoryBytes is the jail's anonymous memory now (not file pages,
// which are shared and reclaimable); 0 before Start.
func (j *Jail) AnonMemoryBytes() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return anonMemory(j.cgroups)
}

// NetworkUsage is the jail's traffic; nil without egress.
func (j *Jail) NetworkUsage() *egress.Usage {
	if j.net == nil {
		return nil
	}
	u := j.net.Usage()
	return &u
}

// Resize gives a started jail new cgroup memory and pids limits and a new
// tmpfs size, and starts its peak-memory counter afresh. The rlimits of
// its processes stay as they were created: lower them from inside.
func (j *Jail) Resize(l Limits) (err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	v2 := cgroups.IsCgroup2UnifiedMode()
	// What the jail has already is not written again (a warm jail made
	// with the default limits serving a request with the same: ~0.15 ms
	// of the request's path); the peak is reset either way. After a
	// failed Resize, what the jail has is unknown: all is written.
	sameCgroup := !j.resizeFailed && l.MemoryBytes == j.limits.MemoryBytes && l.Pids == j.limits.Pids
	sameTmpfs := !j.resizeFailed && l.WorkspaceBytes == j.limits.WorkspaceBytes && l.WorkspaceInodes == j.limits.WorkspaceInodes
	defer func() { j.resizeFailed = err != nil }()
	if len(j.cgroups) == 0 {
		return fmt.Errorf("jail %s: no cgroup to resize (not started)", j.id)
	}
	// Straight to the two controllers: the container's Set would rewrite
	// every controller and its state file (~0.5 ms).
	r := &cgroups.Resources{Memory: l.MemoryBytes, MemorySwap: l.MemoryBytes, PidsLimit: &l.Pids, SkipDevices: true}
	if v2 {
		if !sameCgroup {
			m, err := fs2.NewManager(&cgroups.Cgroup{Resources: r}, j.cgroups[""])
			if err == nil {
				err = m.Set(r)
			}
			if err != nil {
				return fmt.Errorf("set cgroup limits: %w", err)
			}
		}
		if j.peak != nil {
			j.peak.Close()
		}
		j.peak = resetPeak(j.cgroups[""])
	} else {
		if !sameCgroup {
			if err := (&fs.MemoryGroup{}).Set(j.cgroups["memory"], r); err != nil {
				return fmt.Errorf("set cgroup memory limit: %w", err)
			}
			if err := (&fs.PidsGroup{}).Set(j.cgroups["pids"], r); err != nil {
				return fmt.Errorf("set cgroup pids limit: %w", err)
			}
		}
		_ = cgroups.WriteFile(j.cgroups["memory"], "memory.max_usage_in_bytes", "0")
	}
	if l.CPUCores != j.limits.CPUCores || j.resizeFailed {
		if err := setCPUQuota(j.cgroups, l.CPUCores); err != nil {
			return fmt.Errorf("set cgroup cpu quota: %w", err)
		}
	}
	if d := l.WorkspaceBytes - j.tmpfsCharged; d > 0 {
		j.e.chargeTmpfs(d) // up before it can be filled
		j.tmpfsCharged += d
	}
	if !sameTmpfs {
		opts := fmt.Sprintf("size=%d,nr_inodes=%d", l.WorkspaceBytes, l.WorkspaceInodes)
		if err := unix.Mount("", j.runDir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
			return &os.PathError{Op: "remount workspace", Path: j.runDir, Err: err}
		}
	}
	if d := j.tmpfsCharged - l.WorkspaceBytes; d > 0 {
		j.e.chargeTmpfs(-d) // down once it is smaller
		j.tmpfsCharged -= d
	}
	j.limits = l
	return nil
}

// ResetPeak starts the jail's peak-memory counter afresh, where the kernel
// can (cgroup v1; v2 from Linux 6.12): a session's calls each report their
// own peak.
func (j *Jail) ResetPeak() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if cgroups.IsCgroup2UnifiedMode() {
		if j.peak != nil {
			j.peak.Close()
		}
		j.peak = resetPeak(j.cgroups[""])
		return
	}
	_ = cgroups.WriteFile(j.cgroups["memory"], "memory.max_usage_in_bytes", "0")
}

// Destroy kills whatever is left of the jail and removes its cgroup,
// state, mounts, network and run directory, then frees its host id range:
// only once every process of the jail is gone can another jail have those
// ids. It returns after teardownTimeout at the latest; a teardown still
// going on then keeps the range until it ends. Calls after the first do
// nothing.
func (j *Jail) Destroy() {
	j.destroyed.Do(func() {
		defer j.e.live.Done()
		defer j.e.alive.Add(-1)
		done := make(chan bool, 1)
		go func() { done <- j.teardown() }()
		timer := time.NewTimer(teardownTimeout)
		defer timer.Stop()
		select {
		case free := <-done:
			j.e.releaseImage(j.image)
			if free {
				j.e.slots.put(j.slot)
			} else {
				j.e.teardownFailures.Add(1)
			}
		case <-timer.C:
			j.e.teardownFailures.Add(1)
			j.e.log.Error("jail teardown exceeded its deadline; its host id range stays out of use until it ends", "id", j.id, "slot", j.slot, "deadline", teardownTimeout)
			go func() {
				free := <-done
				j.e.releaseImage(j.image)
				if free {
					j.e.slots.put(j.slot)
					j.e.log.Info("late jail teardown ended", "id", j.id, "slot", j.slot)
				}
			}()
		}
	})
}

// teardown reports whether the jail's host id range is free again.
func (j *Jail) teardown() bool {
	j.mu.Lock()
	if j.peak != nil {
		j.peak.Close()
		j.peak = nil
	}
	j.mu.Unlock()
	free := true
	if j.c != nil {
		// A frozen jail (a session between calls) cannot be destroyed:
		// libcontainer refuses a paused container whose first process
		// lives. A jail whose first process still runs (a session, a warm
		// jail) is thawed and killed until that process is seen to end: a
		// freeze racing the teardown (a session's call ending as it is
		// deleted) would leave SIGKILLed tasks frozen for good on cgroup
		// v1. Thaw does nothing to a jail that is not frozen.
		j.mu.Lock()
		started, paths := j.started, j.cgroups
		j.mu.Unlock()
		for started {
			select {
			case <-j.done:
				started = false
				continue
			default:
			}
			_ = j.Thaw()
			j.Kill()
			select {
			case <-j.done:
				started = false
			case <-time.After(50 * time.Millisecond):
			}
		}
		if len(paths) > 0 {
			_ = freezeCgroup(paths, false) // what is left must be able to die
		}
		// The jail's mounts go now (holdMountNamespace); not under j.mu,
		// as the close tears them down.
		j.mu.Lock()
		mntns := j.mntns
		j.mntns = nil
		j.mu.Unlock()
		if mntns != nil {
			mntns.Close()
		}
		if err := j.c.Destroy(); err != nil {
			j.e.log.Error("destroy jail; its host id range stays in use", "id", j.id, "slot", j.slot, "err", err)
			free = false
		}
	}
	if j.net != nil {
		j.net.Close()
	}
	j.e.removeRunDir(j.runDir)
	j.mu.Lock()
	charged := j.tmpfsCharged
	j.tmpfsCharged = 0
	j.mu.Unlock()
	j.e.chargeTmpfs(-charged)
	return free
}

// makeRunDir mounts the jail's tmpfs (the size and inode limits of the
// workspace, /tmp and MetaDir together), lays out its directories, all
// owned by the jail's user, and mounts the jail's root.
func (e *Engine) makeRunDir(j *Jail) (retErr error) {
	dir, l := j.runDir, j.limits
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			e.removeRunDir(dir)
		}
	}()
	uid, gid := j.HostUID(), j.HostGID()
	opts := fmt.Sprintf("size=%d,nr_inodes=%d,mode=0700,uid=%d,gid=%d", l.WorkspaceBytes, l.WorkspaceInodes, uid, gid)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return &os.PathError{Op: "mount tmpfs", Path: dir, Err: err}
	}
	e.chargeTmpfs(l.WorkspaceBytes)
	defer func() {
		if retErr != nil {
			e.chargeTmpfs(-l.WorkspaceBytes)
		}
	}()
	j.tmpfsCharged = l.WorkspaceBytes
	for _, d := range []struct {
		name string
		mode os.FileMode
	}{{"work", 0o755}, {"tmp", 0o1777}, {"meta", 0o755}} {
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
	return e.mountRoot(dir, j.image.img.Root)
}

// mountRoot mounts the jail's root at dir/root: a read-only overlay of the
// image, so that every jail has its own superblock and inodes. Concurrent
// jails then share the image's page cache but no inode state: a flock,
// POSIX or lease lock, or a dnotify watch on an image file is seen only in
// the jail that made it (with one shared squashfs mount, such state was a
// channel between runs). Read-only overlayfs needs two lower layers; the
// second is an empty directory. The layers are named relative to RunDir
// because the jail's /proc/self/mountinfo shows them as given: no host
// path or jail id.
func (e *Engine) mountRoot(dir, imageRoot string) error {
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o555); err != nil {
		return err
	}
	image, err := filepath.Rel(e.cfg.RunDir, imageRoot)
	if err != nil || strings.Contains(image, ":") || strings.HasPrefix(image, "..") {
		return fmt.Errorf("image mount %s is not a plain path below %s", imageRoot, e.cfg.RunDir)
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

// waitEmpty waits until pids lists no process of the jail, killing any
// that remain, for at most a few seconds (Destroy is the backstop).
func (e *Engine) waitEmpty(id string, pids func() ([]int, error)) {
	e.waitEmptyIn(id, "", pids)
}

// waitEmptyIn is waitEmpty for the jail whose cgroup v2 directory is dir
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
