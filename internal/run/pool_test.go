//go:build !unit

package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
)

// newPoolEngine starts a second engine whose pool keeps one warm jail
// that imported numpy and pandas.
func newPoolEngine(t *testing.T) *Service {
	t.Helper()
	return newPoolEngineWith(t, PoolConfig{Size: 1, Preimport: []string{"numpy", "pandas"}})
}

func newPoolEngineWith(t *testing.T, pc PoolConfig) *Service {
	t.Helper()
	runDir, err := os.MkdirTemp("", "jaild-pool-test-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(runDir) })
	if pc.Limits == (jail.Limits{}) {
		pc.Limits = jail.DefaultLimits()
		pc.Limits.Timeout = 60 * time.Second
		pc.Limits.MemoryBytes = 1 << 30
	}
	const base = 2_000_000_000
	je, err := jail.New(jail.Config{
		ImageDir: testImage, SeccompProfile: testProfile, RunDir: runDir,
		CgroupName: "jaild-pool-test-" + strconv.Itoa(os.Getpid()), HostIDBase: base,
	})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(je, Config{Pool: pc})
	if err != nil {
		t.Fatal(errors.Join(err, je.Close()))
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
		if left := je.Leftovers(); len(left) != 0 {
			t.Errorf("pool engine left: %v", left)
		}
		if pids := jailProcesses(base); len(pids) != 0 {
			t.Errorf("pool engine left processes: %v", pids)
		}
	})
	return e
}

// runWarm waits for a full pool, runs code in it and insists it was warm.
func runWarm(t *testing.T, e *Service, code string, opts ...func(*Request)) *Result {
	t.Helper()
	full := func() bool { s := e.PoolStats(); return s.Ready == s.Size && s.PlainReady == s.PlainSize }
	for deadline := time.Now().Add(60 * time.Second); !full(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never filled up: %+v", e.PoolStats())
		}
	}
	req := &Request{Code: code, Limits: jail.DefaultLimits()}
	for _, o := range opts {
		o(req)
	}
	res, err := e.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Warm {
		t.Fatalf("run was not served by a warm jail")
	}
	return res
}

// A warm jail is single-use and as isolated as a cold one: nothing one run
// leaves (a file, a module monkeypatch, an environment change, a process)
// is seen by the next, and the filter and limits are those of the request.
func TestJailWarmPool(t *testing.T) {
	e := newPoolEngine(t)
	res := runWarm(t, e, `
import os, sys, json, subprocess, pandas
open('/tmp/left', 'w').write('x'); open('left', 'w').write('x')
json.dumps = lambda *a, **k: 'PATCHED'
os.environ['LEFT'] = '1'
subprocess.Popen(['sleep', '300'], start_new_session=True)
print('numpy' in sys.modules, 'pandas' in sys.modules)
`)
	if res.Status != spec.StatusOK || string(res.Stdout) != "True True\n" {
		t.Fatalf("first run: %s %q %s", res.Status, res.Stdout, res.Stderr)
	}
	res = runWarm(t, e, `
import os, json
print(os.path.exists('/tmp/left'), os.path.exists('left'), json.dumps(1), os.environ.get('LEFT'),
      sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == [1, os.getpid()])
`)
	if got := string(res.Stdout); got != "False False 1 None True\n" {
		t.Errorf("second run saw state of the first: %q %s", got, res.Stderr)
	}

	// The request's limits, not the pool's: rlimits lowered by the runner,
	// cgroup limits set by the engine, timeout by the engine.
	// RLIMIT_CPU counts from the jail's start: the whole seconds its
	// imports used are added to the run's (4, 5).
	res = runWarm(t, e, "import resource\nru = resource.getrusage(resource.RUSAGE_SELF)\n"+
		"print(resource.getrlimit(resource.RLIMIT_NOFILE), *resource.getrlimit(resource.RLIMIT_CPU), int(ru.ru_utime + ru.ru_stime))\n"+
		"print(open('/proc/self/status').read().count('Seccomp:\\t2'))\n",
		withLimits(func(l *jail.Limits) { l.OpenFiles = 100; l.Timeout = 3 * time.Second }))
	var soft, hard, used int
	if _, err := fmt.Sscanf(string(res.Stdout), "(100, 100) %d %d %d\n1\n", &soft, &hard, &used); err != nil || hard != soft+1 || soft < 4 || soft > 4+used {
		t.Errorf("limits in a warm jail: %q %s (%v)", res.Stdout, res.Stderr, err)
	}
	res = runWarm(t, e, "x = bytearray(700 << 20)\nx[::4096] = b'1' * len(x[::4096])\n", withLimits(func(l *jail.Limits) { l.MemoryBytes = 400 << 20 }))
	if res.Status != spec.StatusMemoryLimit || !res.OOMKilled {
		t.Errorf("memory limit in a warm jail: status %s oom %v", res.Status, res.OOMKilled)
	}
	// The engine's wall clock, not RLIMIT_CPU: the code sleeps. (A busy
	// loop lets the CPU limit race the timer: in the TCG guest of make
	// vm-test, CPU time was once accounted faster than wall time, and a
	// 1 s loop ended at 888 ms as cpu_limit.)
	res = runWarm(t, e, "import time\nwhile True: time.sleep(0.01)\n", withLimits(func(l *jail.Limits) { l.Timeout = time.Second }))
	if res.Status != spec.StatusTimeout || res.Duration > 2500*time.Millisecond {
		t.Errorf("timeout in a warm jail: status %s after %v", res.Status, res.Duration)
	}
	// Files in, and a workspace resized for the request.
	res = runWarm(t, e, "import os\nprint(open('in.txt').read(), os.statvfs('.').f_blocks * os.statvfs('.').f_frsize)\n", func(r *Request) {
		r.Files = []File{{Path: "in.txt", Data: []byte("hello")}}
		r.Limits.WorkspaceBytes = 32 << 20
	})
	if got := string(res.Stdout); got != fmt.Sprintf("hello %d\n", 32<<20) {
		t.Errorf("files and workspace size in a warm jail: %q %s", got, res.Stderr)
	}

	// A request the pool cannot honour (more than the pool's limits, or
	// less memory than a warm jail already uses) runs cold.
	for _, l := range []func(*jail.Limits){
		func(l *jail.Limits) { l.Timeout = 2 * time.Minute },
		func(l *jail.Limits) { l.MemoryBytes = 64 << 20 },
	} {
		req := &Request{Code: "print(1)", Limits: jail.DefaultLimits()}
		l(&req.Limits)
		res, err := e.Run(context.Background(), req)
		if err != nil || res.Warm || res.Status != spec.StatusOK {
			t.Errorf("request outside the pool: warm %v status %v err %v", res != nil && res.Warm, res, err)
		}
	}
	e.Idle()
	if n := strings.Count(strings.Join(stateDirs(e), ","), ","); n > 1 {
		t.Errorf("more jails alive than the pool's one: %v", stateDirs(e))
	}
}

// Code that imports a pre-import is served by a preloaded jail, other code
// by a plain one, and both kinds imported the runner's lazy modules.
func TestJailWarmPoolKinds(t *testing.T) {
	e := newPoolEngineWith(t, PoolConfig{Size: 1, PlainSize: 1, Preimport: []string{"numpy.linalg"}})
	if s := e.PoolStats(); s.Size != 1 || s.PlainSize != 1 {
		t.Fatalf("stats: %+v", s)
	}
	const probe = "import sys\nprint(sorted({'numpy', 'ast', 'traceback'} & set(sys.modules)))\n"
	for _, c := range []struct{ name, code, want string }{
		{"plain", probe, "['ast', 'traceback']\n"},
		{"preloaded", probe + "if 0: import numpy as np\n", "['ast', 'numpy', 'traceback']\n"},
		{"preloaded (from)", probe + "x = 1; from numpy import linalg\n", "['ast', 'numpy', 'traceback']\n"},
	} {
		res := runWarm(t, e, c.code)
		if res.Status != spec.StatusOK || string(res.Stdout) != c.want {
			t.Errorf("%s: %s %q, want %q; %s", c.name, res.Status, res.Stdout, c.want, res.Stderr)
		}
	}
	// With the plain jail taken, other code runs cold rather than use up
	// the preloaded one.
	for e.PoolStats().PlainReady+e.PoolStats().Ready < 2 {
		time.Sleep(20 * time.Millisecond)
	}
	if res := runWarm(t, e, "print(1)"); res.Status != spec.StatusOK {
		t.Fatal(res.Status)
	}
	res, err := e.Run(context.Background(), &Request{Code: probe, Limits: jail.DefaultLimits()})
	if err != nil || res.Warm || string(res.Stdout) != "[]\n" {
		t.Errorf("with the plain jail taken: warm %v %q %v; want a cold run", res != nil && res.Warm, res.Stdout, err)
	}
	if s := e.PoolStats(); s.Ready != 1 {
		t.Errorf("the preloaded jail was used: %+v", s)
	}
}

// stateDirs lists the libcontainer state of e's live jails.
func stateDirs(e *Service) []string {
	var out []string
	for _, l := range e.e.Leftovers() {
		if strings.Contains(l, "/state/") {
			out = append(out, l)
		}
	}
	return out
}

// A session takes a warm jail when one fits (created with a CPU rlimit as
// high as the session's life), and its fresh interpreters after a loss
// start in that jail too.
func TestSessionFromWarmPool(t *testing.T) {
	pc := PoolConfig{PlainSize: 1, Limits: jail.DefaultLimits()}
	pc.Limits.Timeout = 2 * time.Hour
	e := newPoolEngineWith(t, pc)
	for deadline := time.Now().Add(60 * time.Second); e.PoolStats().PlainReady < 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool never filled up: %+v", e.PoolStats())
		}
	}
	l := jail.DefaultLimits()
	l.Timeout = time.Hour
	l.Pids = 48 // below the warm jail's: the runner must lower it
	ss, err := e.NewSession(SessionSpec{Limits: l, Files: []File{{Path: "in.txt", Data: []byte("in")}}, Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	if !ss.Warm() {
		t.Fatal("the session did not take the warm jail")
	}
	exec := func(code string) *CallResult {
		t.Helper()
		r, err := ss.Exec(context.Background(), &Call{Code: code, Timeout: 10 * time.Second, OutputBytes: 1 << 20, LastLineInteractive: true})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// A first call refused (a file inside a file) neither takes a number
	// nor the job that lowers the warm jail's rlimits.
	if _, err := ss.Exec(context.Background(), &Call{Code: "1", Files: []File{{Path: "in.txt/x", Data: []byte("x")}}, Timeout: time.Second, OutputBytes: 100}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("a file inside a file: %v", err)
	}
	r := exec("import os, resource\nx = open('in.txt').read() + os.environ['GREETING']\nresource.getrlimit(resource.RLIMIT_NPROC)")
	if r.Count != 1 {
		t.Errorf("the first call that ran is number %d", r.Count)
	}
	if r.Status != spec.StatusOK || r.ResultRepr == nil || *r.ResultRepr != fmt.Sprintf("(%d, %d)", l.Pids, l.Pids) {
		t.Fatalf("first call: %+v stderr %s", r, r.Stderr)
	}
	if r = exec("x"); r.ResultRepr == nil || *r.ResultRepr != "'inhi'" {
		t.Fatalf("state: %+v", r)
	}
	if r = exec("import os\nos._exit(3)"); !r.StateLost {
		t.Fatalf("loss: %+v", r)
	}
	r = exec("import os, resource\nprint(os.environ.get('JAILD_PREIMPORT'), os.environ['GREETING'])\nresource.getrlimit(resource.RLIMIT_NPROC)")
	if string(r.Stdout) != fmt.Sprintf("None hi\n(%d, %d)\n", l.Pids, l.Pids) {
		t.Fatalf("fresh interpreter in the warm jail: %+v stdout %q stderr %s", r, r.Stdout, r.Stderr)
	}
}

// A command (lint, format) takes a plain warm jail, whose runner executes
// it in its place: it reads its stdin, holds fds 0-2 only, runs under the
// request's limits and the filter with no signal blocked, and its exit
// status is the run's; it matches the same command in a jail of its own,
// and the preloaded jail is left for code. Nothing is ignored in either,
// whatever this test process ignores (nohup's SIGHUP, signal 32 in CI):
// the image's init resets every disposition, and the runner restores
// those Python and it change (SIGINT, SIGPIPE, SIGXFSZ).
func TestJailWarmCommand(t *testing.T) {
	e := newPoolEngineWith(t, PoolConfig{Size: 1, PlainSize: 1, Preimport: []string{"json"}})
	cmd := []string{"/bin/sh", "-c", `cat; ulimit -n; grep -E "^SigBlk:" /proc/self/status; ls /proc/self/fd; ` +
		`grep -c "^Seccomp:.2" /proc/self/status; grep -E "^SigIgn:" /proc/self/status >&2; echo "${JAILD_PREIMPORT-unset}" >&2; exit 3`}
	with := func(r *Request) {
		r.Code, r.Command, r.Stdin = "", cmd, []byte("code\n")
		r.Limits.OpenFiles = 100
	}
	// What this process ignores, which its jails must not inherit.
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var ignored uint64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:\t"); ok {
			ignored, err = strconv.ParseUint(v, 16, 64)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	stderr := func(ign uint64) string { return fmt.Sprintf("SigIgn:\t%016x\nunset\n", ign) }
	const stdout = "code\n100\nSigBlk:\t0000000000000000\n0\n1\n2\n3\n1\n"
	warm := runWarm(t, e, "", with)
	if warm.Status != spec.StatusError || warm.ExitCode != 3 || string(warm.Stdout) != stdout || string(warm.Stderr) != stderr(0) || warm.Exception != nil {
		t.Errorf("warm: %s exit %d stdout %q stderr %q exception %v; want stderr %q (this process ignores %#x)", warm.Status, warm.ExitCode, warm.Stdout, warm.Stderr, warm.Exception, stderr(0), ignored)
	}
	if s := e.PoolStats(); s.Ready != 1 {
		t.Errorf("the preloaded jail was used: %+v", s)
	}
	// The same in a jail of its own (a timeout above the pool's).
	req := &Request{Limits: jail.DefaultLimits()}
	with(req)
	req.Limits.Timeout = 2 * time.Minute
	cold, err := e.Run(context.Background(), req)
	if err != nil || cold.Warm {
		t.Fatalf("cold: %v %v", cold, err)
	}
	if cold.Status != warm.Status || cold.ExitCode != warm.ExitCode || string(cold.Stdout) != string(warm.Stdout) || string(cold.Stderr) != stderr(0) {
		t.Errorf("cold: %s %d %q %q; want the warm run's status and output, and stderr %q (this process ignores %#x)", cold.Status, cold.ExitCode, cold.Stdout, cold.Stderr, stderr(0), ignored)
	}
}
