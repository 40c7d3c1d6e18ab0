package jail

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jaild/jaild/internal/egress"
	"github.com/jaild/jaild/internal/errdefs"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/rootfs"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/seccomp"
)

// Config configures an Engine. Zero values are invalid unless noted.
type Config struct {
	// ImageDir holds rootfs.squashfs and manifest.json (rootfs/build.sh).
	ImageDir string
	// SeccompProfile is an OCI seccomp JSON file (seccomp-profiles/).
	SeccompProfile string
	// RunDir is the engine's private state directory (e.g. /run/jaild):
	// libcontainer state, per-run directories and the rootfs mountpoint.
	// Two engines must not share one.
	RunDir string
	// CgroupName names the directory, beneath the process's own cgroup,
	// that holds one cgroup per run (e.g. "jails"). Two engines must not
	// share one.
	CgroupName string
	// HostIDBase is the first host uid/gid of the jails' ids: each live
	// jail has its own 65536 (0 in the jail is HostIDBase + slot*65536 on
	// the host, slot < MaxJails). It must be non-zero so that host root is
	// never mapped.
	HostIDBase uint32
	// Logger receives diagnostics (host paths and syscall details that
	// callers never see). nil means slog.Default().
	Logger *slog.Logger
	// Network gives runs that ask for it egress; nil: no run has it. Its
	// MaxSlots must be at least MaxJails. The engine does not close it.
	Network *egress.Manager
	// FavorDynmods sets the host's cgroup option favordynmods at start
	// (see favorDynmods): a jail starts ~10 ms sooner. Failing to set it
	// is logged, not fatal.
	FavorDynmods bool
	// CRIU is the criu program jails are checkpointed and restored with
	// (checkpoint.go); "" means no checkpoints (ErrCheckpointsOff).
	CRIU string
	// CheckpointKey signs checkpoints (HMAC-SHA256): a restore refuses
	// one this key did not sign. At least 32 bytes when CRIU is set.
	CheckpointKey []byte
	// CRIUWrapperDir holds the wrapper of criu that libcontainer runs
	// (checkpoint.go): a directory of the daemon's only, on a file system
	// that allows executing (systemd mounts /run noexec); "" is
	// RunDir/criu.
	CRIUWrapperDir string
}

// emptyDir, in RunDir, is the empty second layer of every jail's root.
const emptyDir = "empty"

// idMapSize is how many host ids each jail's user namespace maps.
const idMapSize = 65536

// Validate checks the configuration before anything is created.
func (c *Config) Validate() error {
	var errs []error
	need := func(name, v string) {
		if v == "" || !filepath.IsAbs(v) {
			errs = append(errs, fmt.Errorf("jail config: %s must be an absolute path, got %q", name, v))
		}
	}
	need("ImageDir", c.ImageDir)
	need("SeccompProfile", c.SeccompProfile)
	need("RunDir", c.RunDir)
	if c.CgroupName == "" || strings.ContainsAny(c.CgroupName, "/.") {
		errs = append(errs, fmt.Errorf("jail config: CgroupName %q must be a plain name", c.CgroupName))
	}
	if c.HostIDBase == 0 || uint64(c.HostIDBase)+MaxJails*idMapSize > 1<<32-1 {
		errs = append(errs, fmt.Errorf("jail config: HostIDBase %d must be in 1..%d", c.HostIDBase, uint64(1<<32-1-MaxJails*idMapSize)))
	}
	return errors.Join(errs...)
}

// Engine creates jails. It is safe for concurrent use.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	seccomp *specs.LinuxSeccomp
	// filterProg is the program libcontainer loads for seccomp, read
	// back once (filterfd.go); nil: every jail's init compiles it.
	filterProg []byte
	stateDir   string // libcontainer's root
	runsDir    string // one directory (a tmpfs mountpoint) per run
	v2Base     string // cgroup v2: absolute parent of CgroupName; "" on v1
	slots      slots

	// Counts for the daemon's metrics (JailCounts).
	alive            atomic.Int64  // jails created and not destroyed yet
	teardownFailures atomic.Uint64 // teardowns that failed or overran their deadline
	swept            atomic.Uint64 // jails of a predecessor removed by the start-up sweep
	egressRefused    atomic.Uint64 // the last value read from Network.Refused

	// The images jails can use, by name (images.go); the default one is
	// Config.ImageDir's, named by its manifest.
	defaultImage string

	mu              sync.Mutex
	defaultManifest *rootfs.Manifest
	closed          bool
	images          map[string]*image
	imageSeq        int            // names the mountpoints of added images
	live            sync.WaitGroup // jails created and not destroyed yet
	dynmods         string         // the cgroup hierarchy whose favordynmods this engine set
	criu            *criuSetup     // nil: no checkpoints
	criuErr         error          // why not, when CRIU was configured

	// The daemon's memory.high (LimitDaemonMemory): its own allowance
	// plus the tmpfs size of every live jail. Files the daemon writes into
	// a jail's workspace are charged to the daemon's cgroup (the writer's),
	// and tmpfs pages cannot be reclaimed without swap: a fixed high would
	// throttle the daemon for what sessions keep in their workspaces.
	highMu   sync.Mutex
	highDir  string // the daemon's leaf cgroup; "" when none is limited
	highBase int64
	tmpfs    int64 // the tmpfs sizes of live jails
}

// New validates cfg, sweeps whatever a crashed predecessor with the same
// RunDir and CgroupName left behind, loads and checks the seccomp profile,
// and verifies and mounts the rootfs image. It fails closed: without a
// valid profile (or a build without seccomp support) or a valid image there
// is no engine.
func New(cfg Config) (_ *Engine, retErr error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		log:      cfg.Logger,
		stateDir: filepath.Join(cfg.RunDir, "state"),
		runsDir:  filepath.Join(cfg.RunDir, "runs"),
		slots:    slots{dir: HostIDLockDir, base: cfg.HostIDBase},
	}
	e.slots.foreign = func(id uint64) {
		e.log.Warn("another jaild on this host uses host ids of this daemon's range (its jails' ids are skipped); give each daemon its own host_id_base, 67108864 apart", "host_id", id, "host_id_base", cfg.HostIDBase)
	}
	if err := os.MkdirAll(HostIDLockDir, 0o700); err != nil {
		return nil, fmt.Errorf("host id locks: %w", err)
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if err := checkCgroups(); err != nil {
		return nil, err
	}
	prof, err := seccomp.Load(cfg.SeccompProfile)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	e.seccomp = prof
	if lc, err := specconv.SetupSeccomp(prof); err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	} else if e.filterProg, err = filterProgram(lc); err != nil {
		e.log.Warn("seccomp filter not compiled ahead; each jail's init compiles it", "err", err)
	}
	// A jail's init runs as an unprivileged host uid, so every directory on
	// the way to the rootfs and the run directories must be searchable
	// (but need not be listable) by others.
	for dir := filepath.Dir(filepath.Clean(cfg.RunDir)); ; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return nil, fmt.Errorf("jail config: RunDir %s: %s (mode %04o) is not searchable by other users; jails start as an unprivileged uid and must reach it", cfg.RunDir, dir, fi.Mode().Perm())
		}
		if dir == "/" {
			break
		}
	}
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{cfg.RunDir, 0o711}, {e.stateDir, 0o700}, {e.runsDir, 0o711}, {filepath.Join(cfg.RunDir, emptyDir), 0o555}} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return nil, err
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return nil, err
		}
	}
	if err := e.setupCRIU(); err != nil {
		return nil, err
	}
	if cgroups.IsCgroup2UnifiedMode() {
		if e.v2Base, err = prepareCgroupV2(); err != nil {
			return nil, err
		}
	}
	if cfg.FavorDynmods {
		switch where, err := favorDynmods(); {
		case err != nil:
			e.log.Warn("cannot set cgroup favordynmods; every jail's start waits for an RCU grace period", "err", err)
		case where != "":
			e.dynmods = where
			defer func() {
				if retErr != nil {
					e.restoreDynmods()
				}
			}()
			e.log.Info("set cgroup favordynmods: moving a jail's first process into its cgroups no longer waits for an RCU grace period", "hierarchy", where)
		}
	}
	if err := e.sweep(); err != nil {
		return nil, err
	}
	mnt := filepath.Join(cfg.RunDir, "rootfs")
	_ = unix.Unmount(mnt, unix.MNT_DETACH) // a predecessor's mount, if any
	if err := e.sweepImages(); err != nil {
		return nil, err
	}
	img, err := rootfs.Open(cfg.ImageDir, mnt)
	if err != nil {
		return nil, err
	}
	e.defaultImage, e.defaultManifest = img.Manifest.Name, img.Manifest
	e.images = map[string]*image{e.defaultImage: {name: e.defaultImage, img: img}}
	return e, nil
}

// Manifest returns the verified manifest of the engine's default image
// (the latest, when AddImage replaced it).
func (e *Engine) Manifest() *rootfs.Manifest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.defaultManifest
}

// Seccomp returns the loaded seccomp profile; callers must not modify it.
func (e *Engine) Seccomp() *specs.LinuxSeccomp { return e.seccomp }

// CgroupMode names the cgroup hierarchy in use: "v2" or "v1".
func (e *Engine) CgroupMode() string { return CgroupMode() }

// CgroupMode names the host's cgroup hierarchy: "v2" or "v1".
func CgroupMode() string {
	if cgroups.IsCgroup2UnifiedMode() {
		return "v2"
	}
	return "v1"
}

// Close refuses new jails (Create fails with ErrClosed), waits until every
// jail is destroyed (its owner must Destroy it), then removes the engine's
// cgroups and unmounts the rootfs.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.live.Wait()
	for _, p := range e.cgroupParents() {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			e.log.Warn("remove cgroup parent", "path", p, "err", err)
		}
	}
	e.restoreDynmods()
	e.mu.Lock()
	var errs []error
	list := make([]*image, 0, len(e.images))
	for name, im := range e.images {
		list = append(list, im)
		delete(e.images, name)
	}
	e.mu.Unlock()
	for _, im := range list {
		if err := e.closeImage(im); err != nil { // the mountpoint of an added image goes too
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// restoreDynmods clears favordynmods if this engine set it: a stopped
// daemon leaves the host's cgroup options as it found them.
func (e *Engine) restoreDynmods() {
	if e.dynmods == "" {
		return
	}
	if err := restoreDynmods(); err != nil {
		e.log.Warn("cannot clear cgroup favordynmods again", "hierarchy", e.dynmods, "err", err)
		return
	}
	e.log.Info("cleared cgroup favordynmods again", "hierarchy", e.dynmods)
	e.dynmods = ""
}

// ErrClosed is returned by Create after Close (class errdefs.ErrUnavailable).
var ErrClosed = errdefs.New(errdefs.ErrUnavailable, "the daemon is shutting down")

// cgroupPath is the libcontainer cgroup path of run id. On v1 a relative
// path nests under the process's own cgroup in every hierarchy; on v2 the
// path is absolute beneath the cgroup this process was started in.
func (e *Engine) cgroupPath(id string) string {
	if e.v2Base != "" {
		return filepath.Join(e.v2Base, e.cfg.CgroupName, id)
	}
	return filepath.Join(e.cfg.CgroupName, id)
}

// JailCounts are the engine's counts for the daemon's metrics.
type JailCounts = spec.JailCounts

// JailCounts returns the engine's counts.
func (e *Engine) JailCounts() JailCounts {
	c := JailCounts{Alive: e.alive.Load(), TeardownFailures: e.teardownFailures.Load(), Swept: e.swept.Load()}
	if e.cfg.Network != nil {
		// A counter never goes back: a failed read reports the last value.
		if n, err := e.cfg.Network.Refused(); err == nil {
			for last := e.egressRefused.Load(); n > last && !e.egressRefused.CompareAndSwap(last, n); last = e.egressRefused.Load() {
			}
		}
		c.EgressRefused = e.egressRefused.Load()
	}
	return c
}

// LimitDaemonMemory sets memory.high of the daemon's own leaf cgroup
// ("supervisor", cgroup v2 only) to high bytes plus the tmpfs size of
// every live jail (the workspace files the daemon writes there are charged
// to it), kept up to date as jails come and go: past it the kernel
// reclaims and throttles the daemon rather than kill it. It returns the
// cgroup it set, "" where there is none (v1, or the hierarchy's root).
func (e *Engine) LimitDaemonMemory(high int64) (string, error) {
	if e.v2Base == "" || high <= 0 {
		return "", nil
	}
	own, err := cgroups.ParseCgroupFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	leaf, err := viewPath(own[""])
	if err != nil || filepath.Base(leaf) != "supervisor" {
		return "", err
	}
	dir := filepath.Join("/sys/fs/cgroup", leaf)
	// The leaf has memory.high once its parent (the daemon's delegated
	// cgroup, which holds no process since prepareCgroupV2) enables the
	// memory controller for its children; jails need it there anyway.
	if err := cgroups.WriteFile(filepath.Dir(dir), "cgroup.subtree_control", "+memory"); err != nil {
		return "", fmt.Errorf("enable the memory controller for the daemon's leaf: %w", err)
	}
	e.highMu.Lock()
	defer e.highMu.Unlock()
	if err := cgroups.WriteFile(dir, "memory.high", strconv.FormatInt(high+e.tmpfs, 10)); err != nil {
		return "", err
	}
	e.highDir, e.highBase = dir, high
	return leaf, nil
}

// chargeTmpfs adds delta to the tmpfs size of live jails and moves the
// daemon's memory.high with it: up before a jail's tmpfs can be written,
// down once it is unmounted.
func (e *Engine) chargeTmpfs(delta int64) {
	e.highMu.Lock()
	defer e.highMu.Unlock()
	e.tmpfs += delta
	if e.highDir == "" {
		return
	}
	if err := cgroups.WriteFile(e.highDir, "memory.high", strconv.FormatInt(e.highBase+e.tmpfs, 10)); err != nil {
		e.log.Warn("update the daemon's memory.high", "err", err)
	}
}

// DaemonMemoryHigh reports the daemon's memory.high as last set (0: not
// set) and the tmpfs bytes of live jails counted in it.
func (e *Engine) DaemonMemoryHigh() (high, tmpfs int64) {
	e.highMu.Lock()
	defer e.highMu.Unlock()
	if e.highDir == "" {
		return 0, e.tmpfs
	}
	return e.highBase + e.tmpfs, e.tmpfs
}

// prepareCgroupV2 makes the process's own cgroup usable as a parent of
// jail cgroups. cgroup v2 forbids enabling controllers for children of a
// cgroup that has processes, so the daemon moves itself into a leaf
// "supervisor" child (as systemd's Delegate=yes expects) and returns its
// original cgroup, beneath which jail cgroups are created.
func prepareCgroupV2() (string, error) {
	own, err := cgroups.ParseCgroupFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	base := own[""]
	if base == "" {
		return "", errors.New("cgroup v2: no unified entry in /proc/self/cgroup")
	}
	if base, err = viewPath(base); err != nil {
		return "", err
	}
	if filepath.Base(base) == "supervisor" {
		// Moved already (an engine was created before in this process).
		return filepath.Dir(base), nil
	}
	if base == "/" && cgroupView == "" {
		// The hierarchy's real root, which may hold processes and
		// children both.
		return base, nil
	}
	sup := filepath.Join("/sys/fs/cgroup", base, "supervisor")
	if err := os.Mkdir(sup, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("cgroup v2: %w", err)
	}
	pids, err := cgroups.GetPids(filepath.Join("/sys/fs/cgroup", base))
	if err != nil {
		return "", fmt.Errorf("cgroup v2: %w", err)
	}
	for _, pid := range pids {
		if err := cgroups.WriteCgroupProc(sup, pid); err != nil && !errors.Is(err, unix.ESRCH) {
			return "", fmt.Errorf("cgroup v2: move pid %d to %s: %w", pid, sup, err)
		}
	}
	return base, nil
}

// sweep destroys every jail, cgroup and run directory a predecessor with
// the same RunDir and CgroupName left behind. It fails when a
// predecessor's processes outlive it: their jails' host id ranges (which
// a new daemon hands out again from the first) could then be shared.
func (e *Engine) sweep() error {
	ents, _ := os.ReadDir(e.stateDir)
	for _, ent := range ents {
		if c, err := libcontainer.Load(e.stateDir, ent.Name()); err == nil {
			_ = c.Signal(unix.SIGKILL)
			e.waitEmpty(ent.Name(), c.Processes)
			if err := c.Destroy(); err != nil {
				e.log.Warn("sweep: destroy jail", "id", ent.Name(), "err", err)
			}
			e.log.Info("sweep: destroyed a jail left by a predecessor", "id", ent.Name())
			e.swept.Add(1)
		}
		_ = os.RemoveAll(filepath.Join(e.stateDir, ent.Name()))
	}
	var alive []string
	for _, id := range e.leftoverCgroups() {
		if !e.destroyCgroup(id) {
			alive = append(alive, id)
		}
	}
	ents, _ = os.ReadDir(e.runsDir)
	for _, ent := range ents {
		e.removeRunDir(filepath.Join(e.runsDir, ent.Name()))
		e.log.Info("sweep: removed leftover run directory", "id", ent.Name())
	}
	if len(alive) > 0 {
		return fmt.Errorf("the jails %s left by a previous jaild still have processes that cannot be killed; refusing to start rather than share their host id ranges", strings.Join(alive, ", "))
	}
	return nil
}

// cgroupParents lists the directories, one per hierarchy, that hold the
// engine's run cgroups.
func (e *Engine) cgroupParents() []string {
	if e.v2Base != "" {
		return []string{filepath.Join("/sys/fs/cgroup", e.v2Base, e.cfg.CgroupName)}
	}
	var parents []string
	mounts, _ := cgroups.GetCgroupMounts(false)
	for _, m := range mounts {
		for _, ss := range m.Subsystems {
			// Named hierarchies (name=systemd) are listed without their
			// prefix, but looked up with it.
			p, err := cgroups.GetOwnCgroupPath(ss)
			if err != nil {
				p, err = cgroups.GetOwnCgroupPath(cgroups.CgroupNamePrefix + ss)
			}
			if err == nil {
				parents = append(parents, filepath.Join(p, e.cfg.CgroupName))
				break
			}
		}
	}
	// The hybrid layout's unified hierarchy (hugetlb only here) gets a
	// directory too.
	if cgroups.IsCgroup2HybridMode() {
		own, _ := cgroups.ParseCgroupFile("/proc/self/cgroup")
		parents = append(parents, filepath.Join("/sys/fs/cgroup/unified", own[""], e.cfg.CgroupName))
	}
	return parents
}

// leftoverCgroups lists run cgroups found in any hierarchy.
func (e *Engine) leftoverCgroups() []string {
	seen := map[string]bool{}
	var ids []string
	for _, p := range e.cgroupParents() {
		ents, _ := os.ReadDir(p)
		for _, ent := range ents {
			if ent.IsDir() && !seen[ent.Name()] {
				seen[ent.Name()] = true
				ids = append(ids, ent.Name())
			}
		}
	}
	return ids
}

// destroyCgroup kills every process in run id's cgroup and removes it. It
// reports false when processes are still in it after a few seconds (an
// empty cgroup that cannot be removed is harmless: ids are never reused).
func (e *Engine) destroyCgroup(id string) bool {
	m, err := manager.New(&cgroups.Cgroup{Path: e.cgroupPath(id), Resources: &cgroups.Resources{}})
	if err != nil {
		e.log.Warn("sweep: cgroup manager", "id", id, "err", err)
		return false
	}
	empty := false
	for attempt := 0; attempt < 250; attempt++ {
		pids, _ := m.GetAllPids()
		if len(pids) == 0 {
			empty = true
			break
		}
		// cgroup v2 kills the whole cgroup at once (Linux 5.14+).
		if e.v2Base != "" && cgroups.WriteFile(m.Path(""), "cgroup.kill", "1") == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !empty {
		return false
	}
	if err := m.Destroy(); err != nil {
		e.log.Warn("sweep: remove cgroup", "id", id, "err", err)
	}
	return true
}

// removeRunDir unmounts a run's tmpfs and removes its mountpoint.
func (e *Engine) removeRunDir(dir string) {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		e.log.Warn("unmount run directory", "dir", dir, "err", err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		e.log.Warn("remove run directory", "dir", dir, "err", err)
	}
}

// Leftovers lists what the engine's jails left behind: libcontainer state,
// run directories, cgroups and mounts. It is empty when every jail was
// destroyed completely; the tests' leak checks and a start-up sweep's
// result use it.
func (e *Engine) Leftovers() []string {
	var out []string
	for _, dir := range []string{e.stateDir, e.runsDir} {
		ents, _ := os.ReadDir(dir)
		for _, ent := range ents {
			out = append(out, filepath.Join(dir, ent.Name()))
		}
	}
	for _, id := range e.leftoverCgroups() {
		out = append(out, "cgroup "+id)
	}
	if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, line := range strings.Split(string(mi), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], e.runsDir+"/") {
				out = append(out, "mount "+f[4])
			}
		}
	}
	return out
}

// HostIDBase is the first host id of the jails' ranges (Config.HostIDBase).
func (e *Engine) HostIDBase() uint32 { return e.cfg.HostIDBase }

// checkCgroups fails closed without the cgroups jails need: a cgroup v2
// hierarchy at /sys/fs/cgroup, or cgroup v1 hierarchies of the memory and
// pids controllers (a daemon started where none is mounted, such as under
// `ip netns exec`, which mounts a fresh /sys, would otherwise say it is
// ready and fail every run).
func checkCgroups() error {
	if cgroups.IsCgroup2UnifiedMode() {
		return nil
	}
	for _, ss := range []string{"memory", "pids"} {
		if _, err := cgroups.FindCgroupMountpoint("", ss); err != nil {
			return fmt.Errorf("no cgroup hierarchy for jails: neither cgroup v2 at /sys/fs/cgroup nor a cgroup v1 %s hierarchy is mounted (jails need the memory and pids controllers; is /sys/fs/cgroup mounted in this mount namespace?)", ss)
		}
	}
	return nil
}
