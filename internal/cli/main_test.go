package cli

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/run"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/workspace"
)

// answer makes the fake engine answer every run with res.
func answer(res run.Result) func(context.Context, *run.Request) (*run.Result, error) {
	return func(_ context.Context, req *run.Request) (*run.Result, error) {
		r := res
		emit(req.Hooks, &r)
		return &r, nil
	}
}

// emit hands a result's output to a streamed request's hooks, as the
// engine does (the result keeps none of it then).
func emit(h run.Hooks, res *run.Result) {
	if h.OnStart != nil {
		h.OnStart("r1", false)
	}
	if h.Output != nil {
		for stream, b := range map[int][]byte{1: res.Stdout, 2: res.Stderr} {
			if len(b) > 0 {
				h.Output(stream, b)
			}
		}
		res.Stdout, res.Stderr = nil, nil
	}
}

func TestExecOutputAndExitCode(t *testing.T) {
	hello := []byte("hello\n")
	tests := []struct {
		name   string
		res    run.Result
		code   int
		stderr string
	}{
		{"ok", run.Result{Status: spec.StatusOK, Stdout: hello}, 0, ""},
		{"exit 3", run.Result{Status: spec.StatusError, ExitCode: 3, Stdout: hello, Stderr: []byte("Traceback\n")}, 3,
			"Traceback\njailctl: Process exited with code 3\n"},
		{"timeout", run.Result{Status: spec.StatusTimeout, Signal: 9, ExitCode: -1, TimedOut: true, Stdout: hello}, 124,
			"jailctl: Execution terminated after 10 seconds (the time limit)\n"},
		{"signal 9", run.Result{Status: spec.StatusKilled, Signal: 9, ExitCode: -1, Stdout: hello}, 137,
			"jailctl: Process killed by signal 9 (SIGKILL)\n"},
		{"memory limit", run.Result{Status: spec.StatusMemoryLimit, OOMKilled: true, Signal: 9, ExitCode: -1, Stdout: hello}, 137,
			"jailctl: Memory limit of 512 MB exceeded; the process was killed\n"},
		{"cpu limit", run.Result{Status: spec.StatusCPULimit, Signal: 24, ExitCode: -1, Stdout: hello}, 152,
			"jailctl: CPU time limit exceeded; the process was killed\n"},
		{"output limit", run.Result{Status: spec.StatusOutputLimit, Stdout: hello, StdoutTruncated: true}, 1,
			"jailctl: the run's stdout was truncated\njailctl: Output limit of 1048576 bytes exceeded; the process was killed\n"},
	}
	h := newDaemon(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h.Engine.RunFunc = answer(tt.res)
			r := jailctl(t, h.Socket, "", "exec", "-c", "print('hello')")
			if r.code != tt.code || r.stdout != "hello\n" || r.stderr != tt.stderr {
				t.Errorf("got %d %q %q; want %d %q %q", r.code, r.stdout, r.stderr, tt.code, "hello\n", tt.stderr)
			}
		})
	}
}

func TestExecRequest(t *testing.T) {
	h := newDaemon(t)
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

	r := jailctl(t, h.Socket, "", "exec", "--file", data, "--file", data+":in/other.bin",
		"--timeout", "1500ms", "--memory", "256", "--get", "out/*.png", "--get", "**/*.csv",
		"--interactive", "--env", "A=1", "--env", "B=x=y", "--stdin-file", input, script)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	req := lastRun(t, h)
	if req.Code != "print(open('data.bin','rb').read())\n" {
		t.Errorf("code %q", req.Code)
	}
	if len(req.Files) != 2 || req.Files[0].Path != "data.bin" || !bytes.Equal(req.Files[0].Data, content) ||
		req.Files[1].Path != "in/other.bin" || !bytes.Equal(req.Files[1].Data, content) {
		t.Errorf("files %+v", req.Files)
	}
	if req.Limits.Timeout != 1500*time.Millisecond || req.Limits.MemoryBytes != 256<<20 || req.Limits.Pids != 64 {
		t.Errorf("limits %+v; want 1.5s, 256 MB and the default pids", req.Limits)
	}
	if strings.Join(req.ReturnFiles, " ") != "out/*.png **/*.csv" || !req.LastLineInteractive {
		t.Errorf("return_files %q interactive %v", req.ReturnFiles, req.LastLineInteractive)
	}
	if req.Env["A"] != "1" || req.Env["B"] != "x=y" || len(req.Env) != 2 {
		t.Errorf("env %v", req.Env)
	}
	if string(req.Stdin) != "line 1\n" {
		t.Errorf("stdin %q", req.Stdin)
	}

	// Code from stdin, the daemon's limits, no stdin for the run.
	if r = jailctl(t, h.Socket, "print(2)\n", "exec"); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	req = lastRun(t, h)
	if req.Code != "print(2)\n" || req.Limits.Timeout != 10*time.Second || req.Stdin != nil || req.Files != nil || req.Env != nil {
		t.Errorf("request from stdin %+v", req)
	}

	// --stdin-file - takes jailctl's stdin when the code comes from -c.
	jailctl(t, h.Socket, "abc", "exec", "-c", "x", "--stdin-file", "-")
	if req = lastRun(t, h); req.Code != "x" || string(req.Stdin) != "abc" {
		t.Errorf("request with stdin %+v", req)
	}
}

func TestExecResultPrinted(t *testing.T) {
	// The daemon's stdout holds the repr already (the runner prints it).
	h := newDaemon(t)
	h.Engine.RunFunc = answer(run.Result{Status: spec.StatusOK, Stdout: []byte("a\n42\n"), ResultRepr: strp("42")})
	r := jailctl(t, h.Socket, "", "exec", "--interactive", "-c", "print('a'); 6*7")
	if r.code != 0 || r.stdout != "a\n42\n" {
		t.Errorf("got %d %q", r.code, r.stdout)
	}
}

func TestExecUsageErrors(t *testing.T) {
	h := newDaemon(t)
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
		r := jailctl(t, h.Socket, "", args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "jailctl: ") || r.stdout != "" {
			t.Errorf("%q: got %d %q %q; want a usage error", args, r.code, r.stdout, r.stderr)
		}
	}
	// Missing local files are errors too, before any request.
	r := jailctl(t, h.Socket, "", "exec", "/nonexistent/x.py")
	if r.code != 2 || !strings.Contains(r.stderr, "/nonexistent/x.py") {
		t.Errorf("missing file: %+v", r)
	}
	if got := audited(h); got != "" {
		t.Errorf("usage errors reached the daemon: %s", got)
	}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestExecWritesReturnedFiles(t *testing.T) {
	h := newDaemon(t)
	h.Engine.RunFunc = answer(run.Result{Status: spec.StatusOK,
		Files: []workspace.File{
			{Path: "out/data.csv", Size: 4, Data: []byte("a,b\n")},
			{Path: "top.txt", Size: 2, Data: []byte("hi")},
			{Path: "out/link", Error: "symlink, not returned"},
		},
		Figures: []workspace.Figure{{Name: "figure_1.png", Data: []byte("\x89PNG")}},
	})
	dir := t.TempDir()
	outDir := filepath.Join(dir, "results", "run1")
	// An existing regular file is replaced.
	os.MkdirAll(outDir, 0o755)
	os.WriteFile(filepath.Join(outDir, "top.txt"), []byte("old"), 0o644)

	r := jailctl(t, h.Socket, "", "exec", "-c", "x", "--get", "out/*", "--out-dir", outDir)
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

// A daemon's returned names are the jail's choice: none leaves --out-dir
// or writes through a link. A daemon that validates nothing sends them.
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
	body, _ := json.Marshal(api.ExecuteResponse{RunID: "r1", Status: "ok", ExitCode: intp(0), Files: files,
		Figures: []api.Figure{{Name: "../../fig.png", ContentB64: b64("pwned")}}})
	sock := misbehaving(t, canned(200, "", string(body)))

	wd, _ := os.Getwd()
	r := jailctl(t, sock, "", "exec", "-c", "x", "--out-dir", outDir)
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

// --json prints the daemon's one object as it came, fields jailctl does
// not know included, and writes nothing.
func TestExecJSON(t *testing.T) {
	body := `{"run_id":"r9","status":"error","exit_code":3,"signal":null,"stdout":"x\n","stderr":"","files":[{"path":"a.txt","size_bytes":1,"content_b64":"YQ=="}],"figures":[],"usage":{"duration_ms":1,"cpu_ms":0,"peak_memory_bytes":0},"extra_field":true}`
	var accept string
	sock := misbehaving(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accept = r.Header.Get("Accept")
		canned(200, "", body+"\n")(w, r)
	}))
	dir := t.TempDir()
	r := jailctl(t, sock, "", "exec", "--json", "--out-dir", dir, "-c", "x")
	if r.code != 3 || r.stdout != body+"\n" || r.stderr != "" || accept != "application/json" {
		t.Errorf("got %d %q %q, Accept %q", r.code, r.stdout, r.stderr, accept)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("--json wrote files: %v", entries)
	}
}

func TestDaemonErrors(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/execute", canned(503, "2", `{"error":{"type":"busy","message":"all 8 slots are busy"}}`))
	mux.Handle("POST /v1/lint", canned(400, "", `{"error":{"type":"invalid_argument","message":"select: unknown rule \"ZZZ\""}}`))
	mux.Handle("GET /v1/info", canned(429, "60", `{"error":{"type":"rate_limited","message":"quota exhausted"}}`))
	mux.Handle("GET /v1/health", canned(500, "", `garbage`))
	sock := misbehaving(t, mux)
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
		r := jailctl(t, sock, "x = 1\n", tt.args...)
		if r.code != 2 || r.stderr != tt.stderr || r.stdout != "" {
			t.Errorf("%q: got %d %q %q; want 2 %q", tt.args, r.code, r.stdout, r.stderr, tt.stderr)
		}
	}
}

func TestCannotConnect(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "missing.sock")
	for _, args := range [][]string{{"--socket", sock, "health"}, {"exec", "--socket", sock, "-c", "x"}, {"info"}} {
		t.Setenv("JAILD_SOCKET", sock)
		r := jailctl(t, "", "", args...)
		want := "jailctl: cannot connect to jaild at " + sock + ": no such file or directory (is the daemon running?"
		if r.code != 2 || !strings.HasPrefix(r.stderr, want) {
			t.Errorf("%q: got %d %q; want prefix %q", args, r.code, r.stderr, want)
		}
	}
}

// ruffAnswer makes the fake engine answer ruff's command lines: check
// with findings (ruff's JSON), format with formatted.
func ruffAnswer(findings, formatted string) func(context.Context, *run.Request) (*run.Result, error) {
	return func(_ context.Context, req *run.Request) (*run.Result, error) {
		if len(req.Command) > 1 && req.Command[1] == "format" {
			return &run.Result{Status: spec.StatusOK, Stdout: []byte(formatted)}, nil
		}
		return &run.Result{Status: spec.StatusOK, Stdout: []byte(findings)}, nil // ruff check --exit-zero
	}
}

func TestLint(t *testing.T) {
	h := newDaemon(t)
	h.Engine.RunFunc = ruffAnswer(`[`+
		`{"code":"F401","message":"`+"`os`"+` imported but unused","location":{"row":1,"column":8},"end_location":{"row":1,"column":10},"fix":{"applicability":"safe"},"filename":"/jaild/ws/main.py"},`+
		`{"code":"E711","message":"Comparison to `+"`None`"+` should be `+"`cond is None`"+`","location":{"row":3,"column":6},"end_location":{"row":3,"column":8},"fix":null,"filename":"/jaild/ws/main.py"}]`, "")
	file := filepath.Join(t.TempDir(), "m.py")
	os.WriteFile(file, []byte("import os\n"), 0o644)

	r := jailctl(t, h.Socket, "", "lint", file, "--select", "F,E7", "--ignore", "E711", "--ignore", "E712")
	want := file + ":1:8: F401 `os` imported but unused\n" + file + ":3:6: E711 Comparison to `None` should be `cond is None`\n"
	if r.code != 1 || r.stdout != want || r.stderr != "" {
		t.Errorf("got %d %q %q; want 1 %q", r.code, r.stdout, r.stderr, want)
	}
	req := lastRun(t, h)
	if cmd := strings.Join(req.Command, " "); !strings.Contains(cmd, "--select F,E7") || !strings.Contains(cmd, "E711,E712") {
		t.Errorf("ruff's command %q", cmd)
	}
	if r = jailctl(t, h.Socket, "import os\n", "lint"); r.code != 1 || !strings.HasPrefix(r.stdout, "-:1:8: F401 ") {
		t.Errorf("stdin: got %d %q", r.code, r.stdout)
	}

	h.Engine.RunFunc = ruffAnswer("[]", "")
	if r = jailctl(t, h.Socket, "x = 1\n", "lint", "-"); r.code != 0 || r.stdout != "" {
		t.Errorf("clean: got %d %q", r.code, r.stdout)
	}
	if r = jailctl(t, h.Socket, "x = 1\n", "lint", "--json"); r.code != 0 || r.stdout != "{\"diagnostics\":[]}\n" {
		t.Errorf("json: got %d %q", r.code, r.stdout)
	}
}

func TestFormat(t *testing.T) {
	h := newDaemon(t)
	h.Engine.RunFunc = ruffAnswer("[]", "x = 1\n")
	r := jailctl(t, h.Socket, "x=1\n", "format")
	if r.code != 0 || r.stdout != "x = 1\n" {
		t.Errorf("format: got %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r = jailctl(t, h.Socket, "x=1\n", "format", "--check"); r.code != 1 || r.stdout != "" || r.stderr != "" {
		t.Errorf("--check changed: got %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r = jailctl(t, h.Socket, "x = 1\n", "format", "--check", "-"); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("--check same: got %d %q %q", r.code, r.stdout, r.stderr)
	}

	dir := t.TempDir()
	file := filepath.Join(dir, "m.py")
	os.WriteFile(file, []byte("x=1\n"), 0o640)
	link := filepath.Join(dir, "link.py")
	os.Symlink("m.py", link)
	r = jailctl(t, h.Socket, "", "format", "--write", link)
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
	if r = jailctl(t, h.Socket, "", "format", "--write", file); r.code != 0 || r.stderr != "" {
		t.Errorf("--write unchanged: got %d %q", r.code, r.stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("directory holds %v", entries)
	}
	for _, args := range [][]string{{"format", "--write"}, {"format", "--check", "--write", file}} {
		if r := jailctl(t, h.Socket, "", args...); r.code != 2 {
			t.Errorf("%q: exit %d; want 2", args, r.code)
		}
	}
}

func TestInfoAndHealth(t *testing.T) {
	h := newDaemon(t)
	r := jailctl(t, h.Socket, "", "info")
	for _, want := range []string{"dev (API v1)", "3.13.0", "sha256:0000", "timeout 10s, memory 512 MB, pids 64, file size 64 MB, output 1 MiB",
		"timeout 1m0s, memory 2048 MB", "cgroup mode:     v2", "0/2 running, 0/64 queued", "uid 1000, quota"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("info output lacks %q:\n%s", want, r.stdout)
		}
	}
	if r.code != 0 {
		t.Errorf("info exit %d: %s", r.code, r.stderr)
	}
	r = jailctl(t, h.Socket, "", "info", "--json")
	var info api.Info
	if err := json.Unmarshal([]byte(r.stdout), &info); err != nil || info.Capacity.MaxConcurrent != 2 {
		t.Errorf("info --json: %v %q", err, r.stdout)
	}
	if r := jailctl(t, h.Socket, "", "health"); r.code != 0 || r.stdout != "ok\n" {
		t.Errorf("health: %+v", r)
	}
	if r := jailctl(t, h.Socket, "", "health", "--json"); r.code != 0 || !strings.HasPrefix(r.stdout, "{\"status\":\"ok\"") {
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
	h := newDaemon(t)
	ctx, cancel := context.WithCancel(context.Background())
	h.Engine.RunFunc = func(rctx context.Context, _ *run.Request) (*run.Result, error) {
		cancel()
		<-rctx.Done() // the run lasts until the client goes away
		return nil, rctx.Err()
	}
	var out, errOut bytes.Buffer
	code := Main(ctx, []string{"--socket", h.Socket, "exec", "-c", "import time; time.sleep(60)"}, strings.NewReader(""), &out, &errOut)
	if code != 130 || errOut.String() != "jailctl: interrupted\n" {
		t.Errorf("got %d %q; want 130 and an interrupted note", code, errOut.String())
	}
}
