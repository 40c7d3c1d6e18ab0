package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/jail"
)

// A session's terminal driven as a person drives it: jailctl session
// shell runs on a real pseudo-terminal whose other end the test holds, as
// expect does (the test types keys, reads the screen's bytes, resizes the
// window). It proves jailctl's raw mode (Ctrl-C goes to the session's
// foreground job, not to jailctl), the size and a resize (SIGWINCH)
// reaching the shell, Ctrl-D ending it with jailctl exiting as the shell
// did, and the local terminal's mode restored.
func TestSessionTerminalJailctl(t *testing.T) {
	d := startSessionDaemon(t, 0)
	s := newSession(t, d, api.SessionCreateRequest{})
	id := s.SessionID

	master, tty, err := jail.OpenPTY(100, 33)
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "jailctl"), "--socket", d.Socket, "session", "shell", id)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.Env = append(os.Environ(), "TERM=xterm")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
	}()

	var mu sync.Mutex
	var screen strings.Builder
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	seen := func() string {
		mu.Lock()
		defer mu.Unlock()
		return screen.String()
	}
	at := 0
	// waitFor waits for want on the screen after what was matched last;
	// retype, when set, is typed again every second meanwhile.
	waitFor := func(want, retype string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		next := time.Now().Add(time.Second)
		for {
			if i := strings.Index(seen()[at:], want); i >= 0 {
				at += i + len(want)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q on the screen after byte %d: %q", want, at, seen())
			}
			if retype != "" && time.Now().After(next) {
				type_(t, master, retype)
				next = time.Now().Add(time.Second)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The markers are the shell's arithmetic, so that the echo of what is
	// typed does not match them.
	type_(t, master, "stty size; echo m$((1+1)) $TERM\r")
	waitFor("33 100", "")
	waitFor("m2 xterm", "")
	if err := jail.ResizePTY(master, 120, 50); err != nil {
		t.Fatal(err)
	}
	type_(t, master, "stty size\r")
	waitFor("50 120", "stty size\r")
	// Ctrl-C: in raw mode a byte for the session's terminal, which
	// interrupts its foreground job; jailctl runs on.
	type_(t, master, "sleep 300; echo n$((2+2))\r")
	time.Sleep(500 * time.Millisecond)
	type_(t, master, "\x03")
	type_(t, master, "echo m$((3+3))\r")
	waitFor("m6", "")
	if strings.Contains(seen(), "n4") {
		t.Errorf("Ctrl-C did not interrupt the session's foreground job")
	}
	select {
	case err := <-exited:
		t.Fatalf("jailctl ended on Ctrl-C: %v", err)
	default:
	}
	// Ctrl-D ends the shell and jailctl with its status.
	type_(t, master, "\x04")
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("jailctl after Ctrl-D: %v; screen %q", err, seen())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("jailctl did not end on Ctrl-D: %q", seen())
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("the terminal's mode after jailctl: lflag %#x iflag %#x oflag %#x, before %#x %#x %#x",
			after.Lflag, after.Iflag, after.Oflag, before.Lflag, before.Iflag, before.Oflag)
	}
	// The shell is listed as an ended terminal of the session.
	var list api.CommandList
	if code, _ := d.call(t, "GET", "/v1/sessions/"+id+"/commands", nil, &list); code != 200 || len(list.Commands) != 1 ||
		!list.Commands[0].Terminal || list.Commands[0].State != "exited" || list.Commands[0].ExitCode == nil || *list.Commands[0].ExitCode != 0 {
		t.Errorf("the session's commands after the shell: HTTP %d %+v", code, list)
	}
	// Piped, not a terminal: stdin is typed as it is and its end is a
	// Ctrl-D.
	out, errOut, code := jailctlAt(t, d.Socket, "echo m$((6*7))\nexit 5\n", "session", "shell", id)
	if code != 5 || !strings.Contains(out, "m42") {
		t.Errorf("a piped shell: exit %d stdout %q stderr %q; want m42 and exit 5", code, out, errOut)
	}
	// A session that does not exist: jailctl says so and fails.
	out, errOut, code = jailctlAt(t, d.Socket, "", "session", "shell", "s-0000000000000000")
	if code == 0 || !strings.Contains(errOut, "s-0000000000000000") {
		t.Errorf("shell of no session: exit %d %q %q", code, out, errOut)
	}
}

func type_(t *testing.T, master *os.File, s string) {
	t.Helper()
	if _, err := master.Write([]byte(s)); err != nil && !errors.Is(err, os.ErrClosed) {
		t.Fatal(err)
	}
}
