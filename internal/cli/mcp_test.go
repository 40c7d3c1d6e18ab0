package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPStdioWiring serves MCP on run's stdin and stdout, as a client
// that keeps stdin open until it has its answers, then closes it.
func TestMCPStdioWiring(t *testing.T) {
	h := newDaemon(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(context.Background(), []string{"--socket", h.Socket, "mcp"}, inR, outW, &stderr)
		outW.Close()
	}()
	go io.WriteString(inW, strings.Join([]string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
	}, "\n")+"\n")

	var tools []string
	sc := bufio.NewScanner(outR)
	for sc.Scan() {
		var msg struct {
			ID     int `json:"id"`
			Result struct {
				Tools []struct{ Name string } `json:"tools"`
			} `json:"result"`
		}
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil {
			t.Fatalf("stdout line %q: %v", sc.Text(), err)
		}
		for _, tool := range msg.Result.Tools {
			tools = append(tools, tool.Name)
		}
		if msg.ID == 2 {
			break
		}
	}
	if strings.Join(tools, ",") != "close_session,fork_session,format_python,lint_python,list_sessions,open_session,pause_session,restore_session,run_command,run_python,snapshot_session" {
		t.Errorf("tools/list answered %v", tools)
	}
	inW.Close()
	go io.Copy(io.Discard, outR)
	if code := <-done; code != exitOK {
		t.Errorf("exit %d after stdin closed, want 0: %s", code, stderr.String())
	}
}

func TestMCPUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mcp", "--allow-remote"}, "--allow-remote needs --http"},
		{[]string{"mcp", "--token-file", "/nonexistent"}, "--token-file needs --http"},
		// The address is refused before the (absent) daemon is asked.
		{[]string{"mcp", "--http", "0.0.0.0:0"}, "not a loopback address; pass --allow-remote"},
		{[]string{"mcp", "--http", "8080"}, "want HOST:PORT"},
		{[]string{"mcp", "extra"}, `unexpected argument "extra"`},
	} {
		r := jailctl(t, "/nonexistent/jaild.sock", "", tc.args...)
		if r.code != exitError || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	r := jailctl(t, "/nonexistent/jaild.sock", "", "mcp")
	if r.code != exitError || !strings.Contains(r.stderr, "cannot connect to jaild at /nonexistent/jaild.sock") {
		t.Errorf("no daemon: exit %d, stderr %q", r.code, r.stderr)
	}
}

// A token that is too short is refused before anything is served, and
// the refusal names where it came from and the bound.
func TestMCPTokenRefused(t *testing.T) {
	short := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(short, []byte("0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := jailctl(t, "/nonexistent/jaild.sock", "", "mcp", "--http", "127.0.0.1:0", "--token-file", short)
	if r.code != exitError || !strings.Contains(r.stderr, "token file "+short) || !strings.Contains(r.stderr, "want 32 to 4096 characters") {
		t.Errorf("short --token-file: exit %d, stderr %q", r.code, r.stderr)
	}
	t.Setenv(MCPTokenEnv, "0123456789")
	r = jailctl(t, "/nonexistent/jaild.sock", "", "mcp", "--http", "127.0.0.1:0")
	if r.code != exitError || !strings.Contains(r.stderr, "$"+MCPTokenEnv) || !strings.Contains(r.stderr, "want 32") {
		t.Errorf("short $%s: exit %d, stderr %q", MCPTokenEnv, r.code, r.stderr)
	}
}
