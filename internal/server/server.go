// Package server is jaild's HTTP API on a Unix socket: request decoding and
// validation, admission, the jail runs behind execute, lint and format, the
// info and health endpoints, error mapping, and the audit log.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/admission"
	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/jail"
)

// Server serves the API. Create it with New.
type Server struct {
	cfg     config.Config
	engine  *jail.Engine
	adm     *admission.Controller
	log     *slog.Logger
	audit   *auditor
	adminG  string // gid of the admin group, "" if it does not exist
	netG    string // gid of network.allow_group, "" if none
	baseCtx context.Context
	stop    context.CancelFunc

	adminMu    sync.Mutex
	adminCache map[groupKey]adminEntry
}

type groupKey struct {
	uid   uint32
	group string
}

type adminEntry struct {
	admin bool
	at    time.Time
}

// New returns a Server over an engine. log receives the audit lines and
// diagnostics.
func New(cfg config.Config, engine *jail.Engine, log *slog.Logger) (*Server, error) {
	a := cfg.Admission
	s := &Server{
		cfg:    cfg,
		engine: engine,
		log:    log,
		adm: admission.New(admission.Config{
			MaxConcurrent: cfg.MaxConcurrent(), QueueSize: a.QueueSize, QueueWait: a.QueueWait.Duration,
			RatePerMinute: a.RatePerMinute, Burst: a.Burst, DailyQuota: a.DailyQuota,
		}),
		adminCache: map[groupKey]adminEntry{},
	}
	if g, err := user.LookupGroup(cfg.AdminGroup); err == nil {
		s.adminG = g.Gid
	}
	if n := cfg.Network; n.Enabled && n.AllowGroup != "" {
		if g, err := user.LookupGroup(n.AllowGroup); err == nil {
			s.netG = g.Gid
		} else {
			log.Warn("network.allow_group does not exist: only admins may ask for egress", "group", n.AllowGroup)
		}
	}
	var err error
	if s.audit, err = newAuditor(cfg.Audit, log); err != nil {
		return nil, err
	}
	s.baseCtx, s.stop = context.WithCancel(context.Background())
	return s, nil
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
			caller := admission.Caller{UID: 65534, PID: -1} // not from our Listener: least privilege
			if pc, ok := c.(*peerConn); ok {
				caller = pc.caller
			}
			return context.WithValue(ctx, ctxKey{}, caller)
		},
	}
}

// Abort cancels the context of every request in flight, which kills their
// runs; used when the shutdown grace period is over.
func (s *Server) Abort() { s.stop() }

// Usage reports runs in progress and queued.
func (s *Server) Usage() (running, queued int) { return s.adm.Usage() }

// isAdmin: root, or a member of the admin group.
func (s *Server) isAdmin(uid, gid uint32) bool {
	return uid == 0 || s.inGroup(uid, gid, s.adminG)
}

// mayNetwork: the network policy lets the caller ask for egress: admins,
// and members of network.allow_group (everyone when it is "").
func (s *Server) mayNetwork(uid, gid uint32, admin bool) bool {
	if !s.cfg.Network.Enabled {
		return false
	}
	return admin || s.cfg.Network.AllowGroup == "" || s.inGroup(uid, gid, s.netG)
}

// inGroup: gid is group g, or uid's user is a member of g (cached for a
// minute). g "" (no such group) has no members.
func (s *Server) inGroup(uid, gid uint32, g string) bool {
	if g == "" {
		return false
	}
	if strconv.FormatUint(uint64(gid), 10) == g {
		return true
	}
	key := groupKey{uid, g}
	s.adminMu.Lock()
	e, ok := s.adminCache[key]
	s.adminMu.Unlock()
	if ok && time.Since(e.at) < time.Minute {
		return e.admin
	}
	member := false
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		if gids, err := u.GroupIds(); err == nil {
			member = slices.Contains(gids, g)
		}
	}
	s.adminMu.Lock()
	s.adminCache[key] = adminEntry{member, time.Now()}
	s.adminMu.Unlock()
	return member
}

func callerOf(r *http.Request) admission.Caller {
	c, ok := r.Context().Value(ctxKey{}).(admission.Caller)
	if !ok {
		return admission.Caller{UID: 65534, PID: -1}
	}
	return c
}

type route struct {
	method string
	h      func(http.ResponseWriter, *http.Request) error
}

// Handler returns the API's routes. Every error, including 404 and 405,
// goes out through writeError in the one JSON shape.
func (s *Server) Handler() http.Handler {
	routes := map[string]route{
		"/v1/execute": {http.MethodPost, s.execute},
		"/v1/lint":    {http.MethodPost, s.lint},
		"/v1/format":  {http.MethodPost, s.format},
		"/v1/info":    {http.MethodGet, s.info},
		"/v1/health":  {http.MethodGet, s.health},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt, ok := routes[r.URL.Path]
		var err error
		switch {
		case !ok:
			err = errdefs.New(errdefs.ErrNotFound, "no endpoint %s (see GET /v1/info)", r.URL.Path)
		case r.Method != rt.method:
			w.Header().Set("Allow", rt.method)
			err = errdefs.New(errdefs.ErrMethodNotAllowed, "%s takes %s, not %s", r.URL.Path, rt.method, r.Method)
		default:
			err = rt.h(w, r)
		}
		if err != nil {
			s.writeError(w, r, err)
		}
	})
}

// writeError is the one place where an error becomes an HTTP response.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
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
	var re *admission.RetryError
	if errors.As(err, &re) {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(max(re.After.Seconds(), 1))), 10))
	}
	writeJSON(w, status, api.ErrorBody{Error: detail})
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
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return errdefs.New(errdefs.ErrUnsupportedMediaType, "Content-Type %q: the body must be JSON; send Content-Type: application/json (curl --json, or -H 'Content-Type: application/json' -d)", trimHeader(ct))
		}
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err, s.cfg.MaxBodyBytes)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return decodeError(err, s.cfg.MaxBodyBytes)
		}
		return errdefs.New(errdefs.ErrInvalidArgument, "body: trailing data after the JSON object")
	}
	return nil
}

// trimHeader bounds a header value quoted back to the caller.
func trimHeader(v string) string {
	if len(v) > 64 {
		return v[:64] + "..."
	}
	return v
}

func decodeError(err error, limit int64) error {
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
