package tests

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
	"github.com/jaild/jaild/internal/metrics/metricstest"
)

// freePort returns a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// scrapeURL reads a Prometheus text exposition with c.
func scrapeURL(t *testing.T, c *http.Client, url string) metricstest.Samples {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d", url, resp.StatusCode)
	}
	s, err := metricstest.Parse(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return s
}

// TestMetrics drives a real daemon through a scripted mix (ok, timeout,
// memory_limit, a 400, a 503 from a full queue, a 429 from the daily
// quota) and checks, on the socket's and metrics_listen's /metrics, that
// every counter moved by exactly what happened; metrics_listen serves
// nothing else.
func TestMetrics(t *testing.T) {
	port := freePort(t)
	d := startDaemon(t, daemontest.Options{Config: fmt.Sprintf("socket_mode = \"0666\"\nmetrics_listen = \"127.0.0.1:%d\"\n", port), Tune: func(c string) string {
		return setKeys(c, map[string]string{"max_concurrent": "1", "queue_size": "0", "daily_quota": "1"})
	}})
	tcp := fmt.Sprintf("http://127.0.0.1:%d", port)
	before := scrapeURL(t, http.DefaultClient, tcp+"/metrics")
	if _, ok := before[metricstest.Key("jaild_runs_total", "operation", "execute", "status", "ok", "warm", "false")]; !ok {
		t.Fatal("no jaild_runs_total series before any run")
	}

	execute := func(body, want string) {
		t.Helper()
		var r api.ExecuteResponse
		if status, _ := d.call(t, "POST", "/v1/execute", body, &r); status != 200 || r.Status != want {
			t.Fatalf("execute %s: HTTP %d, status %q, want %q", body, status, r.Status, want)
		}
	}
	execute(`{"code":"print(1)"}`, "ok")
	execute(`{"code":"import time\ntime.sleep(30)","limits":{"timeout_ms":500}}`, "timeout")
	execute(`{"code":"x = bytearray(512 << 20)\nx[::4096] = b'1' * len(x[::4096])\n","limits":{"memory_mb":64}}`, "memory_limit")
	if status, _ := d.call(t, "POST", "/v1/execute", `{"code":`, nil); status != 400 {
		t.Fatalf("truncated body: HTTP %d", status)
	}

	// 503: the one slot is taken and there is no queue.
	done := make(chan struct{})
	go func() {
		defer close(done)
		var r api.ExecuteResponse
		if status, _ := d.call(t, "POST", "/v1/execute", `{"code":"import time\ntime.sleep(2)\nprint(2)"}`, &r); status != 200 || r.Status != "ok" {
			t.Errorf("the run holding the slot: HTTP %d, %q", status, r.Status)
		}
	}()
	waitFor(t, 20*time.Second, "the slot to be taken", func() bool {
		return scrapeURL(t, http.DefaultClient, tcp+"/metrics")[metricstest.Key("jaild_admission_running")] == 1
	})
	if status, h := d.call(t, "POST", "/v1/execute", `{"code":"print(3)"}`, nil); status != 503 || h.Get("Retry-After") == "" {
		t.Fatalf("execute with the slot taken: HTTP %d", status)
	}
	<-done

	// 429: a non-admin uid past its daily quota (1 here).
	for i, want := range []int{200, 429} {
		cmd := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", d.Socket,
			"http://jaild/v1/execute", "-H", "Content-Type: application/json", "-d", `{"code":"print(1)"}`)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl as nobody: %v", err)
		}
		if c, _ := strconv.Atoi(string(out)); c != want {
			t.Fatalf("request %d as uid 65534: HTTP %d, want %d", i, c, want)
		}
	}

	after := scrapeURL(t, d.Client, "http://jaild/metrics") // the socket's
	runs := func(status string) string {
		return metricstest.Key("jaild_runs_total", "operation", "execute", "status", status, "warm", "false")
	}
	rejected := func(reason string) string {
		return metricstest.Key("jaild_rejections_total", "operation", "execute", "reason", reason)
	}
	op := func(name string) string { return metricstest.Key(name, "operation", "execute") }
	const ran = 5 // ok, timeout, memory_limit, the slot holder, nobody's first
	want := metricstest.Samples{
		runs("ok"):                                 3,
		runs("timeout"):                            1,
		runs("memory_limit"):                       1,
		rejected("invalid_argument"):               1,
		rejected("busy"):                           1,
		rejected("rate_limited"):                   1,
		metricstest.Key("jaild_pool_misses_total"): ran,
		op("jaild_queue_wait_seconds_count"):       ran,
		op("jaild_run_duration_seconds_count"):     ran,
		op("jaild_request_duration_seconds_count"): ran,
		metricstest.Key("jaild_jail_start_seconds_count", "warm", "false"): ran,
	}
	counted := []string{"jaild_runs_total", "jaild_rejections_total", "jaild_pool_hits_total", "jaild_pool_misses_total", "jaild_egress_bytes_total",
		"jaild_queue_wait_seconds_count", "jaild_jail_start_seconds_count", "jaild_run_duration_seconds_count", "jaild_request_duration_seconds_count"}
	if diff := metricstest.Diff(metricstest.Delta(before, after, counted...), want); diff != "" {
		t.Errorf("counters after the mix:\n%s", diff)
	}
	if s := after[op("jaild_run_duration_seconds_sum")] - before[op("jaild_run_duration_seconds_sum")]; s < 2.5 {
		t.Errorf("run time of the mix %gs; it slept 2 s and timed out after 0.5 s", s)
	}
	for _, name := range []string{"jaild_admission_running", "jaild_admission_queued", "jaild_memory_budget_bytes", "jaild_store_bytes", "jaild_sessions_live", "jaild_pool_ready"} {
		if _, ok := after[metricstest.Key(name)]; !ok {
			t.Errorf("no %s", name)
		}
	}
	if after[metricstest.Key("jaild_admission_running")] != 0 || after[metricstest.Key("process_resident_memory_bytes")] <= 0 {
		t.Errorf("after the mix: running %g, resident memory %g", after[metricstest.Key("jaild_admission_running")], after[metricstest.Key("process_resident_memory_bytes")])
	}

	// metrics_listen serves /metrics and nothing else.
	for _, tc := range []struct{ method, path, body string }{
		{"GET", "/v1/info", ""}, {"GET", "/v1/health", ""}, {"POST", "/v1/execute", `{"code":"print(1)"}`},
		{"GET", "/", ""}, {"POST", "/metrics", ""}, {"GET", "/metrics/../v1/info", ""},
	} {
		req, _ := http.NewRequest(tc.method, tcp+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("metrics_listen: %s %s: HTTP %d %.200s", tc.method, tc.path, resp.StatusCode, body)
		}
	}
	final := scrapeURL(t, http.DefaultClient, tcp+"/metrics")
	if d := metricstest.Delta(after, final, "jaild_runs_total", "jaild_rejections_total"); len(d) != 0 {
		t.Errorf("requests to metrics_listen moved %v", d)
	}
}

// TestMetricsPoolAndSessions: a run served by the warm pool counts as a
// hit and a warm run; a session's call counts under session_execute, and
// the session in the gauges.
func TestMetricsPoolAndSessions(t *testing.T) {
	d := startDaemon(t, daemontest.Options{Pool: 1})
	scrape := func() metricstest.Samples { return scrapeURL(t, d.Client, "http://jaild/metrics") }
	k := metricstest.Key
	waitFor(t, 60*time.Second, "the warm pool", func() bool {
		s := scrape()
		return s[k("jaild_pool_ready")] == 1 && s[k("jaild_pool_plain_ready")] == 1
	})
	before := scrape()
	if before[k("jaild_pool_size")] != 1 || before[k("jaild_pool_plain_size")] != 1 || before[k("jaild_sessions_live")] != 0 {
		t.Errorf("gauges of a daemon with a pool of 1+1 and no session: %v", before)
	}
	var r api.ExecuteResponse
	if status, _ := d.call(t, "POST", "/v1/execute", `{"code":"print(1)"}`, &r); status != 200 || r.Status != "ok" || !r.Usage.Warm {
		t.Fatalf("execute: HTTP %d %+v, want a warm ok run", status, r)
	}
	var s api.Session
	if status, _ := d.call(t, "POST", "/v1/sessions", `{}`, &s); status != http.StatusCreated {
		t.Fatalf("create a session: HTTP %d", status)
	}
	var c api.SessionExecuteResponse
	if status, _ := d.call(t, "POST", "/v1/sessions/"+s.SessionID+"/execute", `{"code":"x = 1"}`, &c); status != 200 || c.Status != "ok" {
		t.Fatalf("session call: HTTP %d %+v", status, c)
	}
	after := scrape()
	warm := strconv.FormatBool(c.Usage.Warm)
	want := metricstest.Samples{
		k("jaild_runs_total", "operation", "execute", "status", "ok", "warm", "true"):       1,
		k("jaild_runs_total", "operation", "session_execute", "status", "ok", "warm", warm): 1,
		k("jaild_pool_hits_total"):                                                1,
		k("jaild_jail_start_seconds_count", "warm", "true"):                       1,
		k("jaild_queue_wait_seconds_count", "operation", "execute"):               1,
		k("jaild_queue_wait_seconds_count", "operation", "session_execute"):       1,
		k("jaild_run_duration_seconds_count", "operation", "execute"):             1,
		k("jaild_run_duration_seconds_count", "operation", "session_execute"):     1,
		k("jaild_request_duration_seconds_count", "operation", "execute"):         1,
		k("jaild_request_duration_seconds_count", "operation", "session_execute"): 1,
	}
	counted := []string{"jaild_runs_total", "jaild_rejections_total", "jaild_pool_hits_total", "jaild_pool_misses_total",
		"jaild_queue_wait_seconds_count", "jaild_jail_start_seconds_count", "jaild_run_duration_seconds_count", "jaild_request_duration_seconds_count"}
	if diff := metricstest.Diff(metricstest.Delta(before, after, counted...), want); diff != "" {
		t.Errorf("counters:\n%s", diff)
	}
	if after[k("jaild_sessions_live")] != 1 || after[k("jaild_sessions_running")] != 0 {
		t.Errorf("sessions: live %g, running %g", after[k("jaild_sessions_live")], after[k("jaild_sessions_running")])
	}
	if got := after[k("jaild_sessions_created_total")] - before[k("jaild_sessions_created_total")]; got != 1 {
		t.Errorf("jaild_sessions_created_total moved by %g, want 1", got)
	}
	deleteSession(t, d, s.SessionID)
	ended := k("jaild_sessions_ended_total", "reason", "deleted")
	if got := scrape()[ended] - before[ended]; got != 1 {
		t.Errorf("%s moved by %g after a DELETE, want 1", ended, got)
	}
	// The pool timed each jail it made: one of each kind to fill, then
	// the one the run took (of either kind) is made again.
	made := func(s metricstest.Samples) float64 {
		return s[k("jaild_pool_refill_seconds_count", "kind", "preloaded")] + s[k("jaild_pool_refill_seconds_count", "kind", "plain")]
	}
	for _, kind := range []string{"preloaded", "plain"} {
		if n, sum := before[k("jaild_pool_refill_seconds_count", "kind", kind)], before[k("jaild_pool_refill_seconds_sum", "kind", kind)]; n < 1 || sum <= 0 {
			t.Errorf("%s refills before any run: %g taking %g s, want at least one that took time", kind, n, sum)
		}
	}
	waitFor(t, 60*time.Second, "a refill after the warm run", func() bool { return made(scrape()) >= made(before)+1 })
}
