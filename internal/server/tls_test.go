package server_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/metrics/metricstest"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/server/servertest"
	"github.com/jaild/jaild/internal/tlsauth"
	"github.com/jaild/jaild/internal/tlsauth/tlsauthtest"
)

// tlsEnv is a harness that serves its API on a mutual-TLS listener too,
// with the clients alice and bob (alice may ask for egress), ops (an
// admin) and metered (a daily quota of its own of 2 runs).
type tlsEnv struct {
	h    *servertest.Harness
	cfg  config.Config
	ca   *tlsauthtest.CA
	auth *tlsauth.Auth
	addr string
}

func tlsHarness(t *testing.T, mod func(*config.Config), tune func(*http.Server)) *tlsEnv {
	t.Helper()
	dir := t.TempDir()
	e := &tlsEnv{cfg: config.Default(), ca: tlsauthtest.NewCA(t, "test CA")}
	quota := int64(2)
	e.cfg.TLS.Listen = "127.0.0.1:0"
	e.cfg.TLS.Cert, e.cfg.TLS.Key = e.ca.Server(t).Write(t, dir, "server")
	e.cfg.TLS.ClientCA = e.ca.Write(t, dir, "client-ca.crt")
	e.cfg.TLS.Clients = []config.TLSClient{
		{Name: "alice", Network: true}, {Name: "bob"}, {Name: "ops", Admin: true}, {Name: "metered", DailyQuota: &quota},
	}
	if mod != nil {
		mod(&e.cfg)
	}
	st, err := tlsauth.Load(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.auth = tlsauth.New(st)
	e.h = servertest.New(t, e.cfg, user)
	e.addr = e.h.ServeTLS(t, e.auth, tune)
	return e
}

// client is an HTTPS client with name's certificate (HTTP/1.1, keep-alive).
func (e *tlsEnv) client(t *testing.T, name string) *http.Client {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: tlsauthtest.ClientConfig(e.ca, e.ca.Client(t, name))}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// reloadWithout makes the listener's clients those of the configuration
// without the ones named (a SIGHUP after they were removed).
func (e *tlsEnv) reloadWithout(t *testing.T, names ...string) {
	t.Helper()
	cfg := e.cfg
	cfg.TLS.Clients = nil
	for _, c := range e.cfg.TLS.Clients {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+c.Name+" ") {
			cfg.TLS.Clients = append(cfg.TLS.Clients, c)
		}
	}
	st, err := tlsauth.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.auth.Set(st)
}

// call sends a request over TLS and returns the status and body.
func (e *tlsEnv) call(t *testing.T, c *http.Client, method, path, body string) (int, []byte) {
	t.Helper()
	status, data, err := e.try(c, method, path, body, nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return status, data
}

func (e *tlsEnv) try(c *http.Client, method, path, body string, trace *httptrace.ClientTrace) (int, []byte, error) {
	req, err := http.NewRequest(method, "https://"+e.addr+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if trace != nil {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// decode decodes a JSON body into out, failing the test if it is not.
func decode(t *testing.T, what string, data []byte, out any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(out); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, data)
	}
}

// apiError decodes the one error shape.
func apiError(t *testing.T, what string, data []byte) api.ErrorDetail {
	t.Helper()
	var eb api.ErrorBody
	decode(t, what, data, &eb)
	if eb.Error.Type == "" || eb.Error.Message == "" {
		t.Fatalf("%s: not the error shape: %s", what, data)
	}
	return eb.Error
}

func TestTLSIdentities(t *testing.T) {
	e := tlsHarness(t, nil, nil)
	alice, bob, ops := e.client(t, "alice"), e.client(t, "bob"), e.client(t, "ops")

	for _, tc := range []struct {
		c              *http.Client
		name           string
		admin, network bool
	}{{alice, "alice", false, false}, {bob, "bob", false, false}, {ops, "ops", true, false}} {
		status, data := e.call(t, tc.c, "GET", "/v1/info", "")
		var info api.Info
		decode(t, tc.name+"'s info", data, &info)
		// alice may ask for egress, but the daemon has none: no caller
		// gets it.
		if status != 200 || info.Caller.Client != tc.name || info.Caller.UID != config.TLSClientUID(tc.name) ||
			info.Caller.Admin != tc.admin || info.Caller.Network != tc.network {
			t.Errorf("%s's info: HTTP %d, caller %+v", tc.name, status, info.Caller)
		}
	}
	if info, err := e.h.Client.Info(t.Context()); err != nil || info.Caller.Client != "" || info.Caller.UID != user.UID {
		t.Errorf("the socket's caller: %+v %v", info.Caller, err)
	}

	status, data := e.call(t, alice, "POST", "/v1/sessions", "{}")
	var sess api.Session
	decode(t, "alice's session", data, &sess)
	if status != 201 || sess.SessionID == "" {
		t.Fatalf("alice's session: HTTP %d %s", status, data)
	}
	status, data = e.call(t, alice, "POST", "/v1/files?name=a.txt", "alice's data")
	var file api.StoredFile
	decode(t, "alice's file", data, &file)
	if status != 201 || file.FileID == "" || file.UID != config.TLSClientUID("alice") {
		t.Fatalf("alice's file: HTTP %d %s", status, data)
	}
	named := false
	for _, l := range strings.Split(e.h.Log(), "\n") {
		named = named || strings.Contains(l, `"op":"session_create"`) && strings.Contains(l, `"client":"alice"`)
	}
	if !named {
		t.Errorf("no session_create audit line names the client:\n%s", e.h.Log())
	}

	// Neither bob nor the socket's uid 1000 reaches alice's session or file.
	sid, fid := sess.SessionID, file.FileID
	for _, r := range []struct{ method, path, body string }{
		{"GET", "/v1/sessions/" + sid, ""},
		{"POST", "/v1/sessions/" + sid + "/execute", `{"code":"1"}`},
		{"POST", "/v1/sessions/" + sid + "/interrupt", ""},
		{"DELETE", "/v1/sessions/" + sid, ""},
		{"GET", "/v1/files/" + fid, ""},
		{"GET", "/v1/files/" + fid + "/meta", ""},
		{"DELETE", "/v1/files/" + fid, ""},
		{"POST", "/v1/execute", `{"code":"1","files":[{"path":"a.txt","file_id":"` + fid + `"}]}`},
	} {
		status, data := e.call(t, bob, r.method, r.path, r.body)
		if er := apiError(t, "bob: "+r.method+" "+r.path, data); status != 404 || er.Type != "not_found" {
			t.Errorf("bob: %s %s: HTTP %d %+v, want 404", r.method, r.path, status, er)
		}
		if status, _, er := raw(t, e.h, r.method, r.path, "", r.body); status != 404 || er.Type != "not_found" {
			t.Errorf("uid 1000: %s %s: HTTP %d %+v, want 404", r.method, r.path, status, er)
		}
	}

	lists := func(c *http.Client, who string) (sessions, files []string) {
		t.Helper()
		var sl api.SessionList
		var fl api.FileList
		_, data := e.call(t, c, "GET", "/v1/sessions", "")
		decode(t, who+"'s sessions", data, &sl)
		_, data = e.call(t, c, "GET", "/v1/files", "")
		decode(t, who+"'s files", data, &fl)
		for _, s := range sl.Sessions {
			sessions = append(sessions, s.SessionID)
		}
		for _, f := range fl.Files {
			files = append(files, f.FileID)
		}
		return sessions, files
	}
	for _, tc := range []struct {
		c    *http.Client
		who  string
		sees bool
	}{{alice, "alice", true}, {bob, "bob", false}, {ops, "ops (admin)", true}} {
		ss, fs := lists(tc.c, tc.who)
		if got := strings.Join(ss, ",") == sid && strings.Join(fs, ",") == fid; got != tc.sees {
			t.Errorf("%s lists sessions %v and files %v; sees alice's: %v, want %v", tc.who, ss, fs, got, tc.sees)
		}
	}
	if sl, err := e.h.Client.Sessions(t.Context()); err != nil || len(sl.Sessions) != 0 {
		t.Errorf("uid 1000's sessions: %+v %v", sl, err)
	}
	if fl, err := e.h.Client.ListFiles(t.Context()); err != nil || len(fl.Files) != 0 {
		t.Errorf("uid 1000's files: %+v %v", fl, err)
	}

	// What bob tried did nothing to them.
	if status, data := e.call(t, alice, "GET", "/v1/files/"+fid, ""); status != 200 || string(data) != "alice's data" {
		t.Errorf("alice's file after bob's delete: HTTP %d %q", status, data)
	}
	status, data = e.call(t, alice, "POST", "/v1/sessions/"+sid+"/execute", `{"code":"1"}`)
	var se api.SessionExecuteResponse
	decode(t, "alice's call", data, &se)
	if status != 200 || se.Status != "ok" {
		t.Errorf("alice's session after bob's delete: HTTP %d %s", status, data)
	}
}

// A plain HTTP request to the TLS port gets no answer of the API.
func TestTLSPortRefusesPlainHTTP(t *testing.T) {
	e := tlsHarness(t, nil, nil)
	const req = "GET /v1/info HTTP/1.1\r\nHost: jaild\r\nConnection: close\r\n\r\n"
	c, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c) // the server closes the connection
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server held a plain-HTTP connection open: %q", got)
	}
	// Go's TLS server answers a 400 of its own; anything else must not be
	// HTTP. Either way, no JSON of the API.
	if len(got) > 0 && !strings.HasPrefix(string(got), "HTTP/1.0 400 ") || bytes.Contains(got, []byte("{")) {
		t.Errorf("plain HTTP to the TLS port: %q", got)
	}
	// The refusal is counted: a client without a certificate, and this one.
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsauthtest.ClientConfig(e.ca, nil)}}
	if _, _, err := e.try(noCert, "GET", "/v1/info", "", nil); err == nil {
		t.Error("a client without a certificate was served")
	}
	ops := e.client(t, "ops")
	var n float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		_, data := e.call(t, ops, "GET", "/metrics", "")
		m, err := metricstest.Parse(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if n = m[metricstest.Key("jaild_tls_handshake_failures_total")]; n >= 2 {
			break
		}
	}
	if n < 2 {
		t.Errorf("jaild_tls_handshake_failures_total = %v after two refused connections", n)
	}
}

// Connections that never finish a handshake, or never send a request,
// hold nothing the other clients need, and the server closes them once the
// header timeout is over.
func TestTLSSlowConnections(t *testing.T) {
	probe := tlsHarness(t, nil, nil)
	if got := probe.h.Server.TLSServer(probe.auth).ReadHeaderTimeout; got != 10*time.Second {
		t.Errorf("TLSServer's ReadHeaderTimeout %v, want the 10 s that bound a handshake", got)
	}
	// The same server with a bound of 2 s, on the header and on the
	// handshake, so that the test is short.
	const bound = 2 * time.Second
	e := tlsHarness(t, func(c *config.Config) { c.TLS.HandshakeTimeout.Duration = bound }, func(hs *http.Server) { hs.ReadHeaderTimeout = bound })

	type slow struct {
		what string
		c    net.Conn
	}
	var conns []slow
	start := time.Now()
	for range 20 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, slow{"a connection that sends nothing", c})
	}
	for range 20 {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		// A TLS record header announcing a 512-byte ClientHello, and its
		// first 6 bytes.
		if _, err := c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, slow{"a partial ClientHello", c})
	}
	// A client that completes its handshake and sends half a header.
	half, err := tls.Dial("tcp", e.addr, tlsauthtest.ClientConfig(e.ca, e.ca.Client(t, "bob")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(half, "GET /v1/info HTTP/1.1\r\nHost: jai"); err != nil {
		t.Fatal(err)
	}
	conns = append(conns, slow{"half a request header", half})
	t.Cleanup(func() {
		for _, s := range conns {
			s.c.Close()
		}
	})

	// Meanwhile alice is served, each request on a new connection.
	tr := &http.Transport{TLSClientConfig: tlsauthtest.ClientConfig(e.ca, e.ca.Client(t, "alice")), DisableKeepAlives: true}
	alice := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for i := range 5 {
		status, data, err := e.try(alice, "GET", "/v1/info", "", nil)
		if err != nil || status != 200 {
			t.Fatalf("alice's request %d with %d slow connections open: HTTP %d %v %s", i, len(conns), status, err, data)
		}
	}
	if d := time.Since(start); d >= bound {
		t.Fatalf("alice's requests took %v, past the header timeout: the slow connections may be gone already, the test proves nothing", d)
	}

	// The server closes every slow connection at the bound.
	var wg sync.WaitGroup
	for _, s := range conns {
		wg.Go(func() {
			_ = s.c.SetReadDeadline(start.Add(bound + 5*time.Second))
			_, err := io.Copy(io.Discard, s.c)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("%s: still open %v after the header timeout", s.what, time.Since(start)-bound)
			}
		})
	}
	wg.Wait()
}

// A client removed by a reload gets 403 on its next request over a
// connection it opened before, and cannot open a new one; the others go
// on.
func TestTLSRemovedClientKeepAlive(t *testing.T) {
	e := tlsHarness(t, nil, nil)
	alice, bob := e.client(t, "alice"), e.client(t, "bob")
	for _, c := range []*http.Client{alice, bob} {
		if status, data := e.call(t, c, "GET", "/v1/info", ""); status != 200 {
			t.Fatalf("before the reload: HTTP %d %s", status, data)
		}
	}
	e.reloadWithout(t, "alice")

	status, data := e.reusedCall(t, alice, "/v1/info")
	if er := apiError(t, "alice after her removal", data); status != 403 || er.Type != "forbidden" || !strings.Contains(er.Message, "no longer authorized") {
		t.Errorf("alice after her removal, same connection: HTTP %d %+v", status, er)
	}
	if status, data := e.call(t, alice, "POST", "/v1/execute", `{"code":"1"}`); status != 403 {
		t.Errorf("alice's execute after her removal: HTTP %d %s", status, data)
	}
	if n := len(e.h.Engine.Requests()); n != 0 {
		t.Errorf("the engine ran %d requests of a removed client", n)
	}
	if status, data := e.call(t, bob, "GET", "/v1/info", ""); status != 200 {
		t.Errorf("bob after alice's removal: HTTP %d %s", status, data)
	}
	fresh := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsauthtest.ClientConfig(e.ca, e.ca.Client(t, "alice"))}}
	if status, _, err := e.try(fresh, "GET", "/v1/info", "", nil); err == nil {
		t.Errorf("alice on a new connection after her removal: HTTP %d", status)
	}
}

// reusedCall GETs path as c on the connection c already holds, and fails
// the test when a new one was made (a test of a cut keep-alive would then
// prove nothing).
func (e *tlsEnv) reusedCall(t *testing.T, c *http.Client, path string) (int, []byte) {
	t.Helper()
	reused := false
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
	status, data, err := e.try(c, "GET", path, "", trace)
	if err != nil {
		t.Fatal(err)
	}
	if !reused {
		t.Fatal("the second request did not reuse its connection: the test proves nothing")
	}
	return status, data
}

// A client CA replaced by SIGHUP cuts the clients it signed at their next
// request, on the connections they made before.
func TestTLSReplacedCAKeepAlive(t *testing.T) {
	e := tlsHarness(t, nil, nil)
	alice := e.client(t, "alice")
	if status, data := e.call(t, alice, "GET", "/v1/info", ""); status != 200 {
		t.Fatalf("before the reload: HTTP %d %s", status, data)
	}
	cfg := e.cfg
	cfg.TLS.ClientCA = tlsauthtest.NewCA(t, "another CA").Write(t, t.TempDir(), "client-ca.crt")
	st, err := tlsauth.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.auth.Set(st)
	status, data := e.reusedCall(t, alice, "/v1/info")
	if er := apiError(t, "alice after her CA was replaced", data); status != 403 || er.Type != "forbidden" || !strings.Contains(er.Message, "no longer valid") {
		t.Errorf("alice after her CA was replaced, same connection: HTTP %d %+v", status, er)
	}
}

// A client's own daily quota applies to it alone.
func TestTLSClientQuota(t *testing.T) {
	e := tlsHarness(t, nil, nil)
	metered, bob := e.client(t, "metered"), e.client(t, "bob")
	for i := range 2 {
		if status, data := e.call(t, metered, "POST", "/v1/execute", `{"code":"1"}`); status != 200 {
			t.Fatalf("metered's run %d: HTTP %d %s", i, status, data)
		}
	}
	req, _ := http.NewRequest("POST", "https://"+e.addr+"/v1/execute", strings.NewReader(`{"code":"1"}`))
	resp, err := metered.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	er := apiError(t, "metered's third run", data)
	if resp.StatusCode != 429 || er.Type != "rate_limited" || !strings.Contains(er.Message, `daily quota of 2 runs used up for client "metered"`) || resp.Header.Get("Retry-After") == "" {
		t.Errorf("metered's third run: HTTP %d %+v (Retry-After %q)", resp.StatusCode, er, resp.Header.Get("Retry-After"))
	}
	for i := range 3 {
		if status, data := e.call(t, bob, "POST", "/v1/execute", `{"code":"1"}`); status != 200 {
			t.Fatalf("bob's run %d after metered's quota ran out: HTTP %d %s", i, status, data)
		}
	}
	var info api.Info
	_, data = e.call(t, bob, "GET", "/v1/info", "")
	decode(t, "bob's info", data, &info)
	if q := info.Caller.QuotaRemaining; q == nil || *q != config.Default().Admission.DailyQuota-3 {
		t.Errorf("bob's quota remaining %s, want [admission]'s less his 3 runs", data)
	}
	_, data = e.call(t, metered, "GET", "/v1/info", "")
	decode(t, "metered's info", data, &info)
	if q := info.Caller.QuotaRemaining; q == nil || *q != 0 {
		t.Errorf("metered's quota remaining %s, want 0", data)
	}
}

func ready(t *testing.T, e *tlsEnv, c *http.Client) (int, api.Ready) {
	t.Helper()
	status, data := e.call(t, c, "GET", "/v1/ready", "")
	var r api.Ready
	decode(t, "ready", data, &r)
	// The socket answers the same.
	sc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", e.h.Socket)
	}}}
	resp, err := sc.Get("http://jaild/v1/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sdata, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status || !bytes.Equal(sdata, data) {
		t.Errorf("/v1/ready: TLS HTTP %d %s, socket HTTP %d %s", status, data, resp.StatusCode, sdata)
	}
	return status, r
}

func TestReadyAndDrain(t *testing.T) {
	e := tlsHarness(t, nil, nil)
	alice, bob, ops := e.client(t, "alice"), e.client(t, "bob"), e.client(t, "ops")
	if status, r := ready(t, e, bob); status != 200 || r != (api.Ready{Ready: true}) {
		t.Fatalf("ready: HTTP %d %+v", status, r)
	}
	status, data := e.call(t, alice, "POST", "/v1/sessions", "{}")
	var sess api.Session
	decode(t, "alice's session", data, &sess)
	if status != 201 {
		t.Fatalf("alice's session: HTTP %d %s", status, data)
	}

	// A run in flight when the drain starts finishes.
	started, release := make(chan struct{}), make(chan struct{})
	e.h.Engine.RunFunc = func(context.Context, *spec.Request) (*spec.Result, error) {
		close(started)
		<-release
		return &spec.Result{ID: "inflight", Status: spec.StatusOK, Stdout: []byte("done")}, nil
	}
	type answer struct {
		status int
		data   []byte
		err    error
	}
	inflight := make(chan answer, 1)
	go func() {
		s, d, err := e.try(alice, "POST", "/v1/execute", `{"code":"print('done')"}`, nil)
		inflight <- answer{s, d, err}
	}()
	<-started
	e.h.Server.Drain()

	if status, r := ready(t, e, bob); status != 503 || r != (api.Ready{Ready: false, Reason: "draining: the daemon is stopping"}) {
		t.Errorf("ready while draining: HTTP %d %+v", status, r)
	}
	for _, r := range []struct {
		c                 *http.Client
		who, method, path string
		body              string
	}{
		{bob, "bob", "POST", "/v1/execute", `{"code":"1"}`},
		{ops, "ops (admin)", "POST", "/v1/execute", `{"code":"1"}`},
		{bob, "bob", "POST", "/v1/lint", `{"code":"1"}`},
		{bob, "bob", "POST", "/v1/sessions", "{}"},
		{alice, "alice", "POST", "/v1/sessions/" + sess.SessionID + "/execute", `{"code":"1"}`},
	} {
		status, data := e.call(t, r.c, r.method, r.path, r.body)
		if er := apiError(t, r.who+" "+r.path, data); status != 503 || er.Type != "unavailable" || !strings.Contains(er.Message, "the daemon is stopping") {
			t.Errorf("%s: %s %s while draining: HTTP %d %+v", r.who, r.method, r.path, status, er)
		}
	}
	if n := len(e.h.Engine.Requests()); n != 1 {
		t.Errorf("the engine got %d requests, want only the one in flight", n)
	}
	// A session's owner still reads and ends it.
	if status, data := e.call(t, alice, "GET", "/v1/sessions/"+sess.SessionID, ""); status != 200 {
		t.Errorf("alice's session while draining: HTTP %d %s", status, data)
	}
	if status, data := e.call(t, alice, "DELETE", "/v1/sessions/"+sess.SessionID, ""); status != 200 {
		t.Errorf("deleting alice's session while draining: HTTP %d %s", status, data)
	}

	close(release)
	a := <-inflight
	var res api.ExecuteResponse
	if a.err != nil {
		t.Fatalf("the run in flight: %v", a.err)
	}
	decode(t, "the run in flight", a.data, &res)
	if a.status != 200 || res.Status != "ok" || res.Stdout != "done" {
		t.Errorf("the run in flight: HTTP %d %s", a.status, a.data)
	}
}

func TestReadyReasons(t *testing.T) {
	e := tlsHarness(t, func(c *config.Config) { c.Admission.MaxConcurrent, c.Admission.QueueSize = 1, 0 }, nil)
	bob := e.client(t, "bob")
	started, release := make(chan struct{}), make(chan struct{})
	e.h.Engine.RunFunc = func(context.Context, *spec.Request) (*spec.Result, error) {
		close(started)
		<-release
		return &spec.Result{ID: "x", Status: spec.StatusOK}, nil
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := e.try(bob, "POST", "/v1/execute", `{"code":"1"}`, nil)
		done <- err
	}()
	<-started
	if status, r := ready(t, e, bob); status != 503 || r != (api.Ready{Reason: "full: 1 runs in progress and 0 queued"}) {
		t.Errorf("ready with the one slot taken and no queue: HTTP %d %+v", status, r)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if status, r := ready(t, e, bob); status != 200 || !r.Ready {
		t.Errorf("ready once the slot is free: HTTP %d %+v", status, r)
	}
	e.h.Engine.ImagesValue = []spec.ImageStats{{Name: "test-small", Manifest: e.h.Engine.Manifest()}}
	if status, r := ready(t, e, bob); status != 503 || r != (api.Ready{Reason: "no image is mounted"}) {
		t.Errorf("ready without a default image: HTTP %d %+v", status, r)
	}
}
