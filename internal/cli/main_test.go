package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jaild/jaild/internal/api"
)

// reply is a canned daemon response.
type reply struct {
	status  int
	headers map[string]string
	body    string
}

// fakeDaemon serves canned replies by "METHOD /path" on a temporary Unix
// socket and records the last request body per route.
type fakeDaemon struct {
	sock string
	mu   sync.Mutex
	last map[string][]byte
}

func newFakeDaemon(t *testing.T, replies map[string]reply) *fakeDaemon {
	t.Helper()
	// t.TempDir() can exceed the 108-byte limit of a socket path.
	dir, err := os.MkdirTemp("", "jc")
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
			rep = reply{404, nil, `{"error":{"type":"not_found","message":"no route ` + route + `"}}`}
		}
		for k, v := range rep.headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		if rep.status == 0 {
			rep.status = 200
		}
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

type result struct {
	code           int
	stdout, stderr string
}

// jailctl runs the command in-process against sock.
func jailctl(t *testing.T, sock, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	if sock != "" {
		args = append([]string{"--socket", sock}, args...)
	}
	code := Main(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

func executeReply(r api.ExecuteResponse) reply {
	if r.RunID == "" {
		r.RunID = "r1"
	}
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return reply{body: string(b)}
}

func intp(n int) *int { return &n }

func TestExecOutputAndExitCode(t *testing.T) {
	tests := []struct {
		name   string
		resp   api.ExecuteResponse
		code   int
		stderr string
	}{
		{"ok", api.ExecuteResponse{Status: "ok", ExitCode: intp(0), Stdout: "hello\n"}, 0, ""},
		{"exit 3", api.ExecuteResponse{Status: "error", ExitCode: intp(3), Stdout: "hello\n", Stderr: "Traceback\n"}, 3, "Traceback\n"},
		{"timeout", api.ExecuteResponse{Status: "timeout", Signal: intp(9), TimedOut: true, Stdout: "hello\n", Message: "timed out after 1s"}, 124,
			"jailctl: timed out after 1s\n"},
		{"signal 9", api.ExecuteResponse{Status: "killed", Signal: intp(9), Stdout: "hello\n", Message: "killed by signal 9"}, 137,
			"jailctl: killed by signal 9\n"},
		{"memory limit", api.ExecuteResponse{Status: "memory_limit", OOMKilled: true, Stdout: "hello\n"}, 137, ""},
		{"cpu limit", api.ExecuteResponse{Status: "cpu_limit", Signal: intp(24), Stdout: "hello\n"}, 152, ""},
		{"output limit", api.ExecuteResponse{Status: "output_limit", ExitCode: intp(0), Stdout: "hello\n", StdoutTruncated: true, Message: "output over 1 MiB"}, 1,
			"jailctl: the run's stdout was truncated\njailctl: output over 1 MiB\n"},
		{"message on ok is not printed", api.ExecuteResponse{Status: "ok", ExitCode: intp(0), Stdout: "hello\n", Message: "fine"}, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDaemon(t, map[string]reply{"POST /v1/execute": executeReply(tt.resp)})
			r := jailctl(t, d.sock, "", "exec", "-c", "print('hello')")
			if r.code != tt.code || r.stdout != "hello\n" || r.stderr != tt.stderr {
				t.Errorf("got %d %q %q; want %d %q %q", r.code, r.stdout, r.stderr, tt.code, "hello\n", tt.stderr)
			}
		})
	}
}

func TestExecRequest(t *testing.T) {
	d := newFakeDaemon(t, map[string]reply{"POST /v1/execute": executeReply(api.ExecuteResponse{Status: "ok", ExitCode: intp(0)})})
	dir := t.TempDir()
	data := filepath.Join(dir, "data.bin")
	content := []byte("\x00\x01binary\xff")
	if err := os.WriteFile(data, content, 0o644); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "main.py")
	os.WriteFile(script, []byte("print(open('data.bin','rb').read())\n"), 0o644)
	input := filepath.Join(dir, "input.txt")
	os.WriteFile(input, []byte("line 1\n"), 0o644)

	r := jailctl(t, d.sock, "", "exec", "--file", data, "--file", data+":in/other.bin",
		"--timeout", "1500ms", "--memory", "256", "--get", "out/*.png", "--get", "**/*.csv",
		"--interactive", "--env", "A=1", "--env", "B=x=y", "--stdin-file", input, script)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var req api.ExecuteRequest
	d.request(t, "POST /v1/execute", &req)
	b64 := base64.StdEncoding.EncodeToString(content)
	if req.Code != "print(open('data.bin','rb').read())\n" {
		t.Errorf("code %q", req.Code)
	}
	if len(req.Files) != 2 || req.Files[0] != (api.FileIn{Path: "data.bin", ContentB64: b64}) ||
		req.Files[1] != (api.FileIn{Path: "in/other.bin", ContentB64: b64}) {
		t.Errorf("files %+v", req.Files)
	}
	if req.Limits == nil || req.Limits.TimeoutMs == nil || *req.Limits.TimeoutMs != 1500 ||
		req.Limits.MemoryMB == nil || *req.Limits.MemoryMB != 256 || req.Limits.Pids != nil {
		t.Errorf("limits %+v", req.Limits)
	}
	if strings.Join(req.ReturnFiles, " ") != "out/*.png **/*.csv" || !req.LastLineInteractive {
		t.Errorf("return_files %q interactive %v", req.ReturnFiles, req.LastLineInteractive)
	}
	if req.Env["A"] != "1" || req.Env["B"] != "x=y" || len(req.Env) != 2 {
		t.Errorf("env %v", req.Env)
	}
	if req.Stdin == nil || *req.Stdin != "line 1\n" {
		t.Errorf("stdin %v", req.Stdin)
	}

	// Code from stdin, no limits, no stdin for the run.
	r = jailctl(t, d.sock, "print(2)\n", "exec")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	req = api.ExecuteRequest{}
	d.request(t, "POST /v1/execute", &req)
	if req.Code != "print(2)\n" || req.Limits != nil || req.Stdin != nil || req.Files != nil || req.Env != nil {
		t.Errorf("request from stdin %+v", req)
	}

	// --stdin-file - takes jailctl's stdin when the code comes from -c.
	jailctl(t, d.sock, "abc", "exec", "-c", "x", "--stdin-file", "-")
	req = api.ExecuteRequest{}
	d.request(t, "POST /v1/execute", &req)
	if req.Code != "x" || req.Stdin == nil || *req.Stdin != "abc" {
		t.Errorf("request with stdin %+v", req)
	}
}

func TestExecResultPrinted(t *testing.T) {
	res := "42"
	// The daemon's stdout holds the repr already (the runner prints it).
	d := newFakeDaemon(t, map[string]reply{"POST /v1/execute": executeReply(api.ExecuteResponse{Status: "ok", ExitCode: intp(0), Stdout: "a\n42\n", Result: &res})})
	r := jailctl(t, d.sock, "", "exec", "--interactive", "-c", "print('a'); 6*7")
	if r.code != 0 || r.stdout != "a\n42\n" {
		t.Errorf("got %d %q", r.code, r.stdout)
	}
}

func TestExecUsageErrors(t *testing.T) {
	d := newFakeDaemon(t, nil)
	for _, args := range [][]string{
		{"exec", "-c", "x", "file.py"},
		{"exec", "a.py", "b.py"},
		{"exec", "--timeout", "soon", "-c", "x"},
		{"exec", "--timeout", "-1s", "-c", "x"},
		{"exec", "--memory", "0", "-c", "x"},
		{"exec", "--env", "NOEQUALS", "-c", "x"},
		{"exec", "--file", ":x", "-c", "x"},
		{"exec", "--stdin-file", "-", "-"},
		{"exec", "--bogus"},
		{"bogus"},
	} {
		r := jailctl(t, d.sock, "", args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "jailctl: ") || r.stdout != "" {
			t.Errorf("%q: got %d %q %q; want a usage error", args, r.code, r.stdout, r.stderr)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.last) != 0 {
		t.Errorf("usage errors reached the daemon: %v", d.last)
	}
	// Missing local files are errors too, before any request.
	r := jailctl(t, d.sock, "", "exec", "/nonexistent/x.py")
	if r.code != 2 || !strings.Contains(r.stderr, "/nonexistent/x.py") {
		t.Errorf("missing file: %+v", r)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestExecWritesReturnedFiles(t *testing.T) {
	d := newFakeDaemon(t, map[string]reply{"POST /v1/execute": executeReply(api.ExecuteResponse{
		Status: "ok", ExitCode: intp(0),
		Files: []api.FileOut{
			{Path: "out/data.csv", SizeBytes: 4, ContentB64: b64("a,b\n")},
			{Path: "top.txt", SizeBytes: 2, ContentB64: b64("hi")},
			{Path: "out/link", Error: "symlink, not returned"},
		},
		Figures: []api.Figure{{Name: "figure_1.png", ContentB64: b64("\x89PNG")}},
	})})
	dir := t.TempDir()
	outDir := filepath.Join(dir, "results", "run1")
	// An existing regular file is replaced.
	os.MkdirAll(outDir, 0o755)
	os.WriteFile(filepath.Join(outDir, "top.txt"), []byte("old"), 0o644)

	r := jailctl(t, d.sock, "", "exec", "-c", "x", "--get", "out/*", "--out-dir", outDir)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for name, want := range map[string]string{"out/data.csv": "a,b\n", "top.txt": "hi", "figure_1.png": "\x89PNG"} {
		got, err := os.ReadFile(filepath.Join(outDir, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
		if !strings.Contains(r.stderr, "wrote "+filepath.Join(outDir, name)+"\n") {
			t.Errorf("stderr %q does not report %s", r.stderr, name)
		}
	}
	if !strings.Contains(r.stderr, "jailctl: out/link not returned: symlink, not returned\n") {
		t.Errorf("stderr %q does not report the skipped file", r.stderr)
	}
	entries, _ := os.ReadDir(outDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".jailctl-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestExecRefusesHostilePaths(t *testing.T) {
	dir := t.TempDir()
	outDir := filepath.Join(dir, "out")
	outside := filepath.Join(dir, "outside")
	os.MkdirAll(filepath.Join(outside, "etc"), 0o755)
	os.MkdirAll(outDir, 0o755)
	victim := filepath.Join(outside, "victim.txt")
	os.WriteFile(victim, []byte("precious"), 0o644)
	// Symlinks planted in the output directory: to a file outside, to a
	// directory outside, and to a directory inside.
	os.Symlink(victim, filepath.Join(outDir, "link.txt"))
	os.Symlink(outside, filepath.Join(outDir, "dirlink"))
	os.Mkdir(filepath.Join(outDir, "real"), 0o755)
	os.Symlink("real", filepath.Join(outDir, "inlink"))

	hostile := []string{
		"../../etc/x", "/etc/x", "a/../../b", "..", "", "x\x00y",
		"../outside/victim.txt", "link.txt", "dirlink/victim.txt", "inlink/x", ".",
	}
	var files []api.FileOut
	for _, p := range hostile {
		files = append(files, api.FileOut{Path: p, SizeBytes: 5, ContentB64: b64("pwned")})
	}
	files = append(files, api.FileOut{Path: "fine.txt", SizeBytes: 2, ContentB64: b64("ok")})
	d := newFakeDaemon(t, map[string]reply{"POST /v1/execute": executeReply(api.ExecuteResponse{
		Status: "ok", ExitCode: intp(0), Files: files,
		Figures: []api.Figure{{Name: "../../fig.png", ContentB64: b64("pwned")}},
	})})

	wd, _ := os.Getwd()
	r := jailctl(t, d.sock, "", "exec", "-c", "x", "--out-dir", outDir)
	if r.code != 1 {
		t.Errorf("exit %d; want 1 when files could not be written", r.code)
	}
	if got, _ := os.ReadFile(victim); string(got) != "precious" {
		t.Errorf("victim overwritten: %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(outDir, "fine.txt")); string(got) != "ok" {
		t.Errorf("fine.txt: %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(outDir, "link.txt")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("link.txt replaced: %v %v", fi, err)
	}
	if _, err := os.Stat(filepath.Join(outDir, "real", "x")); err == nil {
		t.Error("wrote through an in-directory symlink")
	}
	for _, p := range []string{"/etc/x", filepath.Join(dir, "b"), filepath.Join(outside, "etc", "x"), filepath.Join(dir, "fig.png"), filepath.Join(wd, "fine.txt")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was written", p)
		}
	}
	if n := strings.Count(r.stderr, "jailctl: cannot write "); n != len(hostile)+1 {
		t.Errorf("%d refusals reported; want %d:\n%s", n, len(hostile)+1, r.stderr)
	}
	if !strings.Contains(r.stderr, `jailctl: cannot write "x\x00y": refusing`) {
		t.Errorf("a NUL in a name is not escaped:\n%s", r.stderr)
	}
}

func TestExecJSON(t *testing.T) {
	body := `{"run_id":"r9","status":"error","exit_code":3,"signal":null,"stdout":"x\n","stderr":"","files":[{"path":"a.txt","size_bytes":1,"content_b64":"YQ=="}],"figures":[],"usage":{"duration_ms":1,"cpu_ms":0,"peak_memory_bytes":0},"extra_field":true}`
	d := newFakeDaemon(t, map[string]reply{"POST /v1/execute": {body: body + "\n"}})
	dir := t.TempDir()
	r := jailctl(t, d.sock, "", "exec", "--json", "--out-dir", dir, "-c", "x")
	if r.code != 3 || r.stdout != body+"\n" || r.stderr != "" {
		t.Errorf("got %d %q %q", r.code, r.stdout, r.stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("--json wrote files: %v", entries)
	}
}

func TestDaemonErrors(t *testing.T) {
	d := newFakeDaemon(t, map[string]reply{
		"POST /v1/execute": {503, map[string]string{"Retry-After": "2"}, `{"error":{"type":"busy","message":"all 8 slots are busy"}}`},
		"POST /v1/lint":    {400, nil, `{"error":{"type":"invalid_argument","message":"select: unknown rule \"ZZZ\""}}`},
		"GET /v1/info":     {429, map[string]string{"Retry-After": "60"}, `{"error":{"type":"rate_limited","message":"quota exhausted"}}`},
		"GET /v1/health":   {500, nil, `garbage`},
	})
	for _, tt := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"exec", "-c", "x"}, "jailctl: all 8 slots are busy (retry after 2s)\n"},
		{[]string{"exec", "--json", "-c", "x"}, "jailctl: all 8 slots are busy (retry after 2s)\n"},
		{[]string{"lint", "-", "--select", "ZZZ"}, "jailctl: select: unknown rule \"ZZZ\"\n"},
		{[]string{"info"}, "jailctl: quota exhausted (retry after 1m0s)\n"},
		{[]string{"health"}, "jailctl: jaild answered \"500 Internal Server Error\" with no valid error body\n"},
	} {
		r := jailctl(t, d.sock, "x = 1\n", tt.args...)
		if r.code != 2 || r.stderr != tt.stderr || r.stdout != "" {
			t.Errorf("%q: got %d %q %q; want 2 %q", tt.args, r.code, r.stdout, r.stderr, tt.stderr)
		}
	}
}

func TestCannotConnect(t *testing.T) {
	dir, err := os.MkdirTemp("", "jc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "missing.sock")
	for _, args := range [][]string{{"--socket", sock, "health"}, {"exec", "--socket", sock, "-c", "x"}, {"info"}} {
		t.Setenv("JAILD_SOCKET", sock)
		r := jailctl(t, "", "", args...)
		want := "jailctl: cannot connect to jaild at " + sock + ": no such file or directory (is the daemon running?"
		if r.code != 2 || !strings.HasPrefix(r.stderr, want) {
			t.Errorf("%q: got %d %q; want prefix %q", args, r.code, r.stderr, want)
		}
	}
}

func TestLint(t *testing.T) {
	d := newFakeDaemon(t, map[string]reply{"POST /v1/lint": {body: `{"diagnostics":[` +
		`{"code":"F401","message":"` + "`os`" + ` imported but unused","location":{"line":1,"column":8},"end_location":{"line":1,"column":10},"fixable":true},` +
		`{"code":"E711","message":"Comparison to ` + "`None`" + ` should be ` + "`cond is None`" + `","location":{"line":3,"column":6},"end_location":{"line":3,"column":8},"fixable":true}]}`}})
	file := filepath.Join(t.TempDir(), "m.py")
	os.WriteFile(file, []byte("import os\n"), 0o644)

	r := jailctl(t, d.sock, "", "lint", file, "--select", "F,E7", "--ignore", "E711", "--ignore", "E712")
	want := file + ":1:8: F401 `os` imported but unused\n" + file + ":3:6: E711 Comparison to `None` should be `cond is None`\n"
	if r.code != 1 || r.stdout != want || r.stderr != "" {
		t.Errorf("got %d %q %q; want 1 %q", r.code, r.stdout, r.stderr, want)
	}
	var req api.LintRequest
	d.request(t, "POST /v1/lint", &req)
	if req.Code != "import os\n" || strings.Join(req.Select, " ") != "F E7" || strings.Join(req.Ignore, " ") != "E711 E712" {
		t.Errorf("request %+v", req)
	}

	r = jailctl(t, d.sock, "import os\n", "lint")
	if r.code != 1 || !strings.HasPrefix(r.stdout, "-:1:8: F401 ") {
		t.Errorf("stdin: got %d %q", r.code, r.stdout)
	}

	clean := newFakeDaemon(t, map[string]reply{"POST /v1/lint": {body: `{"diagnostics":[]}`}})
	r = jailctl(t, clean.sock, "x = 1\n", "lint", "-")
	if r.code != 0 || r.stdout != "" {
		t.Errorf("clean: got %d %q", r.code, r.stdout)
	}
	r = jailctl(t, clean.sock, "x = 1\n", "lint", "--json")
	if r.code != 0 || r.stdout != "{\"diagnostics\":[]}\n" {
		t.Errorf("json: got %d %q", r.code, r.stdout)
	}
}

func TestFormat(t *testing.T) {
	changed := newFakeDaemon(t, map[string]reply{"POST /v1/format": {body: `{"code":"x = 1\n","changed":true}`}})
	same := newFakeDaemon(t, map[string]reply{"POST /v1/format": {body: `{"code":"x = 1\n","changed":false}`}})

	r := jailctl(t, changed.sock, "x=1\n", "format")
	if r.code != 0 || r.stdout != "x = 1\n" {
		t.Errorf("format: got %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = jailctl(t, changed.sock, "x=1\n", "format", "--check")
	if r.code != 1 || r.stdout != "" || r.stderr != "" {
		t.Errorf("--check changed: got %d %q %q", r.code, r.stdout, r.stderr)
	}
	r = jailctl(t, same.sock, "x = 1\n", "format", "--check", "-")
	if r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("--check same: got %d %q %q", r.code, r.stdout, r.stderr)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "m.py")
	os.WriteFile(file, []byte("x=1\n"), 0o640)
	link := filepath.Join(dir, "link.py")
	os.Symlink("m.py", link)
	r = jailctl(t, changed.sock, "", "format", "--write", link)
	if r.code != 0 || r.stdout != "" || r.stderr != "reformatted "+link+"\n" {
		t.Errorf("--write: got %d %q %q", r.code, r.stdout, r.stderr)
	}
	if got, _ := os.ReadFile(file); string(got) != "x = 1\n" {
		t.Errorf("file holds %q", got)
	}
	if fi, _ := os.Lstat(file); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v; want 0640", fi.Mode().Perm())
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("--write replaced the symlink instead of its target")
	}
	r = jailctl(t, changed.sock, "", "format", "--write", file)
	if r.code != 0 || r.stderr != "" {
		t.Errorf("--write unchanged: got %d %q", r.code, r.stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("directory holds %v", entries)
	}

	for _, args := range [][]string{{"format", "--write"}, {"format", "--check", "--write", file}} {
		if r := jailctl(t, changed.sock, "", args...); r.code != 2 {
			t.Errorf("%q: exit %d; want 2", args, r.code)
		}
	}
}

func TestInfoAndHealth(t *testing.T) {
	d := newFakeDaemon(t, map[string]reply{
		"GET /v1/info": {body: `{"version":"0.3.0","api":"v1",` +
			`"rootfs":{"name":"jaild-python","image_digest":"sha256:abc","python_version":"3.13.5","debian_suite":"trixie","python_packages":{"numpy":"2.3"},"debian_packages":120},` +
			`"default_limits":{"timeout_ms":10000,"memory_mb":256,"pids":64,"file_size_mb":16,"output_bytes":1048576},` +
			`"max_limits":{"timeout_ms":60000,"memory_mb":1024,"pids":256,"file_size_mb":64,"output_bytes":8388608},` +
			`"cgroup_mode":"delegated","seccomp":{"profile":"default","default_action":"errno","rules":300},` +
			`"capacity":{"max_concurrent":8,"running":2,"queue_size":16,"queued":0},"caller":{"uid":1000,"admin":false,"quota_remaining":7}}`},
		"GET /v1/health": {body: `{"status":"ok"}`},
	})
	r := jailctl(t, d.sock, "", "info")
	for _, want := range []string{"0.3.0", "3.13.5", "sha256:abc", "timeout 10s, memory 256 MB, pids 64, file size 16 MB, output 1 MiB",
		"timeout 1m0s, memory 1024 MB", "delegated", "2/8 running, 0/16 queued", "uid 1000, quota 7 runs remaining"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("info output lacks %q:\n%s", want, r.stdout)
		}
	}
	if r.code != 0 {
		t.Errorf("info exit %d: %s", r.code, r.stderr)
	}
	r = jailctl(t, d.sock, "", "info", "--json")
	var info api.Info
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.Capacity.MaxConcurrent != 8 {
		t.Errorf("info --json: %v %q", err, r.stdout)
	}
	if r := jailctl(t, d.sock, "", "health"); r.code != 0 || r.stdout != "ok\n" {
		t.Errorf("health: %+v", r)
	}
	if r := jailctl(t, d.sock, "", "health", "--json"); r.code != 0 || r.stdout != "{\"status\":\"ok\"}\n" {
		t.Errorf("health --json: %+v", r)
	}
}

func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r := jailctl(t, "", "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "exec") || !strings.Contains(r.stdout, "/run/jaild/jaild.sock") {
			t.Errorf("%q: %+v", args, r)
		}
	}
	if r := jailctl(t, "", ""); r.code != 2 || !strings.Contains(r.stderr, "Commands:") {
		t.Errorf("no args: %+v", r)
	}
	if r := jailctl(t, "", "", "help", "exec"); r.code != 0 || !strings.Contains(r.stdout, "--out-dir DIR") {
		t.Errorf("help exec: %+v", r)
	}
	if r := jailctl(t, "", "", "version"); r.code != 0 || r.stdout != "jailctl dev\n" {
		t.Errorf("version: %+v", r)
	}
}

func TestInterrupt(t *testing.T) {
	dir, err := os.MkdirTemp("", "jc")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The server notices a client going away only once the body is read.
		io.Copy(io.Discard, r.Body)
		close(started)
		<-r.Context().Done() // the run lasts until the client goes away
	}))
	srv.Listener = ln
	srv.Start()
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-started; cancel() }()
	var out, errOut bytes.Buffer
	code := Main(ctx, []string{"--socket", sock, "exec", "-c", "import time; time.sleep(60)"}, strings.NewReader(""), &out, &errOut)
	if code != 130 || errOut.String() != "jailctl: interrupted\n" {
		t.Errorf("got %d %q; want 130 and an interrupted note", code, errOut.String())
	}
}

// doctor reports on this host and on the (fake) daemon behind the socket:
// --json has every check, and the exit status says whether any failed.
func TestDoctor(t *testing.T) {
	d := newFakeDaemon(t, map[string]reply{"GET /v1/info": {200, nil, `{"version":"v-fake","cgroup_mode":"v2"}`}})
	os.Chmod(d.sock, 0o660)
	cfg := filepath.Join(t.TempDir(), "jaild.toml")
	os.WriteFile(cfg, []byte(`image = "/nonexistent/image"`+"\n"), 0o644)
	r := jailctl(t, d.sock, "", "doctor", "--json", "--config", cfg)
	var rep struct {
		Checks []struct{ Name, Status, Detail, Fix string }
		OK     bool
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	got := map[string]string{}
	for _, c := range rep.Checks {
		got[c.Name] = c.Status
		if c.Status == "fail" && c.Fix == "" {
			t.Errorf("%s failed without naming a fix", c.Name)
		}
	}
	if got["daemon"] != "ok" || got["socket"] == "fail" || got["rootfs image"] != "fail" || rep.OK || r.code != exitFail {
		t.Errorf("checks %v, ok %v, exit %d: want the daemon and socket ok, the missing image failing the report (exit 1)", got, rep.OK, r.code)
	}
	if r = jailctl(t, d.sock, "", "doctor", "--config", cfg); !strings.Contains(r.stdout, "fix: install jaild-rootfs") || r.code != exitFail {
		t.Errorf("human report (exit %d):\n%s", r.code, r.stdout)
	}
}
