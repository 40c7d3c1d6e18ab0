package web

import (
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/server/servertest"
	"github.com/jaild/jaild/internal/server/servertest/raw"
)

// fakeDaemon serves handler on a Unix socket and returns a client of it.
func fakeDaemon(t *testing.T, handler http.HandlerFunc) *client.Client {
	t.Helper()
	return client.New(raw.Serve(t, handler))
}

// recorder is a fake daemon that answers every request with status and
// body and keeps what it was sent.
type recorder struct {
	mu     sync.Mutex
	method string
	path   string
	body   string
	status int
	header map[string]string
	answer string
}

func (d *recorder) serve(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	d.mu.Lock()
	d.method, d.path, d.body = r.Method, r.URL.Path, string(b)
	d.mu.Unlock()
	for k, v := range d.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(d.status)
	io.WriteString(w, d.answer)
}

// newServer serves the playground in front of servertest's daemon: the
// real handlers over a fake engine.
func newServer(t *testing.T, allowRemote bool) (*Server, *servertest.Harness) {
	t.Helper()
	d := servertest.Default(t)
	s, err := New(d.Client, allowRemote)
	if err != nil {
		t.Fatal(err)
	}
	return s, d
}

// proxyServer serves the playground in front of a recorder, for what the
// real handlers never answer and to see the bytes forwarded.
func proxyServer(t *testing.T, d *recorder, allowRemote bool) *Server {
	t.Helper()
	s, err := New(fakeDaemon(t, d.serve), allowRemote)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// called is the daemon's requests as "one, two", for messages.
func called(d *servertest.Harness) string { return strings.Join(d.Seen(), ", ") }

// req builds a request as the page would send it: a loopback Host, and
// the token header for /api/ paths when token is set.
func req(method, target, body, token string) *http.Request {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	r.Host = "127.0.0.1:8080"
	if token != "" {
		r.Header.Set(TokenHeader, token)
	}
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	return r
}

func do(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// wantError checks that w is the daemon's error body with status, type
// and (if field is set) field, its message mentioning mention.
func wantError(t *testing.T, what string, w *httptest.ResponseRecorder, status int, typ, field, mention string) {
	t.Helper()
	var body api.ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Errorf("%s: body %q is not an error body: %v", what, w.Body, err)
		return
	}
	if w.Code != status || body.Error.Type != typ || body.Error.Field != field || !strings.Contains(body.Error.Message, mention) {
		t.Errorf("%s: %d %+v, want %d %s field %q mentioning %q", what, w.Code, body.Error, status, typ, field, mention)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
}

func TestToken(t *testing.T) {
	s, d := newServer(t, false)
	other, _ := newServer(t, false)
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(s.token.String()) || s.token.String() == other.token.String() {
		t.Fatalf("tokens %q and %q: want two different 32-byte hex strings", s.token.String(), other.token.String())
	}
	if u := s.URL(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}); u != "http://127.0.0.1:8080/?token="+s.token.String() {
		t.Errorf("URL %q", u)
	}
	h := s.Handler()

	// The page: no token, an empty, a wrong one, another server's, one
	// in a cookie (as the playground once set it).
	for _, target := range []string{"/", "/?x=1", "/?token=", "/?token=" + strings.Repeat("0", 64), "/?token=" + other.token.String(), "/?token=" + s.token.String()[:63]} {
		wantError(t, "GET "+target, do(h, req("GET", target, "", "")), 403, "forbidden", "", "token")
	}
	r := req("GET", "/", "", "")
	r.AddCookie(&http.Cookie{Name: "token", Value: s.token.String()})
	wantError(t, "GET / with the token in a cookie", do(h, r), 403, "forbidden", "", "token")

	// The right token in the URL: the page itself, no redirect, with the
	// token for its script; the same again (a reload).
	for range 2 {
		w := do(h, req("GET", "/?token="+s.token.String(), "", ""))
		if w.Code != 200 || !strings.Contains(w.Body.String(), `<meta name="jaild-token" content="`+s.token.String()+`">`) ||
			strings.Contains(w.Body.String(), tokenPlaceholder) || w.Header().Get("Location") != "" {
			t.Errorf("GET /?token=…: %d (Location %q), want the page with the token in its meta tag", w.Code, w.Header().Get("Location"))
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("CSP %q", csp)
		}
		if rp := w.Header().Get("Referrer-Policy"); rp != "no-referrer" {
			t.Errorf("Referrer-Policy %q: the page's URL holds the token", rp)
		}
	}

	// The API takes the header only: the token in the query is not enough.
	wantError(t, "POST /api/format with the token in the query", do(h, req("POST", "/api/format?token="+s.token.String(), `{"code":"x"}`, "")), 403, "forbidden", "", TokenHeader)
	wantError(t, "GET /api/info with the token in the query", do(h, req("GET", "/api/info?token="+s.token.String(), "", "")), 403, "forbidden", "", TokenHeader)
	wantError(t, "POST /api/format with a wrong token", do(h, req("POST", "/api/format", `{"code":"x"}`, other.token.String())), 403, "forbidden", "", TokenHeader)
	wantError(t, "GET /api/info with no token", do(h, req("GET", "/api/info", "", "")), 403, "forbidden", "", TokenHeader)
	if len(d.Seen()) != 0 {
		t.Errorf("the daemon was called (%s) by a request without the token", called(d))
	}
	if w := do(h, req("GET", "/api/info", "", s.token.String())); w.Code != 200 || called(d) != "GET /v1/info" {
		t.Errorf("GET /api/info with the token: %d, daemon got %s", w.Code, called(d))
	}

	// The assets are public; anything else under /assets/ is not served
	// without the token.
	if w := do(h, req("GET", "/assets/app.js", "", "")); w.Code != 200 || w.Body.Len() == 0 {
		t.Errorf("GET /assets/app.js without the token: %d, want the public bundle", w.Code)
	}
	wantError(t, "POST /assets/app.js", do(h, req("POST", "/assets/app.js", `{}`, "")), 403, "forbidden", "", "token")
	wantError(t, "GET /assets/../", do(h, req("GET", "/assets/../", "", "")), 403, "forbidden", "", "token")
}

// TestNoCookie: no answer, to any request, sets a cookie, which the
// browser would send to every other server on the host.
func TestNoCookie(t *testing.T) {
	s, _ := newServer(t, false)
	h := s.Handler()
	for _, r := range []*http.Request{
		req("GET", "/?token="+s.token.String(), "", ""),
		req("GET", "/?token=wrong", "", ""),
		req("GET", "/", "", ""),
		req("GET", "/assets/app.js", "", ""),
		req("GET", "/assets/app.css", "", ""),
		req("GET", "/api/info", "", s.token.String()),
		req("POST", "/api/format", `{"code":"x"}`, s.token.String()),
		req("GET", "/api/info", "", ""),
		req("GET", "/nope?token="+s.token.String(), "", ""),
	} {
		target := r.Method + " " + r.URL.String()
		w := do(h, r)
		if sc := w.Header().Values("Set-Cookie"); len(sc) != 0 {
			t.Errorf("%s: Set-Cookie %q", target, sc)
		}
	}
}

func TestHostAndOrigin(t *testing.T) {
	s, _ := newServer(t, false)
	h := s.Handler()
	for _, host := range []string{"evil.example.com", "evil.example.com:8080", "10.0.0.1:8080", ""} {
		r := req("POST", "/api/format", `{"code":"x"}`, s.token.String())
		r.Host = host
		wantError(t, "Host "+host, do(h, r), 403, "forbidden", "", "not a loopback name")
	}
	for _, host := range []string{"localhost:8080", "[::1]:8080", "127.0.0.1:1"} {
		r := req("POST", "/api/format", `{"code":"x"}`, s.token.String())
		r.Host = host
		if w := do(h, r); w.Code != 200 {
			t.Errorf("Host %s: %d %s, want 200", host, w.Code, w.Body)
		}
	}
	// A page of another site: its POST is refused even with the token.
	r := req("POST", "/api/format", `{"code":"x"}`, s.token.String())
	r.Header.Set("Origin", "http://evil.example.com")
	wantError(t, "Origin http://evil.example.com", do(h, r), 403, "forbidden", "", "cross-origin")
	r = req("POST", "/api/format", `{"code":"x"}`, s.token.String())
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	wantError(t, "Sec-Fetch-Site cross-site", do(h, r), 403, "forbidden", "", "cross-origin")
	r = req("POST", "/api/format", `{"code":"x"}`, s.token.String())
	r.Header.Set("Origin", "http://127.0.0.1:8080")
	r.Header.Set("Sec-Fetch-Site", "same-origin")
	if w := do(h, r); w.Code != 200 {
		t.Errorf("same-origin POST: %d %s", w.Code, w.Body)
	}

	// --allow-remote: any Host, the token still needed.
	remote, _ := newServer(t, true)
	r = req("GET", "/api/info", "", "")
	r.Host = "jaild.example.com:8080"
	wantError(t, "allow-remote without the token", do(remote.Handler(), r), 403, "forbidden", "", "token")
	r = req("GET", "/api/info", "", remote.token.String())
	r.Host = "jaild.example.com:8080"
	if w := do(remote.Handler(), r); w.Code != 200 {
		t.Errorf("allow-remote, another Host, the token: %d %s, want 200", w.Code, w.Body)
	}
}

func TestBodies(t *testing.T) {
	s, d := newServer(t, false)
	h := s.Handler()
	big := `{"code":"` + strings.Repeat("x", MaxBodyBytes) + `"}`
	for _, tc := range []struct {
		what, path, body, ctype string
		status                  int
		typ, field, mention     string
	}{
		{"over the bound", "/api/execute", big, "application/json", 413, "too_large", "body", "larger than 4194304 bytes"},
		{"unknown field", "/api/lint", `{"code":"x","nope":1}`, "application/json", 400, "invalid_argument", "body", "nope"},
		{"two objects", "/api/lint", `{"code":"x"}{"code":"y"}`, "application/json", 400, "invalid_argument", "body", "more than one"},
		{"trailing bytes", "/api/lint", `{"code":"x"} x`, "application/json", 400, "invalid_argument", "body", ""},
		{"not JSON", "/api/format", `code = 1`, "application/json", 400, "invalid_argument", "body", "not a valid request"},
		{"a wrong type", "/api/execute", `{"code":1}`, "application/json", 400, "invalid_argument", "body", "code"},
		{"not JSON's media type", "/api/format", `{"code":"x"}`, "text/plain", 415, "unsupported_media_type", "", "application/json"},
	} {
		r := req("POST", tc.path, tc.body, s.token.String())
		r.Header.Set("Content-Type", tc.ctype)
		wantError(t, tc.what, do(h, r), tc.status, tc.typ, tc.field, tc.mention)
	}
	if len(d.Seen()) != 0 {
		t.Errorf("the daemon got %s from a refused body", called(d))
	}
	wantError(t, "no such API", do(h, req("GET", "/api/sessions", "", s.token.String())), 404, "not_found", "", "/api/sessions")
	wantError(t, "no such page", do(h, req("GET", "/etc/passwd", "", s.token.String())), 404, "not_found", "", "")
	wantError(t, "no such asset", do(h, req("GET", "/assets/..%2fweb.go", "", s.token.String())), 404, "not_found", "", "")
}

func TestForward(t *testing.T) {
	answer := `{"run_id":"r1","status":"ok","stdout":"42\n","figures":[{"name":"f","content_b64":"iVBORw0KGgo="}]}`
	d := &recorder{status: 200, answer: answer}
	s := proxyServer(t, d, false)
	h := s.Handler()
	w := do(h, req("POST", "/api/execute", `{"code":"print(42)","limits":{"timeout_ms":1500,"memory_mb":256},"return_files":["*.csv"]}`, s.token.String()))
	if w.Code != 200 || w.Body.String() != answer {
		t.Errorf("execute: %d %q, want the daemon's answer unchanged", w.Code, w.Body)
	}
	var sent api.ExecuteRequest
	if err := json.Unmarshal([]byte(d.body), &sent); err != nil || d.method != "POST" || d.path != "/v1/execute" ||
		sent.Code != "print(42)" || sent.Limits == nil || *sent.Limits.TimeoutMs != 1500 || *sent.Limits.MemoryMB != 256 ||
		len(sent.ReturnFiles) != 1 || sent.ReturnFiles[0] != "*.csv" {
		t.Errorf("the daemon got %s %s %s (%v)", d.method, d.path, d.body, err)
	}
	for path, daemonPath := range map[string]string{"/api/lint": "/v1/lint", "/api/format": "/v1/format"} {
		if w := do(h, req("POST", path, `{"code":"import os"}`, s.token.String())); w.Code != 200 || d.path != daemonPath || d.body != `{"code":"import os"}` {
			t.Errorf("%s: %d, the daemon got %s %s", path, w.Code, d.path, d.body)
		}
	}
	if w := do(h, req("GET", "/api/openapi.json", "", s.token.String())); w.Code != 200 || d.method != "GET" || d.path != "/v1/openapi.json" {
		t.Errorf("openapi.json: %d, the daemon got %s %s", w.Code, d.method, d.path)
	}
}

// TestDaemonErrors: what the daemon refuses reaches the page as the
// daemon said it; a daemon that cannot be reached or answers nonsense
// is a JSON error too.
func TestDaemonErrors(t *testing.T) {
	d := &recorder{
		status: 429,
		header: map[string]string{"Retry-After": "7"},
		answer: `{"error":{"type":"rate_limited","message":"daily quota of 3 runs used up","field":""}}`,
	}
	s := proxyServer(t, d, false)
	h := s.Handler()
	w := do(h, req("POST", "/api/execute", `{"code":"1"}`, s.token.String()))
	wantError(t, "rate limited", w, 429, "rate_limited", "", "daily quota of 3 runs")
	if w.Header().Get("Retry-After") != "7" {
		t.Errorf("Retry-After %q, want the daemon's 7", w.Header().Get("Retry-After"))
	}

	d.status, d.header = 400, nil
	d.answer = `{"error":{"type":"invalid_argument","message":"limits.memory_mb: 99999 over the maximum 1024","field":"limits.memory_mb"}}`
	wantError(t, "a bound", do(h, req("POST", "/api/execute", `{"code":"1","limits":{"memory_mb":99999}}`, s.token.String())),
		400, "invalid_argument", "limits.memory_mb", "over the maximum 1024")

	d.status, d.answer = 404, `{"error":{"type":"not_found","message":"no route GET /v1/openapi.json"}}`
	wantError(t, "an older daemon", do(h, req("GET", "/api/openapi.json", "", s.token.String())), 404, "not_found", "", "no route")

	d.status, d.answer = 200, `not json`
	wantError(t, "a malformed answer", do(h, req("POST", "/api/format", `{"code":"1"}`, s.token.String())), 500, "internal", "", "malformed response")

	gone, err := New(client.New(filepath.Join(t.TempDir(), "none.sock")), false)
	if err != nil {
		t.Fatal(err)
	}
	wantError(t, "no daemon", do(gone.Handler(), req("POST", "/api/lint", `{"code":"1"}`, gone.token.String())), 503, "unavailable", "", "cannot connect to jaild")
}

// TestAssets: the embedded page names only assets that are embedded,
// and each is served with its type.
func TestAssets(t *testing.T) {
	s, _ := newServer(t, false)
	h := s.Handler()
	page, err := fs.ReadFile(s.assets, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="(/assets/[^"]+)"`).FindAllStringSubmatch(string(page), -1)
	if len(refs) != 2 {
		t.Fatalf("index.html names %d assets, want the script and the style", len(refs))
	}
	types := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}
	for _, m := range refs {
		w := do(h, req("GET", m[1], "", ""))
		if w.Code != 200 || w.Body.Len() == 0 || w.Header().Get("Content-Type") != types[filepath.Ext(m[1])] {
			t.Errorf("GET %s: %d, %d bytes, %q", m[1], w.Code, w.Body.Len(), w.Header().Get("Content-Type"))
		}
	}
}

// TestAssetTypes: an asset's Content-Type comes from its extension
// through assetTypes alone, whatever the host's /etc/mime.types says.
func TestAssetTypes(t *testing.T) {
	s, _ := newServer(t, false)
	s.assets = fstest.MapFS{
		"assets/a.js":   {Data: []byte("x")},
		"assets/a.css":  {Data: []byte("x")},
		"assets/a.html": {Data: []byte("x")},
		"assets/a.svg":  {Data: []byte("x")},
		"assets/a.png":  {Data: []byte("x")},
		"assets/a.wasm": {Data: []byte("x")},
		"assets/a":      {Data: []byte("x")},
	}
	h := s.Handler()
	for name, want := range map[string]string{
		"a.js":   "text/javascript; charset=utf-8",
		"a.css":  "text/css; charset=utf-8",
		"a.html": "text/html; charset=utf-8",
		"a.svg":  "image/svg+xml",
		"a.png":  "image/png",
		"a.wasm": "application/octet-stream",
		"a":      "application/octet-stream",
	} {
		w := do(h, req("GET", "/assets/"+name, "", ""))
		if w.Code != 200 || w.Header().Get("Content-Type") != want || w.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET /assets/%s: %d %q (nosniff %q), want %q", name, w.Code, w.Header().Get("Content-Type"), w.Header().Get("X-Content-Type-Options"), want)
		}
	}
}
