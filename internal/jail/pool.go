package jail

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
	"golang.org/x/sys/unix"
)

// PoolConfig configures the warm pool: jails created ahead of requests,
// each still single-use. A warm jail is the same jail as a cold one (same
// namespaces, filter, mounts, limits); it only started earlier: its runner
// has started Python and imported its own modules and, in a preloaded
// jail, Preimport, and waits for its job. When a request takes it, the
// engine sets the request's cgroup limits and workspace size and writes
// its files, and the runner lowers its rlimits to the request's before the
// code runs. A request a warm jail cannot honour uses a cold one.
//
// There are two kinds. Preloaded jails (Size) serve code that imports one
// of Preimport's packages; plain jails (PlainSize) serve the rest, so that
// a print(1) does not use up a jail that cost a pandas import. The choice
// reads the code's import statements (importsAny); a wrong guess costs
// time, never isolation.
type PoolConfig struct {
	// Size is how many preloaded jails to keep ready; 0: none.
	Size int
	// Preimport are modules a preloaded jail's runner imports.
	Preimport []string
	// PlainSize is how many plain jails to keep ready; 0: none (then
	// preloaded jails serve every request).
	PlainSize int
	// Limits are what warm jails are created with: the most a request can
	// ask for and still be served warm (usually the callers' maxima).
	Limits Limits
	// MinAvailableBytes: below this much MemAvailable the pool stops
	// refilling and drops its idle jails. 0 means 10% of MemTotal.
	MinAvailableBytes uint64
}

// PoolStats describes the pool for /v1/info.
type PoolStats struct {
	Size, Ready           int // preloaded jails
	PlainSize, PlainReady int
	Preimport             []string
	Paused                bool // under memory pressure
}

// The kinds of warm jail.
const (
	preloaded = iota
	plain
	kinds
)

type pool struct {
	e     *Engine
	cfg   PoolConfig
	size  [kinds]int
	tops  map[string]bool // top-level packages of Preimport
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	ready [kinds][]*box
	pause bool
}

func newPool(e *Engine, cfg PoolConfig) *pool {
	pl := &pool{e: e, cfg: cfg, size: [kinds]int{cfg.Size, cfg.PlainSize}, tops: map[string]bool{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for _, m := range cfg.Preimport {
		top, _, _ := strings.Cut(m, ".")
		pl.tops[top] = true
	}
	if cfg.Size+cfg.PlainSize > 0 {
		go pl.loop()
	} else {
		close(pl.done)
	}
	return pl
}

// take returns a ready warm jail that can serve req, or nil. Warm jails
// have loopback only: a run with egress gets a jail made for it.
func (pl *pool) take(req *Request) (*box, bool) {
	if pl == nil || pl.size == [kinds]int{} || req.Command != nil || req.Network != nil || !fitsUnder(req.Limits, pl.cfg.Limits) {
		return nil, false
	}
	for k := range req.Env {
		if strings.HasPrefix(k, "PYTHON") { // read at interpreter start only
			return nil, false
		}
	}
	// Code that imports a pre-import is best served preloaded, else plain
	// (the import then happens in the run). Other code takes a plain jail
	// only, unless there are none: then preloaded jails serve everything.
	order := []int{plain}
	switch {
	case len(pl.tops) > 0 && importsAny(req.Code, pl.tops):
		order = []int{preloaded, plain}
	case pl.size[plain] == 0 || len(pl.tops) == 0:
		order = []int{plain, preloaded}
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, kind := range order {
		for len(pl.ready[kind]) > 0 {
			b := pl.ready[kind][0]
			pl.ready[kind] = pl.ready[kind][1:]
			select {
			case <-b.exited: // died while waiting
				pl.e.teardowns.Go(func() { pl.e.destroy(b) })
				pl.kick()
				continue
			default:
			}
			return b, true
		}
	}
	return nil, false
}

// importsAny reports whether code has an import statement naming one of
// the top-level packages in tops (import a.b as c, d / from a.b import c).
// It reads text, not Python: a package imported through __import__ or
// importlib is missed, and an import in a string or comment counts. Either
// way the run is as isolated, only slower or faster.
func importsAny(code string, tops map[string]bool) bool {
	for _, m := range importRE.FindAllStringSubmatch(code, -1) {
		for _, name := range strings.Split(m[1], ",") {
			name = strings.TrimSpace(name)
			name, _, _ = strings.Cut(name, " ")
			top, _, _ := strings.Cut(name, ".")
			if tops[top] {
				return true
			}
		}
	}
	return false
}

// importRE matches an import or from statement at the start of a line or
// after ; or : and captures the module list (for from, the one module).
var importRE = regexp.MustCompile(`(?m)(?:^|[;:])[ \t]*(?:import|from)[ \t]+([\w.]+(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+(?:[ \t]+as[ \t]+\w+)?)*)`)

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
	return PoolStats{
		Size: pl.size[preloaded], Ready: len(pl.ready[preloaded]),
		PlainSize: pl.size[plain], PlainReady: len(pl.ready[plain]),
		Preimport: pl.cfg.Preimport, Paused: pl.pause,
	}
}

// loop keeps the pool full, one creation at a time (the kind furthest
// below its size first, plain on a tie: it is the cheaper), pausing and
// dropping idle jails under memory pressure.
func (pl *pool) loop() {
	defer close(pl.done)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		// Refilling can go on for many jails in a row; a stop must not
		// wait for all of them (systemctl stop took 18-32 s).
		select {
		case <-pl.stop:
			return
		default:
		}
		pressure := pl.memoryPressure()
		pl.mu.Lock()
		pl.pause = pressure
		var drop []*box
		if pressure {
			for k := range pl.ready {
				drop = append(drop, pl.ready[k]...)
				pl.ready[k] = nil
			}
		}
		kind, need := plain, 0.0
		for k := kinds - 1; k >= 0; k-- {
			if pl.size[k] == 0 {
				continue
			}
			if n := float64(pl.size[k]-len(pl.ready[k])) / float64(pl.size[k]); n > need {
				kind, need = k, n
			}
		}
		pl.mu.Unlock()
		for _, b := range drop {
			pl.e.destroy(b)
		}
		if !pressure && need > 0 {
			var preimport []string
			if kind == preloaded {
				preimport = pl.cfg.Preimport
			}
			b, err := pl.e.create(spawn{limits: pl.cfg.Limits, warm: true, preimport: preimport})
			if err == nil {
				if err = awaitReady(b, pl.stop); err != nil {
					pl.e.destroy(b)
					b = nil
				}
			}
			select {
			case <-pl.stop:
				if b != nil {
					pl.e.destroy(b)
				}
				return // a jail cut short by the stop is no error
			default:
			}
			if err != nil {
				pl.e.log.Error("warm pool: create jail", "err", err)
			} else {
				pl.mu.Lock()
				pl.ready[kind] = append(pl.ready[kind], b)
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
// whose imports are done is ready (its memory use is then known, and a
// request's lower memory limit cannot hit the imports).
// A close of stop ends the wait at once (a warm jail importing pandas
// would otherwise hold up the daemon's shutdown for seconds).
func awaitReady(b *box, stop <-chan struct{}) error {
	if err := b.p.recR.SetReadDeadline(time.Now().Add(readyTimeout)); err != nil {
		return err
	}
	defer b.p.recR.SetReadDeadline(time.Time{})
	waited := make(chan struct{})
	defer close(waited)
	go func() {
		select {
		case <-stop:
			_ = b.p.recR.SetReadDeadline(time.Now())
		case <-waited:
		}
	}()
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
	pl.ready = [kinds][]*box{}
	pl.mu.Unlock()
	for _, list := range ready {
		for _, b := range list {
			pl.e.destroy(b)
		}
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
	// The request's memory must hold what the jail holds already (the
	// imports' anonymous memory: file pages, the bulk of what imports map,
	// are shared and reclaimable) with room to spare.
	v2 := cgroups.IsCgroup2UnifiedMode()
	anon := keyed(filepath.Join(b.cgroups["memory"], "memory.stat"), "rss")
	if v2 {
		anon = keyed(filepath.Join(b.cgroups[""], "memory.stat"), "anon")
	}
	const headroom = 64 << 20
	if anon+headroom > uint64(l.MemoryBytes) {
		return fmt.Errorf("the warm jail holds %d MiB already; a request allowing %d MiB needs a jail of its own", anon>>20, l.MemoryBytes>>20)
	}
	// Straight to the two controllers: the container's Set would rewrite
	// every controller and its state file (~0.5 ms of the warm path).
	r := &cgroups.Resources{Memory: l.MemoryBytes, MemorySwap: l.MemoryBytes, PidsLimit: &l.Pids, SkipDevices: true}
	if v2 {
		m, err := fs2.NewManager(&cgroups.Cgroup{Resources: r}, b.cgroups[""])
		if err == nil {
			err = m.Set(r)
		}
		if err != nil {
			return fmt.Errorf("set cgroup limits: %w", err)
		}
		// The imports' peak is not the run's.
		b.peak = resetPeak(b.cgroups[""])
	} else {
		if err := (&fs.MemoryGroup{}).Set(b.cgroups["memory"], r); err != nil {
			return fmt.Errorf("set cgroup memory limit: %w", err)
		}
		if err := (&fs.PidsGroup{}).Set(b.cgroups["pids"], r); err != nil {
			return fmt.Errorf("set cgroup pids limit: %w", err)
		}
		// The imports' peak is not the run's.
		_ = cgroups.WriteFile(b.cgroups["memory"], "memory.max_usage_in_bytes", "0")
	}
	opts := fmt.Sprintf("size=%d,nr_inodes=%d", l.WorkspaceBytes, l.WorkspaceInodes)
	if err := unix.Mount("", b.runDir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return &os.PathError{Op: "remount workspace", Path: b.runDir, Err: err}
	}
	b.limits = l
	if err := writeFiles(filepath.Join(b.runDir, "work"), req.Files, b.hostID(jailUID), b.hostID(jailGID)); err != nil {
		return err
	}
	return nil
}
