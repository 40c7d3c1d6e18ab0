// Package web is the playground of `jailctl web`: a page with a Python
// editor that runs, lints and formats code in the daemon, and the API
// reference rendered from the daemon's OpenAPI document. The page (built
// from ui/ into dist/, embedded here) talks to a small JSON API under
// /api/ that forwards each call to the daemon through package client, as
// the uid that started jailctl.
//
// Whoever reaches the port acts as that uid, so the page and the API need
// the server's random token: the page in the query of the URL the server
// prints (kept in the address bar, so a reload works; the page is served
// with Referrer-Policy no-referrer, so the token never leaves in a
// Referer), the API in the X-Jaild-Token header, which no other site's
// page can set; the page hands its script the token in a meta tag. No
// cookie is ever set: browsers do not keep cookies apart by port, so
// another server on the same host would receive it. The assets under
// /assets/ are the public bundle, the same in every jailctl, and are
// served without the token. Unless remote clients are allowed, a Host that
// is not a loopback name is refused (DNS rebinding), and a cross-origin
// POST always is.
package web

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/loopback"
)

//go:embed dist
var dist embed.FS

// TokenHeader carries the token on API requests.
const TokenHeader = "X-Jaild-Token"

// MaxBodyBytes bounds the body of an API request: code and limits, never
// files (the page sends none).
const MaxBodyBytes = 4 << 20

// tokenPlaceholder is replaced by the token in index.html, where the
// page's script reads it.
const tokenPlaceholder = "__JAILD_TOKEN__"

// Server is the playground of one jailctl web process.
type Server struct {
	client      *client.Client
	token       loopback.Token
	allowRemote bool
	assets      fs.FS
	terms       sync.WaitGroup // the terminals open (each ends its session)
}

// New returns a playground that forwards to c, with a fresh token of 32
// random bytes. allowRemote turns off the loopback Host check (the token
// and the Origin check stay).
func New(c *client.Client, allowRemote bool) (*Server, error) {
	token, err := loopback.NewToken()
	if err != nil {
		return nil, err
	}
	assets, err := fs.Sub(dist, "dist")
	if err != nil {
		return nil, err
	}
	return &Server{
		client:      c,
		token:       token,
		allowRemote: allowRemote,
		assets:      assets,
	}, nil
}

// URL is the address to open: the listener's, with the token.
func (s *Server) URL(addr net.Addr) string {
	return "http://" + addr.String() + "/?token=" + s.token.String()
}

// Handler serves the page (GET /?token=TOKEN), its assets (GET
// /assets/NAME, no token) and the API (TokenHeader; the terminal's
// WebSocket, GET /api/terminal, takes it as a subprotocol). Every error is the
// daemon's JSON error body: 403 forbidden for a missing or wrong token, a
// Host that is not loopback or a cross-origin request; 413 too_large for a
// body over MaxBodyBytes; the daemon's own status and body for what it
// refused; 503 unavailable when the daemon cannot be reached.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/execute", forward[api.ExecuteRequest](s, "/v1/execute"))
	mux.HandleFunc("POST /api/lint", forward[api.LintRequest](s, "/v1/lint"))
	mux.HandleFunc("POST /api/format", forward[api.FormatRequest](s, "/v1/format"))
	mux.HandleFunc("GET /api/info", s.get("/v1/info"))
	mux.HandleFunc("GET /api/openapi.json", s.get("/v1/openapi.json"))
	mux.HandleFunc("GET /api/terminal", s.terminal)
	mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errdefs.New(errdefs.ErrNotFound, "no API %s %s", r.Method, r.URL.Path))
	})
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("GET /assets/{name}", s.asset)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errdefs.New(errdefs.ErrNotFound, "no page %s %s", r.Method, r.URL.Path))
	})

	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errdefs.New(errdefs.ErrForbidden, "cross-origin request refused"))
	}))
	authed := cop.Handler(s.authenticate(mux))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer") // the page's URL may hold the token
		h.Set("Cache-Control", "no-store")
		if !s.allowRemote && !loopback.IsHostHeader(r.Host) {
			writeError(w, errdefs.New(errdefs.ErrForbidden, "Host %q is not a loopback name (jailctl web serves this machine only; see --allow-remote)", r.Host))
			return
		}
		authed.ServeHTTP(w, r)
	})
}

// authenticate lets through GETs of the assets, which hold no secret, and
// requests with the token: in TokenHeader anywhere (the page's script
// sends it there), and for pages also in the query, where the URL jailctl
// web printed has it. The API takes the header only, so that its calls
// come from a script of the page, never from a link or form (the
// cross-origin check stops other sites' scripts).
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		isAPI := strings.HasPrefix(r.URL.Path, "/api/")
		switch {
		case (r.Method == http.MethodGet || r.Method == http.MethodHead) && path.Dir(r.URL.Path) == "/assets" && path.Clean(r.URL.Path) == r.URL.Path,
			s.valid(r.Header.Get(TokenHeader)),
			!isAPI && s.valid(r.URL.Query().Get("token")),
			r.URL.Path == "/api/terminal" && s.valid(tokenProtocol(r)):
			next.ServeHTTP(w, r)
		case isAPI:
			writeError(w, errdefs.New(errdefs.ErrForbidden, "no token: send the token jailctl web printed in the %s header", TokenHeader))
		case r.URL.Query().Has("token"):
			writeError(w, errdefs.New(errdefs.ErrForbidden, "wrong token: open the URL jailctl web printed"))
		default:
			writeError(w, errdefs.New(errdefs.ErrForbidden, "no token: open the URL jailctl web printed (http://HOST:PORT/?token=...)"))
		}
	})
}

func (s *Server) valid(token string) bool { return s.token.Equal(token) }

// csp keeps the page to its own scripts; CodeMirror adds style elements,
// figures are data: URLs and downloads blob: ones.
const csp = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	page, err := fs.ReadFile(s.assets, "index.html")
	if err != nil {
		writeError(w, fmt.Errorf("index.html: %w", err))
		return
	}
	w.Header().Set("Content-Security-Policy", csp)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(bytes.ReplaceAll(page, []byte(tokenPlaceholder), []byte(s.token.String())))
}

func (s *Server) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	b, err := fs.ReadFile(s.assets, "assets/"+name)
	if err != nil {
		writeError(w, errdefs.New(errdefs.ErrNotFound, "no asset %q", name))
		return
	}
	ct, ok := assetTypes[path.Ext(name)]
	if !ok {
		ct = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ct)
	_, _ = w.Write(b)
}

// assetTypes are the assets' Content-Types, fixed here rather than taken
// from mime.TypeByExtension, which reads the host's /etc/mime.types.
var assetTypes = map[string]string{
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".html": "text/html; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
}

// forward returns a handler that decodes the request body as a T (one
// JSON object of at most MaxBodyBytes, no unknown field) and sends it to
// the daemon's path.
func forward[T any](s *Server, daemonPath string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/json" {
			writeError(w, errdefs.New(errdefs.ErrUnsupportedMediaType, "Content-Type must be application/json"))
			return
		}
		var req T
		if err := decode(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		raw, err := s.client.Do(r.Context(), http.MethodPost, daemonPath, &req)
		s.reply(w, r, raw, err)
	}
}

func (s *Server) get(daemonPath string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw, err := s.client.Do(r.Context(), http.MethodGet, daemonPath, nil)
		s.reply(w, r, raw, err)
	}
}

// decode reads one JSON object of at most MaxBodyBytes into v.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("more than one JSON value")
	}
	if err == nil {
		if _, e := dec.Token(); !errors.Is(e, io.EOF) {
			err = errors.New("data after the JSON object")
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return errdefs.FieldOfClass(errdefs.ErrTooLarge, "body", "larger than %d bytes", MaxBodyBytes)
	case err != nil:
		return errdefs.Field("body", "not a valid request: %v", err)
	}
	return nil
}

// reply writes the daemon's answer, or err as the daemon would have.
func (s *Server) reply(w http.ResponseWriter, r *http.Request, raw json.RawMessage, err error) {
	if err != nil {
		if r.Context().Err() != nil {
			return // the page went away; nobody reads an answer
		}
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(raw)
}

// writeError writes err as the daemon's error body. An error the daemon
// sent keeps its status, type, field and Retry-After; an unreachable
// daemon is unavailable; an error of no class is internal, with its
// message: the page's user is jailctl's own.
func writeError(w http.ResponseWriter, err error) {
	var ce *client.Error
	var conn *client.ConnectError
	var detail api.ErrorDetail
	var status int
	switch {
	case errors.As(err, &ce):
		status = ce.Err.Status
		_, detail.Type = errdefs.Classify(ce.Err.Class)
		detail.Message, detail.Field = ce.Err.Message, ce.Err.Field
		if ce.RetryAfter > 0 {
			w.Header().Set("Retry-After", fmt.Sprint(int64(ce.RetryAfter/time.Second)))
		}
	case errors.As(err, &conn):
		status, detail.Type = errdefs.Classify(errdefs.ErrUnavailable)
		detail.Message = err.Error()
	default:
		status, detail.Type = errdefs.Classify(err)
		detail.Message = err.Error()
		var fe *errdefs.FieldError
		if errors.As(err, &fe) {
			detail.Field = fe.Field
		}
	}
	if status < 400 || status > 599 {
		status = http.StatusBadGateway
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: detail})
}

// Serve serves Handler on l until ctx is done (nil) or serving fails.
// Requests in flight get a second to finish.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute,
		// A terminal's connection is hijacked, out of Shutdown's reach:
		// ctx's end ends it, and its session.
		BaseContext: func(net.Listener) context.Context { return ctx }}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve the playground: %w", err)
	case <-ctx.Done():
	}
	grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := srv.Shutdown(grace); err != nil {
		srv.Close()
	}
	ended := make(chan struct{})
	go func() {
		s.terms.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
	}
	return nil
}
