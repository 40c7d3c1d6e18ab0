package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/policy"
	"github.com/jaild/jaild/internal/ruff"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/server/servertest"
)

var user = peer.Caller{UID: 1000, PID: 1}

func harness(t *testing.T, mod func(*config.Config)) *servertest.Harness {
	t.Helper()
	cfg := config.Default()
	if mod != nil {
		mod(&cfg)
	}
	return servertest.New(t, cfg, user)
}

// raw sends one request and returns the status, headers and decoded error
// body (when the status is not 200).
func raw(t *testing.T, h *servertest.Harness, method, path, ctype, body string) (int, http.Header, api.ErrorDetail) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.Socket)
	}}}
	req, err := http.NewRequest(method, "http://jaild"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var eb api.ErrorBody
	if resp.StatusCode != http.StatusOK {
		if err := json.Unmarshal(data, &eb); err != nil || eb.Error.Type == "" || eb.Error.Message == "" {
			t.Fatalf("%s %s: HTTP %d with a body that is not the error shape: %s", method, path, resp.StatusCode, data)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: error Content-Type %q", method, path, ct)
		}
	}
	return resp.StatusCode, resp.Header, eb.Error
}

func TestRoutes(t *testing.T) {
	h := harness(t, nil)
	for _, tc := range []struct {
		method, path string
		status       int
		typ, allow   string
	}{
		{"GET", "/v1/health", 200, "", ""},
		{"GET", "/v1/info", 200, "", ""},
		{"GET", "/v1/nothing", 404, "not_found", ""},
		{"GET", "/", 404, "not_found", ""},
		{"GET", "/v1/info/../../etc/passwd", 404, "not_found", ""},
		{"GET", "//v1/info", 404, "not_found", ""},
		{"GET", "/v1/info/", 404, "not_found", ""},
		{"GET", "/v1/execute", 405, "method_not_allowed", "POST"},
		{"DELETE", "/v1/lint", 405, "method_not_allowed", "POST"},
		{"POST", "/v1/info", 405, "method_not_allowed", "GET, HEAD"},
	} {
		status, hdr, e := raw(t, h, tc.method, tc.path, "", "")
		if status != tc.status || e.Type != tc.typ || hdr.Get("Allow") != tc.allow {
			t.Errorf("%s %s: HTTP %d %q Allow %q; want %d %q %q", tc.method, tc.path, status, e.Type, hdr.Get("Allow"), tc.status, tc.typ, tc.allow)
		}
	}
}

func TestExecuteMapsTheResult(t *testing.T) {
	h := harness(t, nil)
	repr := "3"
	h.Engine.RunFunc = func(_ context.Context, req *spec.Request) (*spec.Result, error) {
		return &spec.Result{
			ID: "abc", Status: spec.StatusError, ExitCode: 1, Stdout: []byte("out\xff"), Stderr: []byte("err"),
			Exception:  &spec.Exception{Type: "ValueError", Message: "bad\nsecond line", Line: 2},
			ResultRepr: &repr, Duration: 1500 * time.Millisecond, PeakMemoryBytes: 1 << 20,
			Files: []spec.ReturnedFile{{Path: "o.txt", Size: 2, Data: []byte("hi")}, {Path: "l", Error: "not a regular file (symlink)"}},
		}, nil
	}
	stdin := "in"
	res, err := h.Client.Execute(t.Context(), &api.ExecuteRequest{
		Code: "x = 1\nraise ValueError", Stdin: &stdin, ReturnFiles: []string{"*"},
		Files: []api.FileIn{{Path: "a/b/c.txt", ContentB64: base64.StdEncoding.EncodeToString([]byte("data"))}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.RunID != "abc" || res.Status != "error" || *res.ExitCode != 1 || res.Signal != nil || res.Stdout != "out\uFFFD" ||
		res.Error == nil || res.Error.Type != "ValueError" || *res.Error.Line != 2 || res.Message != "ValueError: bad" ||
		*res.Result != "3" || res.Usage.DurationMs != 1500 || len(res.Files) != 2 || res.Files[0].ContentB64 != "aGk=" || res.Files[1].Error == "" {
		t.Errorf("response %+v", res)
	}
	reqs := h.Engine.Requests()
	if len(reqs) != 1 || string(reqs[0].Stdin) != "in" || reqs[0].Files[0].Path != "a/b/c.txt" || string(reqs[0].Files[0].Data) != "data" ||
		reqs[0].Limits != policy.EngineLimits(config.Default().Defaults) {
		t.Errorf("engine got %+v", reqs)
	}
	if !strings.Contains(h.Log(), `"code_sha256"`) {
		t.Errorf("no audit line for the run:\n%s", h.Log())
	}
}

func TestExecuteValidation(t *testing.T) {
	h := harness(t, nil)
	for _, tc := range []struct {
		body, field, inMsg string
	}{
		{`{}`, "code", "is required"},
		{`{"code":"1","files":[{"path":"../x","content_b64":""}]}`, "files[0].path", "contains .."},
		{`{"code":"1","files":[{"path":"a","content_b64":"!"}]}`, "files[0].content_b64", "base64"},
		{`{"code":"1","return_files":["a/[x"]}`, "return_files[0]", "bad glob"},
		{`{"code":"1","env":{"LD_PRELOAD":"x"}}`, "env", "LD_PRELOAD"},
		{`{"code":"1","limits":{"memory_mb":999999}}`, "limits.memory_mb", "above the maximum"},
		{`{"code":"1","limits":{"timeout_ms":"x"}}`, "", "limits.timeout_ms"},
		{`{"code":"1","bogus":1}`, "", "bogus"},
		{`{"code":"1"} {}`, "", "trailing data"},
		{`{"code":`, "", "truncated"},
		{`{"code":"1","network":"moon"}`, "network", "moon"},
	} {
		status, _, e := raw(t, h, "POST", "/v1/execute", "application/json", tc.body)
		if status != 400 || e.Type != "invalid_argument" || e.Field != tc.field || !strings.Contains(e.Message, tc.inMsg) {
			t.Errorf("%s: HTTP %d %+v; want 400 naming %q (field %q)", tc.body, status, e, tc.inMsg, tc.field)
		}
	}
	if n := len(h.Engine.Requests()); n != 0 {
		t.Errorf("%d invalid requests reached the engine", n)
	}
}

func TestBodyTypeAndSize(t *testing.T) {
	h := harness(t, func(c *config.Config) { c.MaxBodyBytes = 1000 })
	for _, ct := range []string{"application/xml", "application/x-www-form-urlencoded", "text/plain", "nonsense/"} {
		status, _, e := raw(t, h, "POST", "/v1/execute", ct, `{"code":"print(1)"}`)
		if status != 415 || e.Type != "unsupported_media_type" || !strings.Contains(e.Message, "application/json") {
			t.Errorf("Content-Type %s: HTTP %d %+v", ct, status, e)
		}
	}
	for _, ct := range []string{"", "application/json", "application/json; charset=utf-8", "application/vnd.x+json"} {
		if status, _, e := raw(t, h, "POST", "/v1/execute", ct, `{"code":"print(1)"}`); status != 200 {
			t.Errorf("Content-Type %q: HTTP %d %+v", ct, status, e)
		}
	}
	status, _, e := raw(t, h, "POST", "/v1/execute", "", `{"code":"`+strings.Repeat("x", 2000)+`"}`)
	if status != 413 || e.Type != "too_large" || !strings.Contains(e.Message, "1000") {
		t.Errorf("oversized body: HTTP %d %+v", status, e)
	}
	if n := len(h.Engine.Requests()); n != 4 {
		t.Errorf("engine ran %d requests, want the 4 JSON ones", n)
	}
}

// Engine errors keep their class; the daemon's own are 500 with no detail.
func TestEngineErrors(t *testing.T) {
	h := harness(t, nil)
	for _, tc := range []struct {
		err    error
		status int
		typ    string
		msg    string
	}{
		{errdefs.New(errdefs.ErrUnavailable, "too many jails at once"), 503, "unavailable", "too many jails at once"},
		{errdefs.New(errdefs.ErrUnavailable, "the daemon is shutting down"), 503, "unavailable", "shutting down"}, // jail.ErrClosed
		{errdefs.New(errdefs.ErrInvalidArgument, "a/b: the files do not fit the workspace"), 400, "invalid_argument", "do not fit"},
		{fmt.Errorf("mount /var/lib/jaild/secret: %w", errors.New("EPERM")), 500, "internal", "internal error; see the daemon's log"},
	} {
		h.Engine.RunFunc = func(context.Context, *spec.Request) (*spec.Result, error) { return nil, tc.err }
		status, _, e := raw(t, h, "POST", "/v1/execute", "", `{"code":"1"}`)
		if status != tc.status || e.Type != tc.typ || !strings.Contains(e.Message, tc.msg) {
			t.Errorf("%v: HTTP %d %+v; want %d %s %q", tc.err, status, e, tc.status, tc.typ, tc.msg)
		}
		if strings.Contains(e.Message, "/var/lib") {
			t.Errorf("a host path reached the caller: %q", e.Message)
		}
	}
	if !strings.Contains(h.Log(), "/var/lib/jaild/secret") {
		t.Error("the internal error's detail is not in the daemon's log")
	}
}

func TestQuotaAndRate(t *testing.T) {
	h := harness(t, func(c *config.Config) { c.Admission.DailyQuota = 2 })
	for i := range 2 {
		if _, err := h.Client.Execute(t.Context(), &api.ExecuteRequest{Code: "1"}); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	if n, limited := h.Client.QuotaRemaining(); !limited || n != 0 {
		t.Errorf("quota header: %d %v", n, limited)
	}
	_, err := h.Client.Execute(t.Context(), &api.ExecuteRequest{Code: "1"})
	var ce *client.Error
	if !errors.Is(err, errdefs.ErrRateLimited) || !errors.As(err, &ce) || ce.RetryAfter <= 0 || ce.Err.Status != 429 {
		t.Errorf("past the quota: %v", err)
	}
	// Lint and format count against the same quota.
	if _, err := h.Client.Lint(t.Context(), &api.LintRequest{Code: "1"}); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Errorf("lint past the quota: %v", err)
	}
}

func TestBusy(t *testing.T) {
	h := harness(t, func(c *config.Config) {
		c.Admission.MaxConcurrent, c.Admission.QueueSize = 1, 0
	})
	started, release := make(chan struct{}), make(chan struct{})
	h.Engine.RunFunc = func(ctx context.Context, _ *spec.Request) (*spec.Result, error) {
		close(started)
		<-release
		return &spec.Result{ID: "x", Status: spec.StatusOK}, nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.Client.Execute(context.Background(), &api.ExecuteRequest{Code: "1"})
		done <- err
	}()
	<-started
	_, err := h.Client.Execute(t.Context(), &api.ExecuteRequest{Code: "1"})
	var ce *client.Error
	if !errors.Is(err, errdefs.ErrBusy) || !errors.As(err, &ce) || ce.Err.Status != 503 || ce.RetryAfter <= 0 {
		t.Errorf("second run with one slot and no queue: %v", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("first run: %v", err)
	}
}

func TestLintAndFormat(t *testing.T) {
	h := harness(t, nil)
	h.Engine.RunFunc = func(_ context.Context, req *spec.Request) (*spec.Result, error) {
		switch req.Command[1] {
		case "check":
			args := strings.Join(req.Command, " ")
			if !strings.Contains(args, "--select ALL") || !strings.Contains(args, "--ignore "+strings.Join(ruff.DefaultIgnore, ",")) {
				return nil, fmt.Errorf("unexpected ruff arguments %q", args)
			}
			return &spec.Result{Status: spec.StatusOK, Stdout: []byte(`[{"code":"F821","message":"Undefined name x","location":{"row":1,"column":7},"end_location":{"row":1,"column":8},"fix":null,"url":"https://docs.astral.sh/ruff/rules/undefined-name"},
{"code":null,"message":"SyntaxError","location":{"row":2,"column":1},"end_location":{"row":2,"column":2},"fix":{"applicability":"safe"},"url":"https://stale"}]`)}, nil
		case "format":
			if string(req.Stdin) == "def(" {
				return &spec.Result{Status: spec.StatusError, ExitCode: 2, Stderr: []byte("error: Failed to parse main.py:1:4\nmore")}, nil
			}
			return &spec.Result{Status: spec.StatusOK, Stdout: []byte("x = 1\n")}, nil
		}
		return nil, errors.New("unexpected command")
	}
	lr, err := h.Client.Lint(t.Context(), &api.LintRequest{Code: "print(x)\n("})
	if err != nil {
		t.Fatal(err)
	}
	if len(lr.Diagnostics) != 2 || lr.Diagnostics[0].Code != "F821" || lr.Diagnostics[0].Location.Column != 7 || lr.Diagnostics[0].URL == "" ||
		lr.Diagnostics[1].Code != "invalid-syntax" || lr.Diagnostics[1].URL != "" || !lr.Diagnostics[1].Fixable {
		t.Errorf("diagnostics %+v", lr.Diagnostics)
	}
	fr, err := h.Client.Format(t.Context(), &api.FormatRequest{Code: "x=1"})
	if err != nil || fr.Code != "x = 1\n" || !fr.Changed {
		t.Errorf("format: %+v %v", fr, err)
	}
	_, err = h.Client.Format(t.Context(), &api.FormatRequest{Code: "def("})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "Failed to parse") {
		t.Errorf("format of bad code: %v", err)
	}
	status, _, e := raw(t, h, "POST", "/v1/lint", "", `{"code":"1","select":["rm -rf"]}`)
	if status != 400 || !strings.Contains(e.Message, "select[0]") {
		t.Errorf("bad rule: HTTP %d %+v", status, e)
	}
	h.Engine.RunFunc = func(context.Context, *spec.Request) (*spec.Result, error) {
		return &spec.Result{Status: spec.StatusTimeout}, nil
	}
	if _, err := h.Client.Lint(t.Context(), &api.LintRequest{Code: "1"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ruff timing out: %v", err)
	}
}

func TestInfoAndHealth(t *testing.T) {
	h := harness(t, func(c *config.Config) { c.Admission.DailyQuota = 5 })
	info, err := h.Client.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.API != "v1" || info.CgroupMode != "v2" || info.Rootfs.Name != "test" || info.Seccomp.Rules != 1 ||
		info.Caller.UID != user.UID || info.Caller.Admin || info.Caller.QuotaRemaining == nil || *info.Caller.QuotaRemaining != 5 ||
		info.Defaults.TimeoutMs != config.Default().Defaults.TimeoutMs || info.Pool.Preimport == nil || info.Network.DefaultAllowHosts == nil {
		t.Errorf("info %+v", info)
	}
	hl, err := h.Client.Health(t.Context())
	if err != nil || hl.Status != "ok" {
		t.Errorf("health %+v %v", hl, err)
	}
}
