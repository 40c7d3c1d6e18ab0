package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pb33f/jsonschema/v6"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/rootfs"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/server"
	"github.com/jaild/jaild/internal/server/servertest"
)

// openapiPaths returns the document's paths and, for each, its methods in
// upper case.
func openapiPaths(t *testing.T) map[string][]string {
	t.Helper()
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI(), &d); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for p, item := range d.Paths {
		for m := range item {
			if m != "parameters" {
				out[p] = append(out[p], strings.ToUpper(m))
			}
		}
		slices.Sort(out[p])
	}
	return out
}

// sample fills a path template's {id} with an id of the right form.
func sample(path string) string {
	path = strings.Replace(path, "{path}", "workspace%2Fa.txt", 1)
	if strings.HasPrefix(path, "/v1/files/") {
		return strings.Replace(path, "{id}", "f-0123456789abcdef0123456789abcdef", 1)
	}
	return strings.Replace(path, "{id}", "s-lx3k2a-0123456789abcdef01234567", 1)
}

// TestOpenAPIRoutes holds the server's routes and the document's paths
// together, both ways: the route table is the document's operations (a
// HEAD in the document has its GET), and the real handler answers every
// method the document lists for a path (no 405, no "no endpoint"), and
// 405 with the right Allow to every other.
func TestOpenAPIRoutes(t *testing.T) {
	h := harness(t, nil)
	doc := openapiPaths(t)
	var fromDoc []string
	for p, methods := range doc {
		for _, m := range methods {
			if m == http.MethodHead {
				if !slices.Contains(methods, http.MethodGet) {
					t.Errorf("%s: HEAD without GET", p)
				}
				continue
			}
			fromDoc = append(fromDoc, m+" "+p)
		}
	}
	slices.Sort(fromDoc)
	routes := server.RoutePatterns(h.Server)
	slices.Sort(routes)
	if !slices.Equal(fromDoc, routes) {
		t.Errorf("the document's operations\n%v\nthe server's routes\n%v", fromDoc, routes)
	}
	probed := 0
	for p, methods := range doc {
		allow := slices.Clone(methods)
		if slices.Contains(allow, http.MethodGet) && !slices.Contains(allow, http.MethodHead) {
			allow = append(allow, http.MethodHead)
		}
		slices.Sort(allow)
		for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"} {
			r := send(t, h, m, sample(p), nil, nil)
			probed++
			status, hdr := r.status, r.header
			var e api.ErrorDetail
			if status >= 400 {
				if m == http.MethodHead {
					e.Type = "method_not_allowed" // a HEAD answer has no body: status and Allow tell
				} else {
					e = r.errBody(t)
				}
			}
			if slices.Contains(allow, m) {
				if status == http.StatusMethodNotAllowed || (status == http.StatusNotFound && strings.Contains(e.Message, "no endpoint")) {
					t.Errorf("%s %s is in the document; the server answers %d %q", m, p, status, e.Message)
				}
				continue
			}
			if status != http.StatusMethodNotAllowed || e.Type != "method_not_allowed" || hdr.Get("Allow") != strings.Join(allow, ", ") {
				t.Errorf("%s %s (not in the document): HTTP %d %q Allow %q; want 405 Allow %q", m, p, status, e.Type, hdr.Get("Allow"), strings.Join(allow, ", "))
			}
		}
	}
	t.Logf("%d routes, %d paths, %d probes", len(routes), len(doc), probed)
}

// TestOpenAPIServed: GET /v1/openapi.json serves the embedded document.
func TestOpenAPIServed(t *testing.T) {
	h := harness(t, nil)
	r := send(t, h, "GET", "/v1/openapi.json", nil, nil)
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" || !bytes.Equal(r.body, api.OpenAPI()) {
		t.Fatalf("HTTP %d %q, %d bytes; want the document (%d bytes)", r.status, r.header.Get("Content-Type"), len(r.body), len(api.OpenAPI()))
	}
	var d map[string]any
	if err := json.Unmarshal(r.body, &d); err != nil || d["openapi"] != "3.1.0" {
		t.Errorf("served document: %v, openapi %v", err, d["openapi"])
	}
}

// contract sends requests to a harness and validates each exchange
// against the document with libopenapi-validator.
type contract struct {
	t       *testing.T
	v       validator.Validator
	schemas *jsonschema.Compiler
	hc      *http.Client
	mu      sync.Mutex
	seen    map[string]bool // "METHOD /template STATUS"
}

var contractDoc = sync.OnceValues(func() (validator.Validator, error) {
	d, err := libopenapi.NewDocument(api.OpenAPI())
	if err != nil {
		return nil, err
	}
	v, errs := validator.NewValidator(d)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return v, nil
})

func newContract(t *testing.T) *contract {
	v, err := contractDoc()
	if err != nil {
		t.Fatal(err)
	}
	var root any
	if err := json.Unmarshal(api.OpenAPI(), &root); err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("openapi.json", root); err != nil {
		t.Fatal(err)
	}
	return &contract{t: t, v: v, schemas: c, seen: map[string]bool{}}
}

func (c *contract) on(h *servertest.Harness) *contract {
	c.hc = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.Socket)
	}}}
	return c
}

// exchange is a request for contract.do.
type exchange struct {
	method, path, template string
	hdr                    map[string]string
	body                   []byte
	// badRequest: the request breaks the document on purpose (a 4xx
	// test); only the response is validated.
	badRequest bool
}

// do sends x, validates the request (unless it is bad on purpose) and
// the response, and returns the response with its body read.
func (c *contract) do(x exchange) (*http.Response, []byte) {
	c.t.Helper()
	newReq := func() *http.Request {
		req, err := http.NewRequest(x.method, "http://jaild"+x.path, bytes.NewReader(x.body))
		if err != nil {
			c.t.Fatal(err)
		}
		if x.body == nil {
			req.Body, req.ContentLength = http.NoBody, 0
		}
		for k, v := range x.hdr {
			req.Header.Set(k, v)
		}
		return req
	}
	resp, err := c.hc.Do(newReq())
	if err != nil {
		c.t.Fatalf("%s %s: %v", x.method, x.path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatalf("%s %s: %v", x.method, x.path, err)
	}
	what := fmt.Sprintf("%s %s → %d", x.method, x.path, resp.StatusCode)
	if !x.badRequest {
		if ok, errs := c.v.ValidateHttpRequest(newReq()); !ok {
			for _, e := range errs {
				c.t.Errorf("%s: the request breaks the document: %s: %s", what, e.Message, e.Reason)
			}
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	stream := false
	if ct := resp.Header.Get("Content-Type"); ct == api.MediaNDJSON || strings.HasPrefix(ct, api.MediaSSE) {
		// The validator would read a stream as one value: its events are
		// validated one by one (events).
		stream = true
		if x.hdr["Accept"] == "" || !strings.HasPrefix(ct, x.hdr["Accept"]) {
			c.t.Errorf("%s: a %s stream for Accept %q", what, ct, x.hdr["Accept"])
		}
	}
	if ok, errs := c.v.ValidateHttpResponse(newReq(), resp); !ok && !stream {
		for _, e := range errs {
			c.t.Errorf("%s: the response breaks the document: %s: %s %s", what, e.Message, e.Reason, body)
			for _, se := range e.SchemaValidationErrors {
				c.t.Errorf("  %s %s: %s", se.KeywordLocation, se.FieldPath, se.Reason)
			}
		}
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	c.mu.Lock()
	c.seen[fmt.Sprintf("%s %s %d", x.method, x.template, resp.StatusCode)] = true
	c.mu.Unlock()
	return resp, body
}

// upgrade sends a WebSocket upgrade (the terminal's) and validates its
// request and a 101 answer; the connection is closed at once.
func (c *contract) upgrade(path, template string) {
	c.t.Helper()
	newReq := func() *http.Request {
		req, err := http.NewRequest("GET", "http://jaild"+path, http.NoBody)
		if err != nil {
			c.t.Fatal(err)
		}
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		return req
	}
	resp, err := c.hc.Do(newReq())
	if err != nil {
		c.t.Fatalf("GET %s (upgrade): %v", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		c.t.Fatalf("GET %s (upgrade): HTTP %d", path, resp.StatusCode)
	}
	if ok, errs := c.v.ValidateHttpRequest(newReq()); !ok {
		for _, e := range errs {
			c.t.Errorf("GET %s: the request breaks the document: %s: %s", path, e.Message, e.Reason)
		}
	}
	resp.Body = http.NoBody
	if ok, errs := c.v.ValidateHttpResponse(newReq(), resp); !ok {
		for _, e := range errs {
			c.t.Errorf("GET %s → 101: the response breaks the document: %s: %s", path, e.Message, e.Reason)
		}
	}
	c.mu.Lock()
	c.seen["GET "+template+" 101"] = true
	c.mu.Unlock()
}

// schema compiles a schema of the document by its JSON pointer.
func (c *contract) schema(ptr string) *jsonschema.Schema {
	c.t.Helper()
	s, err := c.schemas.Compile("openapi.json#" + ptr)
	if err != nil {
		c.t.Fatal(err)
	}
	return s
}

// events validates a stream's events (NDJSON lines, or SSE records) each
// as an Event whose data is its event's schema, and returns their names.
func (c *contract) events(what string, body []byte, sse bool, done string) []string {
	c.t.Helper()
	event := c.schema("/components/schemas/Event")
	dataSchema := map[string]string{
		"start": "EventStartData", "stdout": "EventText", "stderr": "EventText", "figure": "Figure",
		"exception": "ExecError", "result": "EventResultData", "done": done, "error": "ErrorBody",
	}
	var names []string
	check := func(ev map[string]any) {
		if err := event.Validate(ev); err != nil {
			c.t.Errorf("%s: event %v is no Event: %v", what, ev, err)
			return
		}
		name := ev["event"].(string)
		names = append(names, name)
		if s, ok := dataSchema[name]; ok {
			if err := c.schema("/components/schemas/" + s).Validate(ev["data"]); err != nil {
				c.t.Errorf("%s: the data of %s is no %s: %v", what, name, s, err)
			}
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	rec := map[string]any{}
	for sc.Scan() {
		line := sc.Text()
		if !sse {
			var ev map[string]any
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				c.t.Errorf("%s: line %q: %v", what, line, err)
				continue
			}
			check(jsonNumbers(ev))
			continue
		}
		switch k, v, _ := strings.Cut(line, ": "); k {
		case "":
			if len(rec) > 0 {
				check(rec)
			}
			rec = map[string]any{}
		case "id":
			var n json.Number
			if err := json.Unmarshal([]byte(v), &n); err != nil {
				c.t.Errorf("%s: id %q", what, v)
			}
			rec["id"] = n
		case "event":
			rec["event"] = v
		case "data":
			var data any
			if err := json.Unmarshal([]byte(v), &data); err != nil {
				c.t.Errorf("%s: data %q: %v", what, v, err)
			}
			rec["data"] = jsonNumbers(data)
		}
	}
	return names
}

// jsonNumbers re-decodes v with numbers as json.Number (what the schema
// validator wants).
func jsonNumbers[T any](v T) T {
	b, _ := json.Marshal(v)
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out T
	_ = dec.Decode(&out)
	return out
}

func jsonBody(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var jsonHdr = map[string]string{"Content-Type": "application/json"}

// TestOpenAPIResponses drives every operation of the in-process server
// (fake engine) through its successes and the errors it can be brought to,
// and validates every request and response against the document; stream
// events are validated one by one. It fails if an operation of the
// document was never answered with a success, or an error class never
// came up.
func TestOpenAPIResponses(t *testing.T) {
	c := newContract(t)
	h := harness(t, func(cfg *config.Config) {
		cfg.Admission.RatePerMinute, cfg.Admission.Burst = 6000, 1000
	})
	c.on(h)
	repr := "3"
	line := 2
	h.Engine.RunFunc = func(_ context.Context, req *spec.Request) (*spec.Result, error) {
		switch {
		case len(req.Command) > 1 && req.Command[1] == "check":
			return &spec.Result{Status: spec.StatusOK, Stdout: []byte(`[{"code":"F821","message":"Undefined name x","location":{"row":1,"column":7},"end_location":{"row":1,"column":8},"fix":null,"url":"https://docs.astral.sh/ruff/rules/undefined-name"},
{"code":null,"message":"SyntaxError","location":{"row":2,"column":1},"end_location":{"row":2,"column":2},"fix":{"applicability":"safe"},"url":"https://stale"}]`)}, nil
		case len(req.Command) > 1 && req.Command[1] == "format":
			if string(req.Stdin) == "def(" {
				return &spec.Result{Status: spec.StatusError, ExitCode: 2, Stderr: []byte("error: Failed to parse main.py:1:4")}, nil
			}
			return &spec.Result{Status: spec.StatusOK, Stdout: []byte("x = 1\n")}, nil
		case req.Code == "fail":
			return nil, errors.New("the engine broke")
		}
		if req.OnStart != nil {
			req.OnStart("run-1", false)
			req.Output(1, []byte("out\n"))
			req.Output(2, []byte("err\xff\n"))
		}
		return &spec.Result{
			ID: "run-1", Status: spec.StatusError, ExitCode: 1, Stdout: []byte("out\n"), Stderr: []byte("err\xff\n"),
			Exception:  &spec.Exception{Type: "ValueError", Message: "bad", Line: line},
			ResultRepr: &repr, Duration: 1500 * time.Millisecond, PeakMemoryBytes: 1 << 20,
			Files:   []spec.ReturnedFile{{Path: "o.txt", Size: 2, Data: []byte("hi")}, {Path: "l", Error: "not a regular file (symlink)"}},
			Figures: []spec.Figure{{Name: "figure-1.png", Data: []byte("\x89PNG\r\n\x1a\nxx")}},
			Outputs: []spec.Output{
				{Type: spec.OutputDisplay, Data: []spec.MimeValue{{Type: "text/html", Text: []byte("<b>x</b>")}, {Type: "application/json", JSON: []byte(`[1,{"a":null}]`)}, {Type: "image/png", Bytes: []byte("\x89PNG\r\n\x1a\nxx")}}, Metadata: []byte(`{"image/png":{"width":2}}`)},
				{Type: spec.OutputResult, Data: []spec.MimeValue{{Type: "text/plain", Text: []byte(repr)}}},
			},
		}, nil
	}
	exec := func(body any, hdr map[string]string, bad bool) (*http.Response, []byte) {
		if hdr == nil {
			hdr = jsonHdr
		}
		return c.do(exchange{method: "POST", path: "/v1/execute", template: "/v1/execute", hdr: hdr, body: jsonBody(t, body), badRequest: bad})
	}
	want := func(resp *http.Response, body []byte, status int) {
		t.Helper()
		if resp.StatusCode != status {
			t.Errorf("%s %s: HTTP %d, want %d: %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, status, body)
		}
	}

	// The daemon.
	for _, p := range []string{"/v1/info", "/v1/health", "/v1/ready", "/v1/openapi.json", "/metrics"} {
		resp, body := c.do(exchange{method: "GET", path: p, template: p})
		want(resp, body, 200)
	}

	// Runs: a full result, its streams, and the errors.
	up := upload(t, h, "in.csv", "a,b\n")
	resp, body := exec(api.ExecuteRequest{
		Code: "x", ReturnFiles: []string{"*"}, LastLineInteractive: true, Env: map[string]string{"A": "1"},
		Files:  []api.FileIn{{Path: "a/b.txt", ContentB64: base64.StdEncoding.EncodeToString([]byte("data"))}, {Path: "in.csv", FileID: up.FileID}},
		Limits: &api.Limits{TimeoutMs: ptr[int64](1000), MemoryMB: ptr[int64](256)},
	}, nil, false)
	want(resp, body, 200)
	resp, body = exec(api.ExecuteRequest{Code: "x", ReturnFiles: []string{"o.txt"}, ReturnFilesAs: api.ReturnStore}, nil, false)
	want(resp, body, 200)
	for _, accept := range []string{api.MediaNDJSON, api.MediaSSE} {
		hdr := map[string]string{"Content-Type": "application/json", "Accept": accept}
		resp, body = exec(api.ExecuteRequest{Code: "x", LastLineInteractive: true}, hdr, false)
		want(resp, body, 200)
		names := c.events("execute "+accept, body, accept == api.MediaSSE, "ExecuteResponse")
		if !slices.Equal(names, []string{"start", "stdout", "stderr", "figure", "exception", "display", "result", "done"}) {
			t.Errorf("execute %s: events %v", accept, names)
		}
	}
	resp, body = exec(map[string]any{"code": "x", "cod": 1}, nil, true)
	want(resp, body, 400)
	resp, body = exec(api.ExecuteRequest{Code: "x"}, map[string]string{"Content-Type": "text/plain"}, true)
	want(resp, body, 415)
	resp, body = exec(api.ExecuteRequest{Code: "x", Network: api.NetworkInternet}, nil, false)
	want(resp, body, 403)
	resp, body = exec(api.ExecuteRequest{Code: "x", Files: []api.FileIn{{Path: "x", FileID: "f-0123456789abcdef0123456789abcdef"}}}, nil, false)
	want(resp, body, 404)
	resp, body = exec(api.ExecuteRequest{Code: "fail"}, nil, false)
	want(resp, body, 500)

	// Lint and format.
	resp, body = c.do(exchange{method: "POST", path: "/v1/lint", template: "/v1/lint", hdr: jsonHdr, body: jsonBody(t, api.LintRequest{Code: "print(x)", Select: []string{"F"}})})
	want(resp, body, 200)
	resp, body = c.do(exchange{method: "POST", path: "/v1/lint", template: "/v1/lint", hdr: jsonHdr, body: jsonBody(t, api.LintRequest{Code: "x", Select: []string{"nope"}}), badRequest: true})
	want(resp, body, 400)
	resp, body = c.do(exchange{method: "POST", path: "/v1/format", template: "/v1/format", hdr: jsonHdr, body: jsonBody(t, api.FormatRequest{Code: "x=1"})})
	want(resp, body, 200)
	resp, body = c.do(exchange{method: "POST", path: "/v1/format", template: "/v1/format", hdr: jsonHdr, body: jsonBody(t, api.FormatRequest{Code: "def("})})
	want(resp, body, 400)

	// Images: a run, a session and lint in an image other than the
	// default, and the images the daemon does not serve (or that have no
	// ruff), refused naming the field and the images there are.
	resp, body = exec(api.ExecuteRequest{Code: "x", Image: "test-small"}, nil, false)
	want(resp, body, 200)
	var er api.ExecuteResponse
	if err := json.Unmarshal(body, &er); err != nil || er.Image != "test-small" {
		t.Errorf("execute in test-small: image %q (%v)", er.Image, err)
	}
	resp, body = c.do(exchange{method: "POST", path: "/v1/lint", template: "/v1/lint", hdr: jsonHdr, body: jsonBody(t, api.LintRequest{Code: "x", Image: "test"})})
	want(resp, body, 200)
	resp, body = c.do(exchange{method: "POST", path: "/v1/sessions", template: "/v1/sessions", hdr: jsonHdr, body: []byte(`{"image": "test-small"}`)})
	want(resp, body, 201)
	var inSmall api.Session
	if err := json.Unmarshal(body, &inSmall); err != nil || inSmall.Image != "test-small" {
		t.Errorf("session in test-small: image %q (%v)", inSmall.Image, err)
	}
	for _, x := range []struct {
		x       exchange
		message string
	}{
		{exchange{method: "POST", path: "/v1/execute", template: "/v1/execute", hdr: jsonHdr, body: []byte(`{"code": "x", "image": "nope"}`)},
			`no image "nope" on this daemon; it serves test, test-small`},
		{exchange{method: "POST", path: "/v1/sessions", template: "/v1/sessions", hdr: jsonHdr, body: []byte(`{"image": "nope"}`)},
			`no image "nope" on this daemon; it serves test, test-small`},
		{exchange{method: "POST", path: "/v1/lint", template: "/v1/lint", hdr: jsonHdr, body: []byte(`{"code": "x", "image": "test-small"}`)},
			`image "test-small" has no ruff; lint and format run in test`},
		{exchange{method: "POST", path: "/v1/format", template: "/v1/format", hdr: jsonHdr, body: []byte(`{"code": "x", "image": "nope"}`)},
			`no image "nope" on this daemon; it serves test, test-small`},
	} {
		resp, body = c.do(x.x)
		want(resp, body, 400)
		var e api.ErrorBody
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Type != "invalid_argument" || e.Error.Field != "image" || !strings.Contains(e.Error.Message, x.message) {
			t.Errorf("%s %s: %s; want invalid_argument naming image: %q", x.x.method, x.x.path, body, x.message)
		}
	}

	// Sessions: their life, a call and its streams, and the errors.
	resp, body = c.do(exchange{method: "POST", path: "/v1/sessions", template: "/v1/sessions", hdr: jsonHdr, body: []byte(`{"idle_timeout_s": 60, "limits": {"memory_mb": 256}}`)})
	want(resp, body, 201)
	var s api.Session
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatal(err)
	}
	sp := "/v1/sessions/" + s.SessionID
	for _, x := range []exchange{
		{method: "GET", path: "/v1/sessions", template: "/v1/sessions"},
		{method: "GET", path: sp, template: "/v1/sessions/{id}"},
		{method: "POST", path: sp + "/execute", template: "/v1/sessions/{id}/execute", hdr: jsonHdr, body: []byte(`{"code": "x = 1", "limits": {"timeout_ms": 500}}`)},
		{method: "POST", path: sp + "/interrupt", template: "/v1/sessions/{id}/interrupt"},
		{method: "POST", path: sp + "/interrupt", template: "/v1/sessions/{id}/interrupt", hdr: jsonHdr, body: []byte(`{}`)},
		{method: "POST", path: sp + "/pause", template: "/v1/sessions/{id}/pause"},
		{method: "POST", path: sp + "/resume", template: "/v1/sessions/{id}/resume", hdr: jsonHdr, body: []byte(`{}`)},
		{method: "POST", path: sp + "/fork", template: "/v1/sessions/{id}/fork", hdr: jsonHdr, body: []byte(`{"count": 1}`)},
	} {
		resp, body = c.do(x)
		want(resp, body, 200)
	}
	// Snapshots: take one, list, show, roll back, start a session from
	// it, delete it.
	resp, body = c.do(exchange{method: "POST", path: sp + "/snapshots", template: "/v1/sessions/{id}/snapshots"})
	want(resp, body, 201)
	var snap api.Snapshot
	if err := json.Unmarshal(body, &snap); err != nil || snap.SnapshotID == "" {
		t.Fatalf("snapshot: %s %v", body, err)
	}
	for _, x := range []exchange{
		{method: "GET", path: sp + "/snapshots", template: "/v1/sessions/{id}/snapshots"},
		{method: "GET", path: "/v1/snapshots", template: "/v1/snapshots"},
		{method: "GET", path: "/v1/snapshots/" + snap.SnapshotID, template: "/v1/snapshots/{id}"},
		{method: "POST", path: sp + "/restore", template: "/v1/sessions/{id}/restore", hdr: jsonHdr, body: []byte(`{"snapshot_id": "` + snap.SnapshotID + `"}`)},
	} {
		resp, body = c.do(x)
		want(resp, body, 200)
	}
	resp, body = c.do(exchange{method: "POST", path: "/v1/sessions", template: "/v1/sessions", hdr: jsonHdr, body: []byte(`{"from_snapshot": "` + snap.SnapshotID + `", "idle_timeout_s": 60}`)})
	want(resp, body, 201)
	resp, body = c.do(exchange{method: "POST", path: "/v1/sessions", template: "/v1/sessions", hdr: jsonHdr, body: []byte(`{"from_snapshot": "` + snap.SnapshotID + `", "image": "test"}`), badRequest: true})
	want(resp, body, 400)
	resp, body = c.do(exchange{method: "DELETE", path: "/v1/snapshots/" + snap.SnapshotID, template: "/v1/snapshots/{id}"})
	want(resp, body, 200)
	resp, body = c.do(exchange{method: "GET", path: "/v1/snapshots/" + snap.SnapshotID, template: "/v1/snapshots/{id}"})
	want(resp, body, 404)
	for _, accept := range []string{api.MediaNDJSON, api.MediaSSE} {
		resp, body = c.do(exchange{method: "POST", path: sp + "/execute", template: "/v1/sessions/{id}/execute",
			hdr: map[string]string{"Content-Type": "application/json", "Accept": accept}, body: []byte(`{"code": "1"}`)})
		want(resp, body, 200)
		if names := c.events("session call "+accept, body, accept == api.MediaSSE, "SessionExecuteResponse"); len(names) < 2 || names[0] != "start" || names[len(names)-1] != "done" {
			t.Errorf("session call %s: events %v", accept, names)
		}
	}
	resp, body = c.do(exchange{method: "POST", path: sp + "/execute", template: "/v1/sessions/{id}/execute", hdr: jsonHdr, body: []byte(`{"code": "1", "network": "internet"}`), badRequest: true})
	want(resp, body, 400)
	// A session's files: write, list, read (whole, in ranges,
	// conditional), make a directory, move, remove, and the refusals.
	fsp, fst := sp+"/fs/", "/v1/sessions/{id}/fs/{path}"
	octetHdr := map[string]string{"Content-Type": "application/octet-stream"}
	for _, x := range []struct {
		x      exchange
		status int
	}{
		{exchange{method: "PUT", path: fsp + "workspace%2Fa.txt", template: fst, hdr: octetHdr, body: []byte("0123456789")}, 201},
		{exchange{method: "PUT", path: fsp + "workspace%2Fa.txt", template: fst, hdr: octetHdr, body: []byte("9876543210")}, 200},
		{exchange{method: "PUT", path: fsp + "workspace%2Fd%2Fe.txt?parents=true", template: fst, hdr: octetHdr, body: []byte("deep")}, 201},
		{exchange{method: "PUT", path: fsp + "workspace%2Fx%2Fy.txt", template: fst, hdr: octetHdr, body: []byte("no parent")}, 404},
		{exchange{method: "PUT", path: fsp + "workspace%2Fd", template: fst, hdr: octetHdr, body: []byte("a dir")}, 409},
		{exchange{method: "PUT", path: fsp + "workspace%2Fbig", template: fst, hdr: octetHdr, body: bytes.Repeat([]byte("x"), 128<<20+1)}, 413},
		{exchange{method: "PUT", path: fsp + "etc%2Fpasswd", template: fst, hdr: octetHdr, body: []byte("x")}, 404},
		{exchange{method: "PUT", path: fsp + "workspace%2F" + strings.Repeat("n", 256), template: fst, hdr: octetHdr, body: []byte("x")}, 400},
		{exchange{method: "POST", path: fsp + "workspace%2Fd?op=move&to=%2Fworkspace%2F..%2Fetc", template: fst}, 400},
		{exchange{method: "GET", path: fsp + "workspace", template: fst}, 200},
		{exchange{method: "GET", path: fsp + "workspace%2Fa.txt", template: fst}, 200},
		{exchange{method: "GET", path: fsp + "workspace%2Fa.txt", template: fst, hdr: map[string]string{"Range": "bytes=2-4"}}, 206},
		{exchange{method: "GET", path: fsp + "workspace%2Fa.txt", template: fst, hdr: map[string]string{"Range": "bytes=100-"}}, 416},
		{exchange{method: "GET", path: fsp + "workspace%2Fnone", template: fst}, 404},
		{exchange{method: "POST", path: fsp + "workspace%2Fm?op=mkdir", template: fst}, 201},
		{exchange{method: "POST", path: fsp + "workspace%2Fm?op=mkdir", template: fst}, 409},
		{exchange{method: "POST", path: fsp + "workspace%2Fa.txt?op=move&to=%2Ftmp%2Fa.txt", template: fst}, 200},
		{exchange{method: "POST", path: fsp + "workspace%2Fm?op=chmod", template: fst, badRequest: true}, 400},
		{exchange{method: "DELETE", path: fsp + "workspace%2Fd", template: fst}, 409},
		{exchange{method: "DELETE", path: fsp + "workspace%2Fd%2Fe.txt", template: fst}, 204},
		{exchange{method: "DELETE", path: fsp + "workspace", template: fst}, 409},
		{exchange{method: "POST", path: fsp + "tmp%2Fa.txt?op=store&name=kept.txt", template: fst}, 201},
		{exchange{method: "PUT", path: fsp + "workspace%2Fcopy.csv?from_file=" + up.FileID, template: fst}, 201},
		{exchange{method: "PUT", path: fsp + "workspace%2Fcopy.csv?from_file=f-00000000000000000000000000000000", template: fst}, 404},
	} {
		resp, body = c.do(x.x)
		want(resp, body, x.status)
	}
	resp, body = c.do(exchange{method: "GET", path: fsp + "tmp%2Fa.txt", template: fst})
	want(resp, body, 200)
	if string(body) != "9876543210" {
		t.Errorf("the moved file: %q", body)
	}
	resp, body = c.do(exchange{method: "GET", path: fsp + "tmp%2Fa.txt", template: fst, hdr: map[string]string{"If-None-Match": resp.Header.Get("ETag")}})
	want(resp, body, 304)
	// A session's ports: a test server stands for the session's port
	// 8000; another port is 502; the methods pass through.
	portSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.Path)
	}))
	defer portSrv.Close()
	h.Engine.Ports = map[int]string{8000: portSrv.Listener.Addr().String()}
	pp, pt := sp+"/ports/", "/v1/sessions/{id}/ports/{port}/{path}"
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		resp, body = c.do(exchange{method: m, path: pp + "8000/a%2Fb", template: pt, hdr: map[string]string{"Content-Type": "text/plain"}, body: []byte("x")})
		want(resp, body, 200)
		if string(body) != m+" /a/b" {
			t.Errorf("%s through the port proxy: %q", m, body)
		}
	}
	resp, body = c.do(exchange{method: "GET", path: pp + "8001/x", template: pt})
	want(resp, body, 502)
	resp, body = c.do(exchange{method: "GET", path: pp + "0/x", template: pt, badRequest: true})
	want(resp, body, 400)
	// A session's terminal: the upgrade, and the refusals before it.
	tp, tt := sp+"/pty", "/v1/sessions/{id}/pty"
	c.upgrade(tp+"?cols=100&rows=30&term=xterm", tt)
	upHdr := map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}
	resp, body = c.do(exchange{method: "GET", path: tp, template: tt})
	want(resp, body, 400)
	resp, body = c.do(exchange{method: "GET", path: tp + "?cols=0", template: tt, hdr: upHdr, badRequest: true})
	want(resp, body, 400)
	resp, body = c.do(exchange{method: "GET", path: tp, template: tt, hdr: map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Origin": "https://elsewhere.example"}})
	want(resp, body, 403)
	// A session's commands: foreground, background, its list, output,
	// stdin, signal and deletion, and the refusals.
	cp, ct := sp+"/commands", "/v1/sessions/{id}/commands"
	resp, body = c.do(exchange{method: "POST", path: cp, template: ct, hdr: jsonHdr, body: []byte(`{"cmd": "echo hi"}`)})
	want(resp, body, 200)
	for _, accept := range []string{api.MediaNDJSON, api.MediaSSE} {
		resp, body = c.do(exchange{method: "POST", path: cp, template: ct, hdr: map[string]string{"Content-Type": "application/json", "Accept": accept}, body: []byte(`{"cmd": "echo hi"}`)})
		want(resp, body, 200)
		if names := c.events("command "+accept, body, accept == api.MediaSSE, "CommandResult"); len(names) != 3 || names[0] != "start" || names[1] != "stdout" || names[2] != "done" {
			t.Errorf("streamed command %s: events %v", accept, names)
		}
	}
	for _, bad := range []string{`{}`, `{"cmd": "x", "argv": ["x"]}`, `{"cmd": "x", "cwd": "/etc"}`, `{"cmd": "x", "background": true, "timeout_ms": 5}`, `{"argv": [""]}`} {
		resp, body = c.do(exchange{method: "POST", path: cp, template: ct, hdr: jsonHdr, body: []byte(bad), badRequest: true})
		want(resp, body, 400)
	}
	resp, body = c.do(exchange{method: "POST", path: cp, template: ct, hdr: jsonHdr, body: []byte(`{"argv": ["sleep", "100"], "background": true}`)})
	want(resp, body, 202)
	var bg api.CommandInfo
	if err := json.Unmarshal(body, &bg); err != nil || bg.CommandID == "" {
		t.Fatalf("background command: %s %v", body, err)
	}
	cip, cit := cp+"/"+bg.CommandID, "/v1/sessions/{id}/commands/{cid}"
	for _, x := range []struct {
		x      exchange
		status int
	}{
		{exchange{method: "GET", path: cp, template: ct}, 200},
		{exchange{method: "GET", path: cip, template: cit}, 200},
		{exchange{method: "GET", path: cp + "/c-0000000000000000", template: cit}, 404},
		{exchange{method: "POST", path: cip + "/stdin", template: cit + "/stdin", hdr: jsonHdr, body: []byte(`{"data": "x", "eof": true}`)}, 200},
		{exchange{method: "POST", path: cip + "/stdin", template: cit + "/stdin", hdr: jsonHdr, body: []byte(`{"data": "x"}`)}, 409},
		{exchange{method: "POST", path: cip + "/signal", template: cit + "/signal", hdr: jsonHdr, body: []byte(`{"signal": "SIGWINCH"}`), badRequest: true}, 400},
		{exchange{method: "POST", path: cip + "/signal", template: cit + "/signal", hdr: jsonHdr, body: []byte(`{"signal": "SIGTERM"}`)}, 200},
		{exchange{method: "GET", path: cip + "?follow=true", template: cit, hdr: map[string]string{"Accept": api.MediaNDJSON}}, 200},
		{exchange{method: "GET", path: cip + "?follow=true", template: cit, hdr: map[string]string{"Accept": api.MediaSSE}}, 200},
		{exchange{method: "GET", path: cip + "?follow=true", template: cit}, 400},
		{exchange{method: "GET", path: cip + "?follow=yes", template: cit, hdr: map[string]string{"Accept": api.MediaNDJSON}, badRequest: true}, 400},
		{exchange{method: "DELETE", path: cip, template: cit}, 200},
		{exchange{method: "DELETE", path: cip, template: cit}, 404},
	} {
		resp, body = c.do(x.x)
		want(resp, body, x.status)
	}
	resp, body = c.do(exchange{method: "POST", path: sp + "/fork", template: "/v1/sessions/{id}/fork", hdr: jsonHdr, body: []byte(`{"count": 17}`), badRequest: true})
	want(resp, body, 400)
	resp, body = c.do(exchange{method: "DELETE", path: sp, template: "/v1/sessions/{id}"})
	want(resp, body, 200)
	resp, body = c.do(exchange{method: "POST", path: sp + "/execute", template: "/v1/sessions/{id}/execute", hdr: jsonHdr, body: []byte(`{"code": "1"}`)})
	want(resp, body, 409)
	gone := s.SessionID[:len(s.SessionID)-4] + "0000" // of this daemon, never made
	if gone == s.SessionID {
		gone = s.SessionID[:len(s.SessionID)-4] + "1111"
	}
	resp, body = c.do(exchange{method: "GET", path: "/v1/sessions/" + gone, template: "/v1/sessions/{id}"})
	want(resp, body, 404)
	resp, body = c.do(exchange{method: "GET", path: "/v1/sessions/" + gone + "/pty", template: "/v1/sessions/{id}/pty", hdr: map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}})
	want(resp, body, 404)
	resp, body = c.do(exchange{method: "GET", path: sample("/v1/sessions/{id}"), template: "/v1/sessions/{id}"})
	want(resp, body, 409) // an id of an earlier daemon

	// Files: raw and multipart uploads, the list, downloads whole, in
	// ranges and conditional, the description, and deletion.
	resp, body = c.do(exchange{method: "POST", path: "/v1/files?name=data.csv", template: "/v1/files", hdr: map[string]string{"Content-Type": "text/csv"}, body: []byte("0123456789")})
	want(resp, body, 201)
	var f api.StoredFile
	if err := json.Unmarshal(body, &f); err != nil {
		t.Fatal(err)
	}
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	fw, _ := mw.CreateFormFile("file", "up.txt")
	_, _ = fw.Write([]byte("multipart content"))
	_ = mw.Close()
	resp, body = c.do(exchange{method: "POST", path: "/v1/files", template: "/v1/files", hdr: map[string]string{"Content-Type": mw.FormDataContentType()}, body: mp.Bytes()})
	want(resp, body, 201)
	resp, body = c.do(exchange{method: "POST", path: "/v1/files", template: "/v1/files", hdr: map[string]string{"Content-Type": "text/csv"}, body: []byte("x")})
	want(resp, body, 400)
	resp, body = c.do(exchange{method: "POST", path: "/v1/files?name=x", template: "/v1/files", hdr: map[string]string{"Content-Type": "multipart/mixed; boundary=x"}, body: []byte("x"), badRequest: true})
	want(resp, body, 415)
	fp := "/v1/files/" + f.FileID
	for _, x := range []struct {
		x      exchange
		status int
	}{
		{exchange{method: "GET", path: "/v1/files", template: "/v1/files"}, 200},
		{exchange{method: "GET", path: fp, template: "/v1/files/{id}"}, 200},
		{exchange{method: "HEAD", path: fp, template: "/v1/files/{id}"}, 200},
		{exchange{method: "GET", path: fp, template: "/v1/files/{id}", hdr: map[string]string{"Range": "bytes=2-4"}}, 206},
		{exchange{method: "GET", path: fp, template: "/v1/files/{id}", hdr: map[string]string{"Range": "bytes=0-1,5-6"}}, 206},
		{exchange{method: "GET", path: fp, template: "/v1/files/{id}", hdr: map[string]string{"If-None-Match": `"` + f.SHA256 + `"`}}, 304},
		{exchange{method: "GET", path: fp, template: "/v1/files/{id}", hdr: map[string]string{"If-Match": `"nope"`}}, 412},
		{exchange{method: "GET", path: fp, template: "/v1/files/{id}", hdr: map[string]string{"Range": "bytes=100-"}}, 416},
		{exchange{method: "GET", path: fp + "/meta", template: "/v1/files/{id}/meta"}, 200},
		{exchange{method: "DELETE", path: fp, template: "/v1/files/{id}"}, 200},
		{exchange{method: "GET", path: fp + "/meta", template: "/v1/files/{id}/meta"}, 404},
		{exchange{method: "DELETE", path: fp, template: "/v1/files/{id}"}, 404},
	} {
		resp, body = c.do(x.x)
		want(resp, body, x.status)
	}

	// Bounds and refusals that need another configuration.
	small := harness(t, func(cfg *config.Config) {
		cfg.MaxBodyBytes = 4 << 10
		cfg.Admission.DailyQuota = 1
		cfg.Files.MaxFileMB, cfg.Files.MaxTotalMB = 1, 2
	})
	c.on(small)
	resp, body = exec(api.ExecuteRequest{Code: strings.Repeat("#", 8<<10)}, nil, false)
	want(resp, body, 413)
	resp, body = exec(api.ExecuteRequest{Code: "x"}, nil, false)
	want(resp, body, 200)
	resp, body = exec(api.ExecuteRequest{Code: "x"}, nil, false)
	want(resp, body, 429)
	if resp.Header.Get("Retry-After") == "" || resp.Header.Get(api.QuotaHeader) != "0" {
		t.Errorf("429: Retry-After %q, %s %q", resp.Header.Get("Retry-After"), api.QuotaHeader, resp.Header.Get(api.QuotaHeader))
	}
	big := bytes.Repeat([]byte("x"), 1<<20+1)
	octet := map[string]string{"Content-Type": "application/octet-stream"}
	resp, body = c.do(exchange{method: "POST", path: "/v1/files?name=big", template: "/v1/files", hdr: octet, body: big})
	want(resp, body, 413)
	for range 3 { // max_total_mb 2: the third is refused
		resp, body = c.do(exchange{method: "POST", path: "/v1/files?name=full", template: "/v1/files", hdr: octet, body: big[:1<<20]})
	}
	want(resp, body, 507)

	busy := harness(t, func(cfg *config.Config) { cfg.Admission.MaxConcurrent, cfg.Admission.QueueSize = 1, 0 })
	started, release := make(chan struct{}), make(chan struct{})
	busy.Engine.RunFunc = func(context.Context, *spec.Request) (*spec.Result, error) {
		close(started)
		<-release
		return &spec.Result{ID: "x", Status: spec.StatusOK}, nil
	}
	go func() { _, _ = busy.Client.Execute(context.Background(), &api.ExecuteRequest{Code: "1"}) }()
	<-started
	c.on(busy)
	resp, body = exec(api.ExecuteRequest{Code: "x"}, nil, false)
	want(resp, body, 503)
	resp, body = c.do(exchange{method: "GET", path: "/v1/ready", template: "/v1/ready"})
	want(resp, body, 503)
	if !strings.Contains(string(body), `"reason":"full: 1 runs in progress and 0 queued"`) {
		t.Errorf("GET /v1/ready with every slot taken: %s", body)
	}
	close(release)

	// Draining: ready says so, and new runs, sessions and session calls
	// are refused with the message the document shows.
	drained := harness(t, nil)
	c.on(drained)
	resp, body = c.do(exchange{method: "POST", path: "/v1/sessions", template: "/v1/sessions", hdr: jsonHdr, body: []byte(`{}`)})
	want(resp, body, 201)
	var live api.Session
	if err := json.Unmarshal(body, &live); err != nil {
		t.Fatal(err)
	}
	drained.Server.Drain()
	resp, body = c.do(exchange{method: "GET", path: "/v1/ready", template: "/v1/ready"})
	want(resp, body, 503)
	if string(body) != `{"ready":false,"reason":"draining: the daemon is stopping"}`+"\n" {
		t.Errorf("GET /v1/ready while draining: %q", body)
	}
	for _, x := range []exchange{
		{method: "POST", path: "/v1/execute", template: "/v1/execute", hdr: jsonHdr, body: []byte(`{"code": "x"}`)},
		{method: "POST", path: "/v1/execute", template: "/v1/execute", hdr: map[string]string{"Content-Type": "application/json", "Accept": api.MediaNDJSON}, body: []byte(`{"code": "x"}`)},
		{method: "POST", path: "/v1/lint", template: "/v1/lint", hdr: jsonHdr, body: []byte(`{"code": "x"}`)},
		{method: "POST", path: "/v1/sessions", template: "/v1/sessions", hdr: jsonHdr, body: []byte(`{}`)},
		{method: "POST", path: "/v1/sessions/" + live.SessionID + "/execute", template: "/v1/sessions/{id}/execute", hdr: jsonHdr, body: []byte(`{"code": "1"}`)},
	} {
		resp, body = c.do(x)
		want(resp, body, 503)
		var e api.ErrorBody
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Type != "unavailable" ||
			e.Error.Message != "the daemon is stopping; send the request to another host, or retry when it is back" {
			t.Errorf("%s %s while draining: %s", x.method, x.path, body)
		}
	}
	resp, body = c.do(exchange{method: "GET", path: "/v1/sessions/" + live.SessionID, template: "/v1/sessions/{id}"})
	want(resp, body, 200) // what is not a new run still answers

	off := harness(t, func(cfg *config.Config) { cfg.Files.Enabled, cfg.Sessions.Enabled = false, false })
	c.on(off)
	resp, body = c.do(exchange{method: "GET", path: "/v1/files", template: "/v1/files"})
	want(resp, body, 403)
	resp, body = c.do(exchange{method: "POST", path: "/v1/sessions", template: "/v1/sessions", hdr: jsonHdr, body: []byte(`{}`)})
	want(resp, body, 403)

	noRuff := harness(t, nil)
	noRuff.Engine.ImagesValue = []spec.ImageStats{{Name: "bare", Default: true, Manifest: &rootfs.Manifest{Name: "bare", PythonVersion: "3.13.0"}}}
	c.on(noRuff)
	resp, body = c.do(exchange{method: "POST", path: "/v1/lint", template: "/v1/lint", hdr: jsonHdr, body: jsonBody(t, api.LintRequest{Code: "x"})})
	want(resp, body, 503)
	resp, body = c.do(exchange{method: "GET", path: "/v1/info", template: "/v1/info"})
	want(resp, body, 200)

	// Every operation answered with a success, every class seen.
	ops := openapiPaths(t)
	for p, methods := range ops {
		for _, m := range methods {
			ok := false
			for k := range c.seen {
				if strings.HasPrefix(k, m+" "+p+" 2") || strings.HasPrefix(k, m+" "+p+" 101") {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s %s: no success was validated", m, p)
			}
		}
	}
	statuses := map[string]bool{}
	for k := range c.seen {
		statuses[k[strings.LastIndexByte(k, ' ')+1:]] = true
	}
	for _, s := range []string{"200", "201", "206", "304", "400", "403", "404", "409", "412", "413", "415", "416", "429", "500", "503", "507"} {
		if !statuses[s] {
			t.Errorf("no exchange answered %s", s)
		}
	}
	t.Logf("%d distinct exchanges validated: %v", len(c.seen), slices.Sorted(maps.Keys(c.seen)))
}
