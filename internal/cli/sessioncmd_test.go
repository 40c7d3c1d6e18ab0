package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// jailctl session run (foreground and --bg), cmds, cmd-log and cmd-kill
// against the in-process daemon, whose fake commands echo what they were
// asked to run: the command line reaches the daemon as one shell line,
// and the answers come back as jailctl's output. Real commands are tested
// with real jails in tests/.
func TestSessionCommandsCLI(t *testing.T) {
	h := newDaemon(t)
	s := jailctl(t, h.Socket, "", "session", "new")
	if s.code != 0 {
		t.Fatalf("session new: %+v", s)
	}
	id := strings.TrimSpace(s.stdout)
	r := jailctl(t, h.Socket, "", "session", "run", id, "--", "ls", "-l", "/tmp")
	if r.code != 0 || r.stdout != "/bin/sh -c ls -l /tmp" {
		t.Errorf("run: %+v", r)
	}
	r = jailctl(t, h.Socket, "", "session", "run", "--bg", id, "sleep", "100")
	cid := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(cid, "c-") {
		t.Fatalf("run --bg: %+v", r)
	}
	if r := jailctl(t, h.Socket, "", "session", "cmds", id); r.code != 0 || !strings.Contains(r.stdout, cid) || !strings.Contains(r.stdout, "running") {
		t.Errorf("cmds: %+v", r)
	}
	if r := jailctl(t, h.Socket, "", "session", "cmd-log", id, cid); r.code != 0 || r.stdout != "/bin/sh -c sleep 100" {
		t.Errorf("cmd-log: %+v", r)
	}
	// cmd-log -f prints what was kept, then waits for the end (the fake
	// ends on a signal) and exits as the command did.
	followed := make(chan result, 1)
	go func() { followed <- jailctl(t, h.Socket, "", "session", "cmd-log", "-f", id, cid) }()
	time.Sleep(100 * time.Millisecond)
	if _, err := h.Client.SignalSessionCommand(t.Context(), id, cid, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if r := <-followed; r.code != 128+15 || r.stdout != "/bin/sh -c sleep 100" {
		t.Errorf("cmd-log -f: %+v", r)
	}
	if r := jailctl(t, h.Socket, "", "session", "cmd-kill", id, cid); r.code != 0 {
		t.Errorf("cmd-kill: %+v", r)
	}
	if r := jailctl(t, h.Socket, "", "session", "cmd-log", id, cid); r.code == 0 || !strings.Contains(r.stderr, "no command") {
		t.Errorf("cmd-log of a killed command: %+v", r)
	}
	if r := jailctl(t, h.Socket, "", "session", "run", "--cwd", "/etc", id, "true"); r.code == 0 || !strings.Contains(r.stderr, "cwd") {
		t.Errorf("a cwd outside the session's trees: %+v", r)
	}
}

// jailctl session open-port serves the session's port (here the fake
// engine's test server) on a loopback URL whose first element is the
// token; without it, or with another Host, 404.
func TestSessionOpenPort(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "session server: %s %s", r.Method, r.URL.RequestURI())
	}))
	defer srv.Close()
	h := newDaemon(t)
	h.Engine.Ports = map[int]string{8000: srv.Listener.Addr().String()}
	s := jailctl(t, h.Socket, "", "session", "new")
	id := strings.TrimSpace(s.stdout)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"--socket", h.Socket, "session", "open-port", id, "8000"}, strings.NewReader(""), outW, &stderr)
		outW.Close()
	}()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatalf("no URL: %v %s", err, stderr.String())
	}
	u := strings.TrimSpace(line)
	get := func(url, host string) (int, string) {
		req, _ := http.NewRequest("GET", url, nil)
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(u+"a/b?q=1", ""); code != 200 || body != "session server: GET /a/b?q=1" {
		t.Errorf("through the URL: %d %q", code, body)
	}
	base := u[:strings.LastIndex(strings.TrimSuffix(u, "/"), "/")]
	if code, _ := get(base+"/a/b", ""); code != 404 {
		t.Errorf("without the token: %d", code)
	}
	if code, _ := get(u+"a/b", "evil.example"); code != 404 {
		t.Errorf("another Host: %d", code)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}

// jailctl session shell with piped input against the fake terminal, which
// echoes what is typed and ends on a Ctrl-D: the input is typed as it
// is, its end is a Ctrl-D, the output is the terminal's, and the exit
// status is the shell's. A real shell on a real terminal is tested in
// tests/.
func TestSessionShellCLI(t *testing.T) {
	h := newDaemon(t)
	s := jailctl(t, h.Socket, "", "session", "new")
	if s.code != 0 {
		t.Fatalf("session new: %+v", s)
	}
	id := strings.TrimSpace(s.stdout)
	r := jailctl(t, h.Socket, "echo hi\n", "session", "shell", id)
	if r.code != 0 || r.stdout != "echo hi\n\x04" {
		t.Errorf("shell: %+v", r)
	}
	r = jailctl(t, h.Socket, "", "session", "shell", "--cwd", "/etc", id)
	if r.code == 0 || !strings.Contains(r.stderr, "cwd") {
		t.Errorf("shell --cwd /etc: %+v", r)
	}
}
