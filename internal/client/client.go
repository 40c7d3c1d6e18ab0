// Package client is the Go client of jaild's HTTP API: on its Unix socket
// (New), or on its TCP listener over mutual TLS (NewTLS). It speaks the
// wire contract of package api and turns the daemon's error responses
// back into api's error classes, so callers can test them with errors.Is
// (errdefs.ErrBusy, errdefs.ErrRateLimited, ...).
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/version"
)

// SocketEnv is the environment variable that names the daemon's socket.
const SocketEnv = "JAILD_SOCKET"

// DefaultSocketPath is the daemon's socket when SocketEnv is unset.
const DefaultSocketPath = "/run/jaild/jaild.sock"

// MaxResponseBytes bounds the body of a successful response the client
// reads; an execute response carries base64 files and figures.
const MaxResponseBytes = 512 << 20

// maxErrorBytes bounds the body of an error response.
const maxErrorBytes = 1 << 20

// DefaultSocket returns $JAILD_SOCKET, or DefaultSocketPath when it is
// unset or empty.
func DefaultSocket() string {
	if s := os.Getenv(SocketEnv); s != "" {
		return s
	}
	return DefaultSocketPath
}

// Client talks to one jaild: its socket, or its TLS listener. It is safe
// for concurrent use.
type Client struct {
	socket      string // "" for a client of a TLS listener
	base        string // what a request's path is appended to
	http        *http.Client
	maxResponse int64

	mu    sync.Mutex
	quota *int64 // from the last response; nil when unlimited
}

// New returns a client of the daemon listening on socketPath. It does not
// connect until the first request.
func New(socketPath string) *Client {
	dialer := &net.Dialer{Timeout: dialTimeout}
	return newClient(socketPath, "http://jaild", &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, "unix", socketPath)
			if err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				return nil, &ConnectError{Socket: socketPath, Err: err}
			}
			return conn, nil
		},
	})
}

// CloseIdleConnections closes the client's idle keep-alive connections.
// Behind a load balancer in TCP mode a host is chosen per connection: a
// long-lived client that calls this now and then (or makes a new Client)
// spreads over the hosts, and reaches one that came back or was added.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }

// dialTimeout bounds a connection's dial, and separately its TLS
// handshake.
const dialTimeout = 10 * time.Second

// newClient returns a client whose requests go to base through tr.
func newClient(socket, base string, tr *http.Transport) *Client {
	c := &Client{socket: socket, base: base, maxResponse: MaxResponseBytes}
	tr.DisableCompression = true
	tr.MaxIdleConns = 4
	tr.IdleConnTimeout = 30 * time.Second
	// No Timeout and no ResponseHeaderTimeout: a run lasts as long as its
	// limits allow and a transfer of the file store as long as its size
	// needs (1 GiB); callers bound a request with its context.
	c.http = &http.Client{
		Transport: tr,
		// The daemon never redirects; following one could leave the
		// daemon (or the socket).
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return c
}

// Socket returns the socket path the client dials; "" for a client of a
// TLS listener (NewTLS).
func (c *Client) Socket() string { return c.socket }

// QuotaRemaining returns the caller's remaining quota as of the last
// response. limited is false when that response said the quota is
// unlimited, or before any response.
func (c *Client) QuotaRemaining() (n int64, limited bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.quota == nil {
		return 0, false
	}
	return *c.quota, true
}

// callAs is call decoding into a new T.
func callAs[T any](ctx context.Context, c *Client, method, path string, in any) (*T, error) {
	var out T
	if err := c.call(ctx, method, path, in, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// callChecked is callAs failing with "malformed response: no <field>"
// when has says the response lacks its required field.
func callChecked[T any](ctx context.Context, c *Client, method, path string, in any, field string, has func(*T) bool) (*T, error) {
	out, err := callAs[T](ctx, c, method, path, in)
	if err != nil {
		return nil, err
	}
	if !has(out) {
		return nil, fmt.Errorf("jaild %s %s: malformed response: no %s", method, path, field)
	}
	return out, nil
}

// Execute runs code in a jail (POST /v1/execute). A run that started
// returns a response whatever its outcome (see ExecuteResponse.Status);
// the error is for requests the daemon refused or could not serve.
func (c *Client) Execute(ctx context.Context, req *api.ExecuteRequest) (*api.ExecuteResponse, error) {
	return callChecked(ctx, c, http.MethodPost, "/v1/execute", req, "status", func(r *api.ExecuteResponse) bool { return r.Status != "" })
}

// Lint runs ruff's linter on code (POST /v1/lint).
func (c *Client) Lint(ctx context.Context, req *api.LintRequest) (*api.LintResponse, error) {
	return callAs[api.LintResponse](ctx, c, http.MethodPost, "/v1/lint", req)
}

// Format runs ruff's formatter on code (POST /v1/format).
func (c *Client) Format(ctx context.Context, req *api.FormatRequest) (*api.FormatResponse, error) {
	return callAs[api.FormatResponse](ctx, c, http.MethodPost, "/v1/format", req)
}

// Info describes the daemon, its limits and the caller (GET /v1/info).
func (c *Client) Info(ctx context.Context) (*api.Info, error) {
	return callAs[api.Info](ctx, c, http.MethodGet, "/v1/info", nil)
}

// Health reports whether the daemon is serving (GET /v1/health).
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	return callChecked(ctx, c, http.MethodGet, "/v1/health", nil, "status", func(r *api.Health) bool { return r.Status != "" })
}

// Do sends in (marshalled to JSON; nil sends no body) to path and returns
// the body of a 2xx response, checked to be a single JSON object. It is
// for callers that pass the daemon's JSON on unchanged. Errors are those
// of the typed methods: *ConnectError when the daemon cannot be reached
// (or, over TLS, refuses the client's certificate), *Error for an error response, and wrapped context or decoding errors.
func (c *Client) Do(ctx context.Context, method, path string, in any) (json.RawMessage, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode %s request: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")

	resp, err := c.sendOK(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return c.readObject(resp, method, path)
}

// newRequest returns a request of the daemon's API; body may be nil.
func (c *Client) newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("jaild %s %s: %w", method, path, err)
	}
	req.Header.Set("User-Agent", "jaild-client/"+version.Version)
	return req, nil
}

// send sends req and returns the response whatever its status; the caller
// closes its body. Errors are *ConnectError, or the transport's wrapped
// (context errors included).
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		var ce *ConnectError
		if errors.As(err, &ce) {
			return nil, ce
		}
		// A TLS 1.3 client's handshake ends before the daemon has checked
		// its certificate: a refusal is an alert read with the response.
		var op *net.OpError
		if c.socket == "" && errors.As(err, &op) && op.Op == "remote error" {
			return nil, &ConnectError{Host: c.base, Err: op}
		}
		return nil, fmt.Errorf("jaild %s %s: %w", req.Method, req.URL.Path, err)
	}
	c.noteQuota(resp.Header)
	return resp, nil
}

// readObject reads a successful response's body: one JSON object of at
// most c.maxResponse bytes.
func (c *Client) readObject(resp *http.Response, method, path string) (json.RawMessage, error) {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.maxResponse+1))
	if err != nil {
		return nil, fmt.Errorf("jaild %s %s: read response: %w", method, path, err)
	}
	if int64(len(raw)) > c.maxResponse {
		return nil, fmt.Errorf("jaild %s %s: response larger than %d bytes", method, path, c.maxResponse)
	}
	if err := checkObject(raw); err != nil {
		return nil, fmt.Errorf("jaild %s %s: malformed response: %w", method, path, err)
	}
	return raw, nil
}

// call is Do followed by a decode into out.
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	raw, err := c.Do(ctx, method, path, in)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("jaild %s %s: malformed response: %w", method, path, err)
	}
	return nil
}

// checkObject reports whether raw is exactly one JSON object. A bare null
// or a list would otherwise decode into a zero response without error.
func checkObject(raw []byte) error {
	t := bytes.TrimLeft(raw, " \t\r\n")
	if len(t) == 0 {
		return errors.New("empty body")
	}
	if t[0] != '{' {
		return errors.New("not a JSON object")
	}
	if !json.Valid(t) {
		return errors.New("invalid JSON")
	}
	return nil
}

func (c *Client) noteQuota(h http.Header) {
	var q *int64
	if v := h.Get(api.QuotaHeader); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			q = &n
		}
	}
	c.mu.Lock()
	c.quota = q
	c.mu.Unlock()
}
