package tests

// Stateful sessions against a real daemon (issue 13): state across calls,
// timeouts that keep the state and losses that say so, expiry, interrupt
// from another connection, ownership, caps, a frozen idle session, and
// nothing left behind by DELETE, expiry, a crash or a kill -9 of the
// daemon.

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

// sessionConfig: short bounds so that expiry is quick to see, a cap of
// two sessions per uid; an idle timeout ends a session (the default,
// pausing it, is pause_test.go's).
const sessionConfig = `
[sessions]
max_per_uid = 2
max_total = 8
idle_timeout = "10m"
max_idle_timeout = "1h"
ttl = "1h"
max_ttl = "2h"
admin_max_ttl = "4h"
keep_ended = "10m"
on_idle = "end"
on_shutdown = "end"
`

func startSessionDaemon(t *testing.T, pool int) *daemon {
	t.Helper()
	d := startDaemon(t, daemontest.Options{Config: "socket_mode = \"0666\"\n", Pool: pool, Tune: func(c string) string {
		return setKeys(c, map[string]string{"daily_quota": "1000"}) + sessionConfig
	}})
	return d
}

func newSession(t *testing.T, d *daemon, body api.SessionCreateRequest) api.Session {
	t.Helper()
	var s api.Session
	if code, _ := d.call(t, http.MethodPost, "/v1/sessions", body, &s); code != http.StatusCreated || s.SessionID == "" {
		t.Fatalf("create session: %d %+v", code, s)
	}
	return s
}

func sessionExec(t *testing.T, d *daemon, id string, body any) (int, *api.SessionExecuteResponse) {
	t.Helper()
	var raw json.RawMessage
	code, _ := d.call(t, http.MethodPost, "/v1/sessions/"+id+"/execute", body, &raw)
	var r api.SessionExecuteResponse
	if code == http.StatusOK {
		if err := strictJSON(raw, &r); err != nil {
			t.Fatalf("session execute: %v\n%s", err, raw)
		}
	}
	return code, &r
}

// mustExec runs code in session id, with the other fields of extra if
// given, and fails the test unless the call answers 200.
func mustExec(t *testing.T, d *daemon, id, code string, extra ...api.SessionExecuteRequest) *api.SessionExecuteResponse {
	t.Helper()
	body := api.SessionExecuteRequest{Code: code}
	if len(extra) > 0 {
		body = extra[0]
		body.Code = code
	}
	status, r := sessionExec(t, d, id, body)
	if status != http.StatusOK {
		t.Fatalf("call %q: HTTP %d", code, status)
	}
	return r
}

func deleteSession(t *testing.T, d *daemon, id string) api.Session {
	t.Helper()
	var s api.Session
	if code, _ := d.call(t, http.MethodDelete, "/v1/sessions/"+id, nil, &s); code != http.StatusOK {
		t.Fatalf("delete: %d", code)
	}
	return s
}

// waitGone waits until the jail's cgroups and run directory are gone.
func waitGone(t *testing.T, d *daemon, cg *jailCgroups, jailID string) {
	t.Helper()
	waitFor(t, 30*time.Second, "session jail "+jailID+" to be torn down", func() bool {
		if cg.live()[jailID] {
			return false
		}
		_, err := os.Lstat(filepath.Join(d.Dir, "run", "runs", jailID))
		return os.IsNotExist(err)
	})
}

func TestSessions(t *testing.T) {
	d := startSessionDaemon(t, 1)
	cg, err := cgroupsOf(d)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("state persists", func(t *testing.T) {
		s := newSession(t, d, api.SessionCreateRequest{Files: []api.FileIn{{Path: "data.csv", ContentB64: "YSxiCjEsMgozLDQK"}}})
		if s.State != api.SessionIdle || s.IdleTimeoutS != 600 || s.EndReason != nil || s.ExpiresAt.Sub(s.CreatedAt) != time.Hour {
			t.Errorf("created: %+v", s)
		}
		r := mustExec(t, d, s.SessionID, "import pandas as pd\nimport math\ndf = pd.read_csv('data.csv')\nx = 41\nopen('/tmp/t.txt', 'w').write('tmp')\nopen('w.txt', 'w').write('ws')")
		if r.Status != "ok" || r.ExecutionCount != 1 || r.Session.State != api.SessionIdle {
			t.Fatalf("call 1: %+v", r)
		}
		r = mustExec(t, d, s.SessionID, "df['c'] = df.a + df.b\nprint(open('/tmp/t.txt').read(), open('w.txt').read(), math.floor(2.5))\nx + 1")
		if r.Status != "ok" || r.Stdout != "tmp ws 2\n42\n" || r.Result == nil || *r.Result != "42" || r.ExecutionCount != 2 {
			t.Fatalf("call 2: %+v", r)
		}
		r = mustExec(t, d, s.SessionID, "int(df.c.sum())")
		if r.Result == nil || *r.Result != "10" {
			t.Fatalf("DataFrame: %+v", r)
		}
		r = mustExec(t, d, s.SessionID, "print(input())", api.SessionExecuteRequest{Stdin: ptr("from stdin\n"), ReturnFiles: []string{"w.txt"}})
		if r.Stdout != "from stdin\n" || len(r.Files) != 1 || r.Files[0].ContentB64 != "d3M=" {
			t.Fatalf("stdin and files: %+v", r)
		}
		r = mustExec(t, d, s.SessionID, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.figure()\nplt.plot([2, 1])\nNone")
		if len(r.Figures) != 2 {
			t.Fatalf("figures: %d", len(r.Figures))
		}
		// Figures of an earlier call are not returned again.
		if r = mustExec(t, d, s.SessionID, "print('no figure')"); len(r.Figures) != 0 || r.Stdout != "no figure\n" {
			t.Fatalf("figures again: %+v", r)
		}
		var got api.Session
		d.call(t, http.MethodGet, "/v1/sessions/"+s.SessionID, nil, &got)
		if got.ExecutionCount != 6 || got.State != api.SessionIdle {
			t.Errorf("GET: %+v", got)
		}
		jailID := r.RunID
		ended := deleteSession(t, d, s.SessionID)
		if ended.State != api.SessionEnded || ended.EndReason == nil || *ended.EndReason != "deleted" {
			t.Errorf("DELETE: %+v", ended)
		}
		waitGone(t, d, cg, jailID)
		code, _ := sessionExec(t, d, s.SessionID, api.SessionExecuteRequest{Code: "1"})
		if code != http.StatusConflict {
			t.Errorf("call after DELETE: %d, want 409", code)
		}
	})

	t.Run("timeout keeps state; ignored SIGINT loses it, files kept", func(t *testing.T) {
		s := newSession(t, d, api.SessionCreateRequest{})
		defer deleteSession(t, d, s.SessionID)
		mustExec(t, d, s.SessionID, "x = 1\nopen('kept', 'w').write('k')")
		r := mustExec(t, d, s.SessionID, "while True: pass", api.SessionExecuteRequest{Limits: &api.Limits{TimeoutMs: ptr(int64(500))}})
		if r.Status != "timeout" || r.Session.StateLost || r.Error == nil || r.Error.Type != "KeyboardInterrupt" {
			t.Fatalf("timeout: %+v", r)
		}
		if r = mustExec(t, d, s.SessionID, "x"); r.Result == nil || *r.Result != "1" {
			t.Fatalf("state after the timeout: %+v", r)
		}
		r = mustExec(t, d, s.SessionID, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass", api.SessionExecuteRequest{Limits: &api.Limits{TimeoutMs: ptr(int64(300))}})
		if r.Status != "timeout" || !r.Session.StateLost || r.Session.LostReason == nil || *r.Session.LostReason != "timeout" || !strings.Contains(r.Message, "fresh") {
			t.Fatalf("SIGINT ignored: %+v", r)
		}
		r = mustExec(t, d, s.SessionID, "print(open('kept').read())\nx")
		if r.Stdout != "k\n" || r.Error == nil || r.Error.Type != "NameError" || r.Session.StateLost {
			t.Fatalf("after the loss: %+v", r)
		}
	})

	t.Run("OOM and repeated losses", func(t *testing.T) {
		s := newSession(t, d, api.SessionCreateRequest{Limits: &api.Limits{MemoryMB: ptr(int64(128))}})
		mustExec(t, d, s.SessionID, "x = 1")
		r := mustExec(t, d, s.SessionID, "b = []\nwhile True: b.append(bytearray(8 << 20))")
		if r.Status != "memory_limit" || !r.OOMKilled || !r.Session.StateLost || *r.Session.LostReason != "memory_limit" {
			t.Fatalf("OOM: %+v", r)
		}
		if r = mustExec(t, d, s.SessionID, "print('fresh')"); r.Stdout != "fresh\n" {
			t.Fatalf("after OOM: %+v", r)
		}
		jailID := r.RunID
		for i := range 3 {
			r = mustExec(t, d, s.SessionID, "import os\nos._exit(9)")
			if !r.Session.StateLost || *r.Session.LostReason != "exited" || r.ExitCode == nil || *r.ExitCode != 9 {
				t.Fatalf("loss %d: %+v", i+1, r)
			}
		}
		if r.Session.State != api.SessionEnded || r.Session.EndReason == nil || *r.Session.EndReason != "repeated_losses" {
			t.Fatalf("three losses in a row: %+v", r.Session)
		}
		waitGone(t, d, cg, jailID)
		code, _ := sessionExec(t, d, s.SessionID, api.SessionExecuteRequest{Code: "1"})
		if code != http.StatusConflict {
			t.Errorf("call on an ended session: %d", code)
		}
		var got api.Session
		d.call(t, http.MethodGet, "/v1/sessions/"+s.SessionID, nil, &got)
		if got.State != api.SessionEnded || got.EndReason == nil || *got.EndReason != "repeated_losses" {
			t.Errorf("ended session still listed with its reason: %+v", got)
		}
	})

	t.Run("crash of the interpreter", func(t *testing.T) {
		s := newSession(t, d, api.SessionCreateRequest{})
		r := mustExec(t, d, s.SessionID, "import os, signal, subprocess\nsubprocess.Popen(['sleep', '1000'])\nos.kill(os.getpid(), signal.SIGSEGV)")
		if !r.Session.StateLost || *r.Session.LostReason != "crashed" || r.Signal == nil || *r.Signal != 11 {
			t.Fatalf("crash: %+v", r)
		}
		r = mustExec(t, d, s.SessionID, "import os\nsorted(int(p) for p in os.listdir('/proc') if p.isdigit())")
		if r.Result == nil || strings.Count(*r.Result, ",") != 1 {
			t.Fatalf("processes after the crash (init and the new interpreter only): %+v", r.Result)
		}
		jailID := r.RunID
		deleteSession(t, d, s.SessionID)
		waitGone(t, d, cg, jailID)
	})

	t.Run("interrupt from another connection and 409", func(t *testing.T) {
		s := newSession(t, d, api.SessionCreateRequest{})
		defer deleteSession(t, d, s.SessionID)
		done := make(chan *api.SessionExecuteResponse, 1)
		go func() {
			_, r := sessionExec(t, d, s.SessionID, api.SessionExecuteRequest{Code: "import time\ny = 5\nwhile True: time.sleep(0.01)", Limits: &api.Limits{TimeoutMs: ptr(int64(30000))}})
			done <- r
		}()
		waitFor(t, 10*time.Second, "the call to run", func() bool {
			var got api.Session
			d.call(t, http.MethodGet, "/v1/sessions/"+s.SessionID, nil, &got)
			return got.State == api.SessionRunning
		})
		time.Sleep(200 * time.Millisecond) // into the loop
		code, _ := sessionExec(t, d, s.SessionID, api.SessionExecuteRequest{Code: "1"})
		if code != http.StatusConflict {
			t.Errorf("concurrent call: %d, want 409", code)
		}
		var ir api.SessionInterruptResponse
		// The interrupt has no request type: its body is an empty object.
		if code, _ := d.call(t, http.MethodPost, "/v1/sessions/"+s.SessionID+"/interrupt", map[string]any{}, &ir); code != http.StatusOK || !ir.Interrupted {
			t.Fatalf("interrupt: %d %+v", code, ir)
		}
		select {
		case r := <-done:
			if r.Error == nil || r.Error.Type != "KeyboardInterrupt" || r.Session.StateLost || r.Status != "error" {
				t.Fatalf("interrupted call: %+v", r)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the interrupt did not end the call")
		}
		if r := mustExec(t, d, s.SessionID, "y"); r.Result == nil || *r.Result != "5" {
			t.Fatalf("after the interrupt: %+v", r)
		}
		d.call(t, http.MethodPost, "/v1/sessions/"+s.SessionID+"/interrupt", map[string]any{}, &ir)
		if ir.Interrupted {
			t.Errorf("interrupt of an idle session said it interrupted")
		}
	})

	t.Run("idle and absolute expiry", func(t *testing.T) {
		idle := newSession(t, d, api.SessionCreateRequest{IdleTimeoutS: ptr(int64(1))})
		ttl := newSession(t, d, api.SessionCreateRequest{TTLS: ptr(int64(3)), IdleTimeoutS: ptr(int64(60))})
		r1 := mustExec(t, d, idle.SessionID, "1")
		// Calls keep the second one from idling; the TTL ends it anyway.
		var r2 *api.SessionExecuteResponse
		for start := time.Now(); time.Since(start) < 2*time.Second; time.Sleep(300 * time.Millisecond) {
			r2 = mustExec(t, d, ttl.SessionID, "1")
		}
		for _, c := range []struct {
			id, reason, jail string
		}{{idle.SessionID, "idle_timeout", r1.RunID}, {ttl.SessionID, "expired", r2.RunID}} {
			waitFor(t, 15*time.Second, "the session to end ("+c.reason+")", func() bool {
				var got api.Session
				d.call(t, http.MethodGet, "/v1/sessions/"+c.id, nil, &got)
				return got.State == api.SessionEnded && got.EndReason != nil && *got.EndReason == c.reason
			})
			waitGone(t, d, cg, c.jail)
			code, _ := sessionExec(t, d, c.id, api.SessionExecuteRequest{Code: "1"})
			if code != http.StatusConflict {
				t.Errorf("call on a session ended by %s: %d", c.reason, code)
			}
		}
	})

	t.Run("idle session is frozen", func(t *testing.T) {
		s := newSession(t, d, api.SessionCreateRequest{})
		defer deleteSession(t, d, s.SessionID)
		r := mustExec(t, d, s.SessionID, "import threading\ndef spin():\n    while True: pass\nthreading.Thread(target=spin, daemon=True).start()")
		before := jailCPU(t, cg, r.RunID)
		time.Sleep(time.Second)
		after := jailCPU(t, cg, r.RunID)
		if used := after - before; used > 50*time.Millisecond {
			t.Errorf("an idle session with a busy thread used %v of CPU in 1s", used)
		}
		r = mustExec(t, d, s.SessionID, "import time\ntime.sleep(0.5)")
		if r.Usage.CPUMs < 200 {
			t.Errorf("the thread did not run during the call: %d ms of CPU", r.Usage.CPUMs)
		}
	})

	t.Run("owners and caps", func(t *testing.T) {
		s := newSession(t, d, api.SessionCreateRequest{})
		defer deleteSession(t, d, s.SessionID)
		for _, c := range []struct{ method, path, body string }{
			{http.MethodGet, "/v1/sessions/" + s.SessionID, ""},
			{http.MethodPost, "/v1/sessions/" + s.SessionID + "/execute", `{"code":"1"}`},
			{http.MethodPost, "/v1/sessions/" + s.SessionID + "/interrupt", `{}`},
			{http.MethodDelete, "/v1/sessions/" + s.SessionID, ""},
		} {
			code, _, body := curlAs(t, d.Socket, c.method, c.path, c.body)
			if code != http.StatusNotFound {
				t.Errorf("uid 65534 %s %s: %d %s, want 404", c.method, c.path, code, body)
			}
		}
		code, _, body := curlAs(t, d.Socket, http.MethodGet, "/v1/sessions", "")
		if code != http.StatusOK || strings.Contains(string(body), s.SessionID) {
			t.Errorf("uid 65534 lists root's session: %d %s", code, body)
		}
		var mine []string
		for i := range 3 {
			code, _, body := curlAs(t, d.Socket, http.MethodPost, "/v1/sessions", `{}`)
			if i < 2 {
				var got api.Session
				if code != http.StatusCreated || json.Unmarshal(body, &got) != nil {
					t.Fatalf("uid 65534 session %d: %d %s", i, code, body)
				}
				mine = append(mine, got.SessionID)
				continue
			}
			if code != http.StatusTooManyRequests || !strings.Contains(string(body), "max_per_uid") {
				t.Errorf("uid 65534 beyond its cap: %d %s, want 429", code, body)
			}
		}
		// Root (an admin) sees them; their owner deletes them.
		var all api.SessionList
		d.call(t, http.MethodGet, "/v1/sessions", nil, &all)
		seen := 0
		for _, x := range all.Sessions {
			if x.UID == 65534 && x.State != api.SessionEnded {
				seen++
			}
		}
		if seen != 2 {
			t.Errorf("admin lists %d live sessions of uid 65534, want 2", seen)
		}
		for _, id := range mine {
			if code, _, body := curlAs(t, d.Socket, http.MethodDelete, "/v1/sessions/"+id, ""); code != http.StatusOK {
				t.Errorf("owner's DELETE: %d %s", code, body)
			}
		}
	})

	t.Run("bad input", func(t *testing.T) {
		s := newSession(t, d, api.SessionCreateRequest{})
		defer deleteSession(t, d, s.SessionID)
		for _, c := range []struct {
			body  api.SessionExecuteRequest
			field string
		}{
			{api.SessionExecuteRequest{Code: "1", Limits: &api.Limits{MemoryMB: ptr(int64(64))}}, "limits.memory_mb"},
			{api.SessionExecuteRequest{Code: "1", Env: map[string]string{"A": "b"}}, "env"},
			{api.SessionExecuteRequest{Code: "1", Limits: &api.Limits{TimeoutMs: ptr(int64(10_000_000))}}, "limits.timeout_ms"},
			{api.SessionExecuteRequest{Code: ""}, "code"},
		} {
			var eb api.ErrorBody
			code, _ := d.call(t, http.MethodPost, "/v1/sessions/"+s.SessionID+"/execute", c.body, &eb)
			if code != http.StatusBadRequest || eb.Error.Field != c.field {
				t.Errorf("%v: %d %+v, want 400 naming %s", c.body, code, eb.Error, c.field)
			}
		}
		var eb api.ErrorBody
		if code, _ := d.call(t, http.MethodPost, "/v1/sessions", api.SessionCreateRequest{TTLS: ptr(int64(100000))}, &eb); code != http.StatusBadRequest || eb.Error.Field != "ttl_s" {
			t.Errorf("ttl_s above the maximum: %d %+v", code, eb.Error)
		}
		if code, _ := d.call(t, http.MethodGet, "/v1/sessions/nope", nil, &eb); code != http.StatusNotFound {
			t.Errorf("unknown id: %d", code)
		}
	})
}

// jailCPU reads a jail's CPU usage from its cgroup.
func jailCPU(t *testing.T, cg *jailCgroups, id string) time.Duration {
	t.Helper()
	if cg.v2 {
		v := kvFile(filepath.Join(cg.memory, id, "cpu.stat"))["usage_usec"]
		return time.Duration(v) * time.Microsecond
	}
	for _, p := range cg.parents {
		b, err := os.ReadFile(filepath.Join(p, id, "cpuacct.usage"))
		if err == nil {
			n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			return time.Duration(n)
		}
	}
	t.Fatalf("no CPU accounting for jail %s", id)
	return 0
}

// A kill -9 of the daemon with live sessions: the restarted daemon's
// sweep removes their jails, and a call on an old session names why.
func TestSessionsSurviveNothingOfADaemonKill(t *testing.T) {
	d := startDaemon(t, daemontest.Options{Config: "socket_mode = \"0666\"\n", Tune: func(c string) string { return c + sessionConfig }})
	cg, err := cgroupsOf(d)
	if err != nil {
		t.Fatal(err)
	}
	var ids, jails []string
	for range 2 {
		s := newSession(t, d, api.SessionCreateRequest{})
		r := mustExec(t, d, s.SessionID, "import subprocess\nsubprocess.Popen(['sleep', '1000'])\nx = 1")
		ids, jails = append(ids, s.SessionID), append(jails, r.RunID)
	}
	if err := d.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.Exited()
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	for _, j := range jails {
		waitGone(t, d, cg, j)
	}
	for _, id := range ids {
		var eb api.ErrorBody
		code, _ := d.call(t, http.MethodPost, "/v1/sessions/"+id+"/execute", api.SessionExecuteRequest{Code: "x"}, &eb)
		if code != http.StatusConflict || !strings.Contains(eb.Error.Message, "daemon_restart") {
			t.Errorf("call on a session of the killed daemon: %d %+v", code, eb.Error)
		}
	}
}
