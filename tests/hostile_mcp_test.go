package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

// mcpCases are the attacks on `jailctl mcp --http` (issue 27, finding 4):
// its loopback port is open to every local account, not only to the user
// who started it, whose sessions, files and rights it forwards to.
func mcpCases() []hcase {
	return []hcase{
		{id: "H40", cat: catDaemon, title: "another local account (uid 65534) reaches jailctl mcp --http, started by root, without its token or with a wrong one",
			expect: "401 with WWW-Authenticate: Bearer and a JSON-RPC error for every request (initialize, tools/list, tools/call, GET, DELETE, other paths); nothing runs; the token lets a client in",
			run:    runMCPNoToken},
		{id: "H41", cat: catDaemon, title: "an MCP client with the token lists, runs in and closes a session its user opened outside MCP",
			expect: "the session is not listed, run_python and close_session refuse it without reaching it, and it stays idle with no call run",
			run:    runMCPForeignSession},
	}
}

// mcpAttackBounds measures the daemon during the attack (while jailctl
// mcp still serves) and holds it to the control: RSS within 64 MiB of it
// (jailctl is a process of its own; the daemon only answers its info and
// runs), nothing left reserved in the budget, print(1) within print1Bound.
func (h *hostile) mcpAttackBounds(t *testing.T, b loadSample) string {
	t.Helper()
	rss, inUse := vmRSS(h.d.Cmd.Process.Pid), inUseBytes(t, h.d)
	lat, status, body := timedPrint1(t, h.d)
	if rss > b.rss+64<<20 {
		t.Errorf("daemon RSS %d MiB during the attack, control %d MiB: want at most 64 MiB more", rss>>20, b.rss>>20)
	}
	if inUse > b.inUse {
		t.Errorf("budget in_use_bytes %d after the attack's requests ended, control %d", inUse, b.inUse)
	}
	if status != 200 {
		t.Errorf("another caller's print(1) during the attack: HTTP %d %s", status, body)
	}
	if limit := print1Bound(b.print1); lat > limit {
		t.Errorf("another caller's print(1) took %v during the attack, control %v: want at most %v", lat, b.print1, limit)
	}
	return "daemon RSS, in_use_bytes and another caller's print(1) within the bounds of the baseline"
}

// curlMCPAs sends one request to the MCP server as uid 65534 (curl over
// TCP), with the Authorization header auth unless it is "", and returns
// the status, the headers and the body. headers are more, "Name: value".
func curlMCPAs(t *testing.T, method, url, auth, body string, headers ...string) (int, http.Header, []byte) {
	t.Helper()
	args := []string{"--max-time", "20", "-X", method, url,
		"-H", "Accept: application/json, text/event-stream", "-H", "Mcp-Protocol-Version: 2025-11-25"}
	if auth != "" {
		args = append(args, "-H", "Authorization: "+auth)
	}
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	if body != "" {
		args = append(args, "-H", "Content-Type: application/json", "--data-binary", body)
	}
	return curlAsNobody(t, nil, args...)
}

const (
	mcpInitialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"intruder","version":"1"}}}`
	mcpToolsList  = `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
)

// mcpMarkerCall is a tools/call of run_python with code, which prints a
// marker the case looks for in the answer.
func mcpMarkerCall(code string) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 3, "method": "tools/call",
		"params": map[string]any{"name": "run_python", "arguments": map[string]any{"code": code}}})
	return string(b)
}

func runMCPNoToken(t *testing.T, h *hostile) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := sampleLoad(t, h.d)
	s := startMCPHTTPFor(t, h.d.Socket)
	defer s.stop(t)
	origin := strings.TrimSuffix(s.url, "/mcp")

	// The unauthenticated stranger: every path and method, then the
	// three MCP requests that would act as root, each without a token and
	// with wrong ones.
	type probe struct{ method, url, body string }
	probes := []probe{
		{"POST", s.url, mcpInitialize},
		{"POST", s.url, mcpToolsList},
		{"POST", s.url, mcpMarkerCall("print('intruder ran as', __import__('os').getuid())")},
		{"GET", s.url, ""},
		{"DELETE", s.url, ""},
		{"GET", origin + "/", ""},
		{"POST", origin + "/other", "{}"},
		{"PUT", s.url, mcpInitialize},
	}
	wrong := []string{"", "Bearer", "Bearer " + strings.Repeat("0", 64), "Basic " + s.token, "Bearer " + s.token + "x", s.token}
	refused := 0
	for _, p := range probes {
		for _, auth := range wrong {
			if auth == s.token && s.token == "" {
				continue
			}
			status, hdr, body := curlMCPAs(t, p.method, p.url, auth, p.body)
			var rpc struct {
				JSONRPC string `json:"jsonrpc"`
				Error   struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			err := json.Unmarshal(body, &rpc)
			if status != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer ") || err != nil || rpc.JSONRPC != "2.0" || rpc.Error.Message == "" {
				t.Errorf("%s %s as uid 65534 with Authorization %q: %d, WWW-Authenticate %q, body %q: want 401, Bearer and a JSON-RPC error",
					p.method, p.url, auth, status, hdr.Get("WWW-Authenticate"), body)
				continue
			}
			if bytes.Contains(body, []byte("intruder ran")) {
				t.Errorf("%s %s: the stranger's code ran: %s", p.method, p.url, body)
			}
			refused++
		}
	}
	total := len(probes) * len(wrong)

	// The whole handshake a stranger would make: initialize, take the MCP
	// session it gets (if any), and call run_python in it.
	for _, auth := range wrong[:4] {
		total += 3
		sid := "no-session"
		status, hdr, body := curlMCPAs(t, "POST", s.url, auth, mcpInitialize)
		if status == http.StatusUnauthorized {
			refused++
		} else if hdr.Get("Mcp-Session-Id") != "" {
			sid = hdr.Get("Mcp-Session-Id")
			t.Errorf("initialize as uid 65534 with Authorization %q: %d, MCP session %s: %q", auth, status, sid, body)
		}
		status, _, _ = curlMCPAs(t, "POST", s.url, auth, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, "Mcp-Session-Id: "+sid)
		if status == http.StatusUnauthorized {
			refused++
		}
		status, _, body = curlMCPAs(t, "POST", s.url, auth, mcpMarkerCall("print('intruder ran', 6 * 7)"), "Mcp-Session-Id: "+sid)
		if status == http.StatusUnauthorized {
			refused++
		}
		if bytes.Contains(body, []byte("intruder ran 42")) {
			t.Errorf("uid 65534 with Authorization %q ran code as root through jailctl mcp: %d %q", auth, status, body)
		}
	}
	if refused != total {
		t.Errorf("%d of %d requests without the token refused with 401", refused, total)
	}
	if s.token == "" {
		t.Errorf("jailctl mcp --http printed no token")
	}

	// With the token, the same stranger gets in (the token is the whole
	// credential), and a client runs code.
	status, hdr, body := curlMCPAs(t, "POST", s.url, "Bearer "+s.token, mcpInitialize)
	if status != http.StatusOK || hdr.Get("Mcp-Session-Id") == "" || !bytes.Contains(body, []byte(`"serverInfo"`)) {
		t.Errorf("initialize as uid 65534 with the token: %d %q", status, body)
	}
	m := s.client(ctx, t)
	var out runOutput
	if res := m.call(ctx, "run_python", map[string]any{"code": "print(6 * 7)"}, &out); res.IsError || out.Stdout != "42\n" {
		t.Errorf("run_python with the token: isError %v, %+v", res.IsError, out)
	}
	m.session.Close()
	measured := h.mcpAttackBounds(t, base)
	return fmt.Sprintf("%d of %d requests as uid 65534 (8 paths and methods × 6 missing or wrong credentials, and 4 handshakes of initialize, initialized and a run_python call) refused with 401, WWW-Authenticate: Bearer and a JSON-RPC error; nothing ran; with the token: initialize 200, run_python ran; %s", refused, total, measured)
}

func runMCPForeignSession(t *testing.T, h *hostile) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := sampleLoad(t, h.d)

	// root, who starts jailctl mcp, has a session of its own, opened on
	// the socket.
	var sess api.Session
	if code, _ := h.d.call(t, "POST", "/v1/sessions", map[string]any{}, &sess); code != http.StatusCreated || sess.SessionID == "" {
		t.Fatalf("POST /v1/sessions: %d %+v", code, sess)
	}
	defer h.d.call(t, "DELETE", "/v1/sessions/"+sess.SessionID, nil, nil)

	s := startMCPHTTPFor(t, h.d.Socket)
	defer s.stop(t)
	m := s.client(ctx, t)
	defer m.session.Close()

	var list struct {
		Sessions []struct {
			SessionID string `json:"session_id"`
		} `json:"sessions"`
	}
	res := m.call(ctx, "list_sessions", map[string]any{}, &list)
	listed := slices.ContainsFunc(list.Sessions, func(x struct {
		SessionID string `json:"session_id"`
	}) bool {
		return x.SessionID == sess.SessionID
	})
	if res.IsError || listed || strings.Contains(text(res), sess.SessionID) {
		t.Errorf("list_sessions shows the session opened outside MCP: isError %v, %q", res.IsError, text(res))
	}
	run := m.call(ctx, "run_python", map[string]any{"code": "print('in the foreign session')", "session_id": sess.SessionID}, nil)
	if !run.IsError || strings.Contains(text(run), "in the foreign session") {
		t.Errorf("run_python in the session opened outside MCP: isError %v, %q", run.IsError, text(run))
	}
	closed := m.call(ctx, "close_session", map[string]any{"session_id": sess.SessionID}, nil)
	if !closed.IsError {
		t.Errorf("close_session of the session opened outside MCP: %q", text(closed))
	}
	var after api.Session
	if code, _ := h.d.call(t, "GET", "/v1/sessions/"+sess.SessionID, nil, &after); code != http.StatusOK || after.State != api.SessionIdle || after.ExecutionCount != 0 {
		t.Errorf("the session after the MCP client's attempts: %d, state %q, %d calls: want idle with 0 calls", code, after.State, after.ExecutionCount)
	}
	// Its own session is its own.
	own := m.openSession(ctx, nil)
	if res, out := m.runIn(ctx, own.SessionID, "x = 41\nx + 1", nil); res.IsError || out.Stdout != "42\n" {
		t.Errorf("run_python in its own session: %q", text(res))
	}
	measured := h.mcpAttackBounds(t, base)
	// The session's id differs in every run: the report names it SESSION.
	return fmt.Sprintf("not listed; run_python: %q; close_session refused; the session stayed idle with 0 calls; its own session ran; %s",
		strings.ReplaceAll(firstLine(text(run)), sess.SessionID, "SESSION"), measured)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
