package tests

// The soak: many mixed benign and hostile requests at once against one
// daemon, asserting that it never crashes, never loses or garbles a
// response, and that its fds and RSS stay flat. One kind of request of the
// mix is a session's whole life: open, several calls that count on the
// state of the earlier ones, delete. CI runs 1000 requests at
// concurrency 16 as part of `go test ./tests/`; the full soak is
//
//	JAILD_SOAK_RUNS=10000 go test -tags seccomp -run TestSoak -timeout 3h ./tests/
//
// (JAILD_SOAK_CONCURRENCY changes the concurrency.)

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

// soakKind is one kind of request of the soak's mix, with the exact answer
// it must get.
type soakKind struct {
	name   string
	path   string
	body   any
	status int
	check  func(raw []byte) error
	// run, if set, is the whole request: a session's life.
	run func(client *http.Client) error
}

func execOK(status string, check func(r *api.ExecuteResponse) bool) func([]byte) error {
	return func(raw []byte) error {
		var r api.ExecuteResponse
		if err := strictJSON(raw, &r); err != nil {
			return err
		}
		if r.Status != status || (check != nil && !check(&r)) {
			return fmt.Errorf("status %q exit %v signal %v stdout %.200q stderr %.200q", r.Status, deref(r.ExitCode), deref(r.Signal), r.Stdout, r.Stderr)
		}
		return nil
	}
}

func soakMix() []soakKind {
	b64 := base64.StdEncoding.EncodeToString
	out := func(want string) func(r *api.ExecuteResponse) bool {
		return func(r *api.ExecuteResponse) bool { return r.Stdout == want }
	}
	return []soakKind{
		{name: "print", path: "/v1/execute", body: api.ExecuteRequest{Code: "print(1)"}, status: 200, check: execOK("ok", out("1\n"))},
		{name: "numpy", path: "/v1/execute", body: api.ExecuteRequest{Code: "import numpy as np\nprint(int(np.arange(10).sum()))"}, status: 200, check: execOK("ok", out("45\n"))},
		{name: "files", path: "/v1/execute", status: 200,
			body: api.ExecuteRequest{Code: "import os\nos.makedirs('out')\nopen('out/b.txt', 'w').write(open('in/a.txt').read().upper())", Files: []api.FileIn{{Path: "in/a.txt", ContentB64: b64([]byte("hello"))}}, ReturnFiles: []string{"out/*"}},
			check: execOK("ok", func(r *api.ExecuteResponse) bool {
				return len(r.Files) == 1 && r.Files[0].ContentB64 == b64([]byte("HELLO"))
			})},
		{name: "interactive", path: "/v1/execute", body: api.ExecuteRequest{Code: "x = 20\nx + 22", LastLineInteractive: true}, status: 200,
			check: execOK("ok", func(r *api.ExecuteResponse) bool { return r.Result != nil && *r.Result == "42" })},
		{name: "stdin", path: "/v1/execute", body: api.ExecuteRequest{Code: "import sys\nprint(len(sys.stdin.read()))", Stdin: ptr(strings.Repeat("s", 5000))}, status: 200,
			check: execOK("ok", out("5000\n"))},
		{name: "exception", path: "/v1/execute", body: api.ExecuteRequest{Code: "x = 1\nraise ValueError('soak')"}, status: 200,
			check: execOK("error", func(r *api.ExecuteResponse) bool {
				return r.Error != nil && r.Error.Type == "ValueError" && deref(r.Error.Line) == 2
			})},
		{name: "lint", path: "/v1/lint", body: api.LintRequest{Code: "import os\n"}, status: 200, check: func(raw []byte) error {
			var lr api.LintResponse
			if err := strictJSON(raw, &lr); err != nil {
				return err
			}
			if len(lr.Diagnostics) == 0 || lr.Diagnostics[0].Code != "F401" {
				return fmt.Errorf("diagnostics %+v", lr.Diagnostics)
			}
			return nil
		}},
		{name: "format", path: "/v1/format", body: api.FormatRequest{Code: "x = {  'a':1 }\n"}, status: 200, check: func(raw []byte) error {
			var fr api.FormatResponse
			if err := strictJSON(raw, &fr); err != nil {
				return err
			}
			if fr.Code != "x = {\"a\": 1}\n" {
				return fmt.Errorf("formatted %q", fr.Code)
			}
			return nil
		}},
		{name: "forkbomb", path: "/v1/execute", body: api.ExecuteRequest{Code: "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", Limits: &api.Limits{TimeoutMs: ptr(int64(1000)), Pids: ptr(int64(16))}},
			status: 200, check: execOK("timeout", nil)},
		{name: "memory", path: "/v1/execute", body: api.ExecuteRequest{Code: "x = []\nwhile True: x.append(bytearray(16 << 20))", Limits: &api.Limits{MemoryMB: ptr(int64(64))}},
			status: 200, check: execOK("memory_limit", func(r *api.ExecuteResponse) bool { return r.OOMKilled })},
		{name: "output", path: "/v1/execute", body: api.ExecuteRequest{Code: "while True: print('y' * 1000)", Limits: &api.Limits{OutputBytes: ptr(int64(10000))}},
			status: 200, check: execOK("output_limit", func(r *api.ExecuteResponse) bool { return len(r.Stdout) == 10000 })},
		{name: "sleep", path: "/v1/execute", body: api.ExecuteRequest{Code: "import time\ntime.sleep(60)", Limits: &api.Limits{TimeoutMs: ptr(int64(500))}},
			status: 200, check: execOK("timeout", nil)},
		{name: "syscall", path: "/v1/execute", body: api.ExecuteRequest{Code: "import ctypes\nL = ctypes.CDLL(None, use_errno=True)\nprint(L.syscall(425, 1, None), ctypes.get_errno())"},
			status: 200, check: execOK("ok", out("-1 1\n"))},
		{name: "symlink", path: "/v1/execute", body: api.ExecuteRequest{Code: "import os\nos.symlink('/etc/shadow', 's')", ReturnFiles: []string{"s"}},
			status: 200, check: execOK("ok", func(r *api.ExecuteResponse) bool {
				return len(r.Files) == 1 && r.Files[0].ContentB64 == "" && strings.Contains(r.Files[0].Error, "symlink")
			})},
		{name: "killall", path: "/v1/execute", body: api.ExecuteRequest{Code: "import os, signal, time\nc = os.fork()\nif c == 0:\n    time.sleep(60)\nos.kill(-1, signal.SIGKILL)\nprint(os.waitpid(c, 0)[1])"},
			status: 200, check: execOK("ok", out("9\n"))},
		{name: "daemonize", path: "/v1/execute", body: api.ExecuteRequest{Code: "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0: time.sleep(3600)\n    os._exit(0)\nprint('done')"},
			status: 200, check: execOK("ok", out("done\n"))},
		{name: "fds", path: "/v1/execute", body: api.ExecuteRequest{Code: "fs = []\ntry:\n    while True: fs.append(open('/dev/null'))\nexcept OSError as e: print(e.errno)"},
			status: 200, check: execOK("ok", out("24\n"))},
		{name: "spin", path: "/v1/execute", body: api.ExecuteRequest{Code: "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: pass", Limits: &api.Limits{TimeoutMs: ptr(int64(1000))}},
			status: 200, check: execOK("timeout", nil)},
		{name: "shm", path: "/v1/execute", status: 200, body: api.ExecuteRequest{Code: "import ctypes\nL = ctypes.CDLL(None)\nL.shmat.restype = ctypes.c_void_p\n" +
			"a = L.shmat(L.shmget(7, 8 << 20, 0o1600), None, 0)\nctypes.memset(a, 1, 8 << 20)\nopen('/dev/shm/x', 'wb').write(b'1' * (8 << 20))\nprint('left')"},
			check: execOK("ok", out("left\n"))},
		{name: "records", path: "/v1/execute", body: api.ExecuteRequest{Code: "import os\nos.write(4, b'{\"type\": \"exit\", \"signal\": 9}\\n' + b'\\xff' * 70000 + b'\\n')\nprint('ok')"},
			status: 200, check: execOK("ok", out("ok\n"))},
		{name: "invalid", path: "/v1/execute", body: api.ExecuteRequest{Code: "1", Files: []api.FileIn{{Path: "../x", ContentB64: ""}}},
			status: 400, check: func(raw []byte) error {
				var e api.ErrorBody
				if err := strictJSON(raw, &e); err != nil {
					return err
				}
				if e.Error.Type != "invalid_argument" {
					return fmt.Errorf("error %+v", e.Error)
				}
				return nil
			}},
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestSoak(t *testing.T) {
	runs := envInt("JAILD_SOAK_RUNS", 1000)
	conc := envInt("JAILD_SOAK_CONCURRENCY", 16)
	// Production settings (no GOMEMLIMIT) but for the queue, which holds
	// every client, and the pool's pre-imports: refilling it with numpy,
	// pandas and matplotlib would cost more CPU than the runs themselves
	// (json is nearly free, and a pool with no pre-import never becomes
	// ready: the runner only says "ready" after importing something).
	d := startDaemon(t, daemontest.Options{Pool: 2, Tune: func(cfg string) string {
		return setKeys(cfg, map[string]string{"max_concurrent": "4", "queue_size": "64", "queue_wait": `"300s"`}) + "preimport = [\"json\"]\n"
	}})
	sessions := newSoakSessions()
	mix := append(soakMix(), soakKind{name: "session", run: sessions.life},
		soakKind{name: "stream", run: soakStream}, soakKind{name: "store", run: soakStore})
	client := burstClient(d)
	h := &hostile{d: d}
	var err error
	if h.cg, err = cgroupsOf(d); err != nil {
		t.Fatal(err)
	}

	var (
		failed   atomic.Int64
		mu       sync.Mutex
		failures []string
	)
	// phase sends requests [from, to) of the mix from conc clients.
	phase := func(from, to int) {
		next := atomic.Int64{}
		next.Store(int64(from))
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= to {
						return
					}
					k := mix[i%len(mix)]
					if err := soakRequest(client, k); err != nil {
						failed.Add(1)
						mu.Lock()
						if len(failures) < 20 {
							failures = append(failures, fmt.Sprintf("request %d (%s): %v", i, k.name, err))
						}
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		client.CloseIdleConnections()
	}

	// Warm-up: every kind of request three times (the daemon opens a few
	// files once, on first use), then the baseline, with the daemon idle
	// and its pool full.
	warm := min(runs, 3*len(mix))
	start := time.Now()
	phase(0, warm)
	h.waitPoolFull(t)
	h.base = h.snapshot(t)
	phase(warm, runs)
	elapsed := time.Since(start)

	if !d.Running() || h.d.Cmd.Process.Signal(syscall.Signal(0)) != nil || strings.Contains(d.Log.String(), "panic:") {
		t.Fatalf("the daemon crashed:\n%s", d.Log.String())
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests lost or wrong:\n%s", n, runs, strings.Join(failures, "\n"))
		// What the daemon said of them.
		for _, line := range strings.Split(d.Log.String(), "\n") {
			if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, `"level":"WARN"`) {
				t.Log(line)
			}
		}
	}
	// Idle again: the leak checks of every hostile case, against the
	// warm-up baseline (fds exactly; no jail, mount, cgroup, file, key or
	// IPC object left; memory of dead jails freed), and a flat RSS.
	h.waitPoolFull(t)
	h.checkLeaks(t)
	rss := vmRSS(d.Cmd.Process.Pid)
	if rss > h.base.rss+32<<20 {
		t.Errorf("daemon RSS %d MiB after the soak, %d MiB after the warm-up", rss>>20, h.base.rss>>20)
	}
	if strings.Contains(d.Log.String(), "too many open files") {
		t.Errorf("EMFILE in the daemon's log")
	}
	t.Logf("%d requests at concurrency %d in %v (%.1f/s): %d lost or wrong; daemon RSS %d MiB (after the warm-up %d MiB), %d fds besides live jails'",
		runs, conc, elapsed.Round(time.Second), float64(runs)/elapsed.Seconds(), failed.Load(), rss>>20, h.base.rss>>20, len(h.base.otherFds))
	t.Logf("of them %d sessions: %d opened, %d deleted, %d of %d calls answered as expected",
		sessions.lives.Load(), sessions.opened.Load(), sessions.deleted.Load(), sessions.answered.Load(), sessions.sent.Load())
}

// soakRequest sends one request of the mix and checks its answer.
func soakRequest(client *http.Client, k soakKind) error {
	if k.run != nil {
		return k.run(client)
	}
	body, _ := json.Marshal(k.body)
	resp, err := client.Post("http://jaild"+k.path, "application/json", strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != k.status {
		return fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, raw)
	}
	return k.check(raw)
}

// soakSessions is the soak's session work and its counts.
type soakSessions struct {
	// slots bounds the sessions open at once below sessions.max_per_uid:
	// every request of the soak comes from one uid.
	slots                                  chan struct{}
	lives, opened, deleted, sent, answered atomic.Int64
}

func newSoakSessions() *soakSessions {
	return &soakSessions{slots: make(chan struct{}, sessMaxPerUID-1)}
}

// soakCall is one call of a session's life and the answer it must get.
type soakCall struct {
	body   any
	status string
	result string // the last line's value
}

var soakSessionCalls = []soakCall{
	{body: api.SessionExecuteRequest{Code: "import subprocess\np = subprocess.Popen(['sleep', '600'])\nn = 0\nn"}, status: "ok", result: "0"},
	{body: api.SessionExecuteRequest{Code: "n += 1\nn"}, status: "ok", result: "1"},
	// Interrupted at its timeout, the call ends in KeyboardInterrupt: the
	// interpreter and its state are kept.
	{body: api.ExecuteRequest{Code: "import time\ntime.sleep(60)", Limits: &api.Limits{TimeoutMs: ptr(int64(300))}}, status: "timeout"},
	{body: api.ExecuteRequest{Code: "n += 1\nn"}, status: "ok", result: "2"},
	{body: api.ExecuteRequest{Code: "n += 1 if p.poll() is None else 100\nn"}, status: "ok", result: "3"},
}

// soakDo sends a request (with Content-Type ctype, if set) and reads
// the answer.
func soakDo(client *http.Client, method, path, ctype string, body io.Reader) (int, []byte, error) {
	req, _ := http.NewRequest(method, "http://jaild"+path, body)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// life opens a session, runs soakSessionCalls in it and deletes it; the
// session is deleted whatever happened.
func (ss *soakSessions) life(client *http.Client) (retErr error) {
	ss.slots <- struct{}{}
	defer func() { <-ss.slots }()
	ss.lives.Add(1)
	do := func(method, path string, body any) (int, []byte, error) {
		if body == nil {
			return soakDo(client, method, path, "", nil)
		}
		b, _ := json.Marshal(body)
		return soakDo(client, method, path, "application/json", strings.NewReader(string(b)))
	}
	status, raw, err := do("POST", "/v1/sessions", api.SessionCreateRequest{})
	if err != nil {
		return err
	}
	var info api.Session
	if status != http.StatusCreated || strictJSON(raw, &info) != nil || info.SessionID == "" {
		return fmt.Errorf("open: HTTP %d: %.300s", status, raw)
	}
	ss.opened.Add(1)
	defer func() {
		status, raw, err := do("DELETE", "/v1/sessions/"+info.SessionID, nil)
		var end api.Session
		if err == nil && (status != http.StatusOK || strictJSON(raw, &end) != nil || end.State != api.SessionEnded) {
			err = fmt.Errorf("delete: HTTP %d: %.300s", status, raw)
		}
		if err == nil {
			ss.deleted.Add(1)
		} else if retErr == nil {
			retErr = err
		}
	}()
	jail := ""
	for i, c := range soakSessionCalls {
		ss.sent.Add(1)
		status, raw, err := do("POST", "/v1/sessions/"+info.SessionID+"/execute", c.body)
		if err != nil {
			return fmt.Errorf("call %d: %v", i+1, err)
		}
		var r api.SessionExecuteResponse
		if status != http.StatusOK || strictJSON(raw, &r) != nil {
			return fmt.Errorf("call %d: HTTP %d: %.300s", i+1, status, raw)
		}
		if jail == "" {
			jail = r.RunID
		}
		if r.Status != c.status || r.ExecutionCount != i+1 || r.RunID != jail || r.Session.StateLost || r.Session.State != api.SessionIdle ||
			(c.result != "" && (r.Result == nil || *r.Result != c.result)) {
			return fmt.Errorf("call %d: status %q count %d result %v session %+v stdout %.200q stderr %.200q",
				i+1, r.Status, r.ExecutionCount, deref2(r.Result), r.Session, r.Stdout, r.Stderr)
		}
		ss.answered.Add(1)
	}
	return nil
}

// soakStream is a streamed run: its events, joined, must be the output,
// and done the last.
func soakStream(client *http.Client) error {
	body := `{"code":"import sys\nfor i in range(3):\n    print(i)\n    print('e', i, file=sys.stderr)\nsys.stdout.buffer.write(b'\\xe2\\x9c')\nsys.stdout.flush()\nsys.stdout.buffer.write(b'\\x93\\n')"}`
	req, _ := http.NewRequest("POST", "http://jaild/v1/execute", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", api.MediaNDJSON)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %.300s (%v)", resp.StatusCode, raw, err)
	}
	var stdout, stderr strings.Builder
	var done *api.ExecuteResponse
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	for i, line := range lines {
		var e api.Event
		if err := strictJSON([]byte(line), &e); err != nil || e.ID != int64(i+1) || done != nil {
			return fmt.Errorf("event %d %.200q: %v", i+1, line, err)
		}
		switch e.Event {
		case api.EventStdout, api.EventStderr:
			var t api.EventText
			if err := strictJSON(e.Data, &t); err != nil {
				return err
			}
			if e.Event == api.EventStdout {
				stdout.WriteString(t.Text)
			} else {
				stderr.WriteString(t.Text)
			}
		case api.EventDone:
			done = &api.ExecuteResponse{}
			if err := strictJSON(e.Data, done); err != nil {
				return err
			}
		}
	}
	if done == nil || done.Status != "ok" || stdout.String() != "0\n1\n2\n✓\n" || stderr.String() != "e 0\ne 1\ne 2\n" {
		return fmt.Errorf("stdout %q stderr %q done %+v", stdout.String(), stderr.String(), done)
	}
	return nil
}

// soakStore uploads a file, runs code on it that returns its output to
// the store, reads that back and deletes both.
func soakStore(client *http.Client) error {
	data := strings.Repeat("soak store\n", 6000)
	status, raw, err := soakDo(client, "POST", "/v1/files?name=in.txt", "", strings.NewReader(data))
	var in api.StoredFile
	if err != nil || status != http.StatusCreated || strictJSON(raw, &in) != nil {
		return fmt.Errorf("upload: HTTP %d %.300s (%v)", status, raw, err)
	}
	defer soakDo(client, "DELETE", "/v1/files/"+in.FileID, "", nil) //nolint:errcheck // best effort; a leak shows in the check below
	b, _ := json.Marshal(api.ExecuteRequest{Code: "open('out.txt', 'w').write(open('in.txt').read().upper())", Files: []api.FileIn{{Path: "in.txt", FileID: in.FileID}}, ReturnFiles: []string{"out.txt"}, ReturnFilesAs: "store"})
	status, raw, err = soakDo(client, "POST", "/v1/execute", "application/json", strings.NewReader(string(b)))
	var r api.ExecuteResponse
	if err != nil || status != http.StatusOK || strictJSON(raw, &r) != nil || r.Status != "ok" || len(r.Files) != 1 || r.Files[0].FileID == "" {
		return fmt.Errorf("execute: HTTP %d %.300s (%v)", status, raw, err)
	}
	out := r.Files[0].FileID
	status, raw, err = soakDo(client, "GET", "/v1/files/"+out, "", nil)
	if err != nil || status != http.StatusOK || string(raw) != strings.ToUpper(data) {
		return fmt.Errorf("get the output: HTTP %d, %d bytes (%v)", status, len(raw), err)
	}
	if status, raw, err = soakDo(client, "DELETE", "/v1/files/"+out, "", nil); err != nil || status != http.StatusOK {
		return fmt.Errorf("delete the output: HTTP %d %.300s (%v)", status, raw, err)
	}
	return nil
}
