package tests

// A session's commands (issue 29): programs the caller starts in the
// session's jail beside its interpreter, some left running between calls
// (the session then unfrozen). What they do is hostile: fork bombs,
// processes that try to outlive their command, the daemon's control fds,
// CPU while nothing freezes them, floods of output, and other uids.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
)

func sessCmdCases() []hcase {
	return []hcase{
		{id: "S59", cat: catSession, title: "a background command is a shell fork bomb; then the session is called, runs a command and the bomb is deleted",
			expect: "the bomb is held by the session's pids limit; DELETE ends it and everything it forked; the interpreter keeps its state and a later command runs",
			run:    runCmdForkBomb},
		{id: "S60", cat: catSession, title: "a command starts a process that leaves its session and parent (setsid, double fork), ignores SIGTERM and SIGHUP, then the command is deleted (background) or ends (foreground)",
			expect: "the process is gone with its command in both cases: a command's processes live in a cgroup of their own, killed whole",
			run:    runCmdOutlive},
		{id: "S61", cat: catSession, title: "a command looks for the daemon's control fds: its own fds, init's (/proc/1/fd: the control and status pipes), the daemon's environment",
			expect: "the command holds only its stdio and its exit-record pipe; init's fds cannot be read (init is not dumpable); nothing of the daemon's environment",
			run:    runCmdControlFds},
		{id: "S62", cat: catSession, title: "two busy loops as a background command of a session with cpu_cores 0.5, while no call runs (the session is not frozen); control: the same in a session with cpu_cores 2",
			expect: "the CPU quota holds between calls: the loops get at most about half a core, the control far more",
			run:    runCmdCPUQuota},
		{id: "S63", cat: catSession, title: "a background command floods stdout without end",
			expect: "the daemon keeps the last 1 MiB of it and counts the rest as dropped; the session answers",
			run:    runCmdFlood},
		{id: "S64", cat: catSession, title: "uid 65534 after root's session's commands: run one, list, read, write stdin, signal, delete",
			expect: "every request is 404 as for a session that never existed; root's command runs on",
			run:    runCmdOtherUID},
		{id: "S65", cat: catSession, title: "the port proxy aimed elsewhere: at a port the host listens on (127.0.0.1 of the host), at a port only another session listens on, at ports 0, 65536, -1, \"80@127.0.0.1\" and \"8000%2F..%2F..\", and uid 65534 at the owner's server",
			expect: "the connection is made in the session's own network namespace: the host's and the other session's listeners are unreachable (502 naming the port); malformed ports 400 naming port, the one with a path in it 404 (no such endpoint); uid 65534 404; the other session's server answers its own owner",
			run:    runPortElsewhere},
		{id: "S66", cat: catSession, title: "a terminal's shell floods escape sequences without end (clear screen, window title, cursor and device reports, the alternate screen, bracketed paste, a clipboard write) while its client reads nothing, then reads, then hangs up",
			expect: "the daemon relays with backpressure: the jail's writes wait for the client, the daemon's memory stays bounded, the session answers calls meanwhile; the hang-up kills the shell and everything it started",
			run:    runTerminalFlood},
	}
}

// cmdReq sends a command request of s's owner and decodes the answer
// into out (when the status is want).
func cmdReq(t *testing.T, ss *sessionSet, s *sess, method, path string, body any, want int, out any) []byte {
	t.Helper()
	status, raw := ss.request(s.nobody, method, "/v1/sessions/"+s.id+"/commands"+path, body)
	if status != want {
		t.Fatalf("%s commands%s: HTTP %d %s", method, path, status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s commands%s: %v %s", method, path, err, raw)
		}
	}
	return raw
}

func runCmdForkBomb(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	wantCall(t, ss.exec(s, code("kept = 'state'")), "ok")
	var bomb api.CommandInfo
	cmdReq(t, ss, s, "POST", "", api.CommandRequest{Cmd: `b() { b | b & }; b`, Background: true}, 202, &bomb)
	time.Sleep(2 * time.Second)
	if r := ss.exec(s, code("print(kept)")); r.Stdout != "state\n" {
		t.Errorf("the interpreter during the bomb: %q", r.Stdout)
	}
	start := time.Now()
	var c api.CommandInfo
	cmdReq(t, ss, s, "DELETE", "/"+bomb.CommandID, nil, 200, &c)
	if c.State != "exited" || time.Since(start) > 15*time.Second {
		t.Errorf("DELETE of the bomb: %+v after %v", c, time.Since(start))
	}
	var r api.CommandResult
	cmdReq(t, ss, s, "POST", "", api.CommandRequest{Cmd: "ls /proc | grep -c '^[0-9]'"}, 200, &r)
	n := strings.TrimSpace(r.Stdout)
	// init, the runner, the command's wrapper, sh, ls and grep.
	if r.Status != "ok" || n == "" || len(n) > 1 {
		t.Errorf("the processes left after the bomb's DELETE: %q (status %s %s)", r.Stdout, r.Status, r.Stderr)
	}
	return "the session answered during the bomb; DELETE ended it and everything it forked; a later command ran with a handful of processes in the session"
}

func runCmdOutlive(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	escape := `trap '' TERM HUP; setsid sh -c 'trap "" TERM HUP; echo $$ > /tmp/%s.pid; exec sleep 1000' </dev/null >/dev/null 2>&1 &`
	var bg api.CommandInfo
	cmdReq(t, ss, s, "POST", "", api.CommandRequest{Cmd: fmt.Sprintf(escape, "bg") + " sleep 1000", Background: true}, 202, &bg)
	var fg api.CommandResult
	cmdReq(t, ss, s, "POST", "", api.CommandRequest{Cmd: fmt.Sprintf(escape, "fg") + " sleep 0.5"}, 200, &fg)
	cmdReq(t, ss, s, "DELETE", "/"+bg.CommandID, nil, 200, nil)
	r := ss.exec(s, code(livePy+"for n in ('bg', 'fg'):\n    pid = open('/tmp/%s.pid' % n).read().strip()\n    print(n, pid != '', live(pid))"))
	if r.Stdout != "bg True False\nfg True False\n" {
		t.Errorf("after DELETE and the foreground end, the escaped processes: %q", r.Stdout)
	}
	return "both escaped processes (setsid, double fork, TERM and HUP ignored) were gone with their commands"
}

func runCmdControlFds(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	var r api.CommandResult
	script := `exec 2>&1
echo "fds: $(ls /proc/self/fd | sort -n | tr '\n' ' ')"
echo "init: $(ls /proc/1/fd 2>&1 >/dev/null)"
echo "control: $(head -c 1 /proc/1/fd/5 2>&1)"
echo "env: $(env | grep -c -i -E 'jaild|NOTIFY_SOCKET|LISTEN_FDS|INVOCATION_ID')"`
	cmdReq(t, ss, s, "POST", "", api.CommandRequest{Cmd: script}, 200, &r)
	got := map[string]string{}
	for _, line := range strings.Split(r.Stdout, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			got[k] = v
		}
	}
	// The listing's subshell: its stdio, the exit-record pipe, ls's own
	// directory fd.
	if fds := strings.Fields(got["fds"]); len(fds) > 5 || len(fds) < 3 || strings.Join(fds[:3], " ") != "0 1 2" {
		t.Errorf("the command's fds: %q", got["fds"])
	}
	if !strings.Contains(got["init"], "Permission denied") || !strings.Contains(got["control"], "Permission denied") {
		t.Errorf("init's fds: %q / %q", got["init"], got["control"])
	}
	if got["env"] != "0" {
		t.Errorf("the daemon's environment: %q (output %q)", got["env"], r.Stdout)
	}
	return "the command held its stdio and one pipe; /proc/1/fd and init's control fd: permission denied; no daemon variable in its environment"
}

// spinShare runs two busy loops as a background command of a session
// with cpu_cores cores for about a second and returns their CPU time per
// second of wall time.
func spinShare(t *testing.T, ss *sessionSet, cores float64) float64 {
	t.Helper()
	s := ss.open(api.SessionCreateRequest{CPUCores: &cores})
	var bg api.CommandInfo
	cmdReq(t, ss, s, "POST", "", api.CommandRequest{Cmd: "while :; do :; done & while :; do :; done", Background: true}, 202, &bg)
	time.Sleep(1500 * time.Millisecond)
	var c api.CommandInfo
	cmdReq(t, ss, s, "DELETE", "/"+bg.CommandID, nil, 200, &c)
	if c.EndedAt == nil {
		t.Fatalf("the deleted command did not end: %+v", c)
	}
	wall := c.EndedAt.Sub(c.StartedAt)
	return float64(c.CPUMs) / float64(wall.Milliseconds())
}

func runCmdCPUQuota(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	limited := spinShare(t, ss, 0.5)
	control := spinShare(t, ss, 2)
	if limited > 0.5*1.3 {
		t.Errorf("with cpu_cores 0.5 the loops used %.2f cores", limited)
	}
	if control < 1.5*limited {
		t.Errorf("the control (cpu_cores 2) used %.2f cores against %.2f under the quota: the host gave too little to compare", control, limited)
	}
	return "under cpu_cores 0.5 the loops got at most 0.65 cores (the CFS quota), the control at least 1.5 times as much"
}

func runCmdFlood(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	var bg api.CommandInfo
	cmdReq(t, ss, s, "POST", "", api.CommandRequest{Argv: []string{"yes", "flood"}, Background: true}, 202, &bg)
	var c api.CommandInfo
	waitFor(t, 60*time.Second, "the flood past 1 MiB", func() bool {
		cmdReq(t, ss, s, "GET", "/"+bg.CommandID, nil, 200, &c)
		return c.StdoutDroppedBytes > 0
	})
	if c.Stdout == nil || len(*c.Stdout) > 1<<20 {
		t.Errorf("kept %d bytes of the flood", len(*c.Stdout))
	}
	if r := ss.exec(s, code("print('alive')")); r.Stdout != "alive\n" {
		t.Errorf("the session during the flood: %q", r.Stdout)
	}
	cmdReq(t, ss, s, "DELETE", "/"+bg.CommandID, nil, 200, nil)
	return "at most the last 1 MiB kept, the rest counted as dropped; the session answered"
}

func runTerminalFlood(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	term, err := client.New(h.d.Socket).Terminal(ctx, s.id, client.TerminalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	flood := `yes "$(printf '\033[2J\033]0;pwned\007\033[6n\033[c\033[?1049h\033[?2004h\033]52;c;cHduZWQ=\007')"` + "\r"
	if err := term.Send(ctx, []byte(flood)); err != nil {
		t.Fatal(err)
	}
	// Nothing read for 2 s: whatever the flood writes waits.
	time.Sleep(2 * time.Second)
	pid := h.d.Cmd.Process.Pid
	if rss, ceiling := vmRSS(pid), h.rssCeiling(rssCaseSlack); rss > ceiling {
		t.Errorf("the daemon's RSS during the unread flood: %d MiB, above %d MiB", rss>>20, ceiling>>20)
	}
	if r := ss.exec(s, code("print('alive')")); r.Stdout != "alive\n" {
		t.Errorf("the session during the flood: %q", r.Stdout)
	}
	var got int
	for got < 4<<20 {
		out, exit, err := term.Next(ctx)
		if err != nil || exit != nil {
			t.Fatalf("the flood after %d bytes: %v %+v", got, err, exit)
		}
		got += len(out)
	}
	if rss, ceiling := vmRSS(pid), h.rssCeiling(rssCaseSlack); rss > ceiling {
		t.Errorf("the daemon's RSS while relaying the flood: %d MiB, above %d MiB", rss>>20, ceiling>>20)
	}
	_ = term.Close()
	var list api.CommandList
	waitFor(t, 30*time.Second, "the terminal's shell killed on the hang-up", func() bool {
		cmdReq(t, ss, s, "GET", "", nil, 200, &list)
		return len(list.Commands) == 1 && list.Commands[0].State == "exited"
	})
	if c := list.Commands[0]; !c.Terminal || c.Status == nil || *c.Status != "killed" {
		t.Errorf("the terminal after the hang-up: %+v", c)
	}
	r := mustCommand(t, h.d, s.id, api.CommandRequest{Cmd: "cat /proc/[0-9]*/comm 2>/dev/null | grep -cx yes || true"})
	if strings.TrimSpace(r.Stdout) != "0" {
		t.Errorf("yes processes left after the hang-up: %q", r.Stdout)
	}
	return "the flood waited for the client; the daemon's memory stayed bounded and the session answered; the hang-up killed the shell and its flood"
}

func runCmdOtherUID(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	var bg api.CommandInfo
	cmdReq(t, ss, s, "POST", "", api.CommandRequest{Argv: []string{"sleep", "1000"}, Background: true}, 202, &bg)
	base := "/v1/sessions/" + s.id + "/commands"
	for _, r := range []struct {
		method, path string
		body         any
	}{
		{"POST", base, `{"cmd": "id"}`}, {"GET", base, nil}, {"GET", base + "/" + bg.CommandID, nil},
		{"POST", base + "/" + bg.CommandID + "/stdin", `{"data": "x"}`}, {"POST", base + "/" + bg.CommandID + "/signal", `{"signal": "SIGKILL"}`},
		{"DELETE", base + "/" + bg.CommandID, nil},
	} {
		if status, raw := ss.request(true, r.method, r.path, r.body); status != http.StatusNotFound {
			t.Errorf("uid 65534 %s %s: HTTP %d %s", r.method, r.path, status, raw)
		}
	}
	var c api.CommandInfo
	cmdReq(t, ss, s, "GET", "/"+bg.CommandID, nil, 200, &c)
	if c.State != "running" {
		t.Errorf("root's command after uid 65534's requests: %+v", c)
	}
	return "every request of uid 65534 404; root's command ran on"
}

func runPortElsewhere(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	a := ss.open(api.SessionCreateRequest{})
	b := ss.open(api.SessionCreateRequest{})
	wantCall(t, ss.exec(b, code("open('mark.txt', 'w').write('session b')")), "ok")
	cmdReq(t, ss, a, "POST", "", api.CommandRequest{Argv: []string{"sleep", "1000"}, Background: true}, 202, nil)
	cmdReq(t, ss, b, "POST", "", api.CommandRequest{Argv: []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}, Background: true}, 202, nil)
	waitFor(t, 30*time.Second, "session b's server", func() bool {
		status, _, _ := fsRequest(t, h.d, "GET", "/v1/sessions/"+b.id+"/ports/8000/mark.txt", nil, nil)
		return status == http.StatusOK
	})
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	go func() {
		for {
			c, err := host.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nhost")
			c.Close()
		}
	}()
	hostPort := host.Addr().(*net.TCPAddr).Port
	for _, p := range []int{hostPort, 8000} {
		status, raw := ss.request(false, "GET", fmt.Sprintf("/v1/sessions/%s/ports/%d/mark.txt", a.id, p), nil)
		if e := apiError(t, raw); status != http.StatusBadGateway || !strings.Contains(e.Error.Message, fmt.Sprint(p)) {
			t.Errorf("session a's port %d: HTTP %d %s", p, status, raw)
		}
	}
	if status, raw := ss.request(false, "GET", "/v1/sessions/"+a.id+"/ports/8000%2F..%2F..%2Fx", nil); status != http.StatusNotFound {
		t.Errorf("a port with a path in it: HTTP %d %s", status, raw)
	}
	for _, p := range []string{"0", "65536", "80@127.0.0.1", "-1"} {
		status, raw := ss.request(false, "GET", "/v1/sessions/"+a.id+"/ports/"+p+"/x", nil)
		if e := apiError(t, raw); status != http.StatusBadRequest || e.Error.Field != "port" {
			t.Errorf("port %q: HTTP %d %s", p, status, raw)
		}
	}
	if status, raw := ss.request(true, "GET", "/v1/sessions/"+b.id+"/ports/8000/mark.txt", nil); status != http.StatusNotFound {
		t.Errorf("uid 65534 at root's server: HTTP %d %s", status, raw)
	}
	status, _, raw := fsRequest(t, h.d, "GET", "/v1/sessions/"+b.id+"/ports/8000/mark.txt", nil, nil)
	if status != http.StatusOK || string(raw) != "session b" {
		t.Errorf("session b's own server: HTTP %d %q", status, raw)
	}
	return "the host's listener and session b's were unreachable from session a's proxy (502 naming the port); the malformed ports 400 naming port, the one with a path in it 404 (no such endpoint); uid 65534 404; session b's server answered its owner"
}
