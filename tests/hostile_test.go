package tests

// The hostile-input suite: the attacks a jail must survive, each run
// against a real jaild on a temporary socket. After every case the leak
// checks of leak_test.go run. The cases live in hostile_*_test.go, one file
// per category; report_test.go turns their outcomes into the table of
// docs/SECURITY.md, which lists every case by its ID.
//
// Case IDs: a letter for the category and a number (A01, B07, E18, ...),
// shared with the team's list of hostile cases where it has the case; a
// letter suffix (A09a, H02c) is one input of a case with several.

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

// Categories, in the order of the issue.
const (
	catFiles   = "Files"
	catKernel  = "Kernel surface"
	catPriv    = "Privilege"
	catLeaks   = "Information leaks"
	catExhaust = "Exhaustion"
	catDaemon  = "Daemon protocol and faults"
	catSession = "Sessions"
	catStore   = "Streams and stored files"
)

var categories = []string{catFiles, catKernel, catPriv, catLeaks, catExhaust, catDaemon, catSession, catStore}

// hcase is one hostile case. An execute case sends code (plus req's other
// fields) to POST /v1/execute and judges the 200 response with check; a
// custom case (run set) drives the daemon itself. check and run report
// mismatches with t.Errorf (not Fatal, so that what was observed still
// reaches the report) and return one line saying what was observed. That
// line goes into docs/SECURITY.md, so it must only hold what the case
// asserts, never timings or counts that vary between machines.
type hcase struct {
	id, cat, title, expect string

	code  string
	req   api.ExecuteRequest
	check func(t *testing.T, r *api.ExecuteResponse) string

	run func(t *testing.T, h *hostile) string

	// noNet: the case is about a run without egress; with egress enabled
	// (TestHostileNetworked) it still sends no "network".
	noNet bool
}

// hostileCases is the whole suite, in report order.
func hostileCases() []hcase {
	var all []hcase
	for _, part := range [][]hcase{fileCases(), kernelCases(), privilegeCases(), leakCases(), exhaustionCases(), daemonCases(), sessionCases(), storeCases(), listenerCases(), budgetCases(), sessfixCases(), sessMemCases(), pauseCases(), sessFSCases(), sessCmdCases(), mcpCases()} {
		all = append(all, part...)
	}
	return all
}

// hostile is the daemon the suite attacks and the state its leak checks
// compare against.
type hostile struct {
	d      *daemon
	secret string // in the daemon's environment; must never reach a jail
	cg     *jailCgroups
	base   *snapshot
	// runIDs are the run ids of the current case's runs; the leak checks
	// make sure each one's cgroup, directories and mounts are gone.
	mu     sync.Mutex
	runIDs []string
	// extraParents are jail cgroup parents of other daemons a case has
	// running; their jails are not leaks of the hostile daemon.
	extraParents []string
	// netTable and netPrefix are set when the daemon has egress: its
	// nftables table and interface prefix, checked for leftovers.
	netTable, netPrefix string
}

// hostilePool is the hostile daemon's warm pool size, preloaded and plain
// (the shipped defaults).
const hostilePool = 2

// hostileMemLimit is the hostile daemon's GOMEMLIMIT.
const hostileMemLimit = 64 << 20

// hostileAdmission: two runs at once (the CI machine has two cores), a
// short queue, so that H03's burst meets 503s; a quota that the suite's
// unprivileged requests cannot exhaust; and the small file-store bounds
// of the T cases (hostileStore).
func hostileAdmission(cfg string) string {
	return setKeys(hostileStore(cfg), map[string]string{"max_concurrent": "2", "queue_size": "2", "queue_wait": `"1s"`, "daily_quota": "100"}) + hostileImages()
}

// hostileSecondImage is the image the hostile daemon serves beside its
// default, with a warm jail of its own, so that every leak check runs
// with several images served at once (and D12 runs in it).
const hostileSecondImage = "python-minimal"

func hostileImages() string {
	return fmt.Sprintf("[images.%s]\ndir = %q\n", hostileSecondImage, filepath.Join(imagesRoot(), hostileSecondImage, "current"))
}

func startHostile(t *testing.T, networked bool) *hostile {
	t.Helper()
	h := &hostile{secret: "jaild-canary-" + randHex(12)}
	var err error
	tune := hostileAdmission
	if networked {
		startUpstream(t)
		h.netTable, h.netPrefix = "jaildhostile", "jh"
		tune = func(c string) string { return hostileAdmission(c) + netSection(h.netTable, h.netPrefix) }
	}
	// The socket is open to every uid: the unprivileged-caller cases
	// connect as uid 65534. The warm pool has the shipped size and
	// pre-imports, so most cases run in warm jails, as in production.
	// GOMEMLIMIT makes the Go runtime hand freed memory back promptly, so
	// that the daemon's RSS after a case measures what it still holds, not
	// the peak of the largest response (see leak_test.go).
	h.d = startDaemon(t, daemontest.Options{Config: "socket_mode = \"0666\"\n", Pool: hostilePool,
		Env: []string{"JAILD_HOSTILE_SECRET=" + h.secret, fmt.Sprintf("GOMEMLIMIT=%dMiB", hostileMemLimit>>20)}, Tune: tune})
	if h.cg, err = cgroupsOf(h.d); err != nil {
		t.Fatal(err)
	}
	// Warm up (the first runs pay for the page cache, and the daemon opens
	// a few files once, on its first cold and first warm run), let the
	// pool fill, then take the baseline.
	h.print1(t)
	h.waitPoolFull(t)
	h.print1(t)
	h.waitPoolFull(t)
	h.base = h.snapshot(t)
	return h
}

func (h *hostile) stop(t *testing.T) {
	if err := h.d.Stop(); err != nil {
		t.Errorf("stop the hostile daemon: %v", err)
	}
}

// noteRun records a run id of the current case for the leak checks.
func (h *hostile) noteRun(id string) {
	if id == "" {
		return
	}
	h.mu.Lock()
	h.runIDs = append(h.runIDs, id)
	h.mu.Unlock()
}

// exec posts an execute request and returns its 200 response, failing the
// test on anything else.
func (h *hostile) exec(t *testing.T, req any) *api.ExecuteResponse {
	t.Helper()
	var raw json.RawMessage
	status, _ := h.d.call(t, "POST", "/v1/execute", req, &raw)
	if status != http.StatusOK {
		t.Fatalf("execute: HTTP %d: %s", status, raw)
	}
	var r api.ExecuteResponse
	if err := strictJSON(raw, &r); err != nil {
		t.Fatalf("execute: malformed response: %v\n%s", err, raw)
	}
	if r.Status == "" || r.RunID == "" {
		t.Fatalf("execute: response without status or run_id: %s", raw)
	}
	h.noteRun(r.RunID)
	return &r
}

// strictJSON decodes one JSON object with no unknown fields and nothing
// after it: the daemon's responses are a contract.
func strictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the JSON object")
	}
	return nil
}

// errorCall sends a raw body and decodes the error response, which must
// have the one error shape.
func (h *hostile) errorCall(t *testing.T, method, path string, body any) (int, api.ErrorBody) {
	t.Helper()
	var raw json.RawMessage
	status, _ := h.d.call(t, method, path, body, &raw)
	var e api.ErrorBody
	if err := strictJSON(raw, &e); err != nil || e.Error.Type == "" || e.Error.Message == "" {
		t.Errorf("HTTP %d: not the error shape (%v): %s", status, err, raw)
	}
	return status, e
}

func (h *hostile) print1(t *testing.T) *api.ExecuteResponse {
	t.Helper()
	var r api.ExecuteResponse
	status, _ := h.d.call(t, "POST", "/v1/execute", `{"code":"print(1)"}`, &r)
	if status != 200 || r.Status != "ok" || r.Stdout != "1\n" {
		t.Fatalf("print(1): HTTP %d %+v", status, r)
	}
	return &r
}

func (h *hostile) info(t *testing.T) api.Info {
	t.Helper()
	var info api.Info
	if status, _ := h.d.call(t, "GET", "/v1/info", nil, &info); status != 200 {
		t.Fatalf("info: HTTP %d", status)
	}
	return info
}

func (h *hostile) waitPoolFull(t *testing.T) {
	t.Helper()
	waitFor(t, 90*time.Second, "the warm pools to fill", func() bool {
		for _, im := range h.info(t).Images {
			if p := im.Pool; p.Ready < p.Size || p.PlainReady < p.PlainSize {
				return false
			}
		}
		return true
	})
}

// runCase runs one case and returns what was observed.
func (h *hostile) runCase(t *testing.T, c hcase) string {
	if c.run != nil {
		return c.run(t, h)
	}
	req := c.req
	req.Code = c.code
	return c.check(t, h.exec(t, req))
}

// TestHostile runs the suite against a daemon without egress and writes
// docs/SECURITY.md's table; TestHostileNetworked runs it again against a
// daemon with egress enabled, every run asking for "network": "internet"
// (but the cases about having no network), with the network's own leak
// checks after each case.
func TestHostile(t *testing.T) { runHostile(t, false) }

func TestHostileNetworked(t *testing.T) { runHostile(t, true) }

func runHostile(t *testing.T, networked bool) {
	cases := hostileCases()
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.id] || c.id == "" || c.title == "" || c.expect == "" || (c.run == nil) == (c.check == nil) || (c.run != nil && c.code != "") {
			t.Fatalf("case %q: duplicate id, missing title/expectation, or not exactly one of check and run", c.id)
		}
		seen[c.id] = true
	}
	h := startHostile(t, networked)
	defer h.stop(t)
	if networked {
		h.d.inject = map[string]any{"network": "internet"}
	}
	start := time.Now()
	var rows []reportRow
	for _, c := range cases {
		row := reportRow{ID: c.id, Category: c.cat, Case: c.title, Expected: c.expect}
		ran := false
		ok := t.Run(c.id, func(t *testing.T) {
			ran = true
			h.mu.Lock()
			h.runIDs = nil
			h.mu.Unlock()
			caseStart := time.Now()
			if networked {
				h.d.inject = map[string]any{"network": "internet"}
				if c.noNet {
					h.d.inject = nil
				}
			}
			row.Observed = h.runCase(t, c)
			if t.Failed() && row.Observed == "" {
				row.Observed = "the case did not complete (see the test log)"
			}
			leakStart := time.Now()
			if leaks := h.checkLeaks(t); leaks != "" {
				row.Observed += "; LEAK: " + leaks
			}
			t.Logf("%s: case %v, leak checks %v", c.id, leakStart.Sub(caseStart).Round(time.Millisecond), time.Since(leakStart).Round(time.Millisecond))
		})
		if !ran {
			continue
		}
		row.Result = "pass"
		if !ok {
			row.Result = "FAIL"
		}
		rows = append(rows, row)
	}
	t.Logf("%d cases in %v", len(rows), time.Since(start).Round(time.Second))
	h.checkFlat(t, len(rows))
	if !networked { // the report is of the suite without egress
		checkReport(t, rows, len(cases))
	}
}

// setKeys sets TOML keys (each present once in the test configuration).
func setKeys(cfg string, kv map[string]string) string {
	for k, v := range kv {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(k) + ` = .*$`)
		if !re.MatchString(cfg) {
			panic("test config has no key " + k)
		}
		cfg = re.ReplaceAllLiteralString(cfg, k+" = "+v)
	}
	return cfg
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// outJSON decodes the last stdout line of a run as a JSON object: the
// cases' snippets print their findings that way.
func outJSON(t *testing.T, r *api.ExecuteResponse) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(lines[len(lines)-1]))
	dec.UseNumber() // 33554432, not 3.3554432e+07
	if err := dec.Decode(&m); err != nil {
		t.Errorf("status %s: stdout is not the snippet's JSON (%v)\nstdout: %.2000s\nstderr: %.2000s", r.Status, err, r.Stdout, r.Stderr)
		return map[string]any{}
	}
	return m
}

// wantStatus checks the run's status and returns "status=<s>" for the
// observed line.
func wantStatus(t *testing.T, r *api.ExecuteResponse, want string) string {
	t.Helper()
	if r.Status != want {
		t.Errorf("status %q, want %q (exit %v signal %v message %q)\nstdout: %.1000s\nstderr: %.1000s", r.Status, want, deref(r.ExitCode), deref(r.Signal), r.Message, r.Stdout, r.Stderr)
	}
	return "status " + r.Status
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// sameValues checks that every key of got has the value want, and returns
// "k1, k2: want" (or each differing key with its value) for the report.
func sameValues(t *testing.T, got map[string]any, keys []string, want string) string {
	t.Helper()
	var bad []string
	for _, k := range keys {
		v, ok := got[k]
		if !ok || fmt.Sprint(v) != want {
			bad = append(bad, fmt.Sprintf("%s=%v", k, v))
		}
	}
	if len(bad) > 0 {
		t.Errorf("want %s for all of %v; got %s", want, keys, strings.Join(bad, ", "))
		return strings.Join(bad, ", ")
	}
	return strings.Join(keys, ", ") + ": " + want
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
