package run

import (
	"fmt"
	"strings"
	"time"

	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/lazyre"
	"github.com/jaild/jaild/internal/pool"
	"github.com/jaild/jaild/internal/run/spec"
)

// PoolConfig configures the warm pool: jails created ahead of requests,
// each still single-use. A warm jail is the same jail as a cold one (same
// namespaces, filter, mounts, limits); it only started earlier: its runner
// has started Python and imported its own modules and, in a preloaded
// jail, Preimport, and waits for its job. When a request takes it, the
// service sets the request's cgroup limits and workspace size and writes
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
	Limits jail.Limits
	// MinAvailableBytes: below this much MemAvailable the pool stops
	// refilling and drops its idle jails. 0 means 10% of MemTotal.
	MinAvailableBytes uint64
}

// PoolStats describes the pool for /v1/info.
type PoolStats = spec.PoolStats

// The kinds of warm jail.
const (
	preloaded = "preloaded"
	plain     = "plain"
)

// PoolStats describes the warm pool of every image together: sizes and
// ready jails summed, the creations of every image ever (so they only
// grow), and the default image's Preimport.
func (s *Service) PoolStats() PoolStats {
	st := s.pool.Stats()
	out := PoolStats{Paused: st.Paused, Refill: st.KindRefills[preloaded], PlainRefill: st.KindRefills[plain]}
	for k, n := range st.Size {
		r := st.Ready[k]
		if k.Kind == preloaded {
			out.Size, out.Ready = out.Size+n, out.Ready+r
		} else {
			out.PlainSize, out.PlainReady = out.PlainSize+n, out.PlainReady+r
		}
	}
	if im, err := s.image(""); err == nil {
		out.Preimport = im.pool.Preimport
	}
	return out
}

// warmJail is a pool item: a started jail whose runner said ready.
type warmJail struct{ *started }

// Dead reports whether the jail's runner ended while it waited.
func (w warmJail) Dead() bool {
	select {
	case <-w.j.Done():
		return true
	default:
		return false
	}
}

// createWarm makes one warm jail of the pool's key.
func (s *Service) createWarm(key pool.Key, stop <-chan struct{}) (pool.Item, error) {
	im := s.imageOfKey(key)
	if im == nil {
		return nil, fmt.Errorf("image %s is no longer served", key.Image)
	}
	var preimport []string
	if key.Kind == preloaded {
		preimport = im.pool.Preimport
	}
	st, err := s.start(im.name, s.cfg.Limits, nil, nil, nil, nil, true, preimport, true)
	if err != nil {
		return nil, err
	}
	if err := checkImage(st, im); err != nil {
		st.Destroy()
		return nil, err
	}
	if err := awaitReady(st, stop); err != nil {
		st.Destroy()
		return nil, err
	}
	return warmJail{st}, nil
}

// takeWarm returns a ready warm jail that can serve req, or nil. Warm
// jails have loopback only: a run with egress gets a jail made for it.
func (s *Service) takeWarm(im *servedImage, req *Request) (*started, bool) {
	if im.pool.Size+im.pool.PlainSize == 0 || req.Network != nil || !req.Limits.FitsUnder(s.cfg.Limits) {
		return nil, false
	}
	if req.Command != nil {
		// A command (lint, format) takes a plain jail, whose runner
		// executes it (if the image's runner can: an image built before
		// would take the job for code); a preloaded one is worth keeping
		// for code.
		if im.pool.PlainSize == 0 || !im.manifest.RunnerCan(runnerExec) {
			return nil, false
		}
		it, _, ok := s.pool.Take(im.key(plain))
		if !ok {
			return nil, false
		}
		return it.(warmJail).started, true
	}
	for k := range req.Env {
		if strings.HasPrefix(k, "PYTHON") { // read at interpreter start only
			return nil, false
		}
	}
	// Code that imports a pre-import is best served preloaded, else plain
	// (the import then happens in the run). Other code takes a plain jail
	// only, unless there are none: then preloaded jails serve everything.
	order := []pool.Key{im.key(plain)}
	switch {
	case len(im.tops) > 0 && importsAny(req.Code, im.tops):
		order = []pool.Key{im.key(preloaded), im.key(plain)}
	case im.pool.PlainSize == 0 || len(im.tops) == 0:
		order = []pool.Key{im.key(plain), im.key(preloaded)}
	}
	it, _, ok := s.pool.Take(order...)
	if !ok {
		return nil, false
	}
	return it.(warmJail).started, true
}

// runnerExec is the runner feature of executing a command (runner.py).
const runnerExec = "exec"

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
var importRE = lazyre.New(`(?m)(?:^|[;:])[ \t]*(?:import|from)[ \t]+([\w.]+(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+(?:[ \t]+as[ \t]+\w+)?)*)`)

// readyTimeout bounds how long a warm jail's runner may take to import
// its modules.
const readyTimeout = 2 * time.Minute

// awaitReady waits for the runner's {"type":"ready"} record: only a jail
// whose imports are done is ready (its memory use is then known, and a
// request's lower memory limit cannot hit the imports).
// A close of stop ends the wait at once (a warm jail importing pandas
// would otherwise hold up the daemon's shutdown for seconds).
func awaitReady(st *started, stop <-chan struct{}) error {
	rec, id := st.p.recR, st.j.ID()
	if err := rec.SetReadDeadline(time.Now().Add(readyTimeout)); err != nil {
		return err
	}
	defer rec.SetReadDeadline(time.Time{})
	waited := make(chan struct{})
	defer close(waited)
	go func() {
		select {
		case <-stop:
			_ = rec.SetReadDeadline(time.Now())
		case <-waited:
		}
	}()
	var line []byte
	one := make([]byte, 1)
	for len(line) < 64 {
		if _, err := rec.Read(one); err != nil {
			return fmt.Errorf("warm jail %s never became ready: %w", id, err)
		}
		if one[0] == '\n' {
			if string(line) != `{"type": "ready"}` {
				return fmt.Errorf("warm jail %s: unexpected first record %q", id, line)
			}
			return nil
		}
		line = append(line, one[0])
	}
	return fmt.Errorf("warm jail %s: first record too long", id)
}

// fit prepares a warm jail for req: the request's cgroup limits (refused
// if the request allows too little memory beyond what the jail uses), a
// fresh peak-memory counter, the workspace size, and the request's files.
func (s *Service) fit(st *started, req *Request) error {
	l := req.Limits
	// The request's memory must hold what the jail holds already (the
	// imports' anonymous memory: file pages, the bulk of what imports map,
	// are shared and reclaimable) with room to spare.
	const headroom = 64 << 20
	if anon := st.j.AnonMemoryBytes(); anon+headroom > uint64(l.MemoryBytes) {
		return fmt.Errorf("the warm jail holds %d MiB already; a request allowing %d MiB needs a jail of its own", anon>>20, l.MemoryBytes>>20)
	}
	if err := st.j.Resize(l); err != nil {
		return err
	}
	return writeFiles(st.j, req.Files, false)
}
