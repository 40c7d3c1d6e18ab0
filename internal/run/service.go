package run

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/pool"
	"github.com/jaild/jaild/internal/rootfs"
	"github.com/jaild/jaild/internal/run/spec"
)

// Config configures a Service.
type Config struct {
	// Pool configures the warm pool (its sizes and Preimport are the
	// default image's); the zero value disables it.
	Pool PoolConfig
	// Images are the warm pools of the engine's other images (SetImages
	// changes them later); an image absent here has none.
	Images map[string]ImagePool
	// Logger receives diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// CheckpointDir holds paused sessions (pause.go): a directory of
	// the daemon's only, on a disk. "" means sessions cannot pause.
	CheckpointDir string
}

// Service runs requests in jails of one engine. It is safe for concurrent
// use.
type Service struct {
	e    *jail.Engine
	log  *slog.Logger
	cfg  PoolConfig
	pool *pool.Pool

	cpDir string                 // Config.CheckpointDir
	cpWhy atomic.Pointer[string] // why sessions cannot pause; "" when they can

	mu        sync.Mutex
	images    map[string]*servedImage // by name (SetImages)
	gens      atomic.Int64            // servedImage.gen
	closed    bool
	sessions  map[*Session]struct{} // live sessions, ended by Close
	running   sync.WaitGroup        // runs in progress
	teardowns sync.WaitGroup        // teardowns after runs that returned
}

// New returns a Service over e and starts its warm pool. The Service owns
// e from then on: Close closes it.
func New(e *jail.Engine, cfg Config) (*Service, error) {
	s := &Service{e: e, log: cfg.Logger, cfg: cfg.Pool, cpDir: cfg.CheckpointDir}
	why := "the checkpoint probe has not finished"
	if s.cpDir == "" {
		why = "no checkpoint directory is configured"
	}
	s.cpWhy.Store(&why)
	if s.log == nil {
		s.log = slog.Default()
	}
	pools := maps.Clone(cfg.Images)
	if pools == nil {
		pools = map[string]ImagePool{}
	}
	pools[e.DefaultImage()] = ImagePool{Size: cfg.Pool.Size, Preimport: cfg.Pool.Preimport, PlainSize: cfg.Pool.PlainSize}
	for _, p := range pools {
		if p.Size+p.PlainSize > 0 {
			if err := cfg.Pool.Limits.Validate(); err != nil {
				return nil, fmt.Errorf("pool limits: %w", err)
			}
			break
		}
	}
	s.pool = pool.New(pool.Config{MinAvailableBytes: cfg.Pool.MinAvailableBytes, Logger: s.log}, s.createWarm)
	s.SetImages(pools)
	return s, nil
}

// Manifest describes the default image.
func (s *Service) Manifest() *rootfs.Manifest { return s.e.Manifest() }

// DefaultImage is the name of the image a request without one runs in.
func (s *Service) DefaultImage() string { return s.e.DefaultImage() }

// Seccomp returns the jails' seccomp profile; callers must not modify it.
func (s *Service) Seccomp() *specs.LinuxSeccomp { return s.e.Seccomp() }

// DaemonMemoryHigh is the daemon's memory.high (0: not set) and the tmpfs
// bytes of live jails counted in it; see jail.Engine.LimitDaemonMemory.
func (s *Service) DaemonMemoryHigh() (high, tmpfs int64) { return s.e.DaemonMemoryHigh() }

// JailCounts are the jail engine's counts (alive, teardown failures,
// swept), for the daemon's metrics.
func (s *Service) JailCounts() jail.JailCounts { return s.e.JailCounts() }

// CgroupMode names the cgroup hierarchy in use: "v2" or "v1".
func (s *Service) CgroupMode() string { return s.e.CgroupMode() }

// Idle waits until every finished run has been torn down: its cgroup,
// state, mounts and run directory removed.
func (s *Service) Idle() { s.teardowns.Wait() }

// Close ends every session, destroys the warm pool's idle jails, waits for
// runs in progress to finish and be torn down, then closes the engine. Run fails with
// jail.ErrClosed afterwards.
func (s *Service) Close() error {
	s.mu.Lock()
	s.closed = true
	live := make([]*Session, 0, len(s.sessions))
	for ss := range s.sessions {
		live = append(live, ss)
	}
	s.mu.Unlock()
	for _, ss := range live {
		ss.end(spec.EndShutdown)
	}
	s.pool.Close()
	s.running.Wait()
	s.teardowns.Wait()
	return s.e.Close()
}

// enter counts a run or session creation in progress (Close waits for
// them), or fails with jail.ErrClosed; call s.running.Done after.
func (s *Service) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return jail.ErrClosed
	}
	s.running.Add(1)
	return nil
}

// Run executes req in a fresh jail, a warm one from the pool when req fits
// it, else one created now. The jail is destroyed: before Run returns when
// the run failed, in the background right after when it succeeded (every
// process of the run is dead by then; Idle waits for the rest).
//
// The returned error is for failures to create or run the jail (the
// request is invalid: errdefs.ErrInvalidArgument; the service is closed:
// jail.ErrClosed; no jail capacity: errdefs.ErrUnavailable; the host
// failed: no class); whatever the program did, including crashing, timing
// out or being OOM-killed, is a Result with a nil error. Cancelling ctx
// kills the run (Result.Cancelled); teardown does not depend on ctx.
func (s *Service) Run(ctx context.Context, req *Request) (*Result, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	im, err := s.image(req.Image)
	if err != nil {
		return nil, err
	}
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.running.Done()

	began := time.Now()
	st, warm := s.takeWarm(im, req)
	if warm {
		// The refill is kicked after this run, not when the jail is taken:
		// a jail starting alongside the run would take CPU from it
		// (measured ~2 ms of a warm print(1) on 2 cores).
		defer s.pool.Kick()
		if err := s.fit(st, req); err != nil {
			s.log.Info("warm jail cannot serve the request; using a cold one", "id", st.j.ID(), "err", err)
			st.Destroy()
			st, warm = nil, false
		}
	}
	if st == nil {
		if st, err = s.start(im.name, req.Limits, req.Network, req.Files, req.Command, req.Env, false, nil, false); err != nil {
			return nil, err
		}
	}
	startTime := time.Since(began)
	if req.OnStart != nil {
		req.OnStart(st.j.ID(), warm)
	}
	res, err := s.execute(ctx, st, req)
	if err != nil {
		st.Destroy()
		return nil, err
	}
	res.Warm, res.Start, res.Image = warm, startTime, im.name
	s.teardowns.Go(st.Destroy)
	return res, nil
}
