package tests

import (
	"bytes"
	"encoding/base64"
	"image/png"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/api"
)

func execute(t *testing.T, req any) *api.ExecuteResponse {
	t.Helper()
	var resp api.ExecuteResponse
	if status, _ := shared.call(t, "POST", "/v1/execute", req, &resp); status != http.StatusOK {
		t.Fatalf("execute: HTTP %d", status)
	}
	return &resp
}

func ptr[T any](v T) *T { return &v }

func TestExecuteAllFields(t *testing.T) {
	in := []byte{0, 1, 2, 255}
	resp := execute(t, api.ExecuteRequest{
		Code: "import os, sys\nprint(sys.stdin.read().upper())\nprint(os.environ['GREETING'], file=sys.stderr)\n" +
			"data = open('in/raw.bin', 'rb').read()\nopen('out/copy.bin', 'wb').write(data[::-1])\nopen('out/n.txt', 'w').write(str(len(data)))\nlen(data) * 10\n",
		Stdin:               ptr("hello"),
		Files:               []api.FileIn{{Path: "in/raw.bin", ContentB64: base64.StdEncoding.EncodeToString(in)}, {Path: "out/.keep", ContentB64: ""}},
		ReturnFiles:         []string{"out/*.bin", "out/**/*.txt"},
		Limits:              &api.Limits{TimeoutMs: ptr(int64(5000)), MemoryMB: ptr(int64(256)), Pids: ptr(int64(32)), FileSizeMB: ptr(int64(8)), OutputBytes: ptr(int64(4096))},
		LastLineInteractive: true,
		Env:                 map[string]string{"GREETING": "hi there"},
	})
	if resp.Status != "ok" || resp.ExitCode == nil || *resp.ExitCode != 0 || resp.Signal != nil || resp.Message != "" || resp.Error != nil {
		t.Errorf("status %q exit %v signal %v message %q error %+v", resp.Status, resp.ExitCode, resp.Signal, resp.Message, resp.Error)
	}
	if resp.Stdout != "HELLO\n40\n" || resp.Stderr != "hi there\n" || resp.StdoutTruncated || resp.StderrTruncated {
		t.Errorf("stdout %q stderr %q", resp.Stdout, resp.Stderr)
	}
	if resp.Result == nil || *resp.Result != "40" {
		t.Errorf("result %v, want 40", resp.Result)
	}
	if len(resp.RunID) < 16 || resp.TimedOut || resp.OOMKilled {
		t.Errorf("run_id %q timed_out %v oom_killed %v", resp.RunID, resp.TimedOut, resp.OOMKilled)
	}
	got := map[string]api.FileOut{}
	for _, f := range resp.Files {
		got[f.Path] = f
	}
	if f := got["out/copy.bin"]; f.ContentB64 != base64.StdEncoding.EncodeToString([]byte{255, 2, 1, 0}) || f.SizeBytes != 4 {
		t.Errorf("out/copy.bin = %+v", f)
	}
	if f := got["out/n.txt"]; f.ContentB64 != base64.StdEncoding.EncodeToString([]byte("4")) {
		t.Errorf("out/n.txt = %+v", f)
	}
	if len(resp.Files) != 2 {
		t.Errorf("files %+v, want exactly the two matches", resp.Files)
	}
	if resp.Usage.DurationMs <= 0 || resp.Usage.PeakMemoryBytes == 0 || resp.Usage.Warm { // the shared daemon has no warm pool
		t.Errorf("usage %+v", resp.Usage)
	}
}

func TestExecuteOutcomes(t *testing.T) {
	cases := []struct {
		name, code string
		limits     *api.Limits
		status     string
		check      func(*api.ExecuteResponse) bool
		message    string
	}{
		{"exception", "x = 1\nraise ValueError('bad value')\n", nil, "error",
			func(r *api.ExecuteResponse) bool {
				return r.Error != nil && r.Error.Type == "ValueError" && r.Error.Line != nil && *r.Error.Line == 2 && *r.ExitCode == 1
			}, "ValueError: bad value"},
		{"syntax error", "print(1\n", nil, "error",
			func(r *api.ExecuteResponse) bool { return r.Error != nil && r.Error.Type == "SyntaxError" }, "SyntaxError: "},
		{"missing module", "import foo\n", nil, "error", func(r *api.ExecuteResponse) bool { return r.Error != nil },
			"ModuleNotFoundError: No module named 'foo'"},
		{"exit code", "import sys; sys.exit(4)", nil, "error",
			func(r *api.ExecuteResponse) bool { return *r.ExitCode == 4 && r.Error == nil }, "Process exited with code 4"},
		{"timeout", "while True: pass", &api.Limits{TimeoutMs: ptr(int64(1000))}, "timeout",
			func(r *api.ExecuteResponse) bool { return r.TimedOut && r.Signal != nil && *r.Signal == 9 }, "Execution terminated after 1 second"},
		{"memory", "x = bytearray(512 << 20)\nx[::4096] = b'1' * len(x[::4096])\n", &api.Limits{MemoryMB: ptr(int64(64))}, "memory_limit",
			func(r *api.ExecuteResponse) bool { return r.OOMKilled }, "Memory limit of 64 MB exceeded"},
		{"output", "while True: print('y' * 1000)", &api.Limits{OutputBytes: ptr(int64(10000))}, "output_limit",
			func(r *api.ExecuteResponse) bool { return r.StdoutTruncated && len(r.Stdout) == 10000 }, "Output limit of 10000 bytes exceeded"},
		{"signal", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", nil, "killed",
			func(r *api.ExecuteResponse) bool { return r.Signal != nil && *r.Signal == 11 && r.ExitCode == nil }, "Process killed by signal 11 (SIGSEGV)"},
		{"invalid utf-8", "import sys; sys.stdout.buffer.write(b'a\\xffb')", nil, "ok",
			func(r *api.ExecuteResponse) bool { return r.Stdout == "a\uFFFDb" }, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := execute(t, api.ExecuteRequest{Code: c.code, Limits: c.limits})
			if r.Status != c.status || !c.check(r) || !strings.HasPrefix(r.Message, c.message) {
				t.Errorf("status %q message %q exit %v signal %v error %+v", r.Status, r.Message, r.ExitCode, r.Signal, r.Error)
			}
		})
	}
}

func TestExecuteFigures(t *testing.T) {
	r := execute(t, api.ExecuteRequest{Code: "import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.title('t')\n", Limits: &api.Limits{TimeoutMs: ptr(int64(30000))}})
	if r.Status != "ok" || len(r.Figures) != 1 {
		t.Fatalf("status %q figures %d stderr %s", r.Status, len(r.Figures), r.Stderr)
	}
	data, err := base64.StdEncoding.DecodeString(r.Figures[0].ContentB64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(data)); err != nil || r.Figures[0].Name != "figure-1.png" {
		t.Errorf("figure %q: %v", r.Figures[0].Name, err)
	}
}

// lintCode has findings of several kinds, and one line that ruff's CLI
// and the API must place identically.
const lintCode = "import os, sys\n\ndef f(x):\n    if x == None:\n        return  1\n    l = 1\n    print(l)\n"

func TestLintMatchesRuffCLI(t *testing.T) {
	var lr api.LintResponse
	if status, _ := shared.call(t, "POST", "/v1/lint", api.LintRequest{Code: lintCode}, &lr); status != 200 {
		t.Fatalf("lint: HTTP %d", status)
	}
	if len(lr.Diagnostics) < 4 {
		t.Fatalf("only %d diagnostics: %+v", len(lr.Diagnostics), lr.Diagnostics)
	}
	// The CLI's own findings for the same code and rules, from a jail.
	cli := execute(t, api.ExecuteRequest{Code: "import subprocess, sys\nsrc = open('main.py').read()\n" +
		"p = subprocess.run(['ruff', 'check', '--isolated', '--no-cache', '--output-format', 'concise', '--select', 'ALL', " +
		"'--ignore', 'COM812,CPY,D100,D203,D213,FBT,RUF029', '--stdin-filename', 'main.py', '-'], input=src, capture_output=True, text=True)\n" +
		"print(p.stdout)\n", Files: []api.FileIn{{Path: "main.py", ContentB64: base64.StdEncoding.EncodeToString([]byte(lintCode))}}, Limits: &api.Limits{TimeoutMs: ptr(int64(30000))}})
	var want []string
	for _, line := range strings.Split(cli.Stdout, "\n") {
		// main.py:1:8: F401 [*] `os` imported but unused
		parts := strings.SplitN(line, ":", 4)
		if len(parts) == 4 && parts[0] == "main.py" {
			want = append(want, parts[1]+":"+parts[2]+":"+strings.Fields(parts[3])[0])
		}
	}
	var got []string
	for _, d := range lr.Diagnostics {
		got = append(got, itoa(d.Location.Line)+":"+itoa(d.Location.Column)+":"+d.Code)
		if d.Message == "" || d.EndLocation.Line < d.Location.Line {
			t.Errorf("diagnostic %+v", d)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") || len(want) == 0 {
		t.Errorf("API diagnostics %v\nruff CLI       %v\n(cli stdout %q stderr %q)", got, want, cli.Stdout, cli.Stderr)
	}

	// select/ignore are passed through; a syntax error is a diagnostic.
	shared.call(t, "POST", "/v1/lint", api.LintRequest{Code: lintCode, Select: []string{"F401"}}, &lr)
	if len(lr.Diagnostics) != 2 || lr.Diagnostics[0].Code != "F401" || !lr.Diagnostics[0].Fixable || lr.Diagnostics[0].URL == "" {
		t.Errorf("select F401: %+v", lr.Diagnostics)
	}
	if status, _ := shared.call(t, "POST", "/v1/lint", api.LintRequest{Code: "def f(:\n"}, &lr); status != 200 || len(lr.Diagnostics) == 0 || lr.Diagnostics[0].Code != "invalid-syntax" {
		t.Errorf("syntax error: HTTP %d %+v", status, lr.Diagnostics)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestFormat(t *testing.T) {
	var fr api.FormatResponse
	if status, _ := shared.call(t, "POST", "/v1/format", api.FormatRequest{Code: "x = {  'a':1 }\n"}, &fr); status != 200 {
		t.Fatalf("format: HTTP %d", status)
	}
	if fr.Code != "x = {\"a\": 1}\n" || !fr.Changed {
		t.Errorf("format = %q changed %v", fr.Code, fr.Changed)
	}
	shared.call(t, "POST", "/v1/format", api.FormatRequest{Code: fr.Code}, &fr)
	if fr.Changed {
		t.Error("formatting formatted code changed it")
	}
	var e api.ErrorBody
	if status, _ := shared.call(t, "POST", "/v1/format", api.FormatRequest{Code: "def f(:\n"}, &e); status != 400 || e.Error.Type != "invalid_argument" {
		t.Errorf("format of a syntax error: HTTP %d %+v", status, e)
	}
}

func TestInfoAndHealth(t *testing.T) {
	var info api.Info
	if status, _ := shared.call(t, "GET", "/v1/info", nil, &info); status != 200 {
		t.Fatalf("info: HTTP %d", status)
	}
	if !strings.HasPrefix(info.Rootfs.PythonVersion, "3.13") || !strings.HasPrefix(info.Rootfs.ImageDigest, "sha256:") ||
		info.Rootfs.PythonPackages["numpy"] == "" || info.Defaults.TimeoutMs == 0 || info.Maxima.MemoryMB == 0 ||
		info.Capacity.MaxConcurrent != 2 || info.Seccomp.Rules == 0 || (info.CgroupMode != "v1" && info.CgroupMode != "v2") || !info.Caller.Admin {
		t.Errorf("info %+v", info)
	}
	var h api.Health
	if status, _ := shared.call(t, "GET", "/v1/health", nil, &h); status != 200 || h.Status != "ok" {
		t.Errorf("health: HTTP %d %+v", status, h)
	}
}
