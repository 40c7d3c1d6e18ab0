package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

// livePy defines live(pid) in a session: the process exists and is not a
// zombie (one killed and not reaped yet by the jail's init is not).
const livePy = `import os
def live(pid):
    try:
        return open('/proc/%s/stat' % pid).read().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False
`

// runCommand runs a command in session id and decodes a 200 answer
// strictly; other statuses return the raw body.
func runCommand(t *testing.T, d *daemon, id string, req api.CommandRequest) (int, api.CommandResult, []byte) {
	t.Helper()
	var raw json.RawMessage
	code, _ := d.call(t, http.MethodPost, "/v1/sessions/"+id+"/commands", req, &raw)
	var r api.CommandResult
	if code == http.StatusOK {
		if err := strictJSON(raw, &r); err != nil {
			t.Fatalf("command: %v\n%s", err, raw)
		}
	}
	return code, r, raw
}

func mustCommand(t *testing.T, d *daemon, id string, req api.CommandRequest) api.CommandResult {
	t.Helper()
	code, r, raw := runCommand(t, d, id, req)
	if code != http.StatusOK {
		t.Fatalf("command %+v: HTTP %d %s", req, code, raw)
	}
	return r
}

func startBackground(t *testing.T, d *daemon, id string, req api.CommandRequest) api.CommandInfo {
	t.Helper()
	req.Background = true
	var c api.CommandInfo
	if code, _ := d.call(t, http.MethodPost, "/v1/sessions/"+id+"/commands", req, &c); code != http.StatusAccepted || c.CommandID == "" {
		t.Fatalf("background command %+v: HTTP %d %+v", req, code, c)
	}
	return c
}

func getCommand(t *testing.T, d *daemon, id, cid string) api.CommandInfo {
	t.Helper()
	var c api.CommandInfo
	if code, _ := d.call(t, http.MethodGet, "/v1/sessions/"+id+"/commands/"+cid, nil, &c); code != http.StatusOK {
		t.Fatalf("GET command %s: HTTP %d", cid, code)
	}
	return c
}

func waitExited(t *testing.T, d *daemon, id, cid string) api.CommandInfo {
	t.Helper()
	var c api.CommandInfo
	waitFor(t, 30*time.Second, "command "+cid+" to end", func() bool {
		c = getCommand(t, d, id, cid)
		return c.State == "exited"
	})
	return c
}

// A session's commands (issue 29) in a real jail: foreground ones with
// their exit, output, stdin, cwd and env, as the session's user, sharing
// its files and leaving its interpreter's state alone; their timeout and
// output bound; nothing a command started outlives it. Background ones
// run while the session is idle (not frozen), keep their output, take
// stdin, signals and DELETE (which kills what they started), block a
// pause naming them, and are capped per session.
func TestSessionCommands(t *testing.T) {
	d := startSessionDaemon(t, 0)
	s := newSession(t, d, api.SessionCreateRequest{})
	id := s.SessionID
	mustExec(t, d, id, "n = 42\nopen('from-python.txt', 'w').write('py\\n')")

	// Foreground.
	r := mustCommand(t, d, id, api.CommandRequest{Cmd: `echo out; echo err >&2; id -u; pwd; cat from-python.txt; echo "$GREETING"; echo cmd > from-cmd.txt; exit 3`,
		Env: map[string]string{"GREETING": "hello"}})
	if r.Status != "error" || r.ExitCode == nil || *r.ExitCode != 3 || r.Signal != nil {
		t.Errorf("exit 3: %+v", r)
	}
	if want := "out\n1000\n/workspace\npy\nhello\n"; r.Stdout != want || r.Stderr != "err\n" {
		t.Errorf("stdout %q stderr %q, want %q and %q", r.Stdout, r.Stderr, want, "err\n")
	}
	if !strings.HasPrefix(r.CommandID, "c-") {
		t.Errorf("command id %q", r.CommandID)
	}
	call := mustExec(t, d, id, "print(n, open('from-cmd.txt').read().strip())")
	if call.Stdout != "42 cmd\n" {
		t.Errorf("the interpreter after a command: %q, want its state and the command's file", call.Stdout)
	}
	if r := mustCommand(t, d, id, api.CommandRequest{Argv: []string{"tr", "a-z", "A-Z"}, Stdin: ptr("shout\n"), Cwd: "/tmp"}); r.Status != "ok" || r.Stdout != "SHOUT\n" {
		t.Errorf("argv with stdin: %+v", r)
	}
	if r := mustCommand(t, d, id, api.CommandRequest{Cmd: "pwd", Cwd: "/tmp"}); r.Stdout != "/tmp\n" {
		t.Errorf("cwd /tmp: %q", r.Stdout)
	}
	if code, _, raw := runCommand(t, d, id, api.CommandRequest{Cmd: "pwd", Cwd: "/workspace/none"}); code != 400 || !strings.Contains(string(raw), `"cwd"`) {
		t.Errorf("a cwd that does not exist: %d %s", code, raw)
	}
	if r := mustCommand(t, d, id, api.CommandRequest{Argv: []string{"no-such-program"}}); r.Status != "error" || r.ExitCode == nil || *r.ExitCode != 127 {
		t.Errorf("a program not found: %+v", r)
	}
	// Streamed, as execute streams.
	req, _ := http.NewRequest("POST", "http://jaild/v1/sessions/"+id+"/commands", strings.NewReader(`{"cmd": "for i in 1 2 3; do echo $i; sleep 0.1; done; echo done >&2"}`))
	req.Header.Set("Accept", api.MediaNDJSON)
	resp, err := d.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var out, errOut strings.Builder
	var done api.CommandResult
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev struct {
			Event string          `json:"event"`
			Data  json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("event %q: %v", sc.Text(), err)
		}
		names = append(names, ev.Event)
		var text api.EventText
		switch ev.Event {
		case "stdout":
			_ = json.Unmarshal(ev.Data, &text)
			out.WriteString(text.Text)
		case "stderr":
			_ = json.Unmarshal(ev.Data, &text)
			errOut.WriteString(text.Text)
		case "done":
			if err := strictJSON(ev.Data, &done); err != nil {
				t.Fatal(err)
			}
		}
	}
	resp.Body.Close()
	if names[0] != "start" || names[len(names)-1] != "done" || out.String() != "1\n2\n3\n" || errOut.String() != "done\n" || done.Status != "ok" || done.Stdout != "" {
		t.Errorf("streamed command: events %v stdout %q stderr %q done %+v", names, out.String(), errOut.String(), done)
	}
	// Bounds: the timeout, the output bound; the program killed by a
	// signal says so.
	start := time.Now()
	if r := mustCommand(t, d, id, api.CommandRequest{Cmd: "sleep 60", TimeoutMs: ptr(int64(500))}); r.Status != "timeout" || r.Signal == nil {
		t.Errorf("timeout: %+v", r)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("a 500 ms timeout answered after %v", took)
	}
	if r := mustCommand(t, d, id, api.CommandRequest{Cmd: "yes", OutputBytes: ptr(int64(1000))}); r.Status != "output_limit" || !r.StdoutTruncated || len(r.Stdout) != 1000 {
		t.Errorf("output bound: status %s truncated %v %d bytes", r.Status, r.StdoutTruncated, len(r.Stdout))
	}
	if r := mustCommand(t, d, id, api.CommandRequest{Cmd: "kill -USR1 $$"}); r.Status != "killed" || r.Signal == nil || *r.Signal != 10 || r.ExitCode != nil {
		t.Errorf("killed by SIGUSR1: %+v", r)
	}
	// What a foreground command started ends with it, even out of its
	// session and parentage.
	r = mustCommand(t, d, id, api.CommandRequest{Cmd: `setsid sh -c 'sleep 1000 >/dev/null 2>&1 & echo $!' </dev/null`})
	pid := strings.TrimSpace(r.Stdout)
	if pid == "" {
		t.Fatalf("detached child: %+v", r)
	}
	if c := mustExec(t, d, id, livePy+fmt.Sprintf("print(live('%s'))", pid)); c.Stdout != "False\n" {
		t.Errorf("a detached child of a foreground command outlived it (pid %s): %q", pid, c.Stdout)
	}

	// Background: it runs while the session is idle.
	tick := startBackground(t, d, id, api.CommandRequest{Cmd: `i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.05; done`})
	if tick.State != "running" || tick.Pid <= 1 || tick.Status != nil || tick.EndedAt != nil {
		t.Errorf("started: %+v", tick)
	}
	var seen int
	waitFor(t, 30*time.Second, "ticks while the session is idle", func() bool {
		c := getCommand(t, d, id, tick.CommandID)
		seen = strings.Count(*c.Stdout, "tick")
		return seen >= 5
	})
	var list api.CommandList
	if code, _ := d.call(t, http.MethodGet, "/v1/sessions/"+id+"/commands", nil, &list); code != 200 || len(list.Commands) != 1 || list.Commands[0].Stdout != nil {
		t.Errorf("list: %d %+v", code, list)
	}
	// A call runs beside it; the interpreter is still its own.
	if c := mustExec(t, d, id, "print(n)"); c.Stdout != "42\n" {
		t.Errorf("a call beside a background command: %q", c.Stdout)
	}
	var e api.ErrorBody
	if code, _ := d.call(t, http.MethodPost, "/v1/sessions/"+id+"/pause", nil, &e); code != 409 || !strings.Contains(e.Error.Message, tick.CommandID) {
		t.Errorf("pause with a background command: %d %+v", code, e)
	}
	var c api.CommandInfo
	if code, _ := d.call(t, http.MethodPost, "/v1/sessions/"+id+"/commands/"+tick.CommandID+"/signal", api.CommandSignalRequest{Signal: "SIGTERM"}, &c); code != 200 {
		t.Errorf("signal: %d", code)
	}
	c = waitExited(t, d, id, tick.CommandID)
	if c.Status == nil || *c.Status != "killed" || c.Signal == nil || *c.Signal != 15 || c.EndedAt == nil {
		t.Errorf("after SIGTERM: %+v", c)
	}

	// stdin, then end of file.
	cat := startBackground(t, d, id, api.CommandRequest{Argv: []string{"cat"}})
	if code, _ := d.call(t, http.MethodPost, "/v1/sessions/"+id+"/commands/"+cat.CommandID+"/stdin", api.CommandStdinRequest{Data: "to cat\n", EOF: true}, &c); code != 200 {
		t.Errorf("stdin: %d", code)
	}
	c = waitExited(t, d, id, cat.CommandID)
	if c.Status == nil || *c.Status != "ok" || *c.Stdout != "to cat\n" {
		t.Errorf("cat: %+v stdout %q", c, *c.Stdout)
	}

	// DELETE kills what it started, detached or not.
	tree := startBackground(t, d, id, api.CommandRequest{Cmd: `setsid sh -c 'echo $$ > /tmp/detached.pid; exec sleep 1000' >/dev/null 2>&1 </dev/null & sleep 1000`})
	waitFor(t, 30*time.Second, "the detached process's pid", func() bool {
		return mustExec(t, d, id, "import os; print(os.path.exists('/tmp/detached.pid') and open('/tmp/detached.pid').read().strip() != '')").Stdout == "True\n"
	})
	if code, _ := d.call(t, http.MethodDelete, "/v1/sessions/"+id+"/commands/"+tree.CommandID, nil, &c); code != 200 || c.State != "exited" {
		t.Errorf("DELETE: %d %+v", code, c)
	}
	if got := mustExec(t, d, id, livePy+"print(live(open('/tmp/detached.pid').read().strip()))").Stdout; got != "False\n" {
		t.Errorf("a detached process outlived its command's DELETE: %q", got)
	}
	if code, _ := d.call(t, http.MethodGet, "/v1/sessions/"+id+"/commands/"+tree.CommandID, nil, nil); code != 404 {
		t.Errorf("a deleted command: %d", code)
	}

	// At most 8 background commands at once.
	for i := range 8 {
		_ = i
		startBackground(t, d, id, api.CommandRequest{Argv: []string{"sleep", "1000"}})
	}
	if code, _ := d.call(t, http.MethodPost, "/v1/sessions/"+id+"/commands", api.CommandRequest{Argv: []string{"true"}, Background: true}, &e); code != 429 || !strings.Contains(e.Error.Message, "8") {
		t.Errorf("a 9th background command: %d %+v", code, e)
	}
	// The session's end ends them.
	deleteSession(t, d, id)
}

// portGet sends a GET through session id's port proxy.
func portGet(t *testing.T, d *daemon, id, rest string) (int, []byte) {
	t.Helper()
	status, _, body := fsRequest(t, d, "GET", "/v1/sessions/"+id+"/ports/"+rest, nil, nil)
	return status, body
}

// echoServer is a background command's program: a TCP server on port
// that answers an HTTP Upgrade with 101 and then echoes what it gets.
const echoServer = `
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 8002))
s.listen()
while True:
    c, _ = s.accept()
    buf = b''
    while b'\r\n\r\n' not in buf:
        buf += c.recv(4096)
    c.sendall(b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n')
    while True:
        b = c.recv(4096)
        if not b:
            break
        c.sendall(b)
    c.close()
`

// A session's ports (issue 29) through the daemon's proxy, with a real
// jail: an HTTP server started as a background command is reached while
// the session is idle, its answers as they are; a port nobody listens on
// is 502 naming it; a session without a background command is 409; an
// Upgrade is relayed both ways.
func TestSessionPorts(t *testing.T) {
	d := startSessionDaemon(t, 0)
	s := newSession(t, d, api.SessionCreateRequest{})
	id := s.SessionID
	mustExec(t, d, id, "import os\nos.makedirs('site')\nopen('site/hello.txt', 'w').write('hello through the proxy\\n')")
	if status, body := portGet(t, d, id, "8000/hello.txt"); status != 409 || !strings.Contains(string(body), "background command") {
		t.Errorf("a port of a session without a background command: %d %s", status, body)
	}
	startBackground(t, d, id, api.CommandRequest{Argv: []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "/workspace/site"}})
	var status int
	var body []byte
	waitFor(t, 30*time.Second, "the session's server", func() bool {
		status, body = portGet(t, d, id, "8000/hello.txt")
		return status != 502
	})
	if status != 200 || string(body) != "hello through the proxy\n" {
		t.Errorf("GET through the proxy: %d %q", status, body)
	}
	if status, body := portGet(t, d, id, "8000/none"); status != 404 || strings.Contains(string(body), `"error"`) {
		t.Errorf("the server's own 404 comes back as it is: %d %s", status, body)
	}
	if status, body := portGet(t, d, id, "8001/"); status != 502 || !strings.Contains(string(body), "8001") {
		t.Errorf("a port nobody listens on: %d %s", status, body)
	}
	// An upgrade, relayed both ways.
	startBackground(t, d, id, api.CommandRequest{Argv: []string{"python3", "-c", echoServer}})
	var c net.Conn
	var br *bufio.Reader
	waitFor(t, 30*time.Second, "the echo server", func() bool {
		c, br = fsRawConn(t, d)
		fmt.Fprintf(c, "GET /v1/sessions/%s/ports/8002/ws HTTP/1.1\r\nHost: jaild\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", id)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("upgrade: %v", err)
		}
		if resp.StatusCode == 502 {
			c.Close()
			return false
		}
		if resp.StatusCode != 101 {
			t.Fatalf("upgrade: %s", resp.Status)
		}
		return true
	})
	for _, msg := range []string{"ping", "a second message"} {
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Errorf("echo through the upgraded connection: %q %v", got, err)
		}
	}
	c.Close()
}

// GET .../commands/{cid}?follow=true streams a background command's
// output from what was kept on, as it comes, then its end: both formats,
// a follower that arrives late (the earlier output first) and one there
// from the start.
func TestSessionCommandFollow(t *testing.T) {
	d := startSessionDaemon(t, 0)
	s := newSession(t, d, api.SessionCreateRequest{})
	for _, format := range []string{api.MediaNDJSON, api.MediaSSE} {
		bg := startBackground(t, d, s.SessionID, api.CommandRequest{Cmd: `echo first; read go; for i in 1 2 3; do echo line$((i*11)); sleep 0.2; done; echo err >&2; exit 2`})
		waitFor(t, 30*time.Second, "the command's first line", func() bool {
			var c api.CommandInfo
			d.call(t, "GET", "/v1/sessions/"+s.SessionID+"/commands/"+bg.CommandID, nil, &c)
			return c.Stdout != nil && *c.Stdout == "first\n"
		})
		req, err := http.NewRequestWithContext(t.Context(), "GET", "http://jaild/v1/sessions/"+s.SessionID+"/commands/"+bg.CommandID+"?follow=true", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", format)
		resp, err := d.Client.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("follow %s: %v %v", format, resp, err)
		}
		// The follower is there; the command goes on.
		if code, _ := d.call(t, "POST", "/v1/sessions/"+s.SessionID+"/commands/"+bg.CommandID+"/stdin", api.CommandStdinRequest{Data: "go\n"}, nil); code != 200 {
			t.Fatalf("stdin: HTTP %d", code)
		}
		evs, err := readEvents(resp, format)
		if err != nil {
			t.Fatalf("follow %s: %v", format, err)
		}
		var stdout, stderr strings.Builder
		var names []string
		var done api.CommandInfo
		for _, ev := range evs {
			names = append(names, ev.Event.Event)
			var text api.EventText
			switch ev.Event.Event {
			case "stdout", "stderr":
				if err := strictJSON(ev.Data, &text); err != nil {
					t.Fatalf("%s event %s: %v", ev.Event.Event, ev.Data, err)
				}
				map[string]*strings.Builder{"stdout": &stdout, "stderr": &stderr}[ev.Event.Event].WriteString(text.Text)
			case "done":
				if err := strictJSON(ev.Data, &done); err != nil {
					t.Fatalf("done %s: %v", ev.Data, err)
				}
			}
		}
		if names[0] != "start" || names[len(names)-1] != "done" {
			t.Errorf("follow %s: events %v", format, names)
		}
		if stdout.String() != "first\nline11\nline22\nline33\n" || stderr.String() != "err\n" {
			t.Errorf("follow %s: stdout %q stderr %q", format, stdout.String(), stderr.String())
		}
		if done.State != "exited" || done.ExitCode == nil || *done.ExitCode != 2 || done.Stdout != nil {
			t.Errorf("follow %s: done %+v", format, done)
		}
	}
	// Without a streaming Accept: 400 naming follow.
	bg := startBackground(t, d, s.SessionID, api.CommandRequest{Cmd: "sleep 100"})
	var e api.ErrorBody
	if code, _ := d.call(t, "GET", "/v1/sessions/"+s.SessionID+"/commands/"+bg.CommandID+"?follow=true", nil, &e); code != 400 || e.Error.Field != "follow" {
		t.Errorf("follow without a streaming Accept: HTTP %d %+v", code, e)
	}
}
