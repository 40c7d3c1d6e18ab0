package jail

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// PoolConfig configures the warm pool: jails created ahead of requests,
// each still single-use. A warm jail is the same jail as a cold one (same
// namespaces, filter, mounts, limits); it only started earlier, and its
// runner imported Preimport before any user code existed. When a request
// takes it, the engine sets the request's cgroup limits and workspace size
// and writes its files, and the runner lowers its rlimits to the request's
// before the code runs. A request a warm jail cannot honour uses a cold one.
type PoolConfig struct {
	// Size is how many warm jails to keep ready; 0 disables the pool.
	Size int
	// Preimport are modules the runner imports while it waits.
	Preimport []string
	// Limits are what warm jails are created with: the most a request can
	// ask for and still be served warm (usually the callers' maxima).
	Limits Limits
	// MinAvailableBytes: below this much MemAvailable the pool stops
	// refilling and drops its idle jails. 0 means 10% of MemTotal.
	MinAvailableBytes uint64
}

// PoolStats describes the pool for /v1/info.
type PoolStats struct {
	Size      int
	Ready     int
	Preimport []string
	Paused    bool // under memory pressure
}

type pool struct {
	e     *Engine
	cfg   PoolConfig
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	ready []*box
	pause bool
}

func newPool(e *Engine, cfg PoolConfig) *pool {
	pl := &pool{e: e, cfg: cfg, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if cfg.Size > 0 {
		go pl.loop()
	} else {
		close(pl.done)
	}
	return pl
}

// take returns a ready warm jail that can serve req, or nil. Warm jails
// have loopback only: a run with egress gets a jail made for it.
func (pl *pool) take(req *Request) (*box, bool) {
	if pl == nil || pl.cfg.Size == 0 || req.Command != nil || req.Network != nil || !fitsUnder(req.Limits, pl.cfg.Limits) {
		return nil, false
	}
	for k := range req.Env {
		if strings.HasPrefix(k, "PYTHON") { // read at interpreter start only
			return nil, false
		}
	}
	defer pl.kick()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for len(pl.ready) > 0 {
		b := pl.ready[0]
		pl.ready = pl.ready[1:]
		select {
		case <-b.exited: // died while waiting (e.g. a failed pre-import)
			pl.e.teardowns.Go(func() { pl.e.destroy(b) })
			continue
		default:
		}
		return b, true
	}
	return nil, false
}

func (pl *pool) kick() {
	select {
	case pl.wake <- struct{}{}:
	default:
	}
}

func (pl *pool) stats() PoolStats {
	if pl == nil {
		return PoolStats{}
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return PoolStats{Size: pl.cfg.Size, Ready: len(pl.ready), Preimport: pl.cfg.Preimport, Paused: pl.pause}
}

// loop keeps Size jails ready, one creation at a time, pausing and
// dropping idle jails under memory pressure.
func (pl *pool) loop() {
	defer close(pl.done)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		pressure := pl.memoryPressure()
		pl.mu.Lock()
		pl.pause = pressure
		var drop []*box
		if pressure {
			drop, pl.ready = pl.ready, nil
		}
		need := pl.cfg.Size - len(pl.ready)
		pl.mu.Unlock()
		for _, b := range drop {
			pl.e.destroy(b)
		}
		if !pressure && need > 0 {
			b, err := pl.e.create(pl.cfg.Limits, nil, nil, nil, pl.cfg.Preimport, nil)
			if err == nil && len(pl.cfg.Preimport) > 0 { // the runner says ready after importing
				if err = awaitReady(b); err != nil {
					pl.e.destroy(b)
				}
			}
			if err != nil {
				pl.e.log.Error("warm pool: create jail", "err", err)
			} else {
				pl.mu.Lock()
				pl.ready = append(pl.ready, b)
				pl.mu.Unlock()
				continue // more may be needed
			}
		}
		select {
		case <-pl.stop:
			return
		case <-pl.wake:
		case <-tick.C:
		}
	}
}

// readyTimeout bounds how long a warm jail's runner may take to import
// its modules.
const readyTimeout = 2 * time.Minute

// awaitReady waits for the runner's {"type":"ready"} record: only a jail
// whose pre-imports are done is ready (its memory use is then known, and a
// request's lower memory limit cannot hit the pre-imports).
func awaitReady(b *box) error {
	if err := b.p.recR.SetReadDeadline(time.Now().Add(readyTimeout)); err != nil {
		return err
	}
	defer b.p.recR.SetReadDeadline(time.Time{})
	var line []byte
	one := make([]byte, 1)
	for len(line) < 64 {
		if _, err := b.p.recR.Read(one); err != nil {
			return fmt.Errorf("warm jail %s never became ready: %w", b.id, err)
		}
		if one[0] == '\n' {
			if string(line) != `{"type": "ready"}` {
				return fmt.Errorf("warm jail %s: unexpected first record %q", b.id, line)
			}
			return nil
		}
		line = append(line, one[0])
	}
	return fmt.Errorf("warm jail %s: first record too long", b.id)
}

// close stops refilling and destroys the idle jails.
func (pl *pool) close() {
	if pl == nil {
		return
	}
	select {
	case <-pl.stop:
	default:
		close(pl.stop)
	}
	<-pl.done
	pl.mu.Lock()
	ready := pl.ready
	pl.ready = nil
	pl.mu.Unlock()
	for _, b := range ready {
		pl.e.destroy(b)
	}
}

func (pl *pool) memoryPressure() bool {
	total, avail := meminfo()
	if total == 0 {
		return false
	}
	min := pl.cfg.MinAvailableBytes
	if min == 0 {
		min = total / 10
	}
	return avail < min
}

func meminfo() (total, avail uint64) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseUint(fields[1], 10, 64)
		switch fields[0] {
		case "MemTotal:":
			total = v << 10
		case "MemAvailable:":
			avail = v << 10
		}
	}
	return total, avail
}

// fit prepares a warm jail for req: the request's cgroup limits (refused
// if the request allows too little memory beyond what the jail uses), a fresh
// peak-memory counter, the workspace size, and the request's files.
func (e *Engine) fit(b *box, req *Request) error {
	l := req.Limits
	state, err := b.c.State()
	if err != nil {
		return err
	}
	paths := state.CgroupPaths
	// The user's process is a fork of the runner: when its objects are
	// touched (refcounts, and at the latest at interpreter exit) their
	// anonymous pages are copied, so they may come to count twice. (File
	// pages, the bulk of what imports map, are shared and reclaimable.)
	anon := keyed(filepath.Join(paths["memory"], "memory.stat"), "rss")
	if cgroups.IsCgroup2UnifiedMode() {
		anon = keyed(filepath.Join(paths[""], "memory.stat"), "anon")
	}
	const headroom = 64 << 20
	if 2*anon+headroom > uint64(l.MemoryBytes) {
		return fmt.Errorf("warm jail holds %d anonymous bytes; a request allowing %d could run out copying them", anon, l.MemoryBytes)
	}
	cfg := b.c.Config()
	cg := *cfg.Cgroups
	res := *cg.Resources
	res.Memory, res.MemorySwap, res.PidsLimit = l.MemoryBytes, l.MemoryBytes, &l.Pids
	cg.Resources = &res
	cfg.Cgroups = &cg
	if err := b.c.Set(cfg); err != nil {
		return fmt.Errorf("set cgroup limits: %w", err)
	}
	if !cgroups.IsCgroup2UnifiedMode() {
		// The pre-imports' peak is not the run's.
		_ = cgroups.WriteFile(paths["memory"], "memory.max_usage_in_bytes", "0")
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d", l.WorkspaceBytes, l.WorkspaceInodes)
	if err := unix.Mount("", b.runDir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return &os.PathError{Op: "remount workspace", Path: b.runDir, Err: err}
	}
	b.limits = l
	if err := writeFiles(filepath.Join(b.runDir, "work"), req.Files, b.hostID(jailUID), b.hostID(jailGID)); err != nil {
		return fmt.Errorf("%w: files: %v", ErrInvalid, err)
	}
	return nil
}
