package tests

import (
	"bytes"
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

// sessionOutput is open_session's and close_session's structured content,
// as the tests read it.
type sessionOutput struct {
	SessionID          string `json:"session_id"`
	State              string `json:"state"`
	EndReason          string `json:"end_reason"`
	ExpiresAt          string `json:"expires_at"`
	IdleTimeoutSeconds int64  `json:"idle_timeout_seconds"`
	ExecutionCount     int    `json:"execution_count"`
}

// sessionRunOutput is run_python's structured content with session_id.
type sessionRunOutput struct {
	runOutput
	Result  *string `json:"result"`
	Session *struct {
		SessionID      string `json:"session_id"`
		ExecutionCount int    `json:"execution_count"`
		State          string `json:"state"`
		EndReason      string `json:"end_reason"`
		StateLost      bool   `json:"state_lost"`
		LostReason     string `json:"lost_reason"`
	} `json:"session"`
}

// startMCPStdio starts `jailctl mcp` on d's socket and connects to it.
func startMCPStdio(ctx context.Context, t *testing.T, d *daemon) (*mcpClient, *exec.Cmd) {
	t.Helper()
	cmd := mcpCommand(t, filepath.Join(binDir, "jailctl"), d.Socket, "jailctl mcp")
	return connectMCP(ctx, t, &sdk.CommandTransport{Command: cmd, TerminateDuration: stdioGrace}), cmd
}

// mcpCommand is `bin --socket socket mcp`, its stderr logged under name
// if the test fails.
func mcpCommand(t *testing.T, bin, socket, name string) *exec.Cmd {
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--socket", socket, "mcp")
	cmd.Stderr = &stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, stderr.String())
		}
	})
	return cmd
}

func (m *mcpClient) openSession(ctx context.Context, args map[string]any) sessionOutput {
	m.t.Helper()
	var out sessionOutput
	res := m.call(ctx, "open_session", args, &out)
	if res.IsError || out.SessionID == "" {
		m.t.Fatalf("open_session: isError %v, %+v, %q", res.IsError, out, text(res))
	}
	return out
}

func (m *mcpClient) runIn(ctx context.Context, id, code string, extra map[string]any) (*sdk.CallToolResult, sessionRunOutput) {
	m.t.Helper()
	args := map[string]any{"code": code, "session_id": id}
	for k, v := range extra {
		args[k] = v
	}
	var out sessionRunOutput
	res := m.call(ctx, "run_python", args, &out)
	return res, out
}

// liveSessions are d's sessions that have not ended (the tests run as
// root, an admin: everyone's).
func liveSessions(t *testing.T, d *daemon) []string {
	t.Helper()
	var list api.SessionList
	if code, _ := d.call(t, http.MethodGet, "/v1/sessions", nil, &list); code != http.StatusOK {
		t.Fatalf("GET /v1/sessions: %d", code)
	}
	var live []string
	for _, s := range list.Sessions {
		if s.State != api.SessionEnded {
			live = append(live, s.SessionID+" ("+s.State+")")
		}
	}
	return live
}

// TestMCPSessions drives sessions through `jailctl mcp` over stdio against
// a daemon of its own (so that no other test's session counts): state
// that persists, a timeout that keeps it and one that loses it, the end of
// a closed session, and sessions that end with the MCP connection, at
// stdin's end and at SIGTERM.
func TestMCPSessions(t *testing.T) {
	d := startDaemon(t, daemontest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	m, _ := startMCPStdio(ctx, t, d)

	d1 := m.tools["open_session"].Description
	for _, w := range []string{"variables", "imports", "/workspace", "/tmp", "idle_timeout_seconds", "expires_at", "One call runs at a time", "files are kept"} {
		if !strings.Contains(d1, w) {
			t.Errorf("open_session's description lacks %q:\n%s", w, d1)
		}
	}

	sess := m.openSession(ctx, map[string]any{"timeout_seconds": 5})
	if exp, err := time.Parse(time.RFC3339, sess.ExpiresAt); err != nil || time.Until(exp) < 50*time.Minute || sess.IdleTimeoutSeconds != 600 {
		t.Errorf("open_session: %+v: want the default idle timeout (600 s) and TTL (1 h)", sess)
	}
	id := sess.SessionID

	t.Run("state persists", func(t *testing.T) {
		res, out := m.runIn(ctx, id, "x = 41\nopen('/tmp/t', 'w').write('tmp')\nopen('w.txt', 'w').write('ws')\n", nil)
		if res.IsError || out.Status != "ok" || out.Session == nil || out.Session.ExecutionCount != 1 || out.Session.SessionID != id {
			t.Fatalf("x = 41: isError %v, %+v, %q", res.IsError, out, text(res))
		}
		res, out = m.runIn(ctx, id, "x + 1", nil)
		if res.IsError || out.Stdout != "42\n" || out.Result == nil || *out.Result != "42" || out.Session.ExecutionCount != 2 ||
			!strings.Contains(text(res), "session: "+id+", execution_count 2") {
			t.Fatalf("x + 1: isError %v, %+v, %q: want 42", res.IsError, out, text(res))
		}
		res, out = m.runIn(ctx, id, "print(open('/tmp/t').read(), open('w.txt').read())", nil)
		if res.IsError || out.Stdout != "tmp ws\n" {
			t.Errorf("files: isError %v, %q", res.IsError, text(res))
		}
	})

	t.Run("run_command", func(t *testing.T) {
		var out struct {
			Status     string `json:"status"`
			ExitCode   *int   `json:"exit_code"`
			Stdout     string `json:"stdout"`
			Stderr     string `json:"stderr"`
			DurationMs int64  `json:"duration_ms"`
		}
		res := m.call(ctx, "run_command", map[string]any{"session_id": id, "command": "cat w.txt; echo; pwd; echo e >&2; exit 3"}, &out)
		if !res.IsError || out.Status != "error" || out.ExitCode == nil || *out.ExitCode != 3 || out.Stdout != "ws\n/workspace\n" || out.Stderr != "e\n" ||
			!strings.Contains(text(res), "exit status 3") {
			t.Errorf("a failing command: isError %v, %+v, %q", res.IsError, out, text(res))
		}
		res = m.call(ctx, "run_command", map[string]any{"session_id": id, "command": "pwd", "cwd": "/tmp"}, &out)
		if res.IsError || out.Status != "ok" || out.Stdout != "/tmp\n" {
			t.Errorf("pwd in /tmp: isError %v, %+v, %q", res.IsError, out, text(res))
		}
		res = m.call(ctx, "run_command", map[string]any{"session_id": id, "command": "sleep 30", "timeout_seconds": 1}, &out)
		if !res.IsError || out.Status != "timeout" {
			t.Errorf("a command past its timeout: isError %v, %+v, %q", res.IsError, out, text(res))
		}
		if res, out := m.runIn(ctx, id, "x", nil); res.IsError || out.Stdout != "41\n" {
			t.Errorf("the interpreter after commands: %q, want 41", text(res))
		}
		if res := m.call(ctx, "run_command", map[string]any{"session_id": "s-0-000000000000000000000000", "command": "true"}, nil); !res.IsError {
			t.Errorf("a command in a session this connection did not open: %q", text(res))
		}
	})

	t.Run("timeout keeps the state", func(t *testing.T) {
		res, out := m.runIn(ctx, id, "import time\nx = 7\ntime.sleep(30)\n", map[string]any{"timeout_seconds": 1})
		if !res.IsError || out.Status != "timeout" || out.Session == nil || out.Session.StateLost || strings.Contains(text(res), "state_lost") || !strings.Contains(text(res), "state kept") {
			t.Fatalf("isError %v, %+v, %q: want a timeout with the state kept", res.IsError, out, text(res))
		}
		if res, out := m.runIn(ctx, id, "x", nil); res.IsError || out.Stdout != "7\n" {
			t.Errorf("after the timeout: %q, want 7", text(res))
		}
	})

	t.Run("timeout loses the state", func(t *testing.T) {
		code := "import time\nwhile True:\n    try:\n        time.sleep(30)\n    except KeyboardInterrupt:\n        pass\n"
		res, out := m.runIn(ctx, id, code, map[string]any{"timeout_seconds": 1})
		if !res.IsError || out.Status != "timeout" || out.Session == nil || !out.Session.StateLost || out.Session.LostReason != "timeout" ||
			!strings.Contains(text(res), "state_lost: true (lost_reason: timeout)") {
			t.Fatalf("isError %v, %+v, %q: want state_lost", res.IsError, out, text(res))
		}
		res, out = m.runIn(ctx, id, "print(open('w.txt').read())\nx", nil)
		if !res.IsError || out.Exception == nil || out.Exception.Type != "NameError" || out.Stdout != "ws\n" {
			t.Errorf("after the loss: %q: want the file kept and x gone", text(res))
		}
	})

	t.Run("pause and fork", func(t *testing.T) {
		m.runIn(ctx, id, "y = 'kept'", nil)
		var ps sessionOutput
		res := m.call(ctx, "pause_session", map[string]any{"session_id": id}, &ps)
		if res.IsError || ps.State != "paused" {
			t.Fatalf("pause_session: isError %v, %+v, %q", res.IsError, ps, text(res))
		}
		var fork struct {
			Sessions []sessionOutput `json:"sessions"`
		}
		res = m.call(ctx, "fork_session", map[string]any{"session_id": id, "count": 1}, &fork)
		if res.IsError || len(fork.Sessions) != 1 || fork.Sessions[0].SessionID == id {
			t.Fatalf("fork_session: isError %v, %+v, %q", res.IsError, fork, text(res))
		}
		kid := fork.Sessions[0].SessionID
		if res, out := m.runIn(ctx, kid, "y += ' in the copy'\ny", nil); res.IsError || out.Result == nil || *out.Result != "'kept in the copy'" {
			t.Errorf("run_python in the copy: %q", text(res))
		}
		if res, out := m.runIn(ctx, id, "y", nil); res.IsError || out.Result == nil || *out.Result != "'kept'" {
			t.Errorf("run_python in the paused original: %q", text(res))
		}
		if res := m.call(ctx, "close_session", map[string]any{"session_id": kid}, nil); res.IsError {
			t.Errorf("close_session of the copy: %q", text(res))
		}
		if res := m.call(ctx, "fork_session", map[string]any{"session_id": id, "count": 17}, nil); !res.IsError || !strings.Contains(text(res), "count") {
			t.Errorf("fork_session of 17: isError %v, %q", res.IsError, text(res))
		}
	})

	t.Run("snapshot, restore and open from a snapshot", func(t *testing.T) {
		m.runIn(ctx, id, "z = 1\nopen('snap.txt', 'w').write('before')", nil)
		var sn struct {
			SnapshotID string `json:"snapshot_id"`
			SessionID  string `json:"session_id"`
			Bytes      int64  `json:"bytes"`
		}
		res := m.call(ctx, "snapshot_session", map[string]any{"session_id": id}, &sn)
		if res.IsError || !strings.HasPrefix(sn.SnapshotID, "snap-") || sn.SessionID != id || sn.Bytes <= 0 {
			t.Fatalf("snapshot_session: isError %v, %+v, %q", res.IsError, sn, text(res))
		}
		m.runIn(ctx, id, "z = 2\nopen('snap.txt', 'w').write('after')", nil)
		var back sessionOutput
		res = m.call(ctx, "restore_session", map[string]any{"session_id": id, "snapshot_id": sn.SnapshotID}, &back)
		if res.IsError || back.SessionID != id {
			t.Fatalf("restore_session: isError %v, %+v, %q", res.IsError, back, text(res))
		}
		if res, out := m.runIn(ctx, id, "print(open('snap.txt').read())\nz", nil); res.IsError || !strings.HasPrefix(out.Stdout, "before\n") || out.Result == nil || *out.Result != "1" {
			t.Errorf("after restore_session: %q, want z 1 and the file as it was", text(res))
		}
		var opened sessionOutput
		res = m.call(ctx, "open_session", map[string]any{"from_snapshot": sn.SnapshotID}, &opened)
		if res.IsError || opened.SessionID == "" || opened.SessionID == id {
			t.Fatalf("open_session from_snapshot: isError %v, %+v, %q", res.IsError, opened, text(res))
		}
		if res, out := m.runIn(ctx, opened.SessionID, "z", nil); res.IsError || out.Result == nil || *out.Result != "1" {
			t.Errorf("run_python in the session from the snapshot: %q", text(res))
		}
		if res := m.call(ctx, "close_session", map[string]any{"session_id": opened.SessionID}, nil); res.IsError {
			t.Errorf("close_session: %q", text(res))
		}
		// Another connection reaches neither the snapshot nor the session.
		other, _ := startMCPStdio(ctx, t, d)
		if res := other.call(ctx, "open_session", map[string]any{"from_snapshot": sn.SnapshotID}, nil); !res.IsError || !strings.Contains(text(res), "no snapshot") {
			t.Errorf("open_session from another connection's snapshot: isError %v, %q", res.IsError, text(res))
		}
		if res := other.call(ctx, "restore_session", map[string]any{"session_id": id, "snapshot_id": sn.SnapshotID}, nil); !res.IsError || !strings.Contains(text(res), "no session") {
			t.Errorf("restore_session from another connection: isError %v, %q", res.IsError, text(res))
		}
	})

	t.Run("list", func(t *testing.T) {
		var out struct {
			Sessions []sessionOutput `json:"sessions"`
		}
		res := m.call(ctx, "list_sessions", map[string]any{}, &out)
		if res.IsError || !slices.ContainsFunc(out.Sessions, func(s sessionOutput) bool { return s.SessionID == id && s.State == "idle" }) {
			t.Errorf("list_sessions: %q, want %s idle", text(res), id)
		}
	})

	t.Run("closed", func(t *testing.T) {
		var out sessionOutput
		res := m.call(ctx, "close_session", map[string]any{"session_id": id}, &out)
		if res.IsError || out.State != "ended" {
			t.Fatalf("close_session: isError %v, %+v, %q", res.IsError, out, text(res))
		}
		res, _ = m.runIn(ctx, id, "1", nil)
		if !res.IsError || !strings.Contains(text(res), "has ended") || !strings.Contains(text(res), "open_session") {
			t.Errorf("run_python in a closed session: isError %v, %q: want it to say the session ended", res.IsError, text(res))
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for _, tc := range []struct {
			tool   string
			args   map[string]any
			inText string
		}{
			{"run_python", map[string]any{"code": "1", "session_id": "s-nope"}, "there is no session s-nope in this MCP connection"},
			{"close_session", map[string]any{"session_id": "s-nope"}, "there is no session s-nope in this MCP connection"},
			{"open_session", map[string]any{"memory_mb": 1 << 30}, "memory_mb"},
			{"close_session", map[string]any{}, "session_id"},
		} {
			if res := m.call(ctx, tc.tool, tc.args, nil); !res.IsError || !strings.Contains(text(res), tc.inText) {
				t.Errorf("%s %v: isError %v, %q: want %q", tc.tool, tc.args, res.IsError, text(res), tc.inText)
			}
		}
	})

	// Sessions end with the MCP server's stdin.
	m.openSession(ctx, nil)
	m.openSession(ctx, nil)
	if live := liveSessions(t, d); len(live) != 2 {
		t.Fatalf("live sessions %v, want 2", live)
	}
	start := time.Now()
	if err := m.session.Close(); err != nil || time.Since(start) >= stdioGrace {
		t.Errorf("jailctl mcp after its stdin closed: %v after %s, want exit 0 at once", err, time.Since(start))
	}
	if live := liveSessions(t, d); len(live) != 0 {
		t.Errorf("jailctl mcp exited and left sessions %v", live)
	}
	var snaps api.SnapshotList
	if code, _ := d.call(t, http.MethodGet, "/v1/snapshots", nil, &snaps); code != http.StatusOK || len(snaps.Snapshots) != 0 {
		t.Errorf("GET /v1/snapshots after jailctl mcp exited: %d, %+v: want its snapshots deleted", code, snaps.Snapshots)
	}

	// And at SIGTERM.
	m2, cmd := startMCPStdio(ctx, t, d)
	m2.openSession(ctx, nil)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	m2.session.Wait()
	if live := liveSessions(t, d); len(live) != 0 {
		t.Errorf("jailctl mcp got SIGTERM and left sessions %v", live)
	}
}

// TestMCPHTTPSessions: over Streamable HTTP, a session ends when the MCP
// session that opened it is deleted, and the rest when the server stops.
func TestMCPHTTPSessions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := startDaemon(t, daemontest.Options{})
	s := startMCPHTTP(t, d)
	cmd := s.cmd

	a := connectMCP(ctx, t, s.transport())
	b := connectMCP(ctx, t, s.transport())
	sa := a.openSession(ctx, nil)
	b.openSession(ctx, nil)
	if res, out := a.runIn(ctx, sa.SessionID, "x = 1\nx + 1", nil); res.IsError || out.Stdout != "2\n" {
		t.Errorf("run_python over HTTP: %q", text(res))
	}
	a.session.Close() // DELETE of a's MCP session
	for deadline := time.Now().Add(20 * time.Second); len(liveSessions(t, d)) != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("live sessions %v after a's MCP session was deleted, want b's only", liveSessions(t, d))
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("jailctl mcp --http after SIGINT: %v, want exit 0", err)
	}
	if live := liveSessions(t, d); len(live) != 0 {
		t.Errorf("jailctl mcp --http stopped and left sessions %v", live)
	}
}
