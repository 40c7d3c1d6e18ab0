package server_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/egress"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/metrics/metricstest"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/server/servertest"
)

// scrape reads GET /metrics from the harness's socket.
func scrape(t *testing.T, h *servertest.Harness) metricstest.Samples {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.Socket)
	}}}
	resp, err := hc.Get("http://jaild/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: HTTP %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s, err := metricstest.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// counted are the series whose every move TestMetricsMix accounts for.
var counted = []string{
	"jaild_runs_total", "jaild_rejections_total", "jaild_pool_hits_total", "jaild_pool_misses_total", "jaild_egress_bytes_total",
	"jaild_queue_wait_seconds_count", "jaild_jail_start_seconds_count", "jaild_run_duration_seconds_count", "jaild_request_duration_seconds_count",
}

// TestMetricsMix drives a scripted mix of requests (results of each
// status, a session call, lint and format, a 400, a 503 from a full
// queue, a 429 from the daily quota) and checks that every counter moved
// by exactly what happened, and the gauges read the daemon's state.
func TestMetricsMix(t *testing.T) {
	const quota = 8 // the admitted requests below
	h := harness(t, func(c *config.Config) {
		c.Admission.MaxConcurrent, c.Admission.QueueSize, c.Admission.DailyQuota = 1, 0, quota
		c.MemoryBudgetMB = 300
	})
	started, release := make(chan struct{}), make(chan struct{})
	h.Engine.RunFunc = func(_ context.Context, req *spec.Request) (*spec.Result, error) {
		res := &spec.Result{ID: "r", Status: spec.StatusOK, Start: 20 * time.Millisecond, Duration: 10 * time.Millisecond}
		switch {
		case len(req.Command) > 1 && req.Command[1] == "check":
			res.Stdout = []byte("[]")
		case len(req.Command) > 1 && req.Command[1] == "format":
			res.Stdout = []byte("x = 1\n")
		case req.Code == "warm":
			res.Warm, res.Start = true, 50*time.Microsecond
		case req.Code == "fail":
			res.Status, res.ExitCode = spec.StatusError, 1
		case req.Code == "slow":
			res.Status, res.Duration = spec.StatusTimeout, 2*time.Second
			res.Network = &egress.Usage{BytesSent: 100, BytesReceived: 2000}
		case req.Code == "block":
			close(started)
			<-release
		}
		return res, nil
	}
	ctx := t.Context()
	before := scrape(t, h)
	if g := before[metricstest.Key("jaild_memory_budget_bytes")]; g != 300<<20 {
		t.Errorf("jaild_memory_budget_bytes %g, want %d", g, 300<<20)
	}
	// 503: the only slot is taken and there is no queue.
	done := make(chan error, 1)
	go func() {
		_, err := h.Client.Execute(context.Background(), &api.ExecuteRequest{Code: "block"})
		done <- err
	}()
	<-started
	if mid := scrape(t, h); mid[metricstest.Key("jaild_admission_running")] != 1 || mid[metricstest.Key("jaild_admission_queued")] != 0 {
		t.Errorf("admission gauges during a run: running %g, queued %g", mid[metricstest.Key("jaild_admission_running")], mid[metricstest.Key("jaild_admission_queued")])
	}
	if _, err := h.Client.Execute(ctx, &api.ExecuteRequest{Code: "1"}); !errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("execute with the slot taken: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, code := range []string{"warm", "fail", "slow"} {
		if _, err := h.Client.Execute(ctx, &api.ExecuteRequest{Code: code}); err != nil {
			t.Fatalf("execute %s: %v", code, err)
		}
	}
	if _, err := h.Client.Lint(ctx, &api.LintRequest{Code: "x = 1\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client.Format(ctx, &api.FormatRequest{Code: "x=1"}); err != nil {
		t.Fatal(err)
	}
	s, err := h.Client.CreateSession(ctx, &api.SessionCreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client.SessionExecute(ctx, s.SessionID, &api.SessionExecuteRequest{Code: "1"}); err != nil {
		t.Fatal(err)
	}
	if g := scrape(t, h)[metricstest.Key("jaild_sessions_live")]; g != 1 {
		t.Errorf("jaild_sessions_live %g with one session", g)
	}
	if g := scrape(t, h)[metricstest.Key("jaild_sessions_memory_reserved_bytes")]; g != float64(s.Limits.MemoryMB<<20) || g == 0 {
		t.Errorf("jaild_sessions_memory_reserved_bytes %g with one session of %d MiB", g, s.Limits.MemoryMB)
	}

	// 400, before admission.
	if status, _, _ := raw(t, h, "POST", "/v1/execute", "", `{"code":`); status != http.StatusBadRequest {
		t.Fatalf("truncated body: HTTP %d", status)
	}
	// 429: the daily quota is used up.
	if _, err := h.Client.Execute(ctx, &api.ExecuteRequest{Code: "1"}); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Fatalf("execute past the quota: %v", err)
	}

	after := scrape(t, h)
	runs := func(op, status, warm string) string {
		return metricstest.Key("jaild_runs_total", "operation", op, "status", status, "warm", warm)
	}
	op := func(name, op string) string { return metricstest.Key(name, "operation", op) }
	want := metricstest.Samples{
		runs("execute", "ok", "true"):          1,
		runs("execute", "error", "false"):      1,
		runs("execute", "timeout", "false"):    1,
		runs("execute", "ok", "false"):         1, // the one that blocked
		runs("lint", "ok", "false"):            1,
		runs("format", "ok", "false"):          1,
		runs("session_execute", "ok", "false"): 1,
		metricstest.Key("jaild_rejections_total", "operation", "execute", "reason", "busy"):             1,
		metricstest.Key("jaild_rejections_total", "operation", "execute", "reason", "invalid_argument"): 1,
		metricstest.Key("jaild_rejections_total", "operation", "execute", "reason", "rate_limited"):     1,
		metricstest.Key("jaild_pool_hits_total"):                                                        1,
		metricstest.Key("jaild_pool_misses_total"):                                                      5,
		metricstest.Key("jaild_egress_bytes_total", "direction", "sent"):                                100,
		metricstest.Key("jaild_egress_bytes_total", "direction", "received"):                            2000,
		op("jaild_queue_wait_seconds_count", "execute"):                                                 4,
		op("jaild_queue_wait_seconds_count", "lint"):                                                    1,
		op("jaild_queue_wait_seconds_count", "format"):                                                  1,
		op("jaild_queue_wait_seconds_count", "session_execute"):                                         1,
		op("jaild_run_duration_seconds_count", "execute"):                                               4,
		op("jaild_run_duration_seconds_count", "lint"):                                                  1,
		op("jaild_run_duration_seconds_count", "format"):                                                1,
		op("jaild_run_duration_seconds_count", "session_execute"):                                       1,
		op("jaild_request_duration_seconds_count", "execute"):                                           4,
		op("jaild_request_duration_seconds_count", "lint"):                                              1,
		op("jaild_request_duration_seconds_count", "format"):                                            1,
		op("jaild_request_duration_seconds_count", "session_execute"):                                   1,
		metricstest.Key("jaild_jail_start_seconds_count", "warm", "true"):                               1,
		metricstest.Key("jaild_jail_start_seconds_count", "warm", "false"):                              5,
	}
	if d := metricstest.Diff(metricstest.Delta(before, after, counted...), want); d != "" {
		t.Errorf("counters after the mix:\n%s", d)
	}
	// The run durations the fake engine reported: 3 runs of 10 ms and one of 2 s.
	if sum := after[op("jaild_run_duration_seconds_sum", "execute")]; math.Abs(sum-2.03) > 1e-9 {
		t.Errorf("jaild_run_duration_seconds_sum{operation=execute} %g, want 2.03", sum)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "jaild_pool_ready", "jaild_store_files", "jaild_memory_budget_in_use_bytes"} {
		if _, ok := after[metricstest.Key(name)]; !ok {
			t.Errorf("no %s", name)
		}
	}
}

func TestMetricsStoreGauges(t *testing.T) {
	h := harness(t, nil)
	if _, err := h.Client.PutFile(t.Context(), "a.txt", strings.NewReader("hello"), 5); err != nil {
		t.Fatal(err)
	}
	s := scrape(t, h)
	if s[metricstest.Key("jaild_store_files")] != 1 || s[metricstest.Key("jaild_store_bytes")] != 5 {
		t.Errorf("store gauges: files %g, bytes %g", s[metricstest.Key("jaild_store_files")], s[metricstest.Key("jaild_store_bytes")])
	}
}

// TestMetricsServer: metrics_listen's server serves /metrics and nothing
// else, the API least of all.
func TestMetricsServer(t *testing.T) {
	h := harness(t, nil)
	ms := h.Server.MetricsServer()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = ms.Serve(ln) }()
	t.Cleanup(func() { _ = ms.Close() })
	base := "http://" + ln.Addr().String()
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/metrics", 200},
		{"HEAD", "/metrics", 200},
		{"POST", "/metrics", 404},
		{"GET", "/", 404},
		{"GET", "/v1/info", 404},
		{"GET", "/v1/health", 404},
		{"POST", "/v1/execute", 404},
		{"GET", "/metrics/x", 404},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, strings.NewReader(`{"code":"1"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: HTTP %d, want %d", tc.method, tc.path, resp.StatusCode, tc.status)
		}
		if tc.status == 200 && tc.method == "GET" && !strings.Contains(string(body), "jaild_runs_total") {
			t.Errorf("GET /metrics: no jaild_runs_total in\n%.500s", body)
		}
	}
	if n := len(h.Engine.Requests()); n != 0 {
		t.Errorf("the metrics server ran %d requests", n)
	}
}
