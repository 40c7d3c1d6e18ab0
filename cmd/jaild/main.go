// Command jaild is the jaild daemon: it runs untrusted Python in fresh
// kernel-enforced jails and serves JSON over HTTP on a Unix socket.
// See README.md and docs/API.md.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/net/netutil"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/egress"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run"
	"github.com/jaild/jaild/internal/server"
	"github.com/jaild/jaild/internal/tlsauth"
	"github.com/jaild/jaild/internal/version"
)

// maxConns bounds open connections so a flood cannot exhaust our fds.
const maxConns = 1024

func main() {
	if len(os.Args) > 1 && os.Args[1] == "doctor" {
		os.Exit(doctorMain(os.Args[2:]))
	}
	jail.Init() // when started as a jail's init, this never returns
	// Re-executes itself from a sealed copy of its binary, once, so that
	// no jail's start copies it.
	jail.SealExe()
	// On cgroup v2: re-executes itself, seeing only its own cgroup subtree.
	if err := jail.EnterCgroupView(); err != nil {
		fmt.Fprintln(os.Stderr, "jaild:", err)
		os.Exit(1)
	}
	if err := serve(); err != nil {
		fmt.Fprintln(os.Stderr, "jaild:", err)
		os.Exit(1)
	}
}

func serve() error {
	var (
		cfgPath     = flag.String("config", config.DefaultPath, "configuration file (TOML)")
		socket      = flag.String("socket", "", "socket path (overrides the config's socket)")
		image       = flag.String("image", "", "rootfs image directory (overrides the config's image)")
		profile     = flag.String("seccomp-profile", "", "seccomp profile (overrides the config's seccomp_profile)")
		runDir      = flag.String("run-dir", "", "state directory (overrides the config's run_dir)")
		showVersion = flag.Bool("version", false, "print the version and exit")
	)
	flag.Parse()
	if *showVersion {
		fmt.Println("jaild", version.Version)
		return nil
	}
	// A SIGHUP before the daemon serves must not kill it (its default
	// action): it is taken, and applied, once serving.
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "config" })
	// load reads the configuration, at start and at each reload, with the
	// flags over it.
	load := func() (config.Config, error) {
		cfg, err := config.Load(*cfgPath, explicit)
		if err != nil {
			return cfg, err
		}
		for dst, v := range map[*string]string{&cfg.Socket: *socket, &cfg.Image: *image, &cfg.SeccompProfile: *profile, &cfg.RunDir: *runDir} {
			if v != "" {
				*dst = v
			}
		}
		return cfg, cfg.Validate()
	}
	cfg, err := load()
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if os.Geteuid() != 0 {
		return errors.New("must run as root (jails need namespaces, cgroups and mounts)")
	}

	memoryLimit(cfg, log)

	_, _ = daemon.SdNotify(false, "STATUS=verifying rootfs and starting the jail engine")
	netm, err := network(cfg.Network, log)
	if err != nil {
		return err
	}
	jails, err := jail.New(jail.Config{
		Network:  netm,
		ImageDir: cfg.Image, SeccompProfile: cfg.SeccompProfile, RunDir: cfg.RunDir,
		CgroupName: cfg.CgroupName, HostIDBase: cfg.HostIDBase, Logger: log,
		FavorDynmods: cfg.CgroupFavorDynmods,
	})
	if err != nil {
		return errors.Join(err, closeNetwork(netm))
	}
	imgs := newImages(jails, cfg.Image, log)
	if _, err := imgs.apply(cfg, nil, nil); err != nil {
		return errors.Join(err, jails.Close(), closeNetwork(netm))
	}
	if high := debug.SetMemoryLimit(-1); high > 0 && high < math.MaxInt64 {
		// Above the runtime's soft limit (the config's, or GOMEMLIMIT's)
		// by a margin: the runtime collects first, and the kernel
		// throttles only what that cannot free. The jails' tmpfs is added
		// as jails come and go (see LimitDaemonMemory).
		if cg, err := jails.LimitDaemonMemory(high + high/4); err != nil {
			log.Warn("could not set memory.high of the daemon's cgroup", "err", err)
		} else if cg != "" {
			log.Info("daemon cgroup memory.high set, plus the tmpfs of live jails", "cgroup", cg, "bytes", high+high/4)
		}
	}
	engine, err := run.New(jails, run.Config{Logger: log, Images: pools(cfg, jails.DefaultImage()), Pool: run.PoolConfig{
		Size: cfg.Pool.Size, Preimport: cfg.Pool.Preimport, PlainSize: cfg.Pool.PlainSize,
		MinAvailableBytes: uint64(cfg.Pool.MinAvailableMB) << 20,
		// Warm jails can serve any request within the callers' maxima.
		Limits: poolLimits(cfg),
	}})
	if err != nil {
		return errors.Join(err, jails.Close(), closeNetwork(netm))
	}
	srv, err := server.New(cfg, server.ServiceEngine{Service: engine}, log)
	if err != nil {
		return errors.Join(err, engine.Close(), closeNetwork(netm))
	}
	ln, activated, err := listen(cfg)
	if err != nil {
		return errors.Join(err, engine.Close(), closeNetwork(netm))
	}
	var mln net.Listener // metrics_listen's, nil when not configured
	if cfg.MetricsListen != "" {
		if mln, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			ln.Close()
			if !activated {
				_ = os.Remove(cfg.Socket)
			}
			srv.Close()
			return errors.Join(fmt.Errorf("metrics_listen: %w", err), engine.Close(), closeNetwork(netm))
		}
	}
	var auth *tlsauth.Auth // the TLS listener's, nil when not configured
	var tln net.Listener
	if cfg.TLS.Listen != "" {
		st, err := tlsauth.Load(cfg)
		if err == nil {
			auth = tlsauth.New(st)
			tln, err = net.Listen("tcp", cfg.TLS.Listen)
		}
		if err != nil {
			ln.Close()
			if mln != nil {
				mln.Close()
			}
			if !activated {
				_ = os.Remove(cfg.Socket)
			}
			srv.Close()
			return errors.Join(fmt.Errorf("tls: %w", err), engine.Close(), closeNetwork(netm))
		}
	}
	hs := srv.HTTPServer()
	served := make(chan error, 3) // the socket's server, metrics_listen's and the TLS listener's
	go func() { served <- hs.Serve(srv.Listen(ln, maxConns)) }()
	var ts *http.Server
	if tln != nil {
		ts = srv.TLSServer(auth)
		go func() {
			served <- ts.Serve(tls.NewListener(netutil.LimitListener(tln, cfg.TLS.MaxConnections), auth.TLSConfig()))
		}()
		log.Info("serving the API over mutual TLS", "address", tln.Addr().String(), "clients", len(cfg.TLS.Clients))
	}
	var ms *http.Server
	if mln != nil {
		ms = srv.MetricsServer()
		go func() { served <- ms.Serve(netutil.LimitListener(mln, 64)) }()
		log.Info("serving metrics", "address", mln.Addr().String())
	}
	log.Info("jaild ready", "version", version.Version, "socket", cfg.Socket, "socket_activated", activated,
		"rootfs", engine.Manifest().ImageDigest, "images", imgs.names(), "cgroup", jail.CgroupMode(), "max_concurrent", cfg.MaxConcurrent())
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS=serving on "+cfg.Socket)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	current := cfg
wait:
	for {
		select {
		case sig := <-sigs:
			log.Info("shutting down", "signal", sig.String(), "grace", cfg.ShutdownGrace.Duration)
			break wait
		case err := <-served:
			log.Error("server stopped", "err", err)
			break wait
		case <-hups:
			current = reload(current, load, imgs, engine, srv, auth, log)
		}
	}
	srv.Drain() // /v1/ready says 503; new runs and sessions are refused
	running, queued := srv.Usage()
	_, _ = daemon.SdNotify(false, daemon.SdNotifyStopping+"\nSTATUS=stopping: "+strconv.Itoa(running)+" runs in progress, "+strconv.Itoa(queued)+" queued")
	if ms != nil {
		_ = ms.Close() // scrapes hold nothing worth waiting for
	}
	var wg sync.WaitGroup
	wg.Go(func() { shutdown(hs, srv, cfg.ShutdownGrace.Duration, log) })
	if ts != nil {
		// The TLS listener answers while the runs in flight finish (its
		// load balancer's health checks see /v1/ready's 503, and new
		// requests a 503 they can retry elsewhere), then closes.
		wg.Go(func() { drainTLS(ts, srv, cfg.ShutdownGrace.Duration) })
	}
	wg.Wait()
	srv.Close() // ends the sessions; engine.Close waits for their teardown
	if !activated {
		_ = os.Remove(cfg.Socket)
	}
	return errors.Join(engine.Close(), closeNetwork(netm))
}

// reload applies the configuration file again (SIGHUP, systemctl reload):
// its images (image and [images]); a change to any other key is logged as
// needing a restart. A configuration that does not load, or an image that
// is missing, misnamed or tampered with, fails the whole reload and the
// daemon goes on as before. It returns the configuration now in force.
func reload(cur config.Config, load func() (config.Config, error), imgs *images, svc *run.Service, srv *server.Server, auth *tlsauth.Auth, log *slog.Logger) config.Config {
	_, _ = daemon.SdNotify(false, daemon.SdNotifyReloading+"\nMONOTONIC_USEC="+strconv.FormatInt(monotonicUsec(), 10))
	defer func() { _, _ = daemon.SdNotify(false, daemon.SdNotifyReady+"\nSTATUS=serving images "+imgs.names()) }()
	next, err := load()
	if err != nil {
		log.Error("reload refused: the configuration does not load; nothing changed", "err", err)
		srv.NoteReload(false)
		return cur
	}
	if keys := next.NeedRestart(cur); len(keys) > 0 {
		log.Warn("reload: these settings changed and take effect only at a restart", "keys", strings.Join(keys, ","))
	}
	applied := cur
	applied.Image, applied.Images = next.Image, next.Images
	applied.TLS.Cert, applied.TLS.Key, applied.TLS.ClientCA, applied.TLS.Clients = next.TLS.Cert, next.TLS.Key, next.TLS.ClientCA, next.TLS.Clients
	var tlsState *tlsauth.State
	if auth != nil {
		if tlsState, err = tlsauth.Load(applied); err != nil {
			log.Error("reload refused: the TLS listener's files do not load; nothing changed", "err", err)
			srv.NoteReload(false)
			return cur
		}
	}
	if err := applied.Validate(); err != nil {
		// next's images checked against cur's settings (its maxima, ...),
		// which stay in force until a restart.
		log.Error("reload refused: the images do not fit the settings in force; nothing changed", "err", err)
		srv.NoteReload(false)
		return cur
	}
	changed, err := imgs.apply(applied, svc, func() { srv.SetImages(applied) })
	if !changed {
		log.Error("reload refused; nothing changed", "err", err, "images", imgs.names())
		srv.NoteReload(false)
		return cur
	}
	if tlsState != nil {
		auth.Set(tlsState) // new connections get the new certificate, CA and clients
	}
	srv.NoteReload(err == nil)
	if err != nil {
		// Every image was mounted, yet one could not be committed or
		// removed (the daemon is closing): the others are applied.
		log.Error("reload: an image could not be applied", "err", err, "images", imgs.names())
		return applied
	}
	log.Info("reloaded", "images", imgs.names())
	return applied
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

// monotonicUsec is CLOCK_MONOTONIC in microseconds, which systemd wants
// with RELOADING=1.
func monotonicUsec() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano() / 1000
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
func poolLimits(cfg config.Config) jail.Limits {
	l := server.EngineLimits(cfg.Maxima)
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
	for _, d := range n.Deny {
		cfg.Deny = append(cfg.Deny, netip.MustParsePrefix(d))
	}
	return egress.New(cfg)
}

func closeNetwork(m *egress.Manager) error {
	if m == nil {
		return nil
	}
	return m.Close()
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

// listen returns the socket systemd passed (socket activation) or creates
// cfg.Socket: owned by root and the socket group, with the configured mode,
// never briefly more open than that.
func listen(cfg config.Config) (net.Listener, bool, error) {
	lns, err := activation.Listeners()
	if err != nil {
		return nil, false, fmt.Errorf("socket activation: %w", err)
	}
	if len(lns) > 0 {
		if len(lns) != 1 || lns[0] == nil {
			return nil, false, fmt.Errorf("socket activation: expected one stream socket, got %d", len(lns))
		}
		return lns[0], true, nil
	}
	gid := -1
	if cfg.SocketGroup != "" {
		g, err := user.LookupGroup(cfg.SocketGroup)
		if err != nil {
			return nil, false, fmt.Errorf("socket_group: %w (create it with `groupadd --system %s`, or set socket_group = \"\" for root only)", err, cfg.SocketGroup)
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return nil, false, fmt.Errorf("socket_group: bad gid %q", g.Gid)
		}
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o755); err != nil {
		return nil, false, fmt.Errorf("socket directory: %w", err)
	}
	if err := removeStaleSocket(cfg.Socket); err != nil {
		return nil, false, err
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", cfg.Socket)
	syscall.Umask(old)
	if err != nil {
		return nil, false, fmt.Errorf("listen: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chown(cfg.Socket, 0, gid); err != nil {
		ln.Close()
		return nil, false, fmt.Errorf("socket: %w", err)
	}
	if err := os.Chmod(cfg.Socket, cfg.Mode()); err != nil {
		ln.Close()
		return nil, false, fmt.Errorf("socket: %w", err)
	}
	return ln, false, nil
}

// removeStaleSocket removes a socket file left by a predecessor, but
// refuses to remove anything else or a socket someone still serves.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("socket: %s exists and is not a socket; refusing to replace it", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("socket: %s is in use by a running daemon", path)
	}
	return os.Remove(path)
}
