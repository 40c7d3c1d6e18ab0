package metrics

import (
	"encoding/json"
	"maps"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/jaild/jaild/internal/metrics/metricstest"
)

// full is a Metrics with every source, each run and refusal kind seen once,
// so that every vector and histogram has a series.
func full(t *testing.T) *Metrics {
	t.Helper()
	m := New(Sources{
		Admission: func() (int, int) { return 2, 3 },
		Pool: func() Pool {
			return Pool{Size: 4, Ready: 3, PlainSize: 2, PlainReady: 1,
				// 0.03 s and 0.7 s made, one failed.
				Refill: Refills{Count: 2, Sum: 0.73, Buckets: map[float64]uint64{0.01: 0, 0.025: 0, 0.05: 1, 0.1: 1, 0.25: 1, 0.5: 1, 1: 2, 2.5: 2, 5: 2, 10: 2}, Failed: 1}}
		},
		Sessions:      func() (int, int) { return 5, 1 },
		SessionMemory: func() (int64, int64) { return 640 << 20, 2 << 30 },
		SessionTotals: func() (uint64, map[string]uint64) {
			return 7, map[string]uint64{"deleted": 2, "idle_timeout": 1, "something new": 3}
		},
		SessionEndReasons: []string{"deleted", "idle_timeout", "expired"},
		Store:             func() (int64, int) { return 1000, 7 },
		Memory:            func() (int64, int64) { return 10, 100 },
		Jails:             func() Jails { return Jails{Alive: 6, TeardownFailures: 1, Swept: 2, EgressRefused: 9} },
		Images: func() []Image {
			return []Image{{Name: "python", Digest: "sha256:aa", Default: true}, {Name: "python-ml", Digest: "sha256:bb"}}
		},
		Reload: func() (bool, time.Time) { return false, time.Unix(1700000000, 500_000_000) },
	})
	m.Ran(OpExecute, Run{Status: "ok", Warm: true, Pooled: true, QueueWait: time.Millisecond, JailStart: time.Millisecond,
		Duration: time.Second, Total: 2 * time.Second, EgressSent: 3, EgressReceived: 4})
	m.Ran(OpSessionExecute, Run{Status: "timeout", Duration: time.Second, Total: time.Second})
	m.Refused(OpExecute, "busy")
	return m
}

func scrape(t *testing.T, m *Metrics) metricstest.Samples {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("HTTP %d", rec.Code)
	}
	s, err := metricstest.Parse(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestValues(t *testing.T) {
	m := full(t)
	s := scrape(t, m)
	k := metricstest.Key
	for key, want := range map[string]float64{
		k("jaild_runs_total", "operation", "execute", "status", "ok", "warm", "true"):               1,
		k("jaild_runs_total", "operation", "session_execute", "status", "timeout", "warm", "false"): 1,
		k("jaild_runs_total", "operation", "lint", "status", "memory_limit", "warm", "false"):       0, // created at zero
		k("jaild_rejections_total", "operation", "execute", "reason", "busy"):                       1,
		k("jaild_pool_hits_total"):                                                             1,
		k("jaild_pool_misses_total"):                                                           0, // a session call is neither
		k("jaild_jail_start_seconds_count", "warm", "true"):                                    1,
		k("jaild_queue_wait_seconds_count", "operation", "session_execute"):                    1,
		k("jaild_request_duration_seconds_sum", "operation", "execute"):                        2,
		k("jaild_egress_bytes_total", "direction", "sent"):                                     3,
		k("jaild_egress_bytes_total", "direction", "received"):                                 4,
		k("jaild_admission_running"):                                                           2,
		k("jaild_admission_queued"):                                                            3,
		k("jaild_pool_size"):                                                                   4,
		k("jaild_pool_ready"):                                                                  3,
		k("jaild_pool_plain_size"):                                                             2,
		k("jaild_pool_plain_ready"):                                                            1,
		k("jaild_sessions_live"):                                                               5,
		k("jaild_sessions_running"):                                                            1,
		k("jaild_sessions_memory_reserved_bytes"):                                              640 << 20,
		k("jaild_sessions_memory_limit_bytes"):                                                 2 << 30,
		k("jaild_store_bytes"):                                                                 1000,
		k("jaild_store_files"):                                                                 7,
		k("jaild_memory_budget_in_use_bytes"):                                                  10,
		k("jaild_memory_budget_bytes"):                                                         100,
		k("jaild_jails_alive"):                                                                 6,
		k("jaild_jail_teardown_failures_total"):                                                1,
		k("jaild_sweep_jails_total"):                                                           2,
		k("jaild_sessions_created_total"):                                                      7,
		k("jaild_sessions_ended_total", "reason", "deleted"):                                   2,
		k("jaild_sessions_ended_total", "reason", "idle_timeout"):                              1,
		k("jaild_sessions_ended_total", "reason", "expired"):                                   0, // listed, so present at zero
		k("jaild_sessions_ended_total", "reason", "other"):                                     3, // not listed: bounded
		k("jaild_egress_refused_packets_total"):                                                9,
		k("jaild_pool_refill_seconds_count", "kind", "preloaded"):                              2,
		k("jaild_pool_refill_seconds_sum", "kind", "preloaded"):                                0.73,
		k("jaild_pool_refill_seconds_count", "kind", "plain"):                                  0,
		k("jaild_pool_refill_failures_total", "kind", "preloaded"):                             1,
		k("jaild_pool_refill_failures_total", "kind", "plain"):                                 0,
		k("jaild_image_info", "image", "python", "digest", "sha256:aa", "default", "true"):     1,
		k("jaild_image_info", "image", "python-ml", "digest", "sha256:bb", "default", "false"): 1,
		k("jaild_config_last_reload_successful"):                                               0,
		k("jaild_config_last_reload_success_timestamp_seconds"):                                1700000000.5,
	} {
		if got, ok := s[key]; !ok || got != want {
			t.Errorf("%s = %g (present %v), want %g", key, got, ok, want)
		}
	}
	checkRefillBuckets(t, m)
	if _, ok := s[k("jaild_jail_start_seconds_count", "warm", "false")]; ok {
		t.Error("a session call (no jail start) observed jaild_jail_start_seconds")
	}
}

// TestNoStore: a source that is nil has no gauges.
func TestNoStore(t *testing.T) {
	s := scrape(t, New(Sources{}))
	for name := range s.Names() {
		if strings.HasPrefix(name, "jaild_store_") || strings.HasPrefix(name, "jaild_admission_") {
			t.Errorf("%s without its source", name)
		}
	}
}

// TestNaming: Prometheus conventions (jaild_ prefix, counters end in
// _total, histograms in a base unit) and bounded labels.
func TestNaming(t *testing.T) {
	fams, err := full(t).Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	// image and digest: one per image served, at most 1+config.MaxImages.
	bounded := map[string]bool{"operation": true, "status": true, "warm": true, "reason": true, "direction": true, "le": true, "kind": true,
		"image": true, "digest": true, "default": true}
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, "jaild_") {
			continue // the Go runtime's and the process's
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			if !strings.HasSuffix(name, "_total") {
				t.Errorf("counter %s does not end in _total", name)
			}
		case dto.MetricType_HISTOGRAM:
			if !strings.HasSuffix(name, "_seconds") {
				t.Errorf("histogram %s is not in seconds", name)
			}
		case dto.MetricType_GAUGE:
			if strings.HasSuffix(name, "_total") {
				t.Errorf("gauge %s ends in _total", name)
			}
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no help", name)
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !bounded[l.GetName()] {
					t.Errorf("%s has label %s, not one of the bounded ones", name, l.GetName())
				}
			}
		}
	}
}

// metricRef finds the metric names in a PromQL expression: jaild's own
// and the collectors' (go_, process_).
var metricRef = regexp.MustCompile(`\b(?:jaild|go|process)_[a-zA-Z0-9_]+`)

// TestDashboard: every metric docs/grafana-dashboard.json queries exists.
func TestDashboard(t *testing.T) {
	data, err := os.ReadFile("../../docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if e, ok := v["expr"].(string); ok {
				exprs = append(exprs, e)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(dash)
	if len(exprs) < 10 {
		t.Fatalf("the dashboard has %d queries", len(exprs))
	}
	fams, err := full(t).Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exists := map[string]bool{}
	for _, f := range fams {
		exists[f.GetName()] = true
		if f.GetType() == dto.MetricType_HISTOGRAM {
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				exists[f.GetName()+suffix] = true
			}
		}
	}
	used := map[string]bool{}
	for _, e := range exprs {
		refs := metricRef.FindAllString(e, -1)
		if len(refs) == 0 {
			t.Errorf("query %q names no metric this test knows", e)
		}
		for _, name := range refs {
			used[name] = true
			if !exists[name] {
				t.Errorf("query %q: no metric %s", e, name)
			}
		}
	}
	// The panels the dashboard promises: runs, latency, admission, pool,
	// memory budget, store.
	for _, name := range []string{"jaild_runs_total", "jaild_request_duration_seconds_bucket", "jaild_admission_running",
		"jaild_pool_ready", "jaild_memory_budget_in_use_bytes", "jaild_store_bytes"} {
		if !used[name] {
			t.Errorf("the dashboard does not query %s", name)
		}
	}
	names := slices.Sorted(maps.Keys(used))
	t.Logf("the dashboard queries %d metrics: %s", len(names), strings.Join(names, " "))
}

// checkRefillBuckets: the pool's own buckets are exported as they are.
func checkRefillBuckets(t *testing.T, m *Metrics) {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "jaild_pool_refill_seconds" {
			continue
		}
		for _, mt := range f.GetMetric() {
			if mt.GetLabel()[0].GetValue() != "preloaded" {
				continue
			}
			got := map[float64]uint64{}
			for _, b := range mt.GetHistogram().GetBucket() {
				got[b.GetUpperBound()] = b.GetCumulativeCount()
			}
			if got[0.025] != 0 || got[0.05] != 1 || got[0.5] != 1 || got[1] != 2 || got[10] != 2 || len(got) != 10 {
				t.Errorf("preloaded refill buckets %v", got)
			}
			return
		}
	}
	t.Error("no jaild_pool_refill_seconds{kind=\"preloaded\"}")
}
