// Package server is jaild's HTTP API on a Unix socket: request decoding and
// validation, admission, the jail runs behind execute, lint and format,
// sessions, the file store's endpoints, the info and health endpoints,
// error mapping, and the audit log.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/jaild/jaild/internal/admission"
	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/filestore"
	"github.com/jaild/jaild/internal/metrics"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/policy"
	"github.com/jaild/jaild/internal/pool"
	"github.com/jaild/jaild/internal/rootfs"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/sessions"
)

// Engine is what the server needs to run requests: *run.Service, or a
// fake (servertest.Engine) for tests without root.
type Engine interface {
	// Run runs one request in a jail. Errors of an errdefs class keep
	// their class; any other error is the daemon's.
	Run(ctx context.Context, req *spec.Request) (*spec.Result, error)
	Manifest() *rootfs.Manifest
	// Images are the images runs can name, sorted by name; one is the
	// default. Every request resolves its image with it: it must be cheap.
	Images() []spec.ImageStats
	// PoolsByImage are the warm pools of the images, by name.
	PoolsByImage() map[string]spec.PoolStats
	Seccomp() *specs.LinuxSeccomp
	PoolStats() spec.PoolStats
	CgroupMode() string
	// DaemonMemoryHigh is the daemon's memory.high (0: not set) and the
	// tmpfs bytes of live jails counted in it.
	DaemonMemoryHigh() (high, tmpfs int64)
	// JailCounts are the jail engine's counts for the metrics.
	JailCounts() spec.JailCounts
	// NewSession makes a session: a jail whose interpreter lives across
	// calls (see run.Session).
	NewSession(s spec.SessionSpec) (Session, error)
	// CheckpointsUnavailable says why sessions cannot pause to disk on
	// this host ("" when they can).
	CheckpointsUnavailable() string
	// ForkSession makes n sessions of h, each a restore of a checkpoint
	// of it in a jail of its own (see run.Session.Fork).
	ForkSession(h Session, n int) ([]Session, error)
	// SnapshotSession takes a snapshot of h, record kept with it;
	// RollbackSession makes h what it was at sn (and says its count of
	// calls then); SessionFromSnapshot makes a session of sn (see
	// run.Session.Snapshot, Rollback and run.Service.FromSnapshot).
	SnapshotSession(h Session, record []byte) (sessions.SnapshotHandle, error)
	RollbackSession(h Session, sn sessions.SnapshotHandle) (took time.Duration, calls int, err error)
	SessionFromSnapshot(sn sessions.SnapshotHandle) (Session, error)
}

// Server serves the API. Create it with New.
type Server struct {
	cfg      config.Config
	engine   Engine
	adm      *admission.Controller
	sessions *sessions.Manager
	log      *slog.Logger
	audit    *auditor
	peers    *peer.Policy   // who a caller is: admin, network
	policy   *policy.Policy // requests against the callers' maxima
	baseCtx  context.Context
	stop     context.CancelFunc
	budget   *memBudget
	files    *filestore.Store // nil when the file store is disabled
	metrics  *metrics.Metrics
	imgCfg   atomic.Pointer[config.Config] // images' default limits (SetImages)
	reload   atomic.Pointer[reloadState]
	draining atomic.Bool // Drain: the daemon is stopping
	// tlsRefused counts the TLS listener's refused handshakes.
	tlsRefused atomic.Uint64
}

// Deps are what a Server serves with, built by the daemon's composition
// root (internal/daemon) or a test harness (servertest) from the
// configuration. Engine, Admission, Sessions and Log are required; Files
// is nil when the file store is disabled.
type Deps struct {
	Engine    Engine
	Admission *admission.Controller
	Sessions  *sessions.Manager
	Files     *filestore.Store
	Log       *slog.Logger
}

// New returns a Server over deps. Log receives the audit lines and
// diagnostics. The server owns its memory budget and its metrics
// registry, which reads every dep (Metrics); Close closes Sessions and
// Files.
func New(cfg config.Config, deps Deps) (*Server, error) {
	if deps.Engine == nil || deps.Admission == nil || deps.Sessions == nil || deps.Log == nil {
		return nil, errors.New("server: Engine, Admission, Sessions and Log are required")
	}
	log := deps.Log
	s := &Server{
		cfg:      cfg,
		engine:   deps.Engine,
		log:      log,
		adm:      deps.Admission,
		sessions: deps.Sessions,
		files:    deps.Files,
	}
	s.SetImages(cfg)
	s.peers = peer.NewPolicy(cfg, log)
	s.policy = policy.New(cfg)
	var err error
	if s.audit, err = newAuditor(cfg.Audit, log); err != nil {
		return nil, err
	}
	s.baseCtx, s.stop = context.WithCancel(context.Background())
	s.budget = newMemBudget(cfg.MemoryBudget())
	s.reload.Store(&reloadState{ok: true, at: time.Now()})
	s.metrics = metrics.New(s.metricSources())
	s.audit.metrics = s.metrics
	return s, nil
}

// metricRefills is a pool's refill histogram in the metrics' form: every
// bucket of pool.RefillBuckets, 0 where the pool has made none yet.
func metricRefills(r pool.Refills) metrics.Refills {
	buckets := make(map[float64]uint64, len(pool.RefillBuckets))
	for i, b := range pool.RefillBuckets {
		buckets[b] = 0
		if i < len(r.Buckets) {
			buckets[b] = r.Buckets[i]
		}
	}
	return metrics.Refills{Count: r.Count, Sum: r.Sum, Buckets: buckets, Failed: r.Failed}
}

// metricSources are the figures behind GET /metrics: the deps' and the
// server's own.
func (s *Server) metricSources() metrics.Sources {
	engine := s.engine
	src := metrics.Sources{
		Admission: s.adm.Usage,
		Pool: func() metrics.Pool {
			p := engine.PoolStats()
			return metrics.Pool{Size: p.Size, Ready: p.Ready, PlainSize: p.PlainSize, PlainReady: p.PlainReady,
				Refill: metricRefills(p.Refill), PlainRefill: metricRefills(p.PlainRefill)}
		},
		Sessions:      s.sessions.Counts,
		SessionMemory: func() (int64, int64) { r, _, l := s.sessions.Memory(); return r, l },
		SessionTotals: s.sessions.Totals,
		SessionEndReasons: []string{sessions.EndDeleted, sessions.EndIdle, sessions.EndExpired, sessions.EndShutdown,
			spec.EndLosses, spec.EndJailEnded, spec.EndFreezeFailed, spec.EndRestartError},
		Memory: func() (int64, int64) { return s.budget.inUse(), s.budget.max },
		Jails: func() metrics.Jails {
			c := engine.JailCounts()
			return metrics.Jails{Alive: c.Alive, TeardownFailures: c.TeardownFailures, Swept: c.Swept, EgressRefused: c.EgressRefused}
		},
		Images: func() []metrics.Image {
			var out []metrics.Image
			for _, im := range engine.Images() {
				out = append(out, metrics.Image{Name: im.Name, Digest: im.Manifest.ImageDigest, Default: im.Default})
			}
			return out
		},
		TLSRefused: func() uint64 { return s.tlsRefused.Load() },
		Reload: func() (bool, time.Time) {
			r := s.reload.Load()
			return r.ok, r.at
		},
	}
	if s.files != nil {
		src.Store = s.files.Totals
	}
	return src
}

// MetricsServer returns the http.Server of metrics_listen: GET (or HEAD)
// /metrics, the daemon's metrics in the Prometheus exposition format, and
// a 404 for anything else. It has no caller identity and serves nothing of
// the API.
func (s *Server) MetricsServer() *http.Server {
	prom := s.metrics.Handler()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", prom)
	mux.HandleFunc("/", http.NotFound)
	return &http.Server{
		Handler: mux,
		// A scrape sends its header at once; between scrapes (15 s to a
		// minute apart) a connection is evictable anyway (MetricsListener).
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       min(s.cfg.IdleTimeout.Duration, 2*time.Minute),
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// The bounds of metrics_listen's connections: in all, and per source
// address (see MetricsListener).
const (
	MetricsMaxConns        = 64
	MetricsMaxConnsPerAddr = 8
)

// MetricsListener wraps metrics_listen's listener: at most
// MetricsMaxConns connections, MetricsMaxConnsPerAddr per source address;
// beyond either, the oldest connection not serving a scrape is closed to
// make room (peer.GateListener), counted in
// jaild_connections_refused_total. Serve MetricsServer on it with its
// Serve.
func (s *Server) MetricsListener(ln net.Listener) *peer.GateListener {
	return peer.Gate(ln, MetricsMaxConns, MetricsMaxConnsPerAddr, func(reason string) { s.metrics.ConnRefused("metrics", reason) })
}

type ctxKey struct{}

// HTTPServer returns the http.Server to run on the daemon's listener, with
// the connection deadlines that keep slow clients from holding slots.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       s.cfg.ReadTimeout.Duration,
		IdleTimeout:       s.cfg.IdleTimeout.Duration,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return s.baseCtx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			// Only the connection is stored: its caller is resolved by
			// the first request, off the accept path.
			if pc, ok := c.(*peer.Conn); ok {
				return context.WithValue(ctx, ctxKey{}, pc)
			}
			return ctx
		},
	}
}

// Abort cancels the context of every request in flight, which kills their
// runs; used when the shutdown grace period is over.
func (s *Server) Abort() { s.stop() }

// Close ends every session (their jails are torn down by the engine,
// whose Close waits for that), stops the reaper, and closes the file
// store. Call it after the HTTP server has shut down.
func (s *Server) Close() {
	s.sessions.Close()
	if s.files != nil {
		s.files.Close()
	}
}

// Listen wraps the socket's listener: each connection's caller is
// identified by its peer credentials under the daemon's policy, and at
// most maxConns are open at once (see peer.Listen).
func (s *Server) Listen(ln net.Listener, maxConns int) *peer.Listener {
	return peer.Listen(ln, maxConns, s.peers, s.log)
}

// Usage reports runs in progress and queued.
func (s *Server) Usage() (running, queued int) { return s.adm.Usage() }

// callerOf returns who sent r. A connection that did not come through the
// daemon's Listener is the least privileged caller.
func callerOf(r *http.Request) peer.Caller {
	if pc, ok := r.Context().Value(ctxKey{}).(*peer.Conn); ok {
		return pc.Caller()
	}
	if c, ok := r.Context().Value(ctxKey{}).(peer.Caller); ok {
		return c // set by the TLS listener, and by WithCaller (tests and in-process harnesses)
	}
	return peer.Nobody
}

// WithCaller returns a handler that serves every request as caller: for an
// in-process harness whose connections carry no peer credentials.
func WithCaller(h http.Handler, caller peer.Caller) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, caller)))
	})
}

// route is one endpoint of the API: a method and a path pattern of the
// standard library's ServeMux, and its handler.
type route struct {
	method, path string
	h            func(http.ResponseWriter, *http.Request) error
}

// routes are the API's endpoints, each described in api.OpenAPI's
// document (a test holds the two together). A GET serves HEAD too.
func (s *Server) routes() []route {
	prom := s.metrics.Handler()
	return []route{
		{http.MethodPost, "/v1/execute", s.execute},
		{http.MethodPost, "/v1/lint", s.lint},
		{http.MethodPost, "/v1/format", s.format},
		{http.MethodGet, "/v1/info", s.info},
		{http.MethodGet, "/v1/health", s.health},
		{http.MethodGet, "/v1/ready", s.ready},
		{http.MethodGet, "/v1/openapi.json", s.openapi},
		{http.MethodGet, "/metrics", func(w http.ResponseWriter, r *http.Request) error {
			prom.ServeHTTP(w, r)
			return nil
		}},
		{http.MethodPost, "/v1/sessions", s.createSession},
		{http.MethodGet, "/v1/sessions", s.listSessions},
		{http.MethodPost, "/v1/sessions/{id}/execute", s.sessionExecute},
		{http.MethodPost, "/v1/sessions/{id}/interrupt", s.interruptSession},
		{http.MethodPost, "/v1/sessions/{id}/pause", s.pauseSession},
		{http.MethodPost, "/v1/sessions/{id}/resume", s.resumeSession},
		{http.MethodPost, "/v1/sessions/{id}/fork", s.forkSession},
		{http.MethodPost, "/v1/sessions/{id}/snapshots", s.takeSnapshot},
		{http.MethodGet, "/v1/sessions/{id}/snapshots", s.listSessionSnapshots},
		{http.MethodPost, "/v1/sessions/{id}/restore", s.rollbackSession},
		{http.MethodGet, "/v1/snapshots", s.listSnapshots},
		{http.MethodGet, "/v1/snapshots/{id}", s.getSnapshot},
		{http.MethodDelete, "/v1/snapshots/{id}", s.deleteSnapshot},
		{http.MethodPost, "/v1/sessions/{id}/commands", s.sessionCommand},
		{http.MethodGet, "/v1/sessions/{id}/commands", s.listCommands},
		{http.MethodGet, "/v1/sessions/{id}/commands/{cid}", s.getCommand},
		{http.MethodDelete, "/v1/sessions/{id}/commands/{cid}", s.deleteCommand},
		{http.MethodPost, "/v1/sessions/{id}/commands/{cid}/stdin", s.commandStdin},
		{http.MethodPost, "/v1/sessions/{id}/commands/{cid}/signal", s.signalCommand},
		{http.MethodGet, "/v1/sessions/{id}/pty", s.sessionTerminal},
		{http.MethodGet, "/v1/sessions/{id}/ports/{port}/{path...}", s.sessionPort},
		{http.MethodPost, "/v1/sessions/{id}/ports/{port}/{path...}", s.sessionPort},
		{http.MethodPut, "/v1/sessions/{id}/ports/{port}/{path...}", s.sessionPort},
		{http.MethodPatch, "/v1/sessions/{id}/ports/{port}/{path...}", s.sessionPort},
		{http.MethodDelete, "/v1/sessions/{id}/ports/{port}/{path...}", s.sessionPort},
		{http.MethodGet, "/v1/sessions/{id}/fs/{path...}", s.sessionFS},
		{http.MethodPut, "/v1/sessions/{id}/fs/{path...}", s.sessionFS},
		{http.MethodDelete, "/v1/sessions/{id}/fs/{path...}", s.sessionFS},
		{http.MethodPost, "/v1/sessions/{id}/fs/{path...}", s.sessionFS},
		{http.MethodGet, "/v1/sessions/{id}", s.getSession},
		{http.MethodDelete, "/v1/sessions/{id}", s.deleteSession},
		{http.MethodPost, "/v1/files", s.uploadFile},
		{http.MethodGet, "/v1/files", s.listFiles},
		{http.MethodGet, "/v1/files/{id}", s.getFile},
		{http.MethodDelete, "/v1/files/{id}", s.deleteFile},
		{http.MethodGet, "/v1/files/{id}/meta", s.getFileMeta},
	}
}

// Handler returns the API's routes (the standard library's method and
// path patterns). Every error, 404 and 405 included, goes out through
// writeError in the one JSON shape.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	allow := map[string][]string{} // by path: the methods it takes
	var paths []string
	for _, rt := range s.routes() {
		mux.HandleFunc(rt.method+" "+rt.path, func(w http.ResponseWriter, r *http.Request) {
			if err := rt.h(w, r); err != nil {
				s.writeError(w, r, err)
			}
		})
		if allow[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		allow[rt.path] = append(allow[rt.path], rt.method)
		if rt.method == http.MethodGet {
			allow[rt.path] = append(allow[rt.path], http.MethodHead) // a GET pattern serves HEAD too
		}
	}
	// The path without a method catches every other method.
	for _, p := range paths {
		slices.Sort(allow[p])
		methods := strings.Join(allow[p], ", ")
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", methods)
			s.writeError(w, r, errdefs.New(errdefs.ErrMethodNotAllowed, "%s takes %s, not %s", p, methods, r.Method))
		})
	}
	notFound := func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errdefs.New(errdefs.ErrNotFound, "no endpoint %s (see GET /v1/info)", trimHeader(r.URL.Path)))
	}
	mux.HandleFunc("/", notFound)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// ServeMux would redirect a path that is not clean
		// ("/v1/info/../x"); no endpoint has such a path.
		// A proxied port's path may end in a slash (a directory's URL).
		if p := r.URL.Path; p == "" || path.Clean(p) != p && path.Clean(p)+"/" != p {
			notFound(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// writeError is the one place where an error becomes an HTTP response.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, body := s.errorBody(r, err)
	var re *admission.RetryError
	if errors.As(err, &re) {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(max(re.After.Seconds(), 1))), 10))
	}
	writeJSON(w, status, body)
}

// errorBody is err's status and body; an internal error is logged, and
// its body says only that.
func (s *Server) errorBody(r *http.Request, err error) (int, api.ErrorBody) {
	status, typ := errdefs.Classify(err)
	detail := api.ErrorDetail{Type: typ, Message: err.Error()}
	var fe *errdefs.FieldError
	if errors.As(err, &fe) {
		detail.Field = fe.Field
	}
	if status == http.StatusInternalServerError {
		// Host paths and syscall details go to the log, not to the caller.
		s.log.Error("internal error", "path", r.URL.Path, "err", err)
		detail = api.ErrorDetail{Type: typ, Message: "internal error; see the daemon's log"}
	}
	return status, api.ErrorBody{Error: detail}
}

// writeBulk is writeJSON for a value with bulk placeholders (see
// bulkSet): their content is streamed into the body.
//
// A client that reads slower than the daemon's pace (write_timeout,
// write_min_rate_kib) is dropped, and with it what the request holds of
// the memory budget.
func (s *Server) writeBulk(w http.ResponseWriter, status int, v any, bulk *bulkSet) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	rc := http.NewResponseController(w)
	sw := &paceWriter{w: w, rc: rc, pace: s.pace()}
	if err := writeBulkJSON(sw, v, bulk); err == nil {
		_, _ = io.WriteString(sw, "\n")
	}
	// No flush: a small response keeps its Content-Length (net/http sets
	// it when the handler returns with the body still buffered). What is
	// still buffered then (a few KiB) goes out after the request's memory
	// is released, so it needs no deadline; the connection may serve
	// another request.
	_ = rc.SetWriteDeadline(time.Time{})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// decode reads one JSON object of at most max_body_bytes from the body,
// refusing unknown fields, trailing data, and bodies declared as another
// media type than JSON. No Content-Type is taken as JSON; curl's -d declares
// application/x-www-form-urlencoded and is refused like any other type, as
// Docker's API does.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeWithin(w, r, v, s.cfg.MaxBodyBytes)
}

// decodeWithin is decode with a bound of limit bytes.
func decodeWithin(w http.ResponseWriter, r *http.Request, v any, limit int64) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return errdefs.New(errdefs.ErrUnsupportedMediaType, "Content-Type %q: the body must be JSON; send Content-Type: application/json (curl --json, or -H 'Content-Type: application/json' -d)", trimHeader(ct))
		}
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if _, class := errdefs.Classify(err); errors.As(err, &tooBig) || (err != nil && class != errdefs.ErrInternal.Error()) {
			return decodeError(err, limit)
		}
		return errdefs.New(errdefs.ErrInvalidArgument, "body: trailing data after the JSON object")
	}
	return nil
}

// trimHeader bounds a header or query value quoted back to the caller.
func trimHeader(v string) string {
	if len(v) > 64 {
		return v[:64] + "..."
	}
	return v
}

func decodeError(err error, limit int64) error {
	if _, class := errdefs.Classify(err); class != errdefs.ErrInternal.Error() {
		return err // the memory budget's, while the body was read
	}
	var tooBig *http.MaxBytesError
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &tooBig):
		return errdefs.New(errdefs.ErrTooLarge, "body is larger than %d bytes", limit)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return errdefs.New(errdefs.ErrInvalidArgument, "%s: expected %s, got JSON %s", field, typeErr.Type, typeErr.Value)
	case errors.As(err, &syntaxErr):
		return errdefs.New(errdefs.ErrInvalidArgument, "body is not valid JSON at byte %d: %v", syntaxErr.Offset, err)
	case errors.Is(err, io.EOF):
		return errdefs.New(errdefs.ErrInvalidArgument, "body is empty; expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errdefs.New(errdefs.ErrInvalidArgument, "body is truncated JSON")
	}
	return errdefs.New(errdefs.ErrInvalidArgument, "body: %v", err)
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) error {
	writeJSON(w, http.StatusOK, api.Health{Status: "ok"})
	return nil
}

// Drain marks the daemon as stopping: /v1/ready answers 503 and new runs
// and sessions are refused (503), while the runs in progress finish.
func (s *Server) Drain() { s.draining.Store(true) }

// admit is admission for a run or a session's jail, refused while the
// daemon drains.
func (s *Server) admit(ctx context.Context, who peer.Caller) (func(), error) {
	if s.draining.Load() {
		return nil, errdefs.New(errdefs.ErrUnavailable, "the daemon is stopping; send the request to another host, or retry when it is back")
	}
	return s.adm.Admit(ctx, who)
}

// ready answers whether a run sent now could be admitted: 503 while the
// daemon drains, when it has no default image, or when every run slot
// and queue place is taken; a load balancer sends work elsewhere then.
func (s *Server) ready(w http.ResponseWriter, _ *http.Request) error {
	reason := ""
	hasDefault := false
	for _, im := range s.engine.Images() {
		hasDefault = hasDefault || im.Default
	}
	running, queued := s.adm.Usage()
	switch {
	case s.draining.Load():
		reason = "draining: the daemon is stopping"
	case !hasDefault:
		reason = "no image is mounted"
	case running >= s.cfg.MaxConcurrent() && queued >= s.cfg.Admission.QueueSize:
		reason = fmt.Sprintf("full: %d runs in progress and %d queued", running, queued)
	}
	if reason != "" {
		writeJSON(w, http.StatusServiceUnavailable, api.Ready{Ready: false, Reason: reason})
		return nil
	}
	writeJSON(w, http.StatusOK, api.Ready{Ready: true})
	return nil
}

// openapi serves the API's OpenAPI document.
func (s *Server) openapi(w http.ResponseWriter, _ *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(api.OpenAPI())
	return nil
}
