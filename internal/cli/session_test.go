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
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

func strp(s string) *string { return &s }

func sessionJSON(s api.Session) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func sessionExecReply(r api.SessionExecuteResponse) reply {
	if r.Status == "" {
		r.Status = "ok"
	}
	if r.Session.State == "" {
		r.Session.State = api.SessionIdle
	}
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return reply{body: string(b)}
}

func TestSessionNew(t *testing.T) {
	body := sessionJSON(api.Session{SessionID: "s-1", State: api.SessionIdle, IdleTimeoutS: 600})
	d := newFakeDaemon(t, map[string]reply{"POST /v1/sessions": {status: 201, body: body}})
	dir := t.TempDir()
	data := filepath.Join(dir, "data.csv")
	os.WriteFile(data, []byte("a,b\n"), 0o644)

	r := jailctl(t, d.sock, "", "session", "new", "--memory-mb", "512", "--pids", "32", "--file-size-mb", "8",
		"--timeout-ms", "1500", "--output-bytes", "4096", "--idle-timeout", "5m", "--ttl", "1500ms",
		"--env", "A=1", "--env", "B=x=y", "--allow-host", "example.com", "--file", data, "--file", data+":in/d.csv")
	if r.code != 0 || r.stdout != "s-1\n" || r.stderr != "" {
		t.Fatalf("got %d %q %q; want the bare ID", r.code, r.stdout, r.stderr)
	}
	var req api.SessionCreateRequest
	d.request(t, "POST /v1/sessions", &req)
	l := req.Limits
	if l == nil || *l.MemoryMB != 512 || *l.Pids != 32 || *l.FileSizeMB != 8 || *l.TimeoutMs != 1500 || *l.OutputBytes != 4096 {
		t.Errorf("limits %+v", l)
	}
	if req.IdleTimeoutS == nil || *req.IdleTimeoutS != 300 || req.TTLS == nil || *req.TTLS != 2 {
		t.Errorf("idle %v ttl %v; want 300 and 2 (rounded up)", req.IdleTimeoutS, req.TTLS)
	}
	if len(req.Env) != 2 || req.Env["B"] != "x=y" {
		t.Errorf("env %v", req.Env)
	}
	if req.Network != "internet" || strings.Join(req.AllowHosts, " ") != "example.com" {
		t.Errorf("network %q allow %q; --allow-host means internet", req.Network, req.AllowHosts)
	}
	b := base64.StdEncoding.EncodeToString([]byte("a,b\n"))
	if len(req.Files) != 2 || req.Files[0] != (api.FileIn{Path: "data.csv", ContentB64: b}) || req.Files[1].Path != "in/d.csv" {
		t.Errorf("files %+v", req.Files)
	}

	// No flags: an empty request takes the daemon's defaults.
	r = jailctl(t, d.sock, "", "session", "new")
	req = api.SessionCreateRequest{}
	d.request(t, "POST /v1/sessions", &req)
	if r.code != 0 || req.Limits != nil || req.IdleTimeoutS != nil || req.TTLS != nil || req.Env != nil || req.Network != "" || req.Files != nil {
		t.Errorf("defaults: %d %+v", r.code, req)
	}

	if r := jailctl(t, d.sock, "", "session", "new", "--json"); r.code != 0 || r.stdout != body+"\n" {
		t.Errorf("--json: %d %q", r.code, r.stdout)
	}
}

func TestSessionUsageErrors(t *testing.T) {
	d := newFakeDaemon(t, nil)
	for _, args := range [][]string{
		{"session"},
		{"session", "bogus"},
		{"session", "new", "extra"},
		{"session", "new", "--memory-mb", "0"},
		{"session", "new", "--pids", "x"},
		{"session", "new", "--idle-timeout", "soon"},
		{"session", "new", "--ttl", "-1s"},
		{"session", "new", "--env", "NOEQUALS"},
		{"session", "new", "--file", ":x"},
		{"session", "exec"},
		{"session", "exec", "s-1", "a.py", "b.py"},
		{"session", "exec", "s-1", "-c", "x", "a.py"},
		{"session", "exec", "s-1", "--timeout-ms", "1.5", "-c", "x"},
		{"session", "exec", "s-1", "--stdin-file", "-"},
		{"session", "exec", "s-1", "--env", "A=1", "-c", "x"},
		{"session", "show"},
		{"session", "show", "a", "b"},
		{"session", "interrupt"},
		{"session", "rm"},
		{"session", "ls", "x"},
		{"repl", "extra"},
		{"repl", "--session", "s-1", "--memory-mb", "64"},
		{"repl", "--session", "s-1", "--image", "python"},
	} {
		r := jailctl(t, d.sock, "", args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "jailctl: ") && !strings.HasPrefix(r.stderr, "Usage: ") || r.stdout != "" {
			t.Errorf("%q: got %d %q %q; want a usage error", args, r.code, r.stdout, r.stderr)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.last) != 0 {
		t.Errorf("usage errors reached the daemon: %v", d.last)
	}
}

func TestSessionHelp(t *testing.T) {
	for _, args := range [][]string{{"session", "-h"}, {"help", "session"}, {"session", "help"}} {
		r := jailctl(t, "", "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "interrupt  ") || !strings.Contains(r.stdout, "rm  ") {
			t.Errorf("%q: %+v", args, r)
		}
	}
	for _, args := range [][]string{{"session", "exec", "-h"}, {"session", "help", "exec"}} {
		r := jailctl(t, "", "", args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: jailctl session exec [flags] ID [FILE|-]") || !strings.Contains(r.stdout, "--timeout-ms MS") {
			t.Errorf("%q: %+v", args, r)
		}
	}
	if r := jailctl(t, "", "", "help", "repl"); r.code != 0 || !strings.Contains(r.stdout, "--session ID") || !strings.Contains(r.stdout, "--idle-timeout DURATION") {
		t.Errorf("help repl: %+v", r)
	}
}

func TestSessionExecOutput(t *testing.T) {
	tests := []struct {
		name   string
		resp   api.SessionExecuteResponse
		code   int
		stdout string
		stderr string
	}{
		{"ok, the value printed once", api.SessionExecuteResponse{
			ExecuteResponse: api.ExecuteResponse{Status: "ok", ExitCode: intp(0), Stdout: "42\n", Result: strp("42")},
			ExecutionCount:  2,
		}, 0, "42\n", ""},
		{"exception", api.SessionExecuteResponse{
			ExecuteResponse: api.ExecuteResponse{Status: "error", ExitCode: intp(1), Stderr: "Traceback\nNameError: x\n", Message: "NameError: x"},
		}, 1, "", "Traceback\nNameError: x\njailctl: NameError: x\n"},
		{"timeout, state lost", api.SessionExecuteResponse{
			ExecuteResponse: api.ExecuteResponse{Status: "timeout", Signal: intp(9), TimedOut: true, Stdout: "a\n", Message: "Execution terminated after 1 second (the time limit) The interpreter was lost (timeout) and a fresh one started: variables and imports are gone; the workspace and /tmp are kept."},
			Session:         api.SessionStatus{SessionID: "s-1", State: "idle", StateLost: true, LostReason: strp("timeout")},
		}, 124, "a\n", "jailctl: Execution terminated after 1 second (the time limit)\n" +
			"jailctl: the session's interpreter was restarted (the call timed out and did not stop at the interrupt): variables and imports are gone; files are kept\n"},
		{"memory, state lost", api.SessionExecuteResponse{
			ExecuteResponse: api.ExecuteResponse{Status: "memory_limit", OOMKilled: true, Message: "The interpreter was lost (memory_limit) and a fresh one started."},
			Session:         api.SessionStatus{State: "idle", StateLost: true, LostReason: strp("memory_limit")},
		}, 137, "", "jailctl: the session's interpreter was restarted (the memory limit): variables and imports are gone; files are kept\n"},
		{"ended", api.SessionExecuteResponse{
			ExecuteResponse: api.ExecuteResponse{Status: "killed", Signal: intp(9), Message: "Process killed by signal 9 (SIGKILL) The interpreter was lost (crashed). The session has ended (repeated_losses)."},
			Session:         api.SessionStatus{State: "ended", EndReason: strp("repeated_losses"), StateLost: true, LostReason: strp("crashed")},
		}, 137, "", "jailctl: Process killed by signal 9 (SIGKILL)\n" +
			"jailctl: the session has ended (repeated_losses: its interpreter was lost in too many calls in a row)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDaemon(t, map[string]reply{"POST /v1/sessions/s-1/execute": sessionExecReply(tt.resp)})
			r := jailctl(t, d.sock, "", "session", "exec", "s-1", "-c", "x")
			if r.code != tt.code || r.stdout != tt.stdout || r.stderr != tt.stderr {
				t.Errorf("got %d %q %q\nwant %d %q %q", r.code, r.stdout, r.stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

func TestSessionExecRequest(t *testing.T) {
	d := newFakeDaemon(t, map[string]reply{"POST /v1/sessions/a b/execute": sessionExecReply(api.SessionExecuteResponse{
		ExecuteResponse: api.ExecuteResponse{Status: "ok", ExitCode: intp(0),
			Files: []api.FileOut{{Path: "out.txt", SizeBytes: 2, ContentB64: b64("hi")}}},
	})})
	dir := t.TempDir()
	script := filepath.Join(dir, "main.py")
	os.WriteFile(script, []byte("print(x)\n"), 0o644)
	input := filepath.Join(dir, "in.txt")
	os.WriteFile(input, []byte("line\n"), 0o644)
	outDir := filepath.Join(dir, "out")

	r := jailctl(t, d.sock, "", "session", "exec", "a b", script, "--timeout-ms", "2500", "--output-bytes", "100",
		"--file", input+":data/in.txt", "--get", "*.txt", "--stdin-file", input, "--interactive=false", "--out-dir", outDir)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var req api.SessionExecuteRequest
	d.request(t, "POST /v1/sessions/a b/execute", &req)
	if req.Code != "print(x)\n" || req.Stdin == nil || *req.Stdin != "line\n" || strings.Join(req.ReturnFiles, " ") != "*.txt" {
		t.Errorf("request %+v", req)
	}
	if req.LastLineInteractive == nil || *req.LastLineInteractive {
		t.Errorf("last_line_interactive %v; want false", req.LastLineInteractive)
	}
	if l := req.Limits; l == nil || *l.TimeoutMs != 2500 || *l.OutputBytes != 100 || l.MemoryMB != nil {
		t.Errorf("limits %+v", req.Limits)
	}
	if len(req.Files) != 1 || req.Files[0].Path != "data/in.txt" || req.Env != nil || req.Network != "" {
		t.Errorf("files %+v env %v network %q", req.Files, req.Env, req.Network)
	}
	if got, err := os.ReadFile(filepath.Join(outDir, "out.txt")); err != nil || string(got) != "hi" {
		t.Errorf("returned file: %q %v", got, err)
	}

	// Code on stdin; interactive by default.
	r = jailctl(t, d.sock, "1 + 1\n", "session", "exec", "a b", "--out-dir", outDir)
	req = api.SessionExecuteRequest{}
	d.request(t, "POST /v1/sessions/a b/execute", &req)
	if r.code != 0 || req.Code != "1 + 1\n" || req.LastLineInteractive == nil || !*req.LastLineInteractive || req.Limits != nil || req.Stdin != nil {
		t.Errorf("from stdin: %d %+v", r.code, req)
	}

	// --json prints the response as it came and writes nothing.
	jsonDir := filepath.Join(dir, "json")
	r = jailctl(t, d.sock, "", "session", "exec", "--json", "--out-dir", jsonDir, "a b", "-c", "x")
	var resp api.SessionExecuteResponse
	if err := json.Unmarshal([]byte(r.stdout), &resp); err != nil || r.code != 0 || resp.Status != "ok" || r.stderr != "" {
		t.Errorf("--json: %d %q %q %v", r.code, r.stdout, r.stderr, err)
	}
	if _, err := os.Stat(jsonDir); err == nil {
		t.Error("--json wrote files")
	}
}

func TestSessionExecErrors(t *testing.T) {
	ended := sessionJSON(api.Session{SessionID: "s-1", State: api.SessionEnded, EndReason: strp("idle_timeout")})
	running := sessionJSON(api.Session{SessionID: "s-2", State: api.SessionRunning})
	d := newFakeDaemon(t, map[string]reply{
		"POST /v1/sessions/s-1/execute": {409, nil, `{"error":{"type":"conflict","message":"session s-1 has ended"}}`},
		"GET /v1/sessions/s-1":          {body: ended},
		"POST /v1/sessions/s-2/execute": {409, nil, `{"error":{"type":"conflict","message":"a call is in progress"}}`},
		"GET /v1/sessions/s-2":          {body: running},
		"POST /v1/sessions/s-3/execute": {404, nil, `{"error":{"type":"not_found","message":"no session s-3"}}`},
		"POST /v1/sessions/s-4/execute": {429, map[string]string{"Retry-After": "3"}, `{"error":{"type":"rate_limited","message":"slow down"}}`},
	})
	for _, tt := range []struct{ id, stderr string }{
		{"s-1", "jailctl: session s-1 has ended\njailctl: session s-1 has ended (idle_timeout: it was idle for its idle timeout)\n"},
		{"s-2", "jailctl: a call is in progress\njailctl: another call is running in session s-2; \"jailctl session interrupt s-2\" interrupts it\n"},
		{"s-3", "jailctl: no session s-3\n"},
		{"s-4", "jailctl: slow down (retry after 3s)\n"},
	} {
		r := jailctl(t, d.sock, "", "session", "exec", tt.id, "-c", "x")
		if r.code != 2 || r.stdout != "" || r.stderr != tt.stderr {
			t.Errorf("%s: got %d %q %q; want 2 %q", tt.id, r.code, r.stdout, r.stderr, tt.stderr)
		}
	}
	// A daemon message that names the end already is not repeated.
	d2 := newFakeDaemon(t, map[string]reply{
		"POST /v1/sessions/s-1/execute": {409, nil, `{"error":{"type":"conflict","message":"session s-1 ended (deleted)"}}`},
		"GET /v1/sessions/s-1":          {body: sessionJSON(api.Session{SessionID: "s-1", State: api.SessionEnded, EndReason: strp("deleted")})},
	})
	if r := jailctl(t, d2.sock, "", "session", "exec", "s-1", "-c", "x"); r.code != 2 || r.stderr != "jailctl: session s-1 ended (deleted)\n" {
		t.Errorf("named end: %d %q", r.code, r.stderr)
	}
}

func TestSessionListShowInterruptRemove(t *testing.T) {
	now := time.Now()
	list := api.SessionList{Sessions: []api.Session{
		{SessionID: "s-2", State: "ended", EndReason: strp("deleted"), CreatedAt: now.Add(-time.Minute), IdleTimeoutS: 60, ExecutionCount: 1, LastUsedAt: now.Add(-30 * time.Second)},
		{SessionID: "s-1", State: "idle", CreatedAt: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour), IdleTimeoutS: 600, ExecutionCount: 3, LastUsedAt: now.Add(-5 * time.Second),
			Limits: api.LimitValues{TimeoutMs: 10000, MemoryMB: 256, Pids: 64, FileSizeMB: 16, OutputBytes: 1 << 20}, Network: "none", UID: 1000, Image: "python-ml"},
	}}
	lb, _ := json.Marshal(list)
	d := newFakeDaemon(t, map[string]reply{
		"GET /v1/sessions":                {body: string(lb)},
		"GET /v1/sessions/s-1":            {body: sessionJSON(list.Sessions[1])},
		"POST /v1/sessions/s-1/interrupt": {body: `{"interrupted":true,"session":` + sessionJSON(list.Sessions[1]) + `}`},
		"POST /v1/sessions/s-2/interrupt": {body: `{"interrupted":false,"session":` + sessionJSON(list.Sessions[0]) + `}`},
		"DELETE /v1/sessions/s-1":         {body: sessionJSON(list.Sessions[1])},
		"DELETE /v1/sessions/s-9":         {404, nil, `{"error":{"type":"not_found","message":"not found"}}`},
	})

	r := jailctl(t, d.sock, "", "session", "ls")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 3 {
		t.Fatalf("ls: %d %q", r.code, r.stdout)
	}
	for i, want := range [][]string{
		{"ID", "STATE", "IMAGE", "CALLS", "IDLE", "TIMEOUT", "EXPIRES", "LAST", "USED", "END", "REASON"},
		{"s-1", "idle", "python-ml", "3", "10m", "in", "1h", "5s", "ago", "-"},
		{"s-2", "ended", "-", "1", "1m", "-", "30s", "ago", "deleted"},
	} {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("ls line %d: %q; want %q", i, got, want)
		}
	}
	if r := jailctl(t, d.sock, "", "session", "ls", "--json"); r.code != 0 || r.stdout != string(lb)+"\n" {
		t.Errorf("ls --json: %d %q", r.code, r.stdout)
	}

	r = jailctl(t, d.sock, "", "session", "show", "s-1")
	for _, want := range []string{"session:", "s-1", "idle", "(in 1h)", "idle timeout:  10m", "calls:         3", "memory 256 MB", "image:         python-ml", "uid 1000"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := jailctl(t, d.sock, "", "session", "show", "--json", "s-1"); r.code != 0 || r.stdout != sessionJSON(list.Sessions[1])+"\n" {
		t.Errorf("show --json: %d %q", r.code, r.stdout)
	}

	if r := jailctl(t, d.sock, "", "session", "interrupt", "s-1"); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("interrupt: %+v", r)
	}
	if r := jailctl(t, d.sock, "", "session", "interrupt", "s-2"); r.code != 1 || r.stderr != "jailctl: no call of session s-2 was running\n" {
		t.Errorf("interrupt with nothing running: %+v", r)
	}

	r = jailctl(t, d.sock, "", "session", "rm", "s-1", "s-9")
	if r.code != 2 || r.stderr != "jailctl: s-9: not found\n" {
		t.Errorf("rm: %+v", r)
	}
	d.mu.Lock()
	_, deleted := d.last["DELETE /v1/sessions/s-1"]
	d.mu.Unlock()
	if !deleted {
		t.Error("rm did not delete s-1")
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 400 * time.Millisecond: "0s", 45 * time.Second: "45s", 90 * time.Second: "1m30s", 10 * time.Minute: "10m",
		time.Hour: "1h", 125 * time.Minute: "2h5m", 24 * time.Hour: "1d", 76 * time.Hour: "3d4h",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q; want %q", d, got, want)
		}
	}
}

func TestScanPython(t *testing.T) {
	for _, tt := range []struct {
		src  string
		open bool
		last byte
	}{
		{"x = 1", false, '1'},
		{"if x:", false, ':'},
		{"if x:  # a comment", false, ':'},
		{"x = '#:'", false, '\''},
		{"f(a,", true, ','},
		{"f(a,\n  b)", false, ')'},
		{"d = {'a': [1,", true, ','},
		{`s = """abc`, true, '"'},
		{"s = \"\"\"abc\n\"\"\"", false, '"'},
		{`s = ''`, false, '\''},
		{`s = '\''`, false, '\''},
		{`s = "(" + ')'`, false, '\''},
		{"x = 1 + \\", true, '+'},
		{"x = 1 + \\\n  2", false, '2'},
		{"# only (a comment", false, 0},
		{"x = 'unterminated\ny = (", true, '('},
		{"s = r'\\'", false, '\''},
		{"x = f(\n\n", true, 0},
	} {
		s := scanPython(tt.src)
		if s.open() != tt.open || s.last != tt.last {
			t.Errorf("scanPython(%q) = %+v (open %v); want open %v, last %q", tt.src, s, s.open(), tt.open, tt.last)
		}
	}
}

// feedAll feeds lines to a blockReader and returns the blocks it made,
// the end of input included.
func feedAll(lines ...string) []string {
	var b blockReader
	var blocks []string
	for _, l := range lines {
		blocks = append(blocks, b.feed(l+"\n")...)
	}
	if code := b.flush(); code != "" {
		blocks = append(blocks, code+"<EOF>")
	}
	return blocks
}

func TestBlockReader(t *testing.T) {
	for _, tt := range []struct {
		name   string
		lines  []string
		blocks []string
	}{
		{"simple statements", []string{"x = 1", "print(x)"}, []string{"x = 1\n", "print(x)\n"}},
		{"blank and comment lines between", []string{"", "# hi", "x = 1", "   ", ""}, []string{"x = 1\n"}},
		{"for block ends at an empty line", []string{"for i in range(3):", "    x += i", "", "print(x)"},
			[]string{"for i in range(3):\n    x += i\n", "print(x)\n"}},
		{"compound at end of input", []string{"def f():", "    return 1"}, []string{"def f():\n    return 1\n<EOF>"}},
		{"open bracket continues, empty lines too", []string{"x = [", "", "  1,", "]"}, []string{"x = [\n\n  1,\n]\n"}},
		{"triple-quoted string continues", []string{`s = """`, "", "def f():", `"""`, "s"}, []string{"s = \"\"\"\n\ndef f():\n\"\"\"\n", "s\n"}},
		{"backslash continues", []string{"x = 1 + \\", "  2"}, []string{"x = 1 + \\\n  2\n"}},
		{"if/elif/else stays one block", []string{"if x:", "    a()", "elif y:", "    b()", "else:", "    c()", ""},
			[]string{"if x:\n    a()\nelif y:\n    b()\nelse:\n    c()\n"}},
		{"try/except/finally", []string{"try:", "    1/0", "except ZeroDivisionError:", "    pass", "finally:", "    print(1)", ""},
			[]string{"try:\n    1/0\nexcept ZeroDivisionError:\n    pass\nfinally:\n    print(1)\n"}},
		{"one-line if waits for an else", []string{"if x: a()", "else: b()", ""}, []string{"if x: a()\nelse: b()\n"}},
		{"unindented statement starts the next block", []string{"for i in r:", "    x += i", "print(x)", "y = 2"},
			[]string{"for i in r:\n    x += i\n", "print(x)\n", "y = 2\n"}},
		{"unindented compound starts the next block", []string{"def f():", "    pass", "def g():", "    pass"},
			[]string{"def f():\n    pass\n", "def g():\n    pass\n<EOF>"}},
		{"decorator", []string{"@dec", "def f():", "    pass", ""}, []string{"@dec\ndef f():\n    pass\n"}},
		{"decorator after a block", []string{"def f():", "    pass", "@dec", "class C:", "    pass", ""},
			[]string{"def f():\n    pass\n", "@dec\nclass C:\n    pass\n"}},
		{"multi-line condition", []string{"if (a and", "        b):", "    c()", ""}, []string{"if (a and\n        b):\n    c()\n"}},
		{"comment in a block", []string{"while True:", "# note", "    break", ""}, []string{"while True:\n# note\n    break\n"}},
		{"dict literal with colons is simple", []string{"d = {1: 2}", "d[1:]"}, []string{"d = {1: 2}\n", "d[1:]\n"}},
		{"CRLF lines", []string{"x = 1\r", "for i in r:\r", "    x\r", "\r"}, []string{"x = 1\n", "for i in r:\n    x\n"}},
		{"unterminated open bracket at end", []string{"f("}, []string{"f(\n<EOF>"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := feedAll(tt.lines...); strings.Join(got, "|") != strings.Join(tt.blocks, "|") {
				t.Errorf("blocks\n%q\nwant\n%q", got, tt.blocks)
			}
		})
	}
}

// sessionServer is a daemon with one session, "s-1", on a Unix socket:
// each call's code is recorded and answered by answer.
type sessionServer struct {
	sock   string
	mu     sync.Mutex
	codes  []string
	calls  []api.SessionExecuteRequest
	events []string // "create", "execute", "interrupt", "delete", "get"
	answer func(code string, r *http.Request) api.SessionExecuteResponse
	// interrupted is closed by the first interrupt.
	interrupted chan struct{}
	once        sync.Once
}

func newSessionServer(t *testing.T, answer func(code string, r *http.Request) api.SessionExecuteResponse) *sessionServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "jc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &sessionServer{sock: filepath.Join(dir, "s"), answer: answer, interrupted: make(chan struct{})}
	ln, err := net.Listen("unix", s.sock)
	if err != nil {
		t.Fatal(err)
	}
	session := api.Session{SessionID: "s-1", State: api.SessionIdle}
	write := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		s.event("create")
		write(w, 201, session)
	})
	mux.HandleFunc("GET /v1/sessions/s-1", func(w http.ResponseWriter, r *http.Request) {
		s.event("get")
		write(w, 200, session)
	})
	mux.HandleFunc("DELETE /v1/sessions/s-1", func(w http.ResponseWriter, r *http.Request) {
		s.event("delete")
		write(w, 200, session)
	})
	mux.HandleFunc("POST /v1/sessions/s-1/interrupt", func(w http.ResponseWriter, r *http.Request) {
		s.event("interrupt")
		s.once.Do(func() { close(s.interrupted) })
		write(w, 200, api.SessionInterruptResponse{Interrupted: true, Session: session})
	})
	mux.HandleFunc("POST /v1/sessions/s-1/execute", func(w http.ResponseWriter, r *http.Request) {
		var req api.SessionExecuteRequest
		json.NewDecoder(r.Body).Decode(&req)
		s.mu.Lock()
		s.events = append(s.events, "execute")
		s.codes = append(s.codes, req.Code)
		s.calls = append(s.calls, req)
		s.mu.Unlock()
		resp := s.answer(req.Code, r)
		if resp.Status == "" {
			resp.Status = "ok"
			resp.ExitCode = intp(0)
		}
		if resp.Session.State == "" {
			resp.Session.State = api.SessionIdle
		}
		write(w, 200, resp)
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return s
}

func (s *sessionServer) event(e string) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

func (s *sessionServer) log() (codes, events []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.codes...), append([]string(nil), s.events...)
}

// fakeSignals makes notifySignals hand out a channel the test sends to.
func fakeSignals(t *testing.T) chan<- os.Signal {
	t.Helper()
	ch := make(chan os.Signal, 4)
	old := notifySignals
	notifySignals = func(c chan<- os.Signal) func() {
		done := make(chan struct{})
		go func() {
			for {
				select {
				case s := <-ch:
					c <- s
				case <-done:
					return
				}
			}
		}()
		return func() { close(done) }
	}
	t.Cleanup(func() { notifySignals = old })
	return ch
}

// The first Ctrl-C of a session exec interrupts the call and waits for
// its result; the exit status is 130 for an interrupted call that failed.
func TestSessionExecCtrlCInterrupts(t *testing.T) {
	sigs := fakeSignals(t)
	started := make(chan struct{})
	var s *sessionServer
	s = newSessionServer(t, func(code string, r *http.Request) api.SessionExecuteResponse {
		close(started)
		<-s.interrupted
		return api.SessionExecuteResponse{ExecuteResponse: api.ExecuteResponse{Status: "error", ExitCode: intp(1),
			Stderr: "Traceback\nKeyboardInterrupt\n", Error: &api.ExecError{Type: "KeyboardInterrupt"}, Message: "KeyboardInterrupt"}}
	})
	go func() { <-started; sigs <- os.Interrupt }()
	r := jailctl(t, s.sock, "", "session", "exec", "s-1", "-c", "while True: pass")
	if r.code != 130 || !strings.Contains(r.stderr, "jailctl: interrupting the call") || !strings.Contains(r.stderr, "KeyboardInterrupt\n") {
		t.Errorf("got %d %q %q", r.code, r.stdout, r.stderr)
	}
	if _, events := s.log(); strings.Join(events, " ") != "execute interrupt" {
		t.Errorf("events %q", events)
	}
}

// A second Ctrl-C abandons the call: jailctl closes the request.
func TestSessionExecSecondCtrlCAbandons(t *testing.T) {
	sigs := fakeSignals(t)
	started := make(chan struct{})
	gone := make(chan struct{})
	s := newSessionServer(t, func(code string, r *http.Request) api.SessionExecuteResponse {
		close(started)
		<-r.Context().Done() // a call that ignores the interrupt
		close(gone)
		return api.SessionExecuteResponse{}
	})
	go func() {
		<-started
		sigs <- os.Interrupt
		<-s.interrupted
		sigs <- os.Interrupt
	}()
	r := jailctl(t, s.sock, "", "session", "exec", "s-1", "-c", "while True: pass")
	if r.code != 130 || !strings.Contains(r.stderr, "jailctl: call abandoned") {
		t.Errorf("got %d %q %q", r.code, r.stdout, r.stderr)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Error("the daemon did not see the call go away")
	}
	// SIGTERM abandons at once, with 143.
	s2 := newSessionServer(t, func(code string, r *http.Request) api.SessionExecuteResponse {
		sigs <- syscall.SIGTERM
		<-r.Context().Done()
		return api.SessionExecuteResponse{}
	})
	if r := jailctl(t, s2.sock, "", "session", "exec", "s-1", "-c", "x"); r.code != 143 {
		t.Errorf("SIGTERM: %+v", r)
	}
}

func TestReplScript(t *testing.T) {
	s := newSessionServer(t, func(code string, r *http.Request) api.SessionExecuteResponse {
		switch code {
		case "print(x)\n":
			return api.SessionExecuteResponse{ExecuteResponse: api.ExecuteResponse{Status: "ok", ExitCode: intp(0), Stdout: "5\n"}}
		case "x\n":
			// The runner prints the value; result repeats it.
			return api.SessionExecuteResponse{ExecuteResponse: api.ExecuteResponse{Status: "ok", ExitCode: intp(0), Stdout: "5\n", Result: strp("5")}}
		case "1/0\n":
			return api.SessionExecuteResponse{ExecuteResponse: api.ExecuteResponse{Status: "error", ExitCode: intp(1),
				Stderr: "ZeroDivisionError: division by zero\n", Error: &api.ExecError{Type: "ZeroDivisionError"}, Message: "ZeroDivisionError: division by zero"}}
		}
		return api.SessionExecuteResponse{}
	})
	r := jailctl(t, s.sock, "x = 2\nfor i in range(3):\n    x += i\n\nprint(x)\n1/0\nx", "repl", "--memory-mb", "128")
	if r.code != 0 || r.stdout != "5\n5\n" || r.stderr != "ZeroDivisionError: division by zero\n" {
		t.Errorf("got %d %q %q", r.code, r.stdout, r.stderr)
	}
	codes, events := s.log()
	if want := []string{"x = 2\n", "for i in range(3):\n    x += i\n", "print(x)\n", "1/0\n", "x\n"}; strings.Join(codes, "|") != strings.Join(want, "|") {
		t.Errorf("codes %q; want %q", codes, want)
	}
	if events[0] != "create" || events[len(events)-1] != "delete" {
		t.Errorf("events %q; want create first and delete last", events)
	}
	for _, c := range s.calls {
		if c.LastLineInteractive == nil || !*c.LastLineInteractive {
			t.Errorf("call %q not interactive", c.Code)
		}
	}
}

func TestReplAttached(t *testing.T) {
	s := newSessionServer(t, func(string, *http.Request) api.SessionExecuteResponse { return api.SessionExecuteResponse{} })
	r := jailctl(t, s.sock, "y = 1\n", "repl", "--session", "s-1")
	if r.code != 0 {
		t.Errorf("got %+v", r)
	}
	if _, events := s.log(); strings.Join(events, " ") != "get execute" {
		t.Errorf("events %q; want the session checked, used, and left", events)
	}
}

func TestReplSessionEnds(t *testing.T) {
	s := newSessionServer(t, func(code string, r *http.Request) api.SessionExecuteResponse {
		return api.SessionExecuteResponse{
			ExecuteResponse: api.ExecuteResponse{Status: "killed", Signal: intp(9), Message: "Process killed by signal 9 (SIGKILL)"},
			Session:         api.SessionStatus{State: api.SessionEnded, EndReason: strp("repeated_losses")},
		}
	})
	r := jailctl(t, s.sock, "a\nb\n", "repl")
	if r.code != 1 || !strings.Contains(r.stderr, "jailctl: the session has ended (repeated_losses") {
		t.Errorf("got %+v", r)
	}
	if codes, _ := s.log(); len(codes) != 1 {
		t.Errorf("calls after the session ended: %q", codes)
	}
}

// Ctrl-C at the prompt drops the block being typed; Ctrl-C during a call
// interrupts it and the REPL goes on.
func TestReplCtrlC(t *testing.T) {
	sigs := fakeSignals(t)
	var s *sessionServer
	s = newSessionServer(t, func(code string, r *http.Request) api.SessionExecuteResponse {
		if code == "while True: pass\n" {
			sigs <- os.Interrupt
			<-s.interrupted
			return api.SessionExecuteResponse{ExecuteResponse: api.ExecuteResponse{Status: "error", ExitCode: intp(1), Stderr: "KeyboardInterrupt\n"}}
		}
		return api.SessionExecuteResponse{ExecuteResponse: api.ExecuteResponse{Status: "ok", ExitCode: intp(0), Stdout: "ran\n"}}
	})
	pr, pw := io.Pipe()
	var out, errOut bytes.Buffer
	done := make(chan int)
	go func() {
		done <- Main(context.Background(), []string{"--socket", s.sock, "repl"}, pr, &out, &errOut)
	}()
	io.WriteString(pw, "for i in range(3):\n")
	time.Sleep(100 * time.Millisecond) // the line reaches the block before the Ctrl-C
	sigs <- os.Interrupt
	time.Sleep(100 * time.Millisecond)
	io.WriteString(pw, "while True: pass\nprint(1)\n")
	pw.Close()
	code := <-done
	codes, _ := s.log()
	if want := []string{"while True: pass\n", "print(1)\n"}; strings.Join(codes, "|") != strings.Join(want, "|") {
		t.Errorf("codes %q; want %q", codes, want)
	}
	if code != 0 || out.String() != "ran\n" || !strings.Contains(errOut.String(), "KeyboardInterrupt\n") {
		t.Errorf("got %d %q %q", code, out.String(), errOut.String())
	}
}

// Ctrl-C twice during a REPL call abandons it; the REPL waits for the
// session to be idle again and goes on.
func TestReplAbandonGoesOn(t *testing.T) {
	sigs := fakeSignals(t)
	var s *sessionServer
	s = newSessionServer(t, func(code string, r *http.Request) api.SessionExecuteResponse {
		if code == "slow()\n" {
			sigs <- os.Interrupt
			<-s.interrupted
			sigs <- os.Interrupt
			<-r.Context().Done()
		}
		return api.SessionExecuteResponse{ExecuteResponse: api.ExecuteResponse{Status: "ok", ExitCode: intp(0), Stdout: "ran " + code}}
	})
	r := jailctl(t, s.sock, "slow()\nafter()\n", "repl")
	if r.code != 0 || r.stdout != "ran after()\n" || !strings.Contains(r.stderr, "jailctl: call abandoned") {
		t.Errorf("got %+v", r)
	}
	if _, events := s.log(); strings.Join(events, " ") != "create execute interrupt get execute delete" {
		t.Errorf("events %q", events)
	}
}
