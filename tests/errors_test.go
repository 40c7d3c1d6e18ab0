package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

func TestErrorClasses(t *testing.T) {
	big := `{"code":"` + strings.Repeat("x", 5<<20) + `"}`
	cases := []struct {
		name, method, path, body string
		status                   int
		typ, mentions            string
	}{
		{"unknown field", "POST", "/v1/execute", `{"code":"print(1)","nope":1}`, 400, "invalid_argument", "nope"},
		{"missing code", "POST", "/v1/execute", `{}`, 400, "invalid_argument", "code"},
		{"truncated", "POST", "/v1/execute", `{"code":`, 400, "invalid_argument", "truncated"},
		{"not utf-8 json", "POST", "/v1/execute", "\xff\xfe\x00", 400, "invalid_argument", "JSON"},
		{"trailing garbage", "POST", "/v1/execute", `{"code":"print(1)"} xyz`, 400, "invalid_argument", "trailing"},
		{"deep nesting", "POST", "/v1/execute", strings.Repeat("[", 100000), 400, "invalid_argument", "body"},
		{"number out of range", "POST", "/v1/execute", `{"code":"print(1)","limits":{"timeout_ms":1e999}}`, 400, "invalid_argument", "limits.timeout_ms"},
		{"wrong type", "POST", "/v1/execute", `{"code":"print(1)","limits":{"pids":"many"}}`, 400, "invalid_argument", "limits.pids"},
		{"zero limit", "POST", "/v1/execute", `{"code":"print(1)","limits":{"memory_mb":0}}`, 400, "invalid_argument", "limits.memory_mb"},
		{"negative limit", "POST", "/v1/execute", `{"code":"print(1)","limits":{"timeout_ms":-5}}`, 400, "invalid_argument", "limits.timeout_ms"},
		{"path traversal", "POST", "/v1/execute", `{"code":"1","files":[{"path":"../../etc/cron.d/x","content_b64":""}]}`, 400, "invalid_argument", "files[0].path"},
		{"absolute path", "POST", "/v1/execute", `{"code":"1","files":[{"path":"/etc/x","content_b64":""}]}`, 400, "invalid_argument", "files[0].path"},
		{"nul in path", "POST", "/v1/execute", `{"code":"1","files":[{"path":"a\u0000b","content_b64":""}]}`, 400, "invalid_argument", "files[0].path"},
		{"duplicate path", "POST", "/v1/execute", `{"code":"1","files":[{"path":"a","content_b64":""},{"path":"a","content_b64":""}]}`, 400, "invalid_argument", "files[1].path"},
		{"bad base64", "POST", "/v1/execute", `{"code":"1","files":[{"path":"a","content_b64":"!!"}]}`, 400, "invalid_argument", "files[0].content_b64"},
		{"return traversal", "POST", "/v1/execute", `{"code":"1","return_files":["../../etc/shadow"]}`, 400, "invalid_argument", "return_files[0]"},
		{"return absolute", "POST", "/v1/execute", `{"code":"1","return_files":["/proc/self/environ"]}`, 400, "invalid_argument", "return_files[0]"},
		{"bad env", "POST", "/v1/execute", `{"code":"1","env":{"LD_PRELOAD":"/x"}}`, 400, "invalid_argument", "LD_PRELOAD"},
		{"bad rule", "POST", "/v1/lint", `{"code":"1","select":["E; rm -rf /"]}`, 400, "invalid_argument", "select[0]"},
		{"too large", "POST", "/v1/execute", big, 413, "too_large", "4194304"},
		{"not found", "GET", "/v2/nothing", "", 404, "not_found", "/v2/nothing"},
		{"method", "GET", "/v1/execute", "", 405, "method_not_allowed", "POST"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e api.ErrorBody
			var body any
			if c.body != "" {
				body = c.body
			}
			status, _ := shared.call(t, c.method, c.path, body, &e)
			if status != c.status || e.Error.Type != c.typ || !strings.Contains(e.Error.Message, c.mentions) {
				t.Errorf("HTTP %d %+v, want %d %s mentioning %q", status, e.Error, c.status, c.typ, c.mentions)
			}
		})
	}
}

func TestLimitAboveMaximum(t *testing.T) {
	// Root is an admin: its maxima are admin_max_limits. Above those, no one passes.
	var e api.ErrorBody
	status, _ := shared.call(t, "POST", "/v1/execute", `{"code":"1","limits":{"memory_mb":999999}}`, &e)
	if status != 400 || !strings.Contains(e.Error.Message, "limits.memory_mb: 999999 is above the maximum of 16384") {
		t.Errorf("HTTP %d %+v", status, e.Error)
	}
}

// checkBurst checks the answers to a burst of runs where run i prints i:
// each is 200 with i on stdout, or 503 busy with Retry-After. It returns
// how many of each.
func checkBurst(t *testing.T, statuses []int, bodies []api.ExecuteResponse, retry []string) (ok, busy int) {
	t.Helper()
	for i, st := range statuses {
		switch st {
		case 200:
			ok++
			if bodies[i].Status != "ok" || bodies[i].Stdout != strconv.Itoa(i)+"\n" {
				t.Errorf("accepted run %d: %+v", i, bodies[i])
			}
		case 503:
			busy++
			if retry[i] == "" {
				t.Errorf("request %d: 503 without Retry-After", i)
			}
		default:
			t.Errorf("request %d: HTTP %d", i, st)
		}
	}
	return ok, busy
}

// A burst beyond capacity (2 running + 2 queued) gets 503 with Retry-After;
// every accepted run completes correctly.
func TestBurstBeyondCapacity(t *testing.T) {
	const n = 10
	var wg sync.WaitGroup
	statuses := make([]int, n)
	bodies := make([]api.ExecuteResponse, n)
	retry := make([]string, n)
	for i := range n {
		wg.Go(func() {
			var raw json.RawMessage
			st, h := shared.call(t, "POST", "/v1/execute", `{"code":"import time\ntime.sleep(1.5)\nprint(`+strconv.Itoa(i)+`)"}`, &raw)
			statuses[i], retry[i] = st, h.Get("Retry-After")
			if st == 200 {
				_ = json.Unmarshal(raw, &bodies[i])
			}
		})
	}
	wg.Wait()
	ok, busy := checkBurst(t, statuses, bodies, retry)
	if busy == 0 || ok < 2 {
		t.Errorf("%d ok, %d busy: want some of each", ok, busy)
	}
}

// A non-root uid hits its daily quota (3 in the test config) with 429;
// root does not.
func TestQuotaForNonRoot(t *testing.T) {
	var codes []int
	for range 5 {
		cmd := exec.Command("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--unix-socket", shared.Socket,
			"http://jaild/v1/execute", "-H", "Content-Type: application/json", "-d", `{"code":"print(1)"}`)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("curl as nobody: %v", err)
		}
		c, _ := strconv.Atoi(string(out))
		codes = append(codes, c)
	}
	if codes[0] != 200 || codes[2] != 200 || codes[3] != 429 || codes[4] != 429 {
		t.Errorf("HTTP codes as uid 65534: %v, want three 200 then 429", codes)
	}
	for range 5 {
		var r api.ExecuteResponse
		if status, _ := shared.call(t, "POST", "/v1/execute", `{"code":"print(1)"}`, &r); status != 200 {
			t.Errorf("root: HTTP %d, want no quota", status)
		}
	}
}

// A client that disconnects mid-run gets its run killed within about a second.
func TestClientDisconnectKillsRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://jaild/v1/execute",
		strings.NewReader(`{"code":"import time\nprint('started', flush=True)\ntime.sleep(60)","limits":{"timeout_ms":60000}}`))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := shared.Client.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, 10*time.Second, "the run to start", func() bool { return len(jailPids()) > 0 })
	cancel()
	<-done
	start := time.Now()
	waitFor(t, 3*time.Second, "the run's processes to die", func() bool { return len(jailPids()) == 0 })
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("run died %v after the disconnect, want about a second", d)
	}
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
