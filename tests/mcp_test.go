package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
)

// mcpClient is an MCP client session with `jailctl mcp` and the tools it
// listed, by name.
type mcpClient struct {
	t       *testing.T
	session *sdk.ClientSession
	tools   map[string]*sdk.Tool
}

// connectMCP connects the Go SDK's client over transport, checks the
// initialization and lists the tools, checking that each tool's schemas
// are valid JSON Schemas.
func connectMCP(ctx context.Context, t *testing.T, transport sdk.Transport) *mcpClient {
	t.Helper()
	m := mstConnect(ctx, t, transport, nil)
	init := m.session.InitializeResult()
	if init.ServerInfo == nil || init.ServerInfo.Name != "jaild" || init.Capabilities == nil || init.Capabilities.Tools == nil {
		t.Fatalf("initialize: server %+v, capabilities %+v: want jaild with tools", init.ServerInfo, init.Capabilities)
	}
	for _, tool := range m.tools {
		in := resolveSchema(t, tool.Name+" input", tool.InputSchema)
		required := map[string][]string{"run_python": {"code"}, "lint_python": {"code"}, "format_python": {"code"}, "close_session": {"session_id"}, "pause_session": {"session_id"}, "fork_session": {"session_id"}, "snapshot_session": {"session_id"}, "restore_session": {"session_id", "snapshot_id"}, "run_command": {"session_id", "command"}}[tool.Name]
		if in.Schema().Type != "object" || !slices.Equal(in.Schema().Required, required) {
			t.Errorf("%s: input schema %v: want an object that requires %v", tool.Name, in.Schema(), required)
		}
		resolveSchema(t, tool.Name+" output", tool.OutputSchema)
		if tool.Description == "" {
			t.Errorf("%s: no description", tool.Name)
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range m.tools {
			if !yield(name) {
				return
			}
		}
	})
	if want := []string{"close_session", "fork_session", "format_python", "lint_python", "list_sessions", "open_session", "pause_session", "restore_session", "run_command", "run_python", "snapshot_session"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}
	return m
}

func resolveSchema(t *testing.T, what string, schema any) *jsonschema.Resolved {
	t.Helper()
	raw, err := json.Marshal(schema)
	if err != nil {
		t.Fatalf("%s schema: %v", what, err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("%s schema %s: %v", what, raw, err)
	}
	r, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("%s schema %s is not valid: %v", what, raw, err)
	}
	return r
}

// call calls a tool. Its arguments stay maps, as an MCP client sends them:
// they are checked against the tool's input schema, not internal/api's
// types, and some cases send what that schema refuses. A tool error is a
// result with IsError, never a protocol error; a result with structured content must match the tool's
// output schema. out, if non-nil, receives the structured content.
func (m *mcpClient) call(ctx context.Context, name string, args any, out any) *sdk.CallToolResult {
	m.t.Helper()
	res, err := m.session.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		m.t.Fatalf("tools/call %s: %v", name, err)
	}
	if res.StructuredContent == nil {
		return res
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		m.t.Fatal(err)
	}
	var instance any
	if err := json.Unmarshal(raw, &instance); err != nil {
		m.t.Fatal(err)
	}
	if err := resolveSchema(m.t, name+" output", m.tools[name].OutputSchema).Validate(instance); err != nil {
		m.t.Errorf("%s: structured content %s does not match the output schema: %v", name, raw, err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			m.t.Fatalf("%s: structured content %s: %v", name, raw, err)
		}
	}
	return res
}

// text is the result's text content.
func text(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// runOutput is run_python's structured content, as the tests read it.
type runOutput struct {
	Status    string         `json:"status"`
	Message   string         `json:"message"`
	Exception *api.ExecError `json:"exception"`
	ExitCode  *int           `json:"exit_code"`
	Stdout    string         `json:"stdout"`
	Files     []struct {
		Path  string `json:"path"`
		URI   string `json:"uri"`
		Error string `json:"error"`
	} `json:"files"`
	Figures []string `json:"figures"`
}

// TestMCPStdio drives `jailctl mcp` over stdio with the Go SDK's client,
// against the shared daemon: every tool, and the failures a model must see
// as tool results.
func TestMCPStdio(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := mcpCommand(t, filepath.Join(binDir, "jailctl"), shared.Socket, "jailctl mcp")
	m := connectMCP(ctx, t, &sdk.CommandTransport{Command: cmd, TerminateDuration: stdioGrace})

	t.Run("description", func(t *testing.T) {
		var info api.Info
		if code, _ := shared.call(t, http.MethodGet, "/v1/info", nil, &info); code != http.StatusOK {
			t.Fatalf("GET /v1/info: %d", code)
		}
		d := m.tools["run_python"].Description
		want := []string{"Python " + info.Rootfs.PythonVersion, "clean state", "no network", "print()", "10 s of wall-clock time", "512 MB of memory"}
		for name, version := range info.Rootfs.PythonPackages {
			want = append(want, name+" "+version)
		}
		for _, w := range want {
			if !strings.Contains(d, w) {
				t.Errorf("run_python's description lacks %q:\n%s", w, d)
			}
		}
	})

	t.Run("figure and files", func(t *testing.T) {
		code := `import os
import pandas as pd
import matplotlib.pyplot as plt
total = pd.read_csv("in/data.csv").a.sum()
print("total", total)
os.makedirs("out")
with open("out/total.txt", "w") as f:
    f.write(str(total))
plt.plot([1, 3, 2])
`
		var out runOutput
		res := m.call(ctx, "run_python", map[string]any{
			"code":         code,
			"files":        []map[string]string{{"path": "in/data.csv", "content_b64": base64.StdEncoding.EncodeToString([]byte("a\n1\n2\n3\n"))}},
			"return_files": []string{"out/*.txt", "missing.txt"},
		}, &out)
		if res.IsError || out.Status != "ok" || out.Stdout != "total 6\n" || !strings.Contains(text(res), "total 6") {
			t.Fatalf("isError %v, structured %+v, text %q", res.IsError, out, text(res))
		}
		var pngs, resources int
		for _, c := range res.Content {
			switch c := c.(type) {
			case *sdk.ImageContent:
				pngs++
				if c.MIMEType != "image/png" || !bytes.HasPrefix(c.Data, []byte("\x89PNG\r\n\x1a\n")) {
					t.Errorf("image %s of %d bytes is not a PNG", c.MIMEType, len(c.Data))
				}
			case *sdk.EmbeddedResource:
				resources++
				if !strings.HasSuffix(c.Resource.URI, "/out/total.txt") || c.Resource.Text != "6" {
					t.Errorf("resource %+v, want out/total.txt holding 6", c.Resource)
				}
			}
		}
		if pngs != 1 || resources != 1 || len(out.Figures) != 1 {
			t.Errorf("%d images, %d resources, figures %v: want one of each", pngs, resources, out.Figures)
		}
		if len(out.Files) != 2 || out.Files[0].Path != "out/total.txt" || out.Files[0].URI == "" || out.Files[1].Path != "missing.txt" || out.Files[1].Error == "" {
			t.Errorf("files %+v: want out/total.txt returned and missing.txt with an error", out.Files)
		}
	})

	failures := []struct {
		name       string
		args       map[string]any
		status     string
		inText     string
		exceptType string
	}{
		{"exception", map[string]any{"code": "print('before')\n1 / 0\n"}, "error", "ZeroDivisionError: division by zero (line 2", "ZeroDivisionError"},
		{"timeout", map[string]any{"code": "while True:\n    pass\n", "timeout_seconds": 1}, "timeout", "Execution terminated after 1 second", ""},
		{"memory limit", map[string]any{"code": "x = bytearray(2 << 30)\n"}, "memory_limit", "Memory limit of 512 MB exceeded", ""},
		{"exit code", map[string]any{"code": "import sys\nsys.exit(3)\n"}, "error", "exit code: 3", ""},
	}
	for _, tc := range failures {
		t.Run(tc.name, func(t *testing.T) {
			var out runOutput
			res := m.call(ctx, "run_python", tc.args, &out)
			if !res.IsError || out.Status != tc.status || !strings.Contains(text(res), tc.inText) {
				t.Fatalf("isError %v, status %q, text %q: want isError, status %q and %q", res.IsError, out.Status, text(res), tc.status, tc.inText)
			}
			if tc.exceptType != "" && (out.Exception == nil || out.Exception.Type != tc.exceptType || out.Exception.Line == nil) {
				t.Errorf("exception %+v, want %s with its line", out.Exception, tc.exceptType)
			}
		})
	}

	t.Run("lint", func(t *testing.T) {
		var out struct {
			Diagnostics []api.Diagnostic `json:"diagnostics"`
		}
		res := m.call(ctx, "lint_python", map[string]any{"code": "import os\nx == None\n", "select": []string{"F", "E711"}}, &out)
		var codes []string
		for _, d := range out.Diagnostics {
			codes = append(codes, d.Code)
		}
		if res.IsError || !slices.Equal(codes, []string{"F401", "F821", "E711"}) || !strings.Contains(text(res), "1:8: F401") {
			t.Errorf("isError %v, codes %v, text %q: want F401, F821, E711", res.IsError, codes, text(res))
		}
		res = m.call(ctx, "lint_python", map[string]any{"code": "print(1)\n", "select": []string{"F"}}, &out)
		if res.IsError || len(out.Diagnostics) != 0 {
			t.Errorf("clean code: isError %v, %+v", res.IsError, out.Diagnostics)
		}
	})

	t.Run("format", func(t *testing.T) {
		var out struct {
			Code    string `json:"code"`
			Changed bool   `json:"changed"`
		}
		res := m.call(ctx, "format_python", map[string]any{"code": "x = {  'a':1 }\n"}, &out)
		if res.IsError || out.Code != "x = {\"a\": 1}\n" || !out.Changed || text(res) != out.Code {
			t.Errorf("isError %v, %+v, text %q", res.IsError, out, text(res))
		}
	})

	// Bad arguments are tool errors the model can act on, with the
	// message of whoever refused them.
	refusals := []struct {
		name, tool string
		args       map[string]any
		inText     string
	}{
		{"no code", "run_python", map[string]any{}, "code"},
		{"unknown argument", "run_python", map[string]any{"code": "print(1)", "network": true}, "network"},
		{"timeout above the maximum", "run_python", map[string]any{"code": "print(1)", "timeout_seconds": 1e6}, "timeout_seconds"},
		{"file outside the workspace", "run_python", map[string]any{"code": "print(1)", "files": []map[string]string{{"path": "../x", "content_b64": ""}}}, "files[0].path"},
		{"unparsable code", "format_python", map[string]any{"code": "x = (\n"}, "cannot be formatted"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			res := m.call(ctx, tc.tool, tc.args, nil)
			if !res.IsError || !strings.Contains(text(res), tc.inText) {
				t.Errorf("isError %v, text %q: want isError naming %q", res.IsError, text(res), tc.inText)
			}
		})
	}

	// Closing the session closes jailctl's stdin; it must exit 0 on its
	// own, before the transport resorts to SIGTERM.
	start := time.Now()
	if err := m.session.Close(); err != nil || time.Since(start) >= stdioGrace {
		t.Errorf("jailctl mcp after its stdin closed: %v after %s, want exit 0 at once", err, time.Since(start))
	}
}

// stdioGrace is how long the stdio transport waits for jailctl to exit
// after closing its stdin, before it sends SIGTERM.
const stdioGrace = 20 * time.Second

// startMCPHTTP starts `jailctl mcp --http` on a loopback port for d.
func startMCPHTTP(t *testing.T, d *daemon) *mcpHTTPServer {
	t.Helper()
	return startMCPHTTPFor(t, d.Socket)
}

// mcpHTTPServer is a `jailctl mcp --http` the tests started.
type mcpHTTPServer struct {
	cmd   *exec.Cmd
	url   string
	token string // "" if it printed none
}

// startMCPHTTPFor starts `jailctl mcp --http` on a loopback port for the
// socket, with args after mcp, and reads its URL from stderr and the
// token it printed on stdout.
func startMCPHTTPFor(t *testing.T, socket string, args ...string) *mcpHTTPServer {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "jailctl"), append([]string{"--socket", socket, "mcp", "--http", "127.0.0.1:0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &mcpHTTPServer{cmd: cmd}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	urls, tokens := make(chan string, 1), make(chan string, 1)
	var log bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`serving MCP at (http://\S+)`)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			tokens <- strings.TrimSpace(sc.Text())
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case s.url = <-urls:
	case <-time.After(30 * time.Second):
		t.Fatalf("jailctl mcp --http did not say where it serves: %s", log.String())
	}
	if !strings.HasPrefix(s.url, "http://127.0.0.1:") || !strings.HasSuffix(s.url, "/mcp") {
		t.Fatalf("serving at %s, want http://127.0.0.1:PORT/mcp", s.url)
	}
	// The token, if any, is printed before the URL.
	select {
	case s.token = <-tokens:
	case <-time.After(time.Second):
	}
	return s
}

// stop interrupts the server and waits for it to end its sessions.
func (s *mcpHTTPServer) stop(t *testing.T) {
	t.Helper()
	if err := s.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Wait(); err != nil {
		t.Errorf("jailctl mcp --http after SIGINT: %v, want exit 0", err)
	}
}

// transport is the Go SDK client's transport to the server, with the
// token.
func (s *mcpHTTPServer) transport() *sdk.StreamableClientTransport {
	return &sdk.StreamableClientTransport{Endpoint: s.url, HTTPClient: &http.Client{Transport: bearerTransport{token: s.token}}}
}

// client connects the Go SDK's client with the token.
func (s *mcpHTTPServer) client(ctx context.Context, t *testing.T) *mcpClient {
	t.Helper()
	return mstConnect(ctx, t, s.transport(), nil)
}

// bearerTransport sends a token as a bearer credential.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPHTTP serves `jailctl mcp --http` on a loopback port: a client
// session over Streamable HTTP, the DNS rebinding and cross-origin
// refusals, and the refusal to listen on a non-loopback address.
func TestMCPHTTP(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jailctl := filepath.Join(binDir, "jailctl")
	s := startMCPHTTP(t, shared)
	cmd, url := s.cmd, s.url

	m := connectMCP(ctx, t, s.transport())
	var out runOutput
	if res := m.call(ctx, "run_python", map[string]any{"code": "print(6 * 7)"}, &out); res.IsError || out.Stdout != "42\n" {
		t.Errorf("run_python over HTTP: isError %v, %+v", res.IsError, out)
	}

	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	post := func(host, origin string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(initialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		req.Header.Set("Authorization", "Bearer "+s.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("POST %s: %v", url, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("", ""); code != http.StatusOK {
		t.Errorf("initialize with a loopback Host: %d, want 200", code)
	}
	if code := post("evil.example.com", ""); code != http.StatusForbidden {
		t.Errorf("initialize with Host evil.example.com (DNS rebinding): %d, want 403", code)
	}
	if code := post("", "http://evil.example.com"); code != http.StatusForbidden {
		t.Errorf("initialize with Origin http://evil.example.com: %d, want 403", code)
	}

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("jailctl mcp --http after SIGINT: %v, want exit 0", err)
	}

	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		c := exec.Command(jailctl, "--socket", shared.Socket, "mcp", "--http", addr)
		b, err := c.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(b), "not a loopback address") {
			t.Errorf("mcp --http %s: %v, %q: want exit 2 and a refusal", addr, err, b)
		}
	}
}
