package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/admission"
	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/run"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/runner"
	"github.com/jaild/jaild/internal/server/servertest"
	"github.com/jaild/jaild/internal/workspace"
)

func exception(typ string) *runner.Exception { return &runner.Exception{Type: typ} }

// callAnswer makes the sessions made after answer each call with
// answer(code), an ok call that prints nothing by default, and records
// the calls. A call that ends the session ends the last one made.
func callAnswer(h *servertest.Harness, answer func(ctx context.Context, code string) run.CallResult) *[]run.Call {
	var mu sync.Mutex
	var calls []run.Call
	h.Engine.SessionExec = func(ctx context.Context, c *run.Call) (*run.CallResult, error) {
		mu.Lock()
		calls = append(calls, *c)
		mu.Unlock()
		res := answer(ctx, c.Code)
		if res.Status == "" {
			res.Status = spec.StatusOK
		}
		emit(c.Hooks, &res.Result)
		if res.Ended {
			ss := h.Engine.Sessions()
			ss[len(ss)-1].End(res.EndReason)
		}
		return &res, nil
	}
	return &calls
}

// interrupted waits for the first session's next interrupt.
func interrupted(h *servertest.Harness) {
	<-h.Engine.Sessions()[0].Interrupted()
}

func TestSessionNew(t *testing.T) {
	cfg := config.Default()
	cfg.Network.Enabled = true
	h := servertest.New(t, cfg, admission.Caller{UID: 1000, Network: true})
	dir := t.TempDir()
	data := filepath.Join(dir, "data.csv")
	os.WriteFile(data, []byte("a,b\n"), 0o644)

	r := jailctl(t, h.Socket, "", "session", "new", "--memory-mb", "512", "--pids", "32", "--file-size-mb", "8",
		"--timeout-ms", "1500", "--output-bytes", "4096", "--idle-timeout", "5m", "--ttl", "1500ms",
		"--env", "A=1", "--env", "B=x=y", "--allow-host", "example.com", "--file", data, "--file", data+":in/d.csv")
	id := strings.TrimSuffix(r.stdout, "\n")
	if r.code != 0 || !strings.HasPrefix(id, "s-") || strings.Contains(id, "\n") || r.stderr != "" {
		t.Fatalf("got %d %q %q; want the bare ID", r.code, r.stdout, r.stderr)
	}
	spec := h.Engine.Sessions()[0].Spec
	if l := spec.Limits; l.MemoryBytes != 512<<20 || l.Pids != 32 || l.FileSizeBytes != 8<<20 {
		t.Errorf("limits %+v", l)
	}
	if len(spec.Env) != 2 || spec.Env["B"] != "x=y" {
		t.Errorf("env %v", spec.Env)
	}
	if spec.Network == nil {
		t.Errorf("network %+v; --allow-host means internet", spec.Network)
	}
	if len(spec.Files) != 2 || spec.Files[0].Path != "data.csv" || string(spec.Files[0].Data) != "a,b\n" || spec.Files[1].Path != "in/d.csv" {
		t.Errorf("files %+v", spec.Files)
	}
	s, err := h.Client.Session(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if s.Limits.TimeoutMs != 1500 || s.Limits.OutputBytes != 4096 || s.IdleTimeoutS != 300 || s.ExpiresAt.Sub(s.CreatedAt).Round(time.Second) != 2*time.Second {
		t.Errorf("session %+v; want each call's 1500 ms and 4096 bytes, idle 300 s and a TTL of 2 s (rounded up)", s)
	}

	// No flags: an empty request takes the daemon's defaults.
	if r = jailctl(t, h.Socket, "", "session", "new"); r.code != 0 {
		t.Fatalf("defaults: %+v", r)
	}
	if spec := h.Engine.Sessions()[1].Spec; spec.Limits.Pids != 64 || spec.Env != nil || spec.Network != nil || spec.Files != nil {
		t.Errorf("defaults: %+v", spec)
	}
	var got api.Session
	if r := jailctl(t, h.Socket, "", "session", "new", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &got) != nil || got.State != api.SessionIdle {
		t.Errorf("--json: %d %q", r.code, r.stdout)
	}
}

func TestSessionUsageErrors(t *testing.T) {
	h := newDaemon(t)
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
		{"session", "pause"},
		{"session", "resume", "a", "b"},
		{"session", "rm"},
		{"session", "ls", "x"},
		{"repl", "extra"},
		{"repl", "--session", "s-1", "--memory-mb", "64"},
		{"repl", "--session", "s-1", "--image", "python"},
	} {
		r := jailctl(t, h.Socket, "", args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "jailctl: ") && !strings.HasPrefix(r.stderr, "Usage: ") || r.stdout != "" {
			t.Errorf("%q: got %d %q %q; want a usage error", args, r.code, r.stdout, r.stderr)
		}
	}
	if got := audited(h); got != "" {
		t.Errorf("usage errors reached the daemon: %s", got)
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
		res    run.CallResult
		code   int
		stdout string
		stderr string
	}{
		{"ok, the value printed once", run.CallResult{Result: run.Result{Status: spec.StatusOK, Stdout: []byte("42\n"), ResultRepr: strp("42")}},
			0, "42\n", ""},
		{"exception", run.CallResult{Result: run.Result{Status: spec.StatusError, ExitCode: 1, Stderr: []byte("Traceback\nNameError: x\n"),
			Exception: &runner.Exception{Type: "NameError", Message: "x"}}},
			1, "", "Traceback\nNameError: x\njailctl: NameError: x\n"},
		{"timeout, state lost", run.CallResult{Result: run.Result{Status: spec.StatusTimeout, Signal: 9, ExitCode: -1, TimedOut: true, Stdout: []byte("a\n")},
			StateLost: true, LostReason: "timeout"},
			124, "a\n", "jailctl: Execution terminated after 10 seconds (the time limit).\n" +
				"jailctl: the session's interpreter was restarted (the call timed out and did not stop at the interrupt): variables and imports are gone; files are kept\n"},
		{"memory, state lost", run.CallResult{Result: run.Result{Status: spec.StatusMemoryLimit, OOMKilled: true, Signal: 9, ExitCode: -1},
			StateLost: true, LostReason: "memory_limit"},
			137, "", "jailctl: Memory limit of 512 MB exceeded; the process was killed.\n" +
				"jailctl: the session's interpreter was restarted (the memory limit): variables and imports are gone; files are kept\n"},
		{"ended", run.CallResult{Result: run.Result{Status: spec.StatusKilled, Signal: 9, ExitCode: -1},
			StateLost: true, LostReason: "crashed", Ended: true, EndReason: spec.EndLosses},
			137, "", "jailctl: Process killed by signal 9 (SIGKILL).\n" +
				"jailctl: the session has ended (repeated_losses: its interpreter was lost in too many calls in a row)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newDaemon(t)
			callAnswer(h, func(context.Context, string) run.CallResult { return tt.res })
			r := jailctl(t, h.Socket, "", "session", "exec", newSession(t, h), "-c", "x")
			if r.code != tt.code || r.stdout != tt.stdout || r.stderr != tt.stderr {
				t.Errorf("got %d %q %q\nwant %d %q %q", r.code, r.stdout, r.stderr, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

func TestSessionExecRequest(t *testing.T) {
	h := newDaemon(t)
	var call run.Call
	h.Engine.SessionExec = func(_ context.Context, c *run.Call) (*run.CallResult, error) {
		call = *c
		return &run.CallResult{Result: run.Result{Status: spec.StatusOK, Files: []workspace.File{{Path: "out.txt", Size: 2, Data: []byte("hi")}}}}, nil
	}
	id := newSession(t, h)
	dir := t.TempDir()
	script := filepath.Join(dir, "main.py")
	os.WriteFile(script, []byte("print(x)\n"), 0o644)
	input := filepath.Join(dir, "in.txt")
	os.WriteFile(input, []byte("line\n"), 0o644)
	outDir := filepath.Join(dir, "out")

	r := jailctl(t, h.Socket, "", "session", "exec", id, script, "--timeout-ms", "2500", "--output-bytes", "100",
		"--file", input+":data/in.txt", "--get", "*.txt", "--stdin-file", input, "--interactive=false", "--out-dir", outDir)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if call.Code != "print(x)\n" || string(call.Stdin) != "line\n" || strings.Join(call.ReturnFiles, " ") != "*.txt" || call.LastLineInteractive {
		t.Errorf("call %+v", call)
	}
	if call.Timeout != 2500*time.Millisecond || call.OutputBytes != 100 {
		t.Errorf("limits %v %d", call.Timeout, call.OutputBytes)
	}
	if len(call.Files) != 1 || call.Files[0].Path != "data/in.txt" {
		t.Errorf("files %+v", call.Files)
	}
	if got, err := os.ReadFile(filepath.Join(outDir, "out.txt")); err != nil || string(got) != "hi" {
		t.Errorf("returned file: %q %v", got, err)
	}

	// Code on stdin; interactive by default; the session's limits.
	r = jailctl(t, h.Socket, "1 + 1\n", "session", "exec", id, "--out-dir", outDir)
	if r.code != 0 || call.Code != "1 + 1\n" || !call.LastLineInteractive || call.Timeout != 10*time.Second || call.Stdin != nil {
		t.Errorf("from stdin: %d %+v", r.code, call)
	}

	// --json prints the response as it came and writes nothing.
	jsonDir := filepath.Join(dir, "json")
	r = jailctl(t, h.Socket, "", "session", "exec", "--json", "--out-dir", jsonDir, id, "-c", "x")
	var resp api.SessionExecuteResponse
	if err := json.Unmarshal([]byte(r.stdout), &resp); err != nil || r.code != 0 || resp.Status != "ok" || r.stderr != "" {
		t.Errorf("--json: %d %q %q %v", r.code, r.stdout, r.stderr, err)
	}
	if _, err := os.Stat(jsonDir); err == nil {
		t.Error("--json wrote files")
	}
}

func TestSessionExecErrors(t *testing.T) {
	h := newDaemon(t)
	release := make(chan struct{})
	callAnswer(h, func(ctx context.Context, code string) run.CallResult {
		if code == "slow()" {
			<-release
		}
		return run.CallResult{}
	})
	ended, running := newSession(t, h), newSession(t, h)
	h.Engine.Sessions()[0].End("idle_timeout")
	done := make(chan result)
	go func() { done <- jailctl(t, h.Socket, "", "session", "exec", running, "-c", "slow()") }()
	for s, _ := h.Client.Session(context.Background(), running); s.State != api.SessionRunning; s, _ = h.Client.Session(context.Background(), running) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, tt := range []struct{ id, stderr string }{
		// The daemon's message names the end: it is not said again.
		{ended, "jailctl: session " + ended + " has ended (idle_timeout)\n"},
		{running, "jailctl: session " + running + " is running another call; wait for it or POST /v1/sessions/" + running + "/interrupt\n" +
			"jailctl: another call is running in session " + running + "; \"jailctl session interrupt " + running + "\" interrupts it\n"},
		{"s-3", "jailctl: no session \"s-3\" (sessions are visible to the uid that made them; ended ones stay listed for 10m0s)\n"},
	} {
		r := jailctl(t, h.Socket, "", "session", "exec", tt.id, "-c", "x")
		if r.code != 2 || r.stdout != "" || r.stderr != tt.stderr {
			t.Errorf("%s: got %d %q %q; want 2 %q", tt.id, r.code, r.stdout, r.stderr, tt.stderr)
		}
	}
	close(release)
	<-done
}

func TestSessionListShowInterruptRemove(t *testing.T) {
	h := newDaemon(t)
	release := make(chan struct{})
	callAnswer(h, func(ctx context.Context, code string) run.CallResult {
		if code == "1" {
			return run.CallResult{Count: 1}
		}
		if code == "slow()" {
			select {
			case <-release:
			case <-h.Engine.Sessions()[0].Interrupted():
			}
		}
		return run.CallResult{}
	})
	busy := newSession(t, h)
	s, err := h.Client.CreateSession(context.Background(), &api.SessionCreateRequest{Image: "test-small"})
	if err != nil {
		t.Fatal(err)
	}
	gone := s.SessionID
	if _, err := h.Client.DeleteSession(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	if r := jailctl(t, h.Socket, "", "session", "exec", busy, "-c", "1"); r.code != 0 {
		t.Fatalf("exec: %+v", r)
	}

	r := jailctl(t, h.Socket, "", "session", "ls")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 3 {
		t.Fatalf("ls: %d %q", r.code, r.stdout)
	}
	for i, want := range [][]string{
		{"ID", "STATE", "IMAGE", "CALLS", "IDLE", "TIMEOUT", "EXPIRES", "LAST", "USED", "END", "REASON"},
		{busy, "idle", "test", "1", "10m", "in", "1h", "just", "now", "-"},
		{gone, "ended", "test-small", "0", "10m", "-", "never", "deleted"},
	} {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("ls line %d: %q; want %q", i, got, want)
		}
	}
	var list api.SessionList
	if r := jailctl(t, h.Socket, "", "session", "ls", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Sessions) != 2 {
		t.Errorf("ls --json: %d %q", r.code, r.stdout)
	}

	r = jailctl(t, h.Socket, "", "session", "show", busy)
	for _, want := range []string{"session:", busy, "idle", "(in 1h)", "idle timeout:  10m", "calls:         1", "memory 512 MB", "image:         test", "uid 1000"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	var one api.Session
	if r := jailctl(t, h.Socket, "", "session", "show", "--json", busy); r.code != 0 || json.Unmarshal([]byte(r.stdout), &one) != nil || one.SessionID != busy {
		t.Errorf("show --json: %d %q", r.code, r.stdout)
	}

	if r := jailctl(t, h.Socket, "", "session", "interrupt", busy); r.code != 1 || r.stderr != "jailctl: no call of session "+busy+" was running\n" {
		t.Errorf("interrupt with nothing running: %+v", r)
	}
	done := make(chan result)
	go func() { done <- jailctl(t, h.Socket, "", "session", "exec", busy, "-c", "slow()") }()
	for r := jailctl(t, h.Socket, "", "session", "interrupt", busy); r.code != 0; r = jailctl(t, h.Socket, "", "session", "interrupt", busy) {
		if r.code != 1 || r.stdout != "" {
			t.Fatalf("interrupt: %+v", r)
		}
		time.Sleep(10 * time.Millisecond)
	}
	<-done

	r = jailctl(t, h.Socket, "", "session", "rm", busy, "s-9")
	if r.code != 2 || !strings.HasPrefix(r.stderr, "jailctl: ") || !strings.Contains(r.stderr, "s-9") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("rm: %+v", r)
	}
	if s, err := h.Client.Session(context.Background(), busy); err != nil || s.State != api.SessionEnded {
		t.Errorf("rm did not end %s: %+v %v", busy, s, err)
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

// The first Ctrl-C of a session exec interrupts the call and waits for
// its result; the exit status is 130 for an interrupted call that failed.
func TestSessionExecCtrlCInterrupts(t *testing.T) {
	sigs := fakeSignals(t)
	h := newDaemon(t)
	callAnswer(h, func(context.Context, string) run.CallResult {
		sigs <- os.Interrupt
		interrupted(h)
		return run.CallResult{Result: run.Result{Status: spec.StatusError, ExitCode: 1,
			Stderr: []byte("Traceback\nKeyboardInterrupt\n"), Exception: exception("KeyboardInterrupt")}}
	})
	r := jailctl(t, h.Socket, "", "session", "exec", newSession(t, h), "-c", "while True: pass")
	if r.code != 130 || !strings.Contains(r.stderr, "jailctl: interrupting the call") || !strings.Contains(r.stderr, "KeyboardInterrupt\n") {
		t.Errorf("got %d %q %q", r.code, r.stdout, r.stderr)
	}
	if got := audited(h); got != "session_create session_interrupt session_execute" {
		t.Errorf("audited %q", got)
	}
}

// A second Ctrl-C abandons the call: jailctl closes the request.
func TestSessionExecSecondCtrlCAbandons(t *testing.T) {
	sigs := fakeSignals(t)
	gone := make(chan struct{})
	h := newDaemon(t)
	callAnswer(h, func(ctx context.Context, code string) run.CallResult {
		if code == "term" {
			sigs <- syscall.SIGTERM
		} else {
			sigs <- os.Interrupt
			interrupted(h)
			sigs <- os.Interrupt
		}
		<-ctx.Done() // a call that ignores the interrupt
		if code != "term" {
			close(gone)
		}
		return run.CallResult{}
	})
	id := newSession(t, h)
	r := jailctl(t, h.Socket, "", "session", "exec", id, "-c", "while True: pass")
	if r.code != 130 || !strings.Contains(r.stderr, "jailctl: call abandoned") {
		t.Errorf("got %d %q %q", r.code, r.stdout, r.stderr)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Error("the daemon did not see the call go away")
	}
	// SIGTERM abandons at once, with 143.
	for s, _ := h.Client.Session(context.Background(), id); s.State == api.SessionRunning; s, _ = h.Client.Session(context.Background(), id) {
		time.Sleep(10 * time.Millisecond)
	}
	if r := jailctl(t, h.Socket, "", "session", "exec", id, "-c", "term"); r.code != 143 {
		t.Errorf("SIGTERM: %+v", r)
	}
}

// replCalls is a daemon whose sessions answer the REPL's calls by code
// and record them.
func replCalls(t *testing.T, answer func(ctx context.Context, code string) run.CallResult) (*servertest.Harness, *[]run.Call) {
	h := newDaemon(t)
	return h, callAnswer(h, answer)
}

func codes(calls []run.Call) string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Code)
	}
	return strings.Join(out, "|")
}

func TestReplScript(t *testing.T) {
	h, calls := replCalls(t, func(_ context.Context, code string) run.CallResult {
		switch code {
		case "print(x)\n":
			return run.CallResult{Result: run.Result{Status: spec.StatusOK, Stdout: []byte("5\n")}}
		case "x\n":
			// The runner prints the value; result repeats it.
			return run.CallResult{Result: run.Result{Status: spec.StatusOK, Stdout: []byte("5\n"), ResultRepr: strp("5")}}
		case "1/0\n":
			return run.CallResult{Result: run.Result{Status: spec.StatusError, ExitCode: 1,
				Stderr: []byte("ZeroDivisionError: division by zero\n"), Exception: &runner.Exception{Type: "ZeroDivisionError", Message: "division by zero"}}}
		}
		return run.CallResult{}
	})
	r := jailctl(t, h.Socket, "x = 2\nfor i in range(3):\n    x += i\n\nprint(x)\n1/0\nx", "repl", "--memory-mb", "128")
	if r.code != 0 || r.stdout != "5\n5\n" || r.stderr != "ZeroDivisionError: division by zero\n" {
		t.Errorf("got %d %q %q", r.code, r.stdout, r.stderr)
	}
	if got, want := codes(*calls), "x = 2\n|for i in range(3):\n    x += i\n|print(x)\n|1/0\n|x\n"; got != want {
		t.Errorf("codes %q; want %q", got, want)
	}
	if ops := audited(h); !strings.HasPrefix(ops, "session_create ") || !strings.HasSuffix(ops, " session_delete") {
		t.Errorf("audited %q; want create first and delete last", ops)
	}
	if h.Engine.Sessions()[0].Spec.Limits.MemoryBytes != 128<<20 {
		t.Errorf("limits %+v", h.Engine.Sessions()[0].Spec.Limits)
	}
	for _, c := range *calls {
		if !c.LastLineInteractive {
			t.Errorf("call %q not interactive", c.Code)
		}
	}
}

func TestReplAttached(t *testing.T) {
	h, calls := replCalls(t, func(context.Context, string) run.CallResult { return run.CallResult{} })
	id := newSession(t, h)
	if r := jailctl(t, h.Socket, "y = 1\n", "repl", "--session", id); r.code != 0 {
		t.Errorf("got %+v", r)
	}
	if ops := audited(h); ops != "session_create session_execute" || codes(*calls) != "y = 1\n" {
		t.Errorf("audited %q, calls %q; want the session used and left", ops, codes(*calls))
	}
}

func TestReplSessionEnds(t *testing.T) {
	h, calls := replCalls(t, func(context.Context, string) run.CallResult {
		return run.CallResult{Result: run.Result{Status: spec.StatusKilled, Signal: 9, ExitCode: -1}, Ended: true, EndReason: spec.EndLosses}
	})
	r := jailctl(t, h.Socket, "a\nb\n", "repl")
	if r.code != 1 || !strings.Contains(r.stderr, "jailctl: the session has ended (repeated_losses") {
		t.Errorf("got %+v", r)
	}
	if len(*calls) != 1 {
		t.Errorf("calls after the session ended: %q", codes(*calls))
	}
}

// Ctrl-C at the prompt drops the block being typed; Ctrl-C during a call
// interrupts it and the REPL goes on.
func TestReplCtrlC(t *testing.T) {
	sigs := fakeSignals(t)
	var h *servertest.Harness
	h, calls := replCalls(t, func(_ context.Context, code string) run.CallResult {
		if code == "while True: pass\n" {
			sigs <- os.Interrupt
			interrupted(h)
			return run.CallResult{Result: run.Result{Status: spec.StatusError, ExitCode: 1, Stderr: []byte("KeyboardInterrupt\n"), Exception: exception("KeyboardInterrupt")}}
		}
		return run.CallResult{Result: run.Result{Status: spec.StatusOK, Stdout: []byte("ran\n")}}
	})
	pr, pw := io.Pipe()
	var out, errOut bytes.Buffer
	done := make(chan int)
	go func() {
		done <- Main(context.Background(), []string{"--socket", h.Socket, "repl"}, pr, &out, &errOut)
	}()
	io.WriteString(pw, "for i in range(3):\n")
	time.Sleep(100 * time.Millisecond) // the line reaches the block before the Ctrl-C
	sigs <- os.Interrupt
	time.Sleep(100 * time.Millisecond)
	io.WriteString(pw, "while True: pass\nprint(1)\n")
	pw.Close()
	code := <-done
	if got, want := codes(*calls), "while True: pass\n|print(1)\n"; got != want {
		t.Errorf("codes %q; want %q", got, want)
	}
	if code != 0 || out.String() != "ran\n" || !strings.Contains(errOut.String(), "KeyboardInterrupt\n") {
		t.Errorf("got %d %q %q", code, out.String(), errOut.String())
	}
}

// Ctrl-C twice during a REPL call abandons it; the REPL waits for the
// session to be idle again and goes on.
func TestReplAbandonGoesOn(t *testing.T) {
	sigs := fakeSignals(t)
	var h *servertest.Harness
	h, _ = replCalls(t, func(ctx context.Context, code string) run.CallResult {
		if code == "slow()\n" {
			sigs <- os.Interrupt
			interrupted(h)
			sigs <- os.Interrupt
			<-ctx.Done()
		}
		return run.CallResult{Result: run.Result{Status: spec.StatusOK, Stdout: []byte("ran " + code)}}
	})
	r := jailctl(t, h.Socket, "slow()\nafter()\n", "repl")
	if r.code != 0 || r.stdout != "ran after()\n" || !strings.Contains(r.stderr, "jailctl: call abandoned") {
		t.Errorf("got %+v", r)
	}
	if got := audited(h); got != "session_create session_interrupt session_execute session_execute session_delete" {
		t.Errorf("audited %q", got)
	}
}

// session pause and resume say what became of the session; show says it
// is paused and how large its checkpoint is.
func TestSessionPauseResume(t *testing.T) {
	h := newDaemon(t)
	id := newSession(t, h)
	r := jailctl(t, h.Socket, "", "session", "pause", id)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "session "+id+" paused (4.0 KiB on disk; took ") {
		t.Fatalf("pause: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := jailctl(t, h.Socket, "", "session", "pause", id); r.code != 0 || r.stdout != "session "+id+" was paused already (4.0 KiB on disk)\n" {
		t.Errorf("pause again: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := jailctl(t, h.Socket, "", "session", "show", id); r.code != 0 || !strings.Contains(r.stdout, "paused:") || !strings.Contains(r.stdout, "4.0 KiB on disk") {
		t.Errorf("show: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := jailctl(t, h.Socket, "", "session", "resume", id); r.code != 0 || !strings.HasPrefix(r.stdout, "session "+id+" restored (restore took ") {
		t.Errorf("resume: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := jailctl(t, h.Socket, "", "session", "resume", id); r.code != 0 || r.stdout != "session "+id+" was not paused\n" {
		t.Errorf("resume again: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := jailctl(t, h.Socket, "", "session", "pause", "--json", id); r.code != 0 || !strings.Contains(r.stdout, `"paused"`) {
		t.Errorf("pause --json: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := jailctl(t, h.Socket, "", "session", "pause", "nope"); r.code == 0 || !strings.Contains(r.stderr, "no session") {
		t.Errorf("pause of an unknown session: %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// session fork prints the children's IDs, one per line; -n outside 1..16
// is a usage error that asks nothing of the daemon.
func TestSessionFork(t *testing.T) {
	h := newDaemon(t)
	id := newSession(t, h)
	r := jailctl(t, h.Socket, "", "session", "fork", "-n", "2", id)
	ids := strings.Fields(r.stdout)
	if r.code != 0 || len(ids) != 2 || ids[0] == ids[1] || ids[0] == id || !strings.HasPrefix(ids[0], "s-") {
		t.Fatalf("fork: %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, k := range ids {
		if r := jailctl(t, h.Socket, "", "session", "show", k); r.code != 0 {
			t.Errorf("show of child %s: %d %q", k, r.code, r.stderr)
		}
	}
	if r := jailctl(t, h.Socket, "", "session", "fork", "-n", "17", id); r.code != 2 || !strings.Contains(r.stderr, "-n must be in 1..16") {
		t.Errorf("fork -n 17: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := jailctl(t, h.Socket, "", "session", "fork", "nope"); r.code == 0 || !strings.Contains(r.stderr, "no session") {
		t.Errorf("fork of an unknown session: %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// session snapshot prints the snapshot's ID; snapshots lists it; restore
// rolls the session back to it; new --from-snapshot starts a session of
// it; snapshot-rm deletes it.
func TestSessionSnapshots(t *testing.T) {
	h := newDaemon(t)
	id := newSession(t, h)
	r := jailctl(t, h.Socket, "", "session", "snapshot", id)
	snap := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(snap, "snap-") {
		t.Fatalf("snapshot: %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"session", "snapshots"}, {"session", "snapshots", id}} {
		if r := jailctl(t, h.Socket, "", args...); r.code != 0 || !strings.Contains(r.stdout, snap) || !strings.Contains(r.stdout, "4.0 KiB") {
			t.Errorf("%v: %d %q %q", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := jailctl(t, h.Socket, "", "session", "restore", id, snap); r.code != 0 || !strings.HasPrefix(r.stdout, "session "+id+" rolled back to "+snap) {
		t.Errorf("restore: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := jailctl(t, h.Socket, "", "session", "new", "--from-snapshot", snap); r.code != 0 || !strings.HasPrefix(r.stdout, "s-") {
		t.Errorf("new --from-snapshot: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := jailctl(t, h.Socket, "", "session", "new", "--from-snapshot", snap, "--image", "test"); r.code == 0 || !strings.Contains(r.stderr, "from_snapshot") {
		t.Errorf("new --from-snapshot --image: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := jailctl(t, h.Socket, "", "session", "snapshot-rm", snap); r.code != 0 {
		t.Errorf("snapshot-rm: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := jailctl(t, h.Socket, "", "session", "snapshots"); r.code != 0 || strings.Contains(r.stdout, snap) {
		t.Errorf("snapshots after snapshot-rm: %d %q", r.code, r.stdout)
	}
}
