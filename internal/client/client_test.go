package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/server/servertest/raw"
)

// serve runs h on a temporary Unix socket and returns a client of it.
func serve(t *testing.T, h http.Handler) *Client { return New(raw.Serve(t, h)) }

func TestExecuteSuccess(t *testing.T) {
	var got api.ExecuteRequest
	var method, path, ctype string
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method, path, ctype = r.Method, r.URL.Path, r.Header.Get("Content-Type")
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Errorf("decode request: %v", err)
		}
		w.Header().Set(api.QuotaHeader, "41")
		io.WriteString(w, `{"run_id":"r1","status":"error","exit_code":3,"signal":null,"stdout":"hi\n","stderr":"","files":[{"path":"out/a.txt","size_bytes":2,"content_b64":"aGk="}],"figures":[],"usage":{"duration_ms":12},"future_field":1}`)
	}))
	timeout := int64(1500)
	resp, err := c.Execute(context.Background(), &api.ExecuteRequest{
		Code:   "print('hi')",
		Limits: &api.Limits{TimeoutMs: &timeout},
	})
	if err != nil {
		t.Fatal(err)
	}
	if method != "POST" || path != "/v1/execute" || ctype != "application/json" {
		t.Errorf("request %s %s %q", method, path, ctype)
	}
	if got.Code != "print('hi')" || got.Limits == nil || *got.Limits.TimeoutMs != 1500 {
		t.Errorf("server got %+v", got)
	}
	if resp.RunID != "r1" || resp.Status != "error" || resp.ExitCode == nil || *resp.ExitCode != 3 ||
		resp.Signal != nil || resp.Stdout != "hi\n" || len(resp.Files) != 1 || resp.Usage.DurationMs != 12 {
		t.Errorf("response %+v", resp)
	}
	if n, limited := c.QuotaRemaining(); !limited || n != 41 {
		t.Errorf("QuotaRemaining = %d, %v; want 41, true", n, limited)
	}
}

func TestGetEndpoints(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /v1/info", raw.JSON(200, nil, `{"version":"1.0","api":"v1","rootfs":{"python_version":"3.12.3"},"caller":{"uid":1000,"quota_remaining":null}}`))
	mux.Handle("GET /v1/health", raw.JSON(200, nil, `{"status":"ok"}`))
	mux.Handle("POST /v1/lint", raw.JSON(200, nil, `{"diagnostics":[{"code":"F401","message":"unused","location":{"line":1,"column":8},"end_location":{"line":1,"column":10}}]}`))
	mux.Handle("POST /v1/format", raw.JSON(200, nil, `{"code":"x = 1\n","changed":true}`))
	c := serve(t, mux)
	ctx := context.Background()

	info, err := c.Info(ctx)
	if err != nil || info.Version != "1.0" || info.Rootfs.PythonVersion != "3.12.3" || info.Caller.UID != 1000 {
		t.Errorf("Info = %+v, %v", info, err)
	}
	if _, limited := c.QuotaRemaining(); limited {
		t.Error("QuotaRemaining limited without the header")
	}
	h, err := c.Health(ctx)
	if err != nil || h.Status != "ok" {
		t.Errorf("Health = %+v, %v", h, err)
	}
	l, err := c.Lint(ctx, &api.LintRequest{Code: "import os"})
	if err != nil || len(l.Diagnostics) != 1 || l.Diagnostics[0].Code != "F401" || l.Diagnostics[0].Location.Column != 8 {
		t.Errorf("Lint = %+v, %v", l, err)
	}
	f, err := c.Format(ctx, &api.FormatRequest{Code: "x=1"})
	if err != nil || f.Code != "x = 1\n" || !f.Changed {
		t.Errorf("Format = %+v, %v", f, err)
	}
}

func TestErrorResponses(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		headers    map[string]string
		body       string
		class      error
		message    string
		retryAfter time.Duration
	}{
		{"busy", 503, map[string]string{"Retry-After": "3"}, `{"error":{"type":"busy","message":"all 4 slots busy"}}`,
			errdefs.ErrBusy, "all 4 slots busy (retry after 3s)", 3 * time.Second},
		{"rate limited", 429, map[string]string{"Retry-After": "60"}, `{"error":{"type":"rate_limited","message":"quota exhausted"}}`,
			errdefs.ErrRateLimited, "quota exhausted (retry after 1m0s)", time.Minute},
		{"invalid", 400, nil, `{"error":{"type":"invalid_argument","message":"limits.timeout_ms: 999999 is more than the maximum 60000"}}`,
			errdefs.ErrInvalidArgument, "limits.timeout_ms: 999999 is more than the maximum 60000", 0},
		{"too large", 413, nil, `{"error":{"type":"too_large","message":"body over 64 MiB"}}`,
			errdefs.ErrTooLarge, "body over 64 MiB", 0},
		{"unknown type", 500, nil, `{"error":{"type":"exploded","message":"boom"}}`,
			errdefs.ErrInternal, "boom", 0},
		{"garbage body", 502, nil, `<html>bad gateway</html>`,
			errdefs.ErrInternal, `jaild answered "502 Bad Gateway" with no valid error body`, 0},
		{"bad retry-after", 503, map[string]string{"Retry-After": "soon"}, `{"error":{"type":"unavailable","message":"draining"}}`,
			errdefs.ErrUnavailable, "draining", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serve(t, raw.JSON(tt.status, tt.headers, tt.body))
			_, err := c.Execute(context.Background(), &api.ExecuteRequest{Code: "1"})
			if !errors.Is(err, tt.class) {
				t.Fatalf("err = %v; want class %v", err, tt.class)
			}
			if err.Error() != tt.message {
				t.Errorf("message %q; want %q", err.Error(), tt.message)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter: %#v; want %v", err, tt.retryAfter)
			}
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Status != tt.status {
				t.Errorf("api.Error: %#v; want status %d", ae, tt.status)
			}
		})
	}
}

func TestRetryAfterDate(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if d := retryAfter(now.Add(90*time.Second).Format(http.TimeFormat), now); d != 90*time.Second {
		t.Errorf("retryAfter(date) = %v", d)
	}
	for _, v := range []string{"", "-5", "0", "x", now.Add(-time.Hour).Format(http.TimeFormat)} {
		if d := retryAfter(v, now); d != 0 {
			t.Errorf("retryAfter(%q) = %v; want 0", v, d)
		}
	}
}

func TestMalformedResponses(t *testing.T) {
	for name, body := range map[string]string{
		"empty":      ``,
		"null":       `null`,
		"list":       `[]`,
		"truncated":  `{"run_id":"r1","status":"ok"`,
		"trailing":   `{"run_id":"r1","status":"ok"} {"x":1}`,
		"wrong type": `{"run_id":"r1","status":"ok","exit_code":"zero"}`,
		"no status":  `{"run_id":"r1"}`,
		"not json":   `hello`,
		"html":       `<html>ok</html>`,
	} {
		t.Run(name, func(t *testing.T) {
			c := serve(t, raw.JSON(200, nil, body))
			resp, err := c.Execute(context.Background(), &api.ExecuteRequest{Code: "1"})
			if err == nil || !strings.Contains(err.Error(), "malformed response") {
				t.Errorf("Execute = %+v, %v; want a malformed response error", resp, err)
			}
		})
	}
}

func TestResponseTooLarge(t *testing.T) {
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"status":"ok","stdout":"`)
		io.WriteString(w, strings.Repeat("a", 1<<20))
		io.WriteString(w, `"}`)
	}))
	c.maxResponse = 1 << 20 // MaxResponseBytes itself would take seconds
	_, err := c.Execute(context.Background(), &api.ExecuteRequest{Code: "1"})
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("err = %v; want a size error", err)
	}
}

func TestCannotConnect(t *testing.T) {
	dir := raw.SocketDir(t)

	missing := filepath.Join(dir, "missing.sock")
	_, err := New(missing).Health(context.Background())
	var ce *ConnectError
	if !errors.As(err, &ce) || ce.Socket != missing || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("err = %#v; want a ConnectError for %s", err, missing)
	}
	want := "cannot connect to jaild at " + missing + ": no such file or directory (is the daemon running?"
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "JAILD_SOCKET") {
		t.Errorf("message %q; want prefix %q", err.Error(), want)
	}

	// A socket file with no listener: bind without listen.
	refused := filepath.Join(dir, "refused.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: refused}); err != nil {
		t.Fatal(err)
	}
	_, err = New(refused).Info(context.Background())
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), refused) ||
		!strings.Contains(err.Error(), "systemctl start jaild.socket") {
		t.Errorf("refused: %v", err)
	}

	denied := (&ConnectError{Socket: "/run/jaild/jaild.sock", Err: &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}}).Error()
	if !strings.Contains(denied, "permission denied") || !strings.Contains(denied, "jaild group") {
		t.Errorf("EACCES message %q", denied)
	}
}

func TestContextCancel(t *testing.T) {
	block := make(chan struct{})
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer close(block)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Execute(ctx, &api.ExecuteRequest{Code: "1"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v; want DeadlineExceeded", err)
	}
}

func TestDefaultSocket(t *testing.T) {
	t.Setenv(SocketEnv, "")
	if s := DefaultSocket(); s != DefaultSocketPath {
		t.Errorf("DefaultSocket() = %q", s)
	}
	t.Setenv(SocketEnv, "/tmp/x.sock")
	if s := DefaultSocket(); s != "/tmp/x.sock" {
		t.Errorf("DefaultSocket() = %q", s)
	}
}

// FuzzResponse feeds arbitrary bodies, as success and as error responses,
// through the client's decoding: it must return a response or an error,
// never panic.
func FuzzResponse(f *testing.F) {
	for _, s := range []string{`{"status":"ok"}`, `null`, `[]`, `{"error":{"type":"busy","message":"x"}}`, `{"error":null}`, "\xff", `{"status":"ok"} x`} {
		f.Add(s, uint16(200), "")
		f.Add(s, uint16(503), "3")
	}
	f.Fuzz(func(t *testing.T, body string, status uint16, retry string) {
		code := int(status%500) + 100
		rec := httptest.NewRecorder()
		rec.Header().Set("Retry-After", retry)
		rec.Header().Set(api.QuotaHeader, retry)
		rec.WriteHeader(code)
		io.WriteString(rec, body)
		resp := rec.Result()
		if code < 200 || code > 299 {
			err := responseError(resp)
			var ce *Error
			if !errors.As(err, &ce) || ce.Err == nil || ce.RetryAfter < 0 {
				t.Fatalf("responseError = %#v", err)
			}
			return
		}
		raw, _ := io.ReadAll(resp.Body)
		if checkObject(raw) == nil {
			var r api.ExecuteResponse
			_ = json.Unmarshal(raw, &r)
		}
	})
}
