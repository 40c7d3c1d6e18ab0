package cli

import (
	"strings"
	"testing"
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
