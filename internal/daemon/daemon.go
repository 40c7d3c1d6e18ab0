// Package daemon is jaild's composition root: from the configuration it
// builds every service the daemon runs with (egress, the jail engine and
// its images, the run service, admission, the session table, the file
// store, the server with its metrics) and the listeners (the Unix socket,
// the mutual-TLS listener, metrics_listen), and it owns their life: start,
// reload (SIGHUP), drain and stop (SIGTERM). cmd/jaild is flags and one
// call of Run.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/egress"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/policy"
	"github.com/jaild/jaild/internal/run"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/server"
	"github.com/jaild/jaild/internal/sessions"
	"github.com/jaild/jaild/internal/tlsauth"
	"github.com/jaild/jaild/internal/version"
)

// maxConns bounds the socket's open connections so a flood cannot exhaust
// the daemon's fds.
const maxConns = 1024

// Options are the command line's: where the configuration is and what
// overrides it.
type Options struct {
	ConfigPath string
	// ConfigExplicit: the path was given, so a missing file is an error
	// (the default path may be absent: the defaults apply).
	ConfigExplicit bool
	// Socket, Image, SeccompProfile and RunDir override the
	// configuration's when not "".
	Socket, Image, SeccompProfile, RunDir string
	// Log receives the daemon's log; nil is slog.Default().
	Log *slog.Logger
}

// Load reads the configuration, with the overrides over it, and validates
// it: at start and at each reload.
func (o Options) Load() (config.Config, error) {
	cfg, err := config.Load(o.ConfigPath, o.ConfigExplicit)
	if err != nil {
		return cfg, err
	}
	for dst, v := range map[*string]string{&cfg.Socket: o.Socket, &cfg.Image: o.Image, &cfg.SeccompProfile: o.SeccompProfile, &cfg.RunDir: o.RunDir} {
		if v != "" {
			*dst = v
		}
	}
	return cfg, cfg.Validate()
}

// Daemon is a started daemon: its services and listeners.
type Daemon struct {
	opts Options
	log  *slog.Logger
	cfg  config.Config // in force: the start's, then each applied reload's

	netm   *egress.Manager // nil without egress
	jails  *jail.Engine
	imgs   *images
	engine *run.Service
	criu   string // the criu program sessions pause with; "" none
	srv    *server.Server
	auth   *tlsauth.Auth // the TLS listener's, nil when not configured

	ln        net.Listener // the socket
	activated bool         // ln came from systemd
	tln, mln  net.Listener // the TLS and metrics listeners, nil when not configured
}

// Run starts the daemon and serves until SIGTERM or SIGINT, then drains
// and stops it. hups are the SIGHUPs taken since the process started
// (a SIGHUP before the daemon serves must not kill it): each reloads.
func Run(opts Options, hups <-chan os.Signal) error {
	cfg, err := opts.Load()
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("must run as root (jails need namespaces, cgroups and mounts)")
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	d := &Daemon{opts: opts, log: opts.Log, cfg: cfg}
	if err := d.start(); err != nil {
		return err
	}
	return d.serve(hups)
}

// start builds every service and opens every listener, or, failing, closes
// what it built.
func (d *Daemon) start() (retErr error) {
	memoryLimit(d.cfg, d.log)
	_, _ = daemon.SdNotify(false, "STATUS=verifying rootfs and starting the jail engine")
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, d.close())
		}
	}()
	if err := d.startEngine(); err != nil {
		return err
	}
	deps, err := server.DepsFor(d.cfg, engineOf{d.engine}, d.log)
	if err != nil {
		return err
	}
	if d.srv, err = server.New(d.cfg, deps); err != nil {
		deps.Sessions.Close()
		if deps.Files != nil {
			deps.Files.Close()
		}
		return err
	}
	d.probeCheckpoints()
	d.recoverSessions()
	return d.listen()
}

// startEngine starts egress, the jail engine with its images and the run
// service with its warm pools.
func (d *Daemon) startEngine() error {
	cfg := d.cfg
	var err error
	if d.netm, err = network(cfg.Network, d.log); err != nil {
		return err
	}
	var key []byte
	cpDir := cfg.Sessions.CheckpointDir
	if cpDir != "" && cfg.Sessions.Enabled {
		if key, err = checkpointKey(cpDir); err != nil {
			return fmt.Errorf("sessions.checkpoint_dir: %w", err)
		}
		d.criu = findCRIU(cfg.Sessions)
	} else {
		cpDir = ""
	}
	jc := jail.Config{
		Network:  d.netm,
		ImageDir: cfg.Image, SeccompProfile: cfg.SeccompProfile, RunDir: cfg.RunDir,
		CgroupName: cfg.CgroupName, HostIDBase: cfg.HostIDBase, Logger: d.log,
		FavorDynmods: cfg.CgroupFavorDynmods,
	}
	jc.CheckpointKey = key // reads the records of paused sessions, even without CRIU
	if d.criu != "" {
		// The wrapper beside the checkpoints: /run is noexec under systemd.
		jc.CRIU, jc.CRIUWrapperDir = d.criu, filepath.Join(cpDir, ".criu")
	}
	d.jails, err = jail.New(jc)
	if err != nil {
		return err
	}
	d.imgs = newImages(d.jails, cfg.Image, d.log)
	if _, err := d.imgs.apply(cfg, nil, nil); err != nil {
		return err
	}
	if high := debug.SetMemoryLimit(-1); high > 0 && high < math.MaxInt64 {
		// Above the runtime's soft limit (the config's, or GOMEMLIMIT's)
		// by a margin: the runtime collects first, and the kernel
		// throttles only what that cannot free. The jails' tmpfs is added
		// as jails come and go (see LimitDaemonMemory).
		if cg, err := d.jails.LimitDaemonMemory(high + high/4); err != nil {
			d.log.Warn("could not set memory.high of the daemon's cgroup", "err", err)
		} else if cg != "" {
			d.log.Info("daemon cgroup memory.high set, plus the tmpfs of live jails", "cgroup", cg, "bytes", high+high/4)
		}
	}
	d.engine, err = run.New(d.jails, run.Config{Logger: d.log, CheckpointDir: cpDir, Images: pools(cfg, d.jails.DefaultImage()), Pool: run.PoolConfig{
		Size: cfg.Pool.Size, Preimport: cfg.Pool.Preimport, PlainSize: cfg.Pool.PlainSize,
		MinAvailableBytes: uint64(cfg.Pool.MinAvailableMB) << 20,
		// Warm jails can serve any request within the callers' maxima.
		Limits: poolLimits(cfg),
	}})
	return err
}

// listen opens the socket (or takes systemd's), metrics_listen's and the
// TLS listener.
func (d *Daemon) listen() error {
	cfg := d.cfg
	var err error
	if d.ln, d.activated, err = listenSocket(cfg); err != nil {
		return err
	}
	if cfg.MetricsListen != "" {
		if d.mln, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			return fmt.Errorf("metrics_listen: %w", err)
		}
	}
	if cfg.TLS.Listen != "" {
		st, err := tlsauth.Load(cfg)
		if err == nil {
			d.auth = tlsauth.New(st)
			d.tln, err = net.Listen("tcp", cfg.TLS.Listen)
		}
		if err != nil {
			return fmt.Errorf("tls: %w", err)
		}
	}
	return nil
}

// close closes whatever start built, in reverse order. The server's Close
// ends the sessions; the engine's Close waits for their teardown.
func (d *Daemon) close() error {
	for _, l := range []net.Listener{d.tln, d.mln} {
		if l != nil {
			l.Close()
		}
	}
	if d.ln != nil {
		d.ln.Close()
		if !d.activated {
			_ = os.Remove(d.cfg.Socket)
		}
	}
	if d.srv != nil {
		d.srv.Close()
	}
	var errs []error
	switch {
	case d.engine != nil:
		errs = append(errs, d.engine.Close()) // closes the jail engine too
	case d.jails != nil:
		errs = append(errs, d.jails.Close())
	}
	if d.netm != nil {
		errs = append(errs, d.netm.Close())
	}
	return errors.Join(errs...)
}

// servers are the HTTP servers of the listeners; ts and ms are nil when
// their listener is not configured.
type servers struct{ hs, ts, ms *http.Server }

// serve serves every listener until a signal to stop or a listener's end,
// reloading at each SIGHUP, then drains and stops.
func (d *Daemon) serve(hups <-chan os.Signal) error {
	cfg, srv := d.cfg, d.srv
	// Before the first request can be answered: a client (or systemd)
	// that sees the daemon serve may stop it at once, and a SIGTERM or
	// SIGINT before Notify would kill it without its teardown (its jails'
	// mounts left behind).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	sv := servers{hs: srv.HTTPServer()}
	served := make(chan error, 3) // the socket's server, metrics_listen's and the TLS listener's
	go func() { served <- sv.hs.Serve(srv.Listen(d.ln, maxConns)) }()
	if d.tln != nil {
		sv.ts = srv.TLSServer(d.auth)
		go func() {
			served <- sv.ts.Serve(srv.TLSListener(d.tln, d.auth))
		}()
		d.log.Info("serving the API over mutual TLS", "address", d.tln.Addr().String(), "clients", len(cfg.TLS.Clients))
	}
	if d.mln != nil {
		sv.ms = srv.MetricsServer()
		go func() { served <- srv.MetricsListener(d.mln).Serve(sv.ms) }()
		d.log.Info("serving metrics", "address", d.mln.Addr().String())
	}
	d.log.Info("jaild ready", "version", version.Version, "socket", cfg.Socket, "socket_activated", d.activated,
		"rootfs", d.engine.Manifest().ImageDigest, "images", d.imgs.names(), "cgroup", jail.CgroupMode(), "max_concurrent", cfg.MaxConcurrent())
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS=serving on "+cfg.Socket)

wait:
	for {
		select {
		case sig := <-sigs:
			d.log.Info("shutting down", "signal", sig.String(), "grace", cfg.ShutdownGrace.Duration)
			break wait
		case err := <-served:
			d.log.Error("server stopped", "err", err)
			break wait
		case <-hups:
			d.reload()
		}
	}
	d.stop(sv)
	return d.close()
}

// stop drains: /v1/ready says 503 and new runs and sessions are refused,
// while the runs in flight get the grace period to finish.
func (d *Daemon) stop(sv servers) {
	grace := d.cfg.ShutdownGrace.Duration
	d.srv.Drain()
	running, queued := d.srv.Usage()
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping+"\nSTATUS=stopping: "+strconv.Itoa(running)+" runs in progress, "+strconv.Itoa(queued)+" queued")
	if sv.ms != nil {
		_ = sv.ms.Close() // scrapes hold nothing worth waiting for
	}
	var wg sync.WaitGroup
	wg.Go(func() { shutdown(sv.hs, d.srv, grace, d.log) })
	if sv.ts != nil {
		// The TLS listener answers while the runs in flight finish (its
		// load balancer's health checks see /v1/ready's 503, and new
		// requests a 503 they can retry elsewhere), then closes.
		wg.Go(func() { drainTLS(sv.ts, d.srv, grace) })
	}
	wg.Wait()
	// The listeners are closed by their servers' Shutdown; the socket's
	// file is removed by close.
	d.tln, d.mln = nil, nil
}

// drainTLS lets the TLS listener answer until the runs in flight are done
// or grace is over, then shuts it down.
func drainTLS(ts *http.Server, srv *server.Server, grace time.Duration) {
	for deadline := time.Now().Add(grace); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if running, queued := srv.Usage(); running+queued == 0 {
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		_ = ts.Close()
	}
}

// shutdown stops accepting, lets requests in flight finish within grace,
// then cancels the rest (which kills their runs) and waits for their
// handlers to answer.
func shutdown(hs *http.Server, srv *server.Server, grace time.Duration, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := hs.Shutdown(ctx); err == nil {
		return
	}
	running, _ := srv.Usage()
	log.Warn("grace period over; killing runs in progress", "running", running)
	srv.Abort()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	if err := hs.Shutdown(ctx2); err != nil {
		_ = hs.Close()
	}
}

// memoryLimit sets the Go runtime's soft memory limit from the config,
// unless GOMEMLIMIT is set in the environment (which wins, as the runtime
// documents).
func memoryLimit(cfg config.Config, log *slog.Logger) {
	if os.Getenv("GOMEMLIMIT") != "" {
		log.Info("memory limit from GOMEMLIMIT", "bytes", debug.SetMemoryLimit(-1))
		return
	}
	if n := cfg.MemoryLimit(); n > 0 {
		debug.SetMemoryLimit(n)
		log.Info("memory limit", "bytes", n, "budget_bytes", cfg.MemoryBudget())
	}
}

// poolLimits are the warm jails' limits: the callers' maxima, so that a
// warm jail can serve any request, and, with sessions, a CPU rlimit (from
// Timeout) as high as a session's longest life: a session's interpreter
// may use that much over its life. A single run lowers it to its own
// before its code runs (runner.py).
func poolLimits(cfg config.Config) spec.Limits {
	l := policy.EngineLimits(cfg.Maxima)
	if cfg.Sessions.Enabled {
		l.Timeout = max(l.Timeout, cfg.Sessions.AdminMaxTTL.Duration)
	}
	return l
}

// network starts egress when the configuration enables it: nil otherwise.
func network(n config.Network, log *slog.Logger) (*egress.Manager, error) {
	if !n.Enabled {
		return nil, nil
	}
	dns, err := n.DNSServers()
	if err != nil {
		return nil, fmt.Errorf("network.dns: %w", err)
	}
	cfg := egress.Config{
		Subnet: netip.MustParsePrefix(n.Subnet), MaxSlots: jail.MaxJails, Table: n.Table, IfPrefix: n.InterfacePrefix,
		DNS: dns, MaxConns: n.MaxConnections, BytesPerSec: n.MaxBytesPerSecond, Logger: log,
	}
	for _, p := range n.Deny {
		cfg.Deny = append(cfg.Deny, netip.MustParsePrefix(p))
	}
	return egress.New(cfg)
}

// engineOf adapts *run.Service to the server's Engine: its sessions as the
// server's Session.
type engineOf struct{ *run.Service }

// ForkSession forks a session of the service (run.Session.Fork).
func (e engineOf) ForkSession(h server.Session, n int) ([]server.Session, error) {
	ss, ok := h.(*run.Session)
	if !ok {
		return nil, fmt.Errorf("fork: a session of type %T", h)
	}
	kids, err := ss.Fork(n)
	if err != nil {
		return nil, err
	}
	out := make([]server.Session, len(kids))
	for i, k := range kids {
		out[i] = k
	}
	return out, nil
}

// SnapshotSession takes a snapshot of a session of the service.
func (e engineOf) SnapshotSession(h server.Session, record []byte) (sessions.SnapshotHandle, error) {
	ss, ok := h.(*run.Session)
	if !ok {
		return nil, fmt.Errorf("snapshot: a session of type %T", h)
	}
	sn, err := ss.Snapshot(record)
	if err != nil {
		return nil, err
	}
	return sn, nil
}

// RollbackSession rolls a session of the service back to a snapshot.
func (e engineOf) RollbackSession(h server.Session, sn sessions.SnapshotHandle) (time.Duration, int, error) {
	ss, ok := h.(*run.Session)
	rs, ok2 := sn.(*run.Snapshot)
	if !ok || !ok2 {
		return 0, 0, fmt.Errorf("rollback: a session of type %T, a snapshot of type %T", h, sn)
	}
	took, err := ss.Rollback(rs)
	return took, ss.Calls(), err
}

// SessionFromSnapshot makes a session of the service from a snapshot.
func (e engineOf) SessionFromSnapshot(sn sessions.SnapshotHandle) (server.Session, error) {
	rs, ok := sn.(*run.Snapshot)
	if !ok {
		return nil, fmt.Errorf("from snapshot: a snapshot of type %T", sn)
	}
	ss, err := e.Service.FromSnapshot(rs)
	if err != nil {
		return nil, err
	}
	return ss, nil
}

// NewSession makes a session of the service.
func (e engineOf) NewSession(s spec.SessionSpec) (server.Session, error) {
	sess, err := e.Service.NewSession(s)
	if err != nil {
		return nil, err
	}
	return sess, nil
}
