package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
)

// fakeDaemon answers "METHOD /path" with canned JSON on a Unix socket and
// keeps the last request body of each route.
type fakeDaemon struct {
	sock string
	mu   sync.Mutex
	last map[string][]byte
}

type reply struct {
	status int
	body   string
}

func newFakeDaemon(t *testing.T, replies map[string]reply) *fakeDaemon {
	t.Helper()
	// t.TempDir() can exceed the 108-byte limit of a socket path.
	dir, err := os.MkdirTemp("", "mcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	f := &fakeDaemon{sock: filepath.Join(dir, "s"), last: map[string][]byte{}}
	ln, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.Method + " " + r.URL.Path
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.last[route] = body
		f.mu.Unlock()
		rep, ok := replies[route]
		if !ok {
			rep = reply{http.StatusNotFound, `{"error":{"type":"not_found","message":"no route"}}`}
		}
		if rep.status == 0 {
			rep.status = http.StatusOK
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		io.WriteString(w, rep.body)
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
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

func infoReply(admin bool) reply {
	info := api.Info{
		Rootfs:      api.RootfsInfo{PythonVersion: "3.13.5", PythonPackages: map[string]string{"numpy": "2.2.4", "pandas": "2.2.3"}},
		Defaults:    api.LimitValues{TimeoutMs: 10000, MemoryMB: 512, Pids: 64, FileSizeMB: 64, OutputBytes: 1 << 20},
		Maxima:      api.LimitValues{TimeoutMs: 60000},
		AdminMaxima: api.LimitValues{TimeoutMs: 3600000},
		Caller:      api.CallerInfo{Admin: admin},
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

// session serves a Server on the fake daemon to an in-memory client.
func session(t *testing.T, f *fakeDaemon) (*Server, *sdk.ClientSession) {
	t.Helper()
	ctx := context.Background()
	s, err := New(ctx, client.New(f.sock), "test")
	if err != nil {
		t.Fatal(err)
	}
	st, ct := sdk.NewInMemoryTransports()
	ss, err := s.mcp.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return s, cs
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
	_, err := New(context.Background(), client.New(filepath.Join(t.TempDir(), "none.sock")), "test")
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
		for _, want := range []string{"Python 3.13.5", "numpy 2.2.4, pandas 2.2.3", "clean state", "no network", "print()", "10 s of wall-clock time", max, "512 MB of memory", "1 MiB each of stdout"} {
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
	_, _, err := runResult(&api.ExecuteResponse{Status: "ok", Figures: []api.Figure{{Name: "f.png", ContentB64: "!"}}})
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
	if !isLoopback("::1") {
		t.Error("::1 is loopback")
	}
}

func TestHandlerRefusesRebindingAndOtherOrigins(t *testing.T) {
	f := newFakeDaemon(t, map[string]reply{"GET /v1/info": infoReply(false)})
	s, _ := session(t, f)
	srv := httptest.NewServer(s.Handler())
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
