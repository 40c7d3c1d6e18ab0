// Package servertest serves jaild's API in process, over a real Unix
// socket, with a fake engine: handler tests without root or jails. The
// daemon's own client talks to it.
package servertest

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/jaild/jaild/internal/admission"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/rootfs"
	"github.com/jaild/jaild/internal/run"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/server"
	"github.com/jaild/jaild/internal/server/servertest/raw"
)

// Engine is a fake engine. RunFunc answers Run (a run that prints nothing
// and ends ok when nil); every request it got is kept in Requests.
type Engine struct {
	RunFunc func(ctx context.Context, req *run.Request) (*run.Result, error)
	// SessionExec, when set, answers the calls of sessions made after.
	SessionExec func(ctx context.Context, c *run.Call) (*run.CallResult, error)
	// JailCountsValue is what JailCounts reports.
	JailCountsValue jail.JailCounts
	// ImagesValue, when set, is what Images reports; else the images
	// "test" (the default, with ruff) and "test-small" (without).
	ImagesValue []run.ImageStats
	// PoolsValue, when set, is what PoolsByImage reports; else an empty
	// pool for each image.
	PoolsValue map[string]run.PoolStats
	// Ports maps a session's port to the address (host:port) of a server
	// the test runs for it: a fake session's DialPort dials that (any
	// other port is refused as nothing listening).
	Ports map[int]string

	mu       sync.Mutex
	requests []*run.Request
	sessions []*Session
	// sessionErr fails the sessions made (FailSessions).
	sessionErr error
}

// Run records req and answers with RunFunc.
func (e *Engine) Run(ctx context.Context, req *run.Request) (*run.Result, error) {
	if err := req.Validate(); err != nil {
		return nil, err // the real engine refuses what it would not run
	}
	e.mu.Lock()
	e.requests = append(e.requests, req)
	f := e.RunFunc
	e.mu.Unlock()
	if f == nil {
		return &run.Result{ID: jail.NewID(), Status: spec.StatusOK, Image: req.Image}, nil
	}
	res, err := f(ctx, req)
	if res != nil && res.Image == "" {
		res.Image = req.Image // as the real engine reports it
	}
	return res, err
}

// Requests returns the requests Run received, in order.
func (e *Engine) Requests() []*run.Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*run.Request(nil), e.requests...)
}

// Manifest describes a fake image.
func (e *Engine) Manifest() *rootfs.Manifest {
	return &rootfs.Manifest{Schema: 1, Name: "test", ImageDigest: "sha256:" + string(bytes.Repeat([]byte("0"), 64)), PythonVersion: "3.13.0", DebianSuite: "test",
		Packages: []rootfs.Package{{Name: "python3", Version: "3.13.0-1"}, {Name: "ruff", Version: "0.16.10+ds-1"}}}
}

// Images reports ImagesValue, or the default image "test" and the image
// "test-small" without ruff.
func (e *Engine) Images() []run.ImageStats {
	e.mu.Lock()
	v := e.ImagesValue
	e.mu.Unlock()
	if v != nil {
		return v
	}
	small := &rootfs.Manifest{Schema: 1, Name: "test-small", ImageDigest: "sha256:" + string(bytes.Repeat([]byte("1"), 64)), PythonVersion: "3.13.0", DebianSuite: "test",
		Packages: []rootfs.Package{{Name: "python3", Version: "3.13.0-1"}}, Wheels: []rootfs.Wheel{{Name: "acme", Version: "1.0", SHA256: []string{"sha256:" + string(bytes.Repeat([]byte("a"), 64))}}}}
	return []run.ImageStats{{Name: "test", Default: true, Manifest: e.Manifest()}, {Name: "test-small", Manifest: small}}
}

// Seccomp returns a one-rule profile.
func (e *Engine) Seccomp() *specs.LinuxSeccomp {
	return &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow}}}
}

// PoolStats reports an empty pool.
func (e *Engine) PoolStats() run.PoolStats { return run.PoolStats{} }

// PoolsByImage reports an empty pool for each image.
func (e *Engine) PoolsByImage() map[string]run.PoolStats {
	e.mu.Lock()
	v := e.PoolsValue
	e.mu.Unlock()
	if v != nil {
		return v
	}
	out := map[string]run.PoolStats{}
	for _, im := range e.Images() {
		out[im.Name] = run.PoolStats{}
	}
	return out
}

// CgroupMode reports v2.
func (e *Engine) CgroupMode() string { return "v2" }

// CheckpointsUnavailable: the fake's sessions pause in memory (Session.Pause).
func (e *Engine) CheckpointsUnavailable() string { return "" }

// JailCounts reports what JailCountsValue holds (zero by default).
func (e *Engine) JailCounts() jail.JailCounts {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.JailCountsValue
}

// DaemonMemoryHigh reports no memory.high.
func (e *Engine) DaemonMemoryHigh() (int64, int64) { return 0, 0 }

// Harness is a server on a Unix socket with a fake engine.
type Harness struct {
	Engine *Engine
	Client *client.Client
	Socket string
	Server *server.Server

	logMu sync.Mutex
	log   bytes.Buffer
	seen  []string
}

// Seen returns "METHOD /path" of every request the server got, in order.
func (h *Harness) Seen() []string {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	return append([]string(nil), h.seen...)
}

// Count is how many requests of route ("METHOD /path") the server got.
func (h *Harness) Count(route string) int {
	n := 0
	for _, r := range h.Seen() {
		if r == route {
			n++
		}
	}
	return n
}

// Caller is the caller Default serves: a local, unprivileged uid.
var Caller = admission.Caller{UID: 1000, PID: 1}

// Default serves the default configuration's API to Caller; it is shut
// down when the test ends.
func Default(t testing.TB) *Harness {
	t.Helper()
	return New(t, config.Default(), Caller)
}

// Log returns what the server logged so far (audit lines included).
func (h *Harness) Log() string {
	h.logMu.Lock()
	defer h.logMu.Unlock()
	return h.log.String()
}

type lockedWriter struct{ h *Harness }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.h.logMu.Lock()
	defer w.h.logMu.Unlock()
	return w.h.log.Write(p)
}

// New serves cfg's API with a fake engine, every request as caller; it is
// shut down when the test ends.
func New(t testing.TB, cfg config.Config, caller admission.Caller) *Harness {
	t.Helper()
	dir := raw.SocketDir(t)
	var err error
	if cfg.Files.Dir == config.Default().Files.Dir {
		// The file store of a test lives and dies with it, on whatever
		// disk the test has.
		cfg.Files.Dir, cfg.Files.MinFreeMB = filepath.Join(dir, "files"), 0
	}
	h := &Harness{Engine: &Engine{}, Socket: filepath.Join(dir, "api.sock")}
	log := slog.New(slog.NewJSONHandler(lockedWriter{h}, nil))
	deps, err := server.DepsFor(cfg, h.Engine, log)
	if err != nil {
		t.Fatal(err)
	}
	if h.Server, err = server.New(cfg, deps); err != nil {
		deps.Sessions.Close()
		if deps.Files != nil {
			deps.Files.Close()
		}
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", h.Socket)
	if err != nil {
		t.Fatal(err)
	}
	hs := h.Server.HTTPServer()
	handler := server.WithCaller(hs.Handler, caller)
	hs.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.logMu.Lock()
		h.seen = append(h.seen, r.Method+" "+r.URL.Path)
		h.logMu.Unlock()
		handler.ServeHTTP(w, r)
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		_ = hs.Close()
		<-done
		h.Server.Close()
	})
	h.Client = client.New(h.Socket)
	return h
}
