package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/loopback"
	"github.com/jaild/jaild/internal/server/servertest"
	"github.com/jaild/jaild/internal/server/servertest/raw"
)

// fakeDaemon answers "METHOD /path" with canned JSON on a Unix socket and
// keeps the last request body and the number of requests of each route.
type fakeDaemon struct {
	sock string
	mu   sync.Mutex
	last map[string][]byte
	hits map[string]int
}

type reply struct {
	status int
	body   string
}

func newFakeDaemon(t *testing.T, replies map[string]reply) *fakeDaemon {
	t.Helper()
	return newFakeDaemonFunc(t, func(route string, _ int) (reply, bool) {
		rep, ok := replies[route]
		return rep, ok
	})
}

// newFakeDaemonFunc is newFakeDaemon with the replies of a function of
// the route and its number of requests so far, this one included.
func newFakeDaemonFunc(t *testing.T, replies func(route string, n int) (reply, bool)) *fakeDaemon {
	t.Helper()
	f := &fakeDaemon{last: map[string][]byte{}, hits: map[string]int{}}
	f.sock = raw.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.Method + " " + r.URL.Path
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.last[route] = body
		f.hits[route]++
		n := f.hits[route]
		f.mu.Unlock()
		rep, ok := replies(route, n)
		if !ok {
			rep = reply{http.StatusNotFound, `{"error":{"type":"not_found","message":"no route"}}`}
		}
		if rep.status == 0 {
			rep.status = http.StatusOK
		}
		raw.JSON(rep.status, nil, rep.body)(w, r)
	}))
	return f
}

func (f *fakeDaemon) request(t *testing.T, route string, v any) {
	t.Helper()
	f.mu.Lock()
	body, ok := f.last[route]
	f.mu.Unlock()
	if !ok {
		t.Fatalf("no %s request", route)
	}
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s request %s: %v", route, body, err)
	}
}

// count is how many requests route had.
func (f *fakeDaemon) count(route string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[route]
}

func infoReply(admin bool) reply {
	info := api.Info{
		Rootfs:      api.RootfsInfo{PythonVersion: "3.13.5", PythonPackages: map[string]string{"numpy": "2.2.4", "pandas": "2.2.3"}},
		Defaults:    api.LimitValues{TimeoutMs: 10000, MemoryMB: 512, Pids: 64, FileSizeMB: 64, OutputBytes: 1 << 20},
		Maxima:      api.LimitValues{TimeoutMs: 60000, MemoryMB: 2048},
		AdminMaxima: api.LimitValues{TimeoutMs: 3600000},
		Caller:      api.CallerInfo{Admin: admin},
		Sessions: api.SessionInfo{Enabled: true, MaxPerUID: 4, IdleTimeoutS: 600, MaxIdleTimeoutS: 3600, TTLS: 3600, MaxTTLS: 14400,
			InterruptGraceMs: 2000},
	}
	b, _ := json.Marshal(info)
	return reply{body: string(b)}
}

func jsonReply(v any) reply {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return reply{body: string(b)}
}

// daemon is where a test's Server finds jaild: a fake daemon's socket
// or servertest's (the real handlers over a fake engine).
type daemon interface{ socket() string }

func (f *fakeDaemon) socket() string { return f.sock }

type realDaemon struct{ *servertest.Harness }

func (d realDaemon) socket() string { return d.Socket }

// newRealDaemon serves the default configuration's API with servertest.
func newRealDaemon(t *testing.T) realDaemon { return realDaemon{servertest.Default(t)} }

// session serves a Server on the daemon to an in-memory client.
func session(t *testing.T, f daemon) (*Server, *sdk.ClientSession) {
	t.Helper()
	return sessionWith(t, f, nil)
}

// sessionWith is session with a client of options opts.
func sessionWith(t *testing.T, f daemon, opts *sdk.ClientOptions) (*Server, *sdk.ClientSession) {
	t.Helper()
	return serverSession(t, f, Options{Version: "test"}, opts)
}

// sessionAll is session with a server that reaches all the caller's
// sessions (--all-sessions), not only those its connection opened.
func sessionAll(t *testing.T, f daemon) (*Server, *sdk.ClientSession) {
	t.Helper()
	return serverSession(t, f, Options{Version: "test", AllSessions: true}, nil)
}

// serverSession serves a Server of options so on the daemon to an
// in-memory client of options opts.
func serverSession(t *testing.T, f daemon, so Options, opts *sdk.ClientOptions) (*Server, *sdk.ClientSession) {
	t.Helper()
	s, err := New(context.Background(), client.New(f.socket()), so)
	if err != nil {
		t.Fatal(err)
	}
	return s, connectWith(t, s, opts)
}

// testToken is a token for a test's HTTP handler.
func testToken(t *testing.T) loopback.Token {
	t.Helper()
	tok, err := loopback.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// bearerClient is an HTTP client that sends token as a bearer credential.
func bearerClient(token loopback.Token) *http.Client {
	return &http.Client{Transport: bearerTransport{token.String()}}
}

type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func resultText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func TestNewNeedsTheDaemon(t *testing.T) {
	_, err := New(context.Background(), client.New(filepath.Join(t.TempDir(), "none.sock")), Options{Version: "test"})
	var ce *client.ConnectError
	if !errors.As(err, &ce) || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("New without a daemon: %v, want a *client.ConnectError", err)
	}
}

func TestDescriptionsFromInfo(t *testing.T) {
	for _, admin := range []bool{false, true} {
		f := newFakeDaemon(t, map[string]reply{"GET /v1/info": infoReply(admin)})
		_, cs := session(t, f)
		list, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var run *sdk.Tool
		for _, tool := range list.Tools {
			if tool.Name == RunTool {
				run = tool
			}
		}
		if run == nil {
			t.Fatalf("no %s in %v", RunTool, list.Tools)
		}
		max := "at most 60 s"
		if admin {
			max = "at most 3600 s"
		}
		for _, want := range []string{"Python 3.13.5", "numpy 2.2.4, pandas 2.2.3", "clean state", "no network", "print()", "10 s of wall-clock time", max, "512 MB of memory", "1 MiB each of stdout", "clean state"} {
			if !strings.Contains(run.Description, want) {
				t.Errorf("admin %v: description lacks %q:\n%s", admin, want, run.Description)
			}
		}
		schema, _ := json.Marshal(run.InputSchema)
		var s struct {
			Properties map[string]struct {
				Type    any      `json:"type"`
				Maximum *float64 `json:"maximum"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(schema, &s); err != nil {
			t.Fatal(err)
		}
		if m := s.Properties["timeout_seconds"].Maximum; m == nil || (admin && *m != 3600) || (!admin && *m != 60) {
			t.Errorf("admin %v: timeout_seconds maximum %v", admin, m)
		}
		if typ := s.Properties["files"].Type; typ != "array" {
			t.Errorf("files has type %v, want a plain array", typ)
		}
	}
}

func TestRunForwardsAndMapsTheResult(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nfake")
	f := newFakeDaemon(t, map[string]reply{
		"GET /v1/info": infoReply(false),
		"POST /v1/execute": jsonReply(api.ExecuteResponse{
			RunID: "r1", Status: api.StatusError, ExitCode: new(1), Stdout: "partial\n", Stderr: "Traceback...\n",
			Message: "ValueError: bad", Error: &api.ExecError{Type: "ValueError", Message: "bad", Line: new(3)},
			Figures: []api.Figure{{Name: "figure-1.png", ContentB64: base64.StdEncoding.EncodeToString(png)}},
			Files: []api.FileOut{
				{Path: "out/a b.csv", SizeBytes: 4, ContentB64: base64.StdEncoding.EncodeToString([]byte("x,y\n"))},
				{Path: "bin", SizeBytes: 2, ContentB64: base64.StdEncoding.EncodeToString([]byte{0, 0xff})},
				{Path: "big", SizeBytes: 1 << 30, Error: "file over 16 MiB"},
			},
			Usage: api.Usage{DurationMs: 1500},
		}),
	})
	_, cs := session(t, f)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: RunTool, Arguments: map[string]any{
		"code": "x", "stdin": "in", "timeout_seconds": 1.5,
		"files":        []map[string]string{{"path": "d.csv", "content_b64": "YQ=="}},
		"return_files": []string{"out/*"},
	}})
	if err != nil {
		t.Fatal(err)
	}

	var req api.ExecuteRequest
	f.request(t, "POST /v1/execute", &req)
	if req.Code != "x" || req.Stdin == nil || *req.Stdin != "in" || req.Limits == nil || *req.Limits.TimeoutMs != 1500 ||
		len(req.Files) != 1 || req.Files[0] != (api.FileIn{Path: "d.csv", ContentB64: "YQ=="}) || len(req.ReturnFiles) != 1 {
		t.Errorf("request to the daemon: %+v", req)
	}

	if !res.IsError {
		t.Error("a failed run is not a result with isError")
	}
	text := resultText(res)
	for _, want := range []string{"status: error (1.5 s)", "exception: ValueError: bad (line 3 of the code)", "exit code: 1", "stdout:\npartial\n", "stderr:\nTraceback...", "file big: not returned: file over 16 MiB", "figure figure-1.png: attached as an image"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "message:") {
		t.Errorf("text repeats the exception as the message:\n%s", text)
	}
	if len(res.Content) != 4 {
		t.Fatalf("%d content blocks, want text, an image and two resources", len(res.Content))
	}
	if img, ok := res.Content[1].(*sdk.ImageContent); !ok || img.MIMEType != "image/png" || string(img.Data) != string(png) {
		t.Errorf("content[1] = %#v, want the PNG", res.Content[1])
	}
	csv, ok := res.Content[2].(*sdk.EmbeddedResource)
	if !ok || csv.Resource.URI != "jaild://r1/out/a%20b.csv" || csv.Resource.Text != "x,y\n" || csv.Resource.Blob != nil {
		t.Errorf("content[2] = %#v, want out/a b.csv as text", res.Content[2])
	}
	bin, ok := res.Content[3].(*sdk.EmbeddedResource)
	if !ok || bin.Resource.MIMEType != "application/octet-stream" || string(bin.Resource.Blob) != "\x00\xff" {
		t.Errorf("content[3] = %#v, want bin as a blob", res.Content[3])
	}
	var out RunOutput
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if out.Status != api.StatusError || out.Exception == nil || out.Exception.Type != "ValueError" || len(out.Files) != 3 || out.Files[2].Error == "" || out.Figures[0] != "figure-1.png" {
		t.Errorf("structured content %s", raw)
	}
}

func TestDaemonErrorsAreToolErrors(t *testing.T) {
	f := newFakeDaemon(t, map[string]reply{
		"GET /v1/info":     infoReply(false),
		"POST /v1/execute": {http.StatusServiceUnavailable, `{"error":{"type":"busy","message":"all run slots are busy"}}`},
		"POST /v1/format":  {http.StatusBadRequest, `{"error":{"type":"invalid_argument","message":"code cannot be formatted: line 1"}}`},
	})
	_, cs := session(t, f)
	for tool, want := range map[string]string{RunTool: "jaild did not run the code: all run slots are busy", FormatTool: "code cannot be formatted: line 1"} {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tool, Arguments: map[string]any{"code": "x"}})
		if err != nil {
			t.Fatalf("%s: protocol error %v, want a tool error", tool, err)
		}
		if !res.IsError || !strings.Contains(resultText(res), want) {
			t.Errorf("%s: isError %v, %q, want %q", tool, res.IsError, resultText(res), want)
		}
	}
}

func TestLintAndFormat(t *testing.T) {
	f := newFakeDaemon(t, map[string]reply{
		"GET /v1/info": infoReply(false),
		"POST /v1/lint": jsonReply(api.LintResponse{Diagnostics: []api.Diagnostic{
			{Code: "F401", Message: "`os` imported but unused", Location: api.Location{Line: 1, Column: 8}, Fixable: true},
		}}),
		"POST /v1/format": jsonReply(api.FormatResponse{Code: "x = 1\n", Changed: true}),
	})
	_, cs := session(t, f)
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: LintTool, Arguments: map[string]any{"code": "import os\n", "select": []string{"F"}}})
	if err != nil {
		t.Fatal(err)
	}
	var lreq api.LintRequest
	f.request(t, "POST /v1/lint", &lreq)
	if lreq.Code != "import os\n" || len(lreq.Select) != 1 || lreq.Ignore != nil {
		t.Errorf("lint request %+v", lreq)
	}
	if res.IsError || resultText(res) != "1:8: F401 `os` imported but unused (fixable)" {
		t.Errorf("lint: isError %v, %q", res.IsError, resultText(res))
	}

	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: FormatTool, Arguments: map[string]any{"code": "x=1"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if res.IsError || resultText(res) != "x = 1\n" || string(raw) != `{"changed":true,"code":"x = 1\n"}` {
		t.Errorf("format: isError %v, %q, %s", res.IsError, resultText(res), raw)
	}
}

func TestLintTextWhenClean(t *testing.T) {
	if got := lintText(nil); got != "No findings: the code is clean." {
		t.Errorf("lintText(nil) = %q", got)
	}
}

func TestRunText(t *testing.T) {
	tests := []struct {
		name string
		out  RunOutput
		want string
	}{
		{"silent success", RunOutput{Status: "ok", ExitCode: new(0), DurationMs: 90},
			"status: ok (0.09 s)\nexit code: 0\nstdout: (empty: print() what you want to see)\nstderr: (empty)"},
		{"timeout", RunOutput{Status: "timeout", Message: "Execution terminated after 1 seconds (the time limit)", Signal: new(9), Stdout: "tick", StdoutTruncated: true, DurationMs: 1000},
			"status: timeout (1 s)\nmessage: Execution terminated after 1 seconds (the time limit)\nkilled by signal 9\nstdout (cut at the output limit):\ntick\nstderr: (empty)"},
		{"exception without a message", RunOutput{Status: "timeout", Exception: &api.ExecError{Type: "KeyboardInterrupt", Line: new(3)}, ExitCode: new(1)},
			"status: timeout (0 s)\nexception: KeyboardInterrupt (line 3 of the code)\nexit code: 1\nstdout: (empty)\nstderr: (empty)"},
		{"exception without a line", RunOutput{Status: "error", Message: "SyntaxError: invalid syntax", Exception: &api.ExecError{Type: "SyntaxError", Message: "invalid syntax"}, ExitCode: new(1)},
			"status: error (0 s)\nexception: SyntaxError: invalid syntax\nexit code: 1\nstdout: (empty)\nstderr: (empty)"},
	}
	for _, tc := range tests {
		if got := runText(&tc.out); got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}

func TestMalformedDaemonResponse(t *testing.T) {
	_, _, err := runResult(&api.ExecuteResponse{Status: "ok", Figures: []api.Figure{{Name: "f.png", ContentB64: "!"}}}, nil)
	if err == nil || !strings.Contains(err.Error(), `figure "f.png"`) {
		t.Errorf("bad figure base64: %v", err)
	}
}

func TestEmptyFileIsAnEmptyBlob(t *testing.T) {
	rc := resourceContents("jaild://r/e", "e.txt", nil)
	raw, _ := json.Marshal(&sdk.EmbeddedResource{Resource: rc})
	if !strings.Contains(string(raw), `"blob":""`) {
		t.Errorf("empty file: %s, want an explicit empty blob", raw)
	}
}

func TestExecuteRequestTimeout(t *testing.T) {
	for _, tc := range []struct {
		seconds float64
		ms      int64
		bad     bool
	}{{0, 0, false}, {1.5, 1500, false}, {0.0001, 1, false}, {-1, 0, true}, {1e12, 0, true}} {
		req, err := executeRequest(RunInput{Code: "x", TimeoutSeconds: tc.seconds})
		switch {
		case tc.bad:
			if err == nil || !strings.Contains(err.Error(), "timeout_seconds") {
				t.Errorf("%g s: %v, want an error naming timeout_seconds", tc.seconds, err)
			}
		case err != nil:
			t.Errorf("%g s: %v", tc.seconds, err)
		case tc.ms == 0 && req.Limits != nil, tc.ms != 0 && (req.Limits == nil || *req.Limits.TimeoutMs != tc.ms):
			t.Errorf("%g s: limits %+v, want %d ms", tc.seconds, req.Limits, tc.ms)
		}
	}
}

func TestListenOnlyLoopback(t *testing.T) {
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:0", true}, {"localhost:0", true}, {"127.0.0.2:0", true},
		{"0.0.0.0:0", false}, {":0", false}, {"[::]:0", false}, {"192.0.2.1:0", false}, {"example.com:0", false},
	} {
		l, err := Listen(tc.addr, false)
		if tc.ok {
			if err != nil {
				t.Errorf("%s: %v", tc.addr, err)
				continue
			}
			l.Close()
		} else if !errors.Is(err, ErrNotLoopback) {
			t.Errorf("%s: %v, want ErrNotLoopback", tc.addr, err)
		}
	}
	if _, err := Listen("127.0.0.1", false); err == nil || errors.Is(err, ErrNotLoopback) {
		t.Errorf("no port: %v, want a HOST:PORT error", err)
	}
}

// Without the token every request is refused, whatever its path, method
// and headers, before anything else: no MCP session, no daemon request.
func TestHandlerRequiresToken(t *testing.T) {
	f := newRealDaemon(t)
	s, err := New(context.Background(), client.New(f.socket()), Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	tok := testToken(t)
	srv := httptest.NewServer(s.Handler(tok))
	defer srv.Close()
	other := testToken(t)
	bodies := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_python","arguments":{"code":"print(1)"}}}`,
	}
	before := f.Count("POST /v1/execute") + f.Count("GET /v1/info")
	refused := 0
	for _, method := range []string{"POST", "GET", "DELETE", "PUT", "OPTIONS", "HEAD"} {
		for _, path := range []string{Path, "/", "/mcp/x", "/.well-known/oauth-protected-resource"} {
			for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer " + other.String(), "Bearer " + tok.String() + "x", "Bearer " + tok.String()[:63],
				"Basic " + tok.String(), tok.String(), "Bearer " + strings.ToUpper(tok.String())} {
				for _, body := range bodies {
					req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Accept", "application/json, text/event-stream")
					if auth != "" {
						req.Header.Set("Authorization", auth)
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					var rpc struct {
						JSONRPC string          `json:"jsonrpc"`
						ID      json.RawMessage `json:"id"`
						Error   struct {
							Code    int    `json:"code"`
							Message string `json:"message"`
						} `json:"error"`
					}
					challenge := resp.Header.Get("WWW-Authenticate")
					if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(challenge, "Bearer ") || resp.Header.Get("Mcp-Session-Id") != "" {
						t.Fatalf("%s %s, Authorization %q: %d, WWW-Authenticate %q: want 401 with a Bearer challenge", method, path, auth, resp.StatusCode, challenge)
					}
					if wrong := strings.HasPrefix(auth, "Bearer ") && len(auth) > len("Bearer "); wrong != strings.Contains(challenge, `error="invalid_token"`) {
						t.Errorf("Authorization %q: challenge %q", auth, challenge)
					}
					if method != "HEAD" {
						if err := json.Unmarshal(b, &rpc); err != nil || rpc.JSONRPC != "2.0" || string(rpc.ID) != "null" || rpc.Error.Code != codeUnauthorized || !strings.Contains(rpc.Error.Message, "token") {
							t.Errorf("%s %s: body %q: want a JSON-RPC error about the token", method, path, b)
						}
					}
					refused++
				}
			}
		}
	}
	if after := f.Count("POST /v1/execute") + f.Count("GET /v1/info"); after != before {
		t.Errorf("the refused requests reached the daemon: %d requests", after-before)
	}
	// The token, in any case of the scheme's name, lets a client in.
	for _, scheme := range []string{"Bearer", "bearer"} {
		req, _ := http.NewRequest("POST", srv.URL+Path, strings.NewReader(bodies[0]))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", scheme+" "+tok.String())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") == "" {
			t.Errorf("initialize with %q and the token: %d", scheme, resp.StatusCode)
		}
	}
	// The zero token lets nothing through, not even an empty credential.
	zero := httptest.NewServer(s.Handler(loopback.Token{}))
	defer zero.Close()
	for _, auth := range []string{"", "Bearer ", "Bearer x"} {
		req, _ := http.NewRequest("POST", zero.URL+Path, strings.NewReader(bodies[0]))
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("the zero token, Authorization %q: %d", auth, resp.StatusCode)
		}
	}
	t.Logf("%d requests refused", refused)
}

func TestHandlerRefusesRebindingAndOtherOrigins(t *testing.T) {
	s, _ := session(t, newRealDaemon(t))
	tok := testToken(t)
	srv := httptest.NewServer(s.Handler(tok))
	defer srv.Close()
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, tc := range []struct {
		name, path, host, origin string
		want                     int
	}{
		{"loopback", Path, "", "", http.StatusOK},
		{"same origin", Path, "", srv.URL, http.StatusOK},
		{"DNS rebinding", Path, "evil.example.com", "", http.StatusForbidden},
		{"cross origin", Path, "", "http://evil.example.com", http.StatusForbidden},
		{"other path", "/", "", "", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+tc.path, strings.NewReader(initialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tc.host != "" {
			req.Host = tc.host
		}
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		req.Header.Set("Authorization", "Bearer "+tok.String())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}

func sessionReply(id, state string, endReason string) reply {
	sess := api.Session{
		SessionID: id, State: state, IdleTimeoutS: 600, ExecutionCount: 2,
		CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour), LastUsedAt: time.Now(),
		Limits: api.LimitValues{TimeoutMs: 2000, MemoryMB: 256},
	}
	if endReason != "" {
		sess.EndReason = &endReason
	}
	return jsonReply(sess)
}

func toolByName(t *testing.T, cs *sdk.ClientSession, name string) *sdk.Tool {
	t.Helper()
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		if tool.Name == name {
			return tool
		}
	}
	t.Fatalf("no tool %s", name)
	return nil
}

// schemaOf decodes a tool's input schema.
func schemaOf(t *testing.T, tool *sdk.Tool) (s struct {
	Required   []string `json:"required"`
	Properties map[string]struct {
		Type      any      `json:"type"`
		Maximum   *float64 `json:"maximum"`
		MinLength *int     `json:"minLength"`
	} `json:"properties"`
}) {
	t.Helper()
	raw, _ := json.Marshal(tool.InputSchema)
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The session tools tell the model what persists, for how long, and what
// is lost when.
func TestSessionToolsDescribed(t *testing.T) {
	f := newFakeDaemon(t, map[string]reply{"GET /v1/info": infoReply(false)})
	_, cs := session(t, f)
	open := toolByName(t, cs, OpenSessionTool)
	for _, want := range []string{
		"variables, functions, imports, and the files in /workspace (the working directory) and /tmp",
		"ends 10 min after the end of its last call (idle_timeout_seconds, at most 1 h)",
		"1 h after it opened at the latest (ttl_seconds, at most 4 h; the result's expires_at)", "when this MCP connection closes",
		"One call runs at a time", "KeyboardInterrupt; if the code stops within 2 s the state is kept",
		"restarted: variables and imports are lost but files are kept", "state_lost",
		"512 MB by default, at most 2048 MB", "10 s by default, at most 60 s", "at most 4 sessions open at once", CloseSessionTool,
	} {
		if !strings.Contains(open.Description, want) {
			t.Errorf("%s's description lacks %q:\n%s", OpenSessionTool, want, open.Description)
		}
	}
	os := schemaOf(t, open)
	for name, max := range map[string]float64{"timeout_seconds": 60, "memory_mb": 2048, "idle_timeout_seconds": 3600, "ttl_seconds": 14400} {
		if m := os.Properties[name].Maximum; m == nil || *m != max {
			t.Errorf("%s's %s: maximum %v, want %g", OpenSessionTool, name, m, max)
		}
	}
	if len(os.Required) != 0 {
		t.Errorf("%s requires %v", OpenSessionTool, os.Required)
	}
	if ins := cs.InitializeResult().Instructions; !strings.Contains(ins, "open_session") {
		t.Errorf("instructions do not mention sessions: %s", ins)
	}
	for _, p := range []string{"memory_mb", "timeout_seconds", "idle_timeout_seconds", "ttl_seconds", "files"} {
		if _, ok := os.Properties[p]; !ok {
			t.Errorf("%s has no argument %s", OpenSessionTool, p)
		}
	}

	run := toolByName(t, cs, RunTool)
	for _, want := range []string{"Without session_id, each call starts from a clean state", "With session_id (from open_session)", "state_lost", "An ended session takes no more calls"} {
		if !strings.Contains(run.Description, want) {
			t.Errorf("%s's description lacks %q:\n%s", RunTool, want, run.Description)
		}
	}
	if p, ok := schemaOf(t, run).Properties["session_id"]; !ok || p.Type != "string" || p.MinLength == nil || *p.MinLength != 1 {
		t.Errorf("%s's session_id: %+v", RunTool, p)
	}
	if cl := schemaOf(t, toolByName(t, cs, CloseSessionTool)); len(cl.Required) != 1 || cl.Required[0] != "session_id" {
		t.Errorf("%s requires %v, want session_id", CloseSessionTool, cl.Required)
	}
	toolByName(t, cs, ListSessionsTool)
}

func TestRunInSession(t *testing.T) {
	f := newFakeDaemon(t, map[string]reply{
		"GET /v1/info": infoReply(false),
		"POST /v1/sessions/s-1/execute": jsonReply(api.SessionExecuteResponse{
			ExecuteResponse: api.ExecuteResponse{Status: api.StatusOK, ExitCode: new(0), Stdout: "42\n", Result: new("42"), Usage: api.Usage{DurationMs: 20}},
			ExecutionCount:  2,
			Session:         api.SessionStatus{SessionID: "s-1", State: api.SessionIdle},
		}),
	})
	_, cs := sessionAll(t, f)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: RunTool, Arguments: map[string]any{
		"code": "x + 1", "session_id": "s-1", "timeout_seconds": 1.5, "stdin": "in",
		"files": []map[string]string{{"path": "d.csv", "content_b64": "YQ=="}}, "return_files": []string{"*.csv"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if f.count("POST /v1/execute") != 0 {
		t.Error("a call with session_id went to POST /v1/execute")
	}
	var req api.SessionExecuteRequest
	f.request(t, "POST /v1/sessions/s-1/execute", &req)
	if req.Code != "x + 1" || req.Stdin == nil || *req.Stdin != "in" || req.Limits == nil || *req.Limits.TimeoutMs != 1500 || req.Limits.MemoryMB != nil ||
		len(req.Files) != 1 || len(req.ReturnFiles) != 1 || req.LastLineInteractive != nil || req.Env != nil || req.Network != "" {
		t.Errorf("request to the daemon: %+v", req)
	}
	text := resultText(res)
	if res.IsError || !strings.HasPrefix(text, "status: ok (0.02 s)\nsession: s-1, execution_count 2\n") || !strings.Contains(text, "stdout:\n42\n") || strings.Contains(text, "state_lost") {
		t.Errorf("isError %v, text:\n%s", res.IsError, text)
	}
	var out RunOutput
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if out.Session == nil || *out.Session != (CallSession{SessionID: "s-1", ExecutionCount: 2, State: "idle"}) || out.Result == nil || *out.Result != "42" {
		t.Errorf("structured content %s", raw)
	}
}

func TestSessionCallText(t *testing.T) {
	for _, tc := range []struct {
		name string
		sess CallSession
		want []string
		not  []string
	}{
		{"state kept", CallSession{SessionID: "s-1", ExecutionCount: 3, State: "idle"}, []string{"session: s-1, execution_count 3\nstate kept: the code stopped at the KeyboardInterrupt"}, []string{"state_lost", "ended"}},
		{"state lost", CallSession{SessionID: "s-1", ExecutionCount: 3, State: "idle", StateLost: true, LostReason: "timeout"},
			[]string{"state_lost: true (lost_reason: timeout)", "variables and imports are gone, files in /workspace and /tmp are kept"}, []string{"session ended", "state kept"}},
		{"ended", CallSession{SessionID: "s-1", ExecutionCount: 3, State: "ended", EndReason: "repeated_losses", StateLost: true, LostReason: "memory_limit"},
			[]string{"state_lost: true (lost_reason: memory_limit)", "session ended: its interpreter was lost several times in a row (repeated_losses)", "open a new one with open_session"}, nil},
		{"ended without a reason", CallSession{SessionID: "s-1", ExecutionCount: 3, State: "ended"}, []string{"session ended. It takes no more calls"}, nil},
	} {
		got := runText(&RunOutput{Status: "timeout", Session: &tc.sess})
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: text lacks %q:\n%s", tc.name, w, got)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(got, w) {
				t.Errorf("%s: text has %q:\n%s", tc.name, w, got)
			}
		}
	}
}

// A call the daemon refuses says why, in words the model can act on.
func TestSessionCallRefused(t *testing.T) {
	conflict := reply{http.StatusConflict, `{"error":{"type":"conflict","message":"session s-x has ended (idle_timeout)"}}`}
	f := newFakeDaemon(t, map[string]reply{
		"GET /v1/info":                     infoReply(false),
		"POST /v1/sessions/s-gone/execute": conflict,
		"GET /v1/sessions/s-gone":          sessionReply("s-gone", api.SessionEnded, "idle_timeout"),
		"POST /v1/sessions/s-busy/execute": {http.StatusConflict, `{"error":{"type":"conflict","message":"session s-busy is running another call"}}`},
		"GET /v1/sessions/s-busy":          sessionReply("s-busy", api.SessionRunning, ""),
	})
	_, cs := sessionAll(t, f)
	for id, want := range map[string][]string{
		"s-gone": {"jaild did not run the code: session s-x has ended (idle_timeout)", "Session s-gone has ended: no call came within its idle timeout (idle_timeout)", "Open a new one with open_session"},
		"s-busy": {"Another call is running in session s-busy: one call runs at a time"},
		"s-none": {"no route", "There is no session s-none", "Open one with open_session, or call run_python without session_id"},
	} {
		res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: RunTool, Arguments: map[string]any{"code": "x", "session_id": id}})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !res.IsError || !strings.Contains(resultText(res), w) {
				t.Errorf("%s: isError %v, %q, want %q", id, res.IsError, resultText(res), w)
			}
		}
	}
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: RunTool, Arguments: map[string]any{"code": "x", "session_id": ""}})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "session_id") {
		t.Errorf("empty session_id: %v, %+v", err, res)
	}
}

func TestOpenAndCloseSession(t *testing.T) {
	f := newFakeDaemon(t, map[string]reply{
		"GET /v1/info":            infoReply(false),
		"POST /v1/sessions":       sessionReply("s-1", api.SessionIdle, ""),
		"DELETE /v1/sessions/s-1": sessionReply("s-1", api.SessionEnded, "deleted"),
		// Deleting an ended session answers its snapshot.
		"DELETE /v1/sessions/s-old": sessionReply("s-old", api.SessionEnded, "expired"),
		"GET /v1/sessions": jsonReply(api.SessionList{Sessions: []api.Session{
			{SessionID: "s-1", State: api.SessionIdle, IdleTimeoutS: 600, ExpiresAt: time.Now().Add(time.Hour)},
			{SessionID: "s-other", State: api.SessionIdle, UID: 1234},
		}}),
	})
	_, cs := session(t, f)
	ctx := context.Background()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: OpenSessionTool, Arguments: map[string]any{
		"memory_mb": 256, "timeout_seconds": 2, "idle_timeout_seconds": 60, "ttl_seconds": 120,
		"files": []map[string]string{{"path": "d.csv", "content_b64": "YQ=="}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var req api.SessionCreateRequest
	f.request(t, "POST /v1/sessions", &req)
	if req.Limits == nil || *req.Limits.TimeoutMs != 2000 || *req.Limits.MemoryMB != 256 || req.Limits.Pids != nil ||
		*req.IdleTimeoutS != 60 || *req.TTLS != 120 || len(req.Files) != 1 || req.Network != "" {
		t.Errorf("request to the daemon: %+v", req)
	}
	text := resultText(res)
	for _, w := range []string{"session_id: s-1\n", "variables, imports and the files in /workspace and /tmp persist", "One call runs at a time", "after 10 min without a call", "at the latest (in 1 h)", "when this MCP connection closes", "256 MB of memory"} {
		if res.IsError || !strings.Contains(text, w) {
			t.Errorf("open: isError %v, text lacks %q:\n%s", res.IsError, w, text)
		}
	}
	var info SessionInfo
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &info); err != nil || info.SessionID != "s-1" || info.IdleTimeoutSeconds != 600 || info.TimeoutSeconds != 2 || info.MemoryMB != 256 {
		t.Errorf("open: structured content %s", raw)
	}
	if exp, err := time.Parse(time.RFC3339, info.ExpiresAt); err != nil || time.Until(exp) < 59*time.Minute {
		t.Errorf("expires_at %q: %v", info.ExpiresAt, err)
	}

	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: ListSessionsTool, Arguments: map[string]any{}})
	raw, _ = json.Marshal(res.StructuredContent)
	if err != nil || res.IsError || !strings.Contains(resultText(res), "s-1: idle, 0 calls, ends after 10 min without a call") || strings.Contains(string(raw), "s-other") {
		t.Errorf("list: %v, %q, %s", err, resultText(res), raw)
	}

	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: CloseSessionTool, Arguments: map[string]any{"session_id": "s-1"}})
	if err != nil || res.IsError || resultText(res) != "Session s-1 is closed after 2 calls; its variables and files are gone." {
		t.Errorf("close: %v, %+v, %q", err, res, resultText(res))
	}
	// Sessions this connection did not open are refused without a request.
	for _, id := range []string{"s-old", "s-none", "s-other"} {
		res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: CloseSessionTool, Arguments: map[string]any{"session_id": id}})
		if err != nil || !res.IsError || !strings.Contains(resultText(res), "there is no session "+id+" in this MCP connection") || f.count("DELETE /v1/sessions/"+id) != 0 {
			t.Errorf("close %s, not opened here: %v, %q", id, err, resultText(res))
		}
	}
	// With --all-sessions, the daemon answers for them.
	_, all := sessionAll(t, f)
	res, err = all.CallTool(ctx, &sdk.CallToolParams{Name: CloseSessionTool, Arguments: map[string]any{"session_id": "s-old"}})
	if err != nil || res.IsError || !strings.Contains(resultText(res), "had already ended: it reached its time to live (expired)") {
		t.Errorf("close an ended session: %v, %q", err, resultText(res))
	}
	res, err = all.CallTool(ctx, &sdk.CallToolParams{Name: CloseSessionTool, Arguments: map[string]any{"session_id": "s-none"}})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "jaild did not close the session: no route") {
		t.Errorf("close an unknown session: %v, %q", err, resultText(res))
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: OpenSessionTool, Arguments: map[string]any{"memory_mb": 1 << 20}})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "memory_mb") {
		t.Errorf("open above the maximum: %v, %q", err, resultText(res))
	}
}

// sessionsDaemon opens sessions s-1, s-2, ... and answers their DELETE.
func sessionsDaemon(t *testing.T, deleteStatus int) *fakeDaemon {
	return newFakeDaemonFunc(t, func(route string, n int) (reply, bool) {
		switch {
		case route == "GET /v1/info":
			return infoReply(false), true
		case route == "POST /v1/sessions":
			return sessionReply(fmt.Sprintf("s-%d", n), api.SessionIdle, ""), true
		case strings.HasPrefix(route, "DELETE /v1/sessions/"):
			if deleteStatus != http.StatusOK {
				return reply{deleteStatus, `{"error":{"type":"internal","message":"no"}}`}, true
			}
			return sessionReply(strings.TrimPrefix(route, "DELETE /v1/sessions/"), api.SessionEnded, "deleted"), true
		}
		return reply{}, false
	})
}

func openSession(t *testing.T, cs *sdk.ClientSession) string {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: OpenSessionTool, Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("open_session: %v, %q", err, resultText(res))
	}
	return res.StructuredContent.(map[string]any)["session_id"].(string)
}

// connect is one more client connection to s.
func connect(t *testing.T, s *Server) *sdk.ClientSession {
	t.Helper()
	return connectWith(t, s, nil)
}

// connectWith connects an in-memory client of options opts to s.
func connectWith(t *testing.T, s *Server, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := sdk.NewInMemoryTransports()
	ss, err := s.mcp.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, opts).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 5 s", what)
		}
	}
}

// Sessions end with the connection that opened them, and all of them
// when the server stops; a session closed with close_session is not
// deleted again.
func TestSessionsEndWithTheirConnection(t *testing.T) {
	f := newRealDaemon(t)
	s, a := session(t, f)
	b := connect(t, s)
	s1 := openSession(t, a)
	s2 := openSession(t, b)
	s3 := openSession(t, a)
	res, err := a.CallTool(context.Background(), &sdk.CallToolParams{Name: CloseSessionTool, Arguments: map[string]any{"session_id": s3}})
	if err != nil || res.IsError {
		t.Fatalf("close_session: %v, %q", err, resultText(res))
	}
	deleted := func(id string) int { return f.Count("DELETE /v1/sessions/" + id) }

	a.Close()
	waitFor(t, "DELETE of "+s1, func() bool { return deleted(s1) == 1 })
	time.Sleep(50 * time.Millisecond)
	if deleted(s2) != 0 || deleted(s3) != 1 {
		t.Errorf("after a closed: %s deleted %d times (want 0: b is open), %s %d (want 1: by close_session)", s2, deleted(s2), s3, deleted(s3))
	}

	if err := s.owned.endAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if deleted(s2) != 1 {
		t.Errorf("the server stopped and %s is not deleted", s2)
	}
	// Opened after the stop: nothing would end it, so it is ended at once.
	others := func() int {
		n := 0
		for _, r := range f.Seen() {
			if id, ok := strings.CutPrefix(r, "DELETE /v1/sessions/"); ok && id != s1 && id != s2 && id != s3 {
				n++
			}
		}
		return n
	}
	res, err = b.CallTool(context.Background(), &sdk.CallToolParams{Name: OpenSessionTool, Arguments: map[string]any{}})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "shutting down") || f.Count("POST /v1/sessions") != 4 || others() != 1 {
		t.Errorf("open_session after the stop: %v, %q, opened %d sessions in all (want 4), the fourth deleted %d times", err, resultText(res), f.Count("POST /v1/sessions"), others())
	}
	b.Close()
	time.Sleep(50 * time.Millisecond)
	if deleted(s2) != 1 {
		t.Errorf("%s deleted twice", s2)
	}
}

// The stdio server has deleted its sessions when ServeStdio returns, and
// says so when it could not.
func TestServeStdioEndsSessions(t *testing.T) {
	for _, tc := range []struct {
		status  int
		wantErr bool
	}{{http.StatusOK, false}, {http.StatusInternalServerError, true}} {
		f := sessionsDaemon(t, tc.status)
		s, err := New(context.Background(), client.New(f.sock), Options{Version: "test"})
		if err != nil {
			t.Fatal(err)
		}
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		served := make(chan error, 1)
		go func() {
			served <- s.ServeStdio(context.Background(), inR, outW)
			outW.Close()
		}()
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).
			Connect(context.Background(), &sdk.IOTransport{Reader: outR, Writer: inW}, nil)
		if err != nil {
			t.Fatal(err)
		}
		openSession(t, cs)
		openSession(t, cs)
		cs.Close() // closes the server's stdin
		err = <-served
		if n := f.count("DELETE /v1/sessions/s-1") + f.count("DELETE /v1/sessions/s-2"); n != 2 {
			t.Errorf("daemon %d: %d deletes when ServeStdio returned, want 2", tc.status, n)
		}
		if tc.wantErr != errors.Is(err, ErrSessionsLeft) || (tc.wantErr && !strings.Contains(err.Error(), "session s-")) {
			t.Errorf("daemon %d: ServeStdio: %v", tc.status, err)
		}
	}
}

// Ending sessions does not wait on a daemon that does not answer.
func TestEndSessionsIsBounded(t *testing.T) {
	defer func(d time.Duration) { endTimeout = d }(endTimeout)
	endTimeout = 100 * time.Millisecond
	hang := make(chan struct{})
	sock := raw.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-hang }))
	defer close(hang) // before the server's close, which waits for the handlers
	s := &Server{client: client.New(sock)}
	start := time.Now()
	err := s.endSessions(context.Background(), []string{"s-1", "s-2"})
	if !errors.Is(err, ErrSessionsLeft) || time.Since(start) > 2*time.Second {
		t.Errorf("endSessions on a hung daemon: %v after %s", err, time.Since(start))
	}
}

// Over HTTP, a client's DELETE of its MCP session ends its sessions.
func TestHTTPSessionEndsSessions(t *testing.T) {
	f := newRealDaemon(t)
	s, _ := session(t, f)
	tok := testToken(t)
	srv := httptest.NewServer(s.Handler(tok))
	defer srv.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).
		Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: srv.URL + Path, HTTPClient: bearerClient(tok)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := openSession(t, cs)
	time.Sleep(50 * time.Millisecond)
	if f.Count("DELETE /v1/sessions/"+id) != 0 {
		t.Fatal("the session ended with the HTTP request that opened it")
	}
	cs.Close()
	waitFor(t, "DELETE of "+id, func() bool { return f.Count("DELETE /v1/sessions/"+id) == 1 })
}

// A daemon without sessions gets no session tools, and run_python no
// session_id.
func TestSessionsDisabled(t *testing.T) {
	info := api.Info{Maxima: api.LimitValues{TimeoutMs: 60000}}
	f := newFakeDaemon(t, map[string]reply{"GET /v1/info": jsonReply(info)})
	_, cs := session(t, f)
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "format_python,lint_python,run_python" {
		t.Errorf("tools %v", names)
	}
	run := toolByName(t, cs, RunTool)
	if _, ok := schemaOf(t, run).Properties["session_id"]; ok || strings.Contains(run.Description, "session") {
		t.Errorf("run_python speaks of sessions:\n%s", run.Description)
	}
	if ins := cs.InitializeResult().Instructions; strings.Contains(ins, "session") {
		t.Errorf("instructions speak of sessions: %s", ins)
	}
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: RunTool, Arguments: map[string]any{"code": "x", "session_id": "s-1"}})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "session_id") {
		t.Errorf("session_id without sessions: %v, %q", err, resultText(res))
	}
}

// Rich outputs reach the model: text types as text, images as images; a
// figure (already attached) and a plain execute_result add nothing.
func TestRunResultOutputs(t *testing.T) {
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nxx"))
	fig := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nfig"))
	raw := func(s string) json.RawMessage { b, _ := json.Marshal(s); return b }
	resp := &api.ExecuteResponse{Status: "ok", Figures: []api.Figure{{Name: "figure-1.png", ContentB64: fig}}, Outputs: []api.Output{
		{OutputType: api.OutputDisplayData, Data: map[string]json.RawMessage{"text/html": raw("<table/>"), "application/json": json.RawMessage(`{"a":1}`), "text/plain": raw("T")}},
		{OutputType: api.OutputDisplayData, Data: map[string]json.RawMessage{"image/png": raw(fig), "text/plain": raw("<Figure>")}},
		{OutputType: api.OutputDisplayData, Data: map[string]json.RawMessage{"image/png": raw(png), "text/plain": raw("img")}},
		{OutputType: api.OutputDisplayData, Data: map[string]json.RawMessage{"text/plain": raw("just text")}},
		{OutputType: api.OutputExecuteResult, Data: map[string]json.RawMessage{"text/plain": raw("42")}},
	}}
	res, _, err := runResult(resp, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range res.Content[1:] {
		switch c := c.(type) {
		case *sdk.TextContent:
			got = append(got, c.Text)
		case *sdk.ImageContent:
			got = append(got, c.MIMEType+" "+string(c.Data[8:]))
		}
	}
	want := []string{
		"image/png fig",
		"output 1 (display_data):\ntext/html:\n<table/>\napplication/json:\n{\"a\":1}",
		"output 3 (display_data), its image attached next:\ntext/plain:\nimg",
		"image/png xx",
		"output 4 (display_data):\ntext/plain:\njust text",
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("content\n%q\nwant\n%q", got, want)
	}
	resp.Outputs = []api.Output{{OutputType: api.OutputDisplayData, Data: map[string]json.RawMessage{"image/jpeg": raw("!")}}}
	if _, _, err := runResult(resp, nil); err == nil || !strings.Contains(err.Error(), "output 1: image/jpeg") {
		t.Errorf("bad output base64: %v", err)
	}
}
