package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

// jailctl's sessions and REPL against a real daemon (issue 13): state
// across "session exec" calls, ls and show, an interrupt from another
// process and from Ctrl-C, a lost interpreter's note, rm and the refusal
// after it, and a REPL fed a script that leaves no session behind.
func TestJailctlSession(t *testing.T) {
	d := startSessionDaemon(t, 0)
	ctl := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		return jailctlAt(t, d.Socket, stdin, args...)
	}
	show := func(id string) api.Session {
		t.Helper()
		out, errOut, code := ctl("", "session", "show", "--json", id)
		var s api.Session
		if err := json.Unmarshal([]byte(out), &s); err != nil || code != 0 {
			t.Fatalf("session show --json: exit %d, %v: %q %q", code, err, out, errOut)
		}
		return s
	}

	out, errOut, code := ctl("", "session", "new", "--idle-timeout", "5m", "--memory-mb", "256")
	id := strings.TrimSuffix(out, "\n")
	if code != 0 || id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("session new: exit %d stdout %q stderr %q; want the bare ID", code, out, errOut)
	}
	t.Cleanup(func() { ctl("", "session", "rm", id) })

	if out, errOut, code := ctl("", "session", "exec", id, "-c", "x = 41"); code != 0 || out != "" {
		t.Fatalf("x = 41: exit %d %q %q", code, out, errOut)
	}
	if out, errOut, code := ctl("print(x + 1)\n", "session", "exec", id); code != 0 || out != "42\n" {
		t.Fatalf("print(x + 1): exit %d %q %q; want 42 from the state of the call before", code, out, errOut)
	}
	// The value of a final expression is printed once.
	if out, _, code := ctl("", "session", "exec", id, "-c", "x"); code != 0 || out != "41\n" {
		t.Errorf("final expression: exit %d %q; want 41 once", code, out)
	}

	s0 := show(id)
	out, _, code = ctl("", "session", "ls")
	if lines := strings.Split(out, "\n"); code != 0 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(out, id) {
		t.Errorf("session ls: exit %d\n%s", code, out)
	} else {
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) > 4 && f[0] == id && (f[1] != "idle" || f[2] != s0.Image || f[3] != "3" || f[4] != "5m") {
				t.Errorf("ls row %q; want idle, image %s, 3 calls, idle timeout 5m", l, s0.Image)
			}
		}
	}
	if s := show(id); s.State != api.SessionIdle || s.ExecutionCount != 3 || s.Limits.MemoryMB != 256 || s.IdleTimeoutS != 300 {
		t.Errorf("show: %+v", s)
	}

	// startLoop starts a call that runs until interrupted, and waits until
	// it is in the loop.
	startLoop := func() (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
		t.Helper()
		cmd := exec.Command(filepath.Join(binDir, "jailctl"), "--socket", d.Socket, "session", "exec", "--timeout-ms", "30000", id, "-c", "y = 5\nwhile True: pass")
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the call to run", func() bool { return show(id).State == api.SessionRunning })
		time.Sleep(300 * time.Millisecond) // into the loop
		return cmd, &o, &e
	}
	wait := func(cmd *exec.Cmd) int {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			return cmd.ProcessState.ExitCode()
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatal("the interrupt did not end the call")
		}
		return -1
	}

	// An interrupt from another process: KeyboardInterrupt in the call,
	// the state kept.
	cmd, o, e := startLoop()
	if _, errOut, code := ctl("", "session", "interrupt", id); code != 0 {
		t.Errorf("session interrupt: exit %d %q", code, errOut)
	}
	if code := wait(cmd); code != 1 || !strings.Contains(e.String(), "KeyboardInterrupt") || strings.Contains(e.String(), "restarted") {
		t.Errorf("interrupted call: exit %d stdout %q stderr %q; want exit 1 and a KeyboardInterrupt", code, o, e)
	}
	if out, _, code := ctl("", "session", "exec", id, "-c", "print(x + 1, y)"); code != 0 || out != "42 5\n" {
		t.Errorf("after the interrupt: exit %d %q; want the state kept", code, out)
	}
	if _, errOut, code := ctl("", "session", "interrupt", id); code != 1 || !strings.Contains(errOut, "no call") {
		t.Errorf("interrupt of an idle session: exit %d %q", code, errOut)
	}

	// Ctrl-C of the jailctl running the call interrupts it, and does not
	// abandon it: exit 130, the KeyboardInterrupt shown, the state kept.
	cmd, o, e = startLoop()
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code := wait(cmd); code != 130 || !strings.Contains(e.String(), "jailctl: interrupting the call") || !strings.Contains(e.String(), "KeyboardInterrupt") {
		t.Errorf("Ctrl-C: exit %d stdout %q stderr %q; want 130 and the call's KeyboardInterrupt", code, o, e)
	}
	if out, _, code := ctl("", "session", "exec", id, "-c", "x"); code != 0 || out != "41\n" {
		t.Errorf("after Ctrl-C: exit %d %q; want the state kept", code, out)
	}

	// An interpreter that exits is replaced; jailctl says what was lost.
	_, errOut, code = ctl("", "session", "exec", id, "-c", "import os\nos._exit(0)")
	if !strings.Contains(errOut, "jailctl: the session's interpreter was restarted (it exited): variables and imports are gone; files are kept") {
		t.Errorf("lost interpreter: exit %d stderr %q", code, errOut)
	}
	if _, errOut, code := ctl("", "session", "exec", id, "-c", "x"); code != 1 || !strings.Contains(errOut, "NameError") {
		t.Errorf("after the loss: exit %d %q; want a NameError", code, errOut)
	}

	if out, errOut, code := ctl("", "session", "rm", id); code != 0 || out != "" || errOut != "" {
		t.Errorf("session rm: exit %d %q %q", code, out, errOut)
	}
	if s := show(id); s.State != api.SessionEnded || s.EndReason == nil || *s.EndReason != "deleted" {
		t.Errorf("after rm: %+v", s)
	}
	if out, errOut, code := ctl("", "session", "exec", id, "-c", "1"); code != 2 || out != "" || !strings.Contains(errOut, "ended") || !strings.Contains(errOut, "deleted") {
		t.Errorf("exec after rm: exit %d %q %q; want 2 and a message naming the end", code, out, errOut)
	}
	if _, errOut, code := ctl("", "session", "exec", "no-such-session", "-c", "1"); code != 2 || !strings.Contains(errOut, "no-such-session") {
		t.Errorf("unknown session: exit %d %q", code, errOut)
	}

	// The REPL: one session for the script, each statement or block a
	// call, removed at the end of input.
	out, errOut, code = ctl("x = 2\nfor i in range(3):\n    x += i\n\nprint(x)\n", "repl")
	if code != 0 || out != "5\n" {
		t.Errorf("repl: exit %d stdout %q stderr %q; want 5", code, out, errOut)
	}
	out, errOut, code = ctl("import math\nmath.floor(2.5)\n1/0\ndef f(a):\n    return a * 2\nf(21)\n", "repl")
	if code != 0 || out != "2\n42\n" || !strings.Contains(errOut, "ZeroDivisionError") || strings.Contains(errOut, "jailctl:") {
		t.Errorf("repl with an error: exit %d stdout %q stderr %q", code, out, errOut)
	}
	out, _, code = ctl("", "session", "ls", "--json")
	var list api.SessionList
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != 0 {
		t.Fatalf("session ls --json: exit %d %v %q", code, err, out)
	}
	if len(list.Sessions) != 3 {
		t.Errorf("%d sessions listed; want 3 (the removed one and the two REPLs', ended)", len(list.Sessions))
	}
	for _, s := range list.Sessions {
		if s.State != api.SessionEnded || s.EndReason == nil || *s.EndReason != "deleted" {
			t.Errorf("session left behind: %+v", s)
		}
	}

	// --session runs in an existing session and leaves it.
	out, _, _ = ctl("", "session", "new")
	kept := strings.TrimSuffix(out, "\n")
	if out, errOut, code := ctl("z = 7\nz * 6\n", "repl", "--session", kept); code != 0 || out != "42\n" {
		t.Errorf("repl --session: exit %d %q %q", code, out, errOut)
	}
	if s := show(kept); s.State != api.SessionIdle || s.ExecutionCount != 2 {
		t.Errorf("attached session after the REPL: %+v", s)
	}
	ctl("", "session", "rm", kept)
}
