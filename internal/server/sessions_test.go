package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/metrics/metricstest"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/server"
)

func TestSessionRoutes(t *testing.T) {
	h := harness(t, nil)
	ctx := context.Background()
	s, err := h.Client.CreateSession(ctx, &api.SessionCreateRequest{IdleTimeoutS: ptr(int64(60)), Env: map[string]string{"A": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if s.IdleTimeoutS != 60 || s.State != api.SessionIdle || s.Limits.MemoryMB != 512 || s.UID != user.UID {
		t.Errorf("created %+v", s)
	}
	fake := h.Engine.Sessions()[0]
	// The jail lives as long as the session may: its CPU rlimit follows.
	if fake.Spec.Limits.Timeout != time.Hour || fake.Spec.Env["A"] != "b" {
		t.Errorf("spec %+v", fake.Spec)
	}
	r, err := h.Client.SessionExecute(ctx, s.SessionID, &api.SessionExecuteRequest{Code: "print(1)"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "print(1)" || r.ExecutionCount != 1 || r.Session.State != api.SessionIdle || r.Session.SessionID != s.SessionID {
		t.Errorf("call %+v", r)
	}
	list, err := h.Client.Sessions(ctx)
	if err != nil || len(list.Sessions) != 1 || list.Sessions[0].ExecutionCount != 1 {
		t.Fatalf("list %+v %v", list, err)
	}
	for _, c := range []struct{ method, path string }{{http.MethodPut, "/v1/sessions"}, {http.MethodPost, "/v1/sessions/" + s.SessionID}, {http.MethodGet, "/v1/sessions/x/execute"}} {
		if code, hdr, e := raw(t, h, c.method, c.path, "", ""); code != http.StatusMethodNotAllowed || e.Type != "method_not_allowed" || hdr.Get("Allow") == "" {
			t.Errorf("%s %s: %d %+v", c.method, c.path, code, e)
		}
	}
	ended, err := h.Client.DeleteSession(ctx, s.SessionID)
	if err != nil || ended.State != api.SessionEnded || *ended.EndReason != "deleted" || !fake.Closed() {
		t.Fatalf("delete %+v %v", ended, err)
	}
	_, err = h.Client.SessionExecute(ctx, s.SessionID, &api.SessionExecuteRequest{Code: "1"})
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "deleted") {
		t.Errorf("call after delete: %v", err)
	}
}

func TestSessionFields(t *testing.T) {
	h := harness(t, nil)
	ctx := context.Background()
	s, err := h.Client.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req   api.SessionExecuteRequest
		field string
	}{
		{api.SessionExecuteRequest{Code: "1", Limits: &api.Limits{MemoryMB: ptr(int64(1))}}, "limits.memory_mb"},
		{api.SessionExecuteRequest{Code: "1", Limits: &api.Limits{Pids: ptr(int64(1))}}, "limits.pids"},
		{api.SessionExecuteRequest{Code: "1", Network: "internet"}, "network"},
		{api.SessionExecuteRequest{Code: "1", Limits: &api.Limits{TimeoutMs: ptr(int64(0))}}, "limits.timeout_ms"},
		{api.SessionExecuteRequest{Code: "1", Limits: &api.Limits{OutputBytes: ptr(int64(1 << 40))}}, "limits.output_bytes"},
		{api.SessionExecuteRequest{Code: "1", ReturnFiles: []string{"../x"}}, "return_files[0]"},
		{api.SessionExecuteRequest{}, "code"},
	} {
		_, err := h.Client.SessionExecute(ctx, s.SessionID, &c.req)
		var fe *api.Error
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want a field error of %s", c.req, err, c.field)
		}
	}
	for _, c := range []struct {
		req   api.SessionCreateRequest
		field string
	}{
		{api.SessionCreateRequest{TTLS: ptr(int64(5 * 3600))}, "ttl_s"},
		{api.SessionCreateRequest{IdleTimeoutS: ptr(int64(0))}, "idle_timeout_s"},
		{api.SessionCreateRequest{Env: map[string]string{"LD_PRELOAD": "x"}}, "env"},
		{api.SessionCreateRequest{Files: []api.FileIn{{Path: "/etc/x"}}}, "files[0].path"},
		{api.SessionCreateRequest{Files: []api.FileIn{{Path: "a"}, {Path: "a/b/c"}}}, "files[1].path"},
	} {
		_, err := h.Client.CreateSession(ctx, &c.req)
		var fe *api.Error
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: %v, want a field error of %s", c.req, err, c.field)
		}
	}
}

func TestSessionOwnersCapsAndConflicts(t *testing.T) {
	h := harness(t, func(c *config.Config) { c.Sessions.MaxPerUID = 1 })
	ctx := context.Background()
	release := make(chan struct{})
	h.Engine.SessionExec = func(ctx context.Context, c *spec.Call) (*spec.CallResult, error) {
		if c.Code == "block" {
			<-release
		}
		return &spec.CallResult{Count: 1, Result: spec.Result{Status: spec.StatusOK}}, nil
	}
	s, err := h.Client.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client.CreateSession(ctx, nil); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Errorf("beyond the cap: %v", err)
	}
	// Another uid, same daemon.
	other := httptest.NewServer(server.WithCaller(h.Server.Handler(), peer.Caller{UID: 1001, PID: 2}))
	defer other.Close()
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/sessions/" + s.SessionID, ""},
		{http.MethodDelete, "/v1/sessions/" + s.SessionID, ""},
		{http.MethodPost, "/v1/sessions/" + s.SessionID + "/execute", `{"code":"1"}`},
		{http.MethodPost, "/v1/sessions/" + s.SessionID + "/interrupt", ``},
	} {
		req, _ := http.NewRequest(c.method, other.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("uid 1001 %s %s: %d, want 404", c.method, c.path, resp.StatusCode)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := h.Client.SessionExecute(ctx, s.SessionID, &api.SessionExecuteRequest{Code: "block"})
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, _ := h.Client.Session(ctx, s.SessionID)
		if got != nil && got.State == api.SessionRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call never ran")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := h.Client.SessionExecute(ctx, s.SessionID, &api.SessionExecuteRequest{Code: "1"}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("concurrent call: %v", err)
	}
	ir, err := h.Client.InterruptSession(ctx, s.SessionID)
	if err != nil || !ir.Interrupted {
		t.Errorf("interrupt: %+v %v", ir, err)
	}
	select {
	case <-h.Engine.Sessions()[0].Interrupted():
	case <-time.After(5 * time.Second):
		t.Error("the engine got no interrupt")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.Log(), `"op":"session_execute"`) || !strings.Contains(h.Log(), `"call":1`) {
		t.Errorf("no audit line with the session and call: %s", h.Log())
	}
}

func TestSessionsDisabled(t *testing.T) {
	h := harness(t, func(c *config.Config) { c.Sessions.Enabled = false })
	if _, err := h.Client.CreateSession(context.Background(), nil); !errors.Is(err, errdefs.ErrForbidden) {
		t.Errorf("%v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// An interrupt's body is looked at only for a live session, and is at
// most 4 KiB; a session call's body is read only for a live session.
func TestSessionBodiesAfterLookup(t *testing.T) {
	h := harness(t, nil)
	s, err := h.Client.CreateSession(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	big := "{" + strings.Repeat(" ", 8<<10) + "}"
	for _, c := range []struct {
		path, body string
		status     int
		typ, says  string
	}{
		{"/v1/sessions/s_nope/interrupt", big, http.StatusNotFound, "not_found", "s_nope"},
		{"/v1/sessions/s_nope/execute", `{"code":`, http.StatusNotFound, "not_found", "s_nope"},
		{"/v1/sessions/" + s.SessionID + "/interrupt", big, http.StatusRequestEntityTooLarge, "too_large", "4096"},
		{"/v1/sessions/" + s.SessionID + "/interrupt", `{"x":1}`, http.StatusBadRequest, "invalid_argument", "x"},
		{"/v1/sessions/" + s.SessionID + "/interrupt", `{}`, http.StatusOK, "", ""},
	} {
		status, _, e := raw(t, h, http.MethodPost, c.path, "application/json", c.body)
		if status != c.status || e.Type != c.typ || !strings.Contains(e.Message, c.says) {
			t.Errorf("POST %s (%d bytes): %d %+v, want %d %s naming %q", c.path, len(c.body), status, e, c.status, c.typ, c.says)
		}
	}
}

// TestSessionMemoryBounds: a creation reserves its memory_mb before its
// jail is made; one past the caller's bound is 429, past the total 503,
// both naming the bound; /v1/info and the metrics show what is reserved,
// and it is zero again once every session ended (a failed creation holds
// nothing).
func TestSessionMemoryBounds(t *testing.T) {
	h := harness(t, func(c *config.Config) {
		c.Sessions.MaxMemoryPerUIDMB, c.Sessions.MaxMemoryTotalMB = 1024, 1536
	})
	ctx := context.Background()
	other := httptest.NewServer(server.WithCaller(h.Server.Handler(), peer.Caller{UID: 1001, PID: 2}))
	defer other.Close()
	create := func(base string) (int, api.ErrorDetail, string) {
		t.Helper()
		resp, err := http.Post(base+"/v1/sessions", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusCreated {
			var s api.Session
			_ = json.NewDecoder(resp.Body).Decode(&s)
			return resp.StatusCode, api.ErrorDetail{}, s.SessionID
		}
		var e api.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error, ""
	}
	reserved := func(want int64) {
		t.Helper()
		info, err := h.Client.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		s := info.Sessions
		if s.MemoryReservedBytes != want<<20 || s.MaxMemoryPerUIDBytes != 1024<<20 || s.MaxMemoryTotalBytes != 1536<<20 {
			t.Fatalf("info: reserved %d MiB (want %d), per uid %d, total %d", s.MemoryReservedBytes>>20, want, s.MaxMemoryPerUIDBytes>>20, s.MaxMemoryTotalBytes>>20)
		}
		if g := scrape(t, h)[metricstest.Key("jaild_sessions_memory_reserved_bytes")]; g != float64(want<<20) {
			t.Fatalf("jaild_sessions_memory_reserved_bytes %g, want %d MiB", g, want)
		}
	}
	reserved(0)
	var mine []string
	for range 2 {
		s, err := h.Client.CreateSession(ctx, nil) // 512 MiB each, the default
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, s.SessionID)
	}
	reserved(1024)
	_, err := h.Client.CreateSession(ctx, nil)
	if !errors.Is(err, errdefs.ErrRateLimited) || !strings.Contains(err.Error(), "sessions.max_memory_per_uid_mb, 1024 MiB") {
		t.Fatalf("past the caller's bound: %v", err)
	}
	var theirs []string
	code, _, id := create(other.URL)
	if code != http.StatusCreated {
		t.Fatalf("uid 1001's first: %d", code)
	}
	theirs = append(theirs, id)
	if code, e, _ := create(other.URL); code != http.StatusServiceUnavailable || e.Type != "unavailable" || !strings.Contains(e.Message, "sessions.max_memory_total_mb, 1536 MiB") {
		t.Fatalf("past the total: %d %+v", code, e)
	}
	reserved(1536)
	// A creation whose jail fails gives its memory back.
	if _, err := h.Client.DeleteSession(ctx, mine[1]); err != nil {
		t.Fatal(err)
	}
	reserved(1024)
	h.Engine.FailSessions(errors.New("no jail"))
	if _, err := h.Client.CreateSession(ctx, nil); err == nil {
		t.Fatal("a failed jail made a session")
	}
	h.Engine.FailSessions(nil)
	reserved(1024)
	// A session that ends by itself gives it back too.
	h.Engine.Sessions()[0].End(spec.EndLosses)
	reserved(512)
	code, _, id = create(other.URL)
	if code != http.StatusCreated {
		t.Fatalf("uid 1001 after room was made: %d", code)
	}
	theirs = append(theirs, id)
	reserved(1024)
	for _, id := range theirs {
		req, _ := http.NewRequest(http.MethodDelete, other.URL+"/v1/sessions/"+id, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("delete uid 1001's %s: %v", id, err)
		}
		resp.Body.Close()
	}
	reserved(0)
}
