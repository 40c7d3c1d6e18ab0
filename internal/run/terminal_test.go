//go:build !unit

package run

import (
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
)

// termReader collects a terminal's output in the background.
type termReader struct {
	mu  sync.Mutex
	out strings.Builder
	eof chan struct{}
}

func readTerminal(term spec.TerminalIO) *termReader {
	r := &termReader{eof: make(chan struct{})}
	go func() {
		defer close(r.eof)
		buf := make([]byte, 4096)
		for {
			n, err := term.Read(buf)
			r.mu.Lock()
			r.out.Write(buf[:n])
			r.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return r
}

func (r *termReader) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// waitFor waits until the output holds want after offset from.
func (r *termReader) waitFor(t *testing.T, from int, want string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := r.String()
		if i := strings.Index(s[from:], want); i >= 0 {
			return from + i + len(want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the terminal's output after byte %d: %q", want, from, s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A session's terminal: a shell whose controlling terminal it is (its
// size, a resize, Ctrl-C to the foreground job and not the shell), listed
// as a command while it runs, blocking a pause, and its exit status once
// it exits.
func TestSessionTerminal(t *testing.T) {
	ss := newTestSession(t)
	call(t, ss, "x = 5")
	term, err := ss.StartTerminal(&spec.Terminal{Cols: 91, Rows: 27, Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	r := readTerminal(term)
	w := func(s string) {
		t.Helper()
		if _, err := term.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	// The markers are computed by the shell, so that the echo of what is
	// typed does not match them.
	w("stty size; echo m$((1+1)) $GREETING $TERM\r")
	at := r.waitFor(t, 0, "27 91")
	at = r.waitFor(t, at, "m2 hi xterm-256color")
	w(`python3 -c "import os; print('ctty', os.getpgrp() == os.tcgetpgrp(0), os.isatty(1))"` + "\r")
	at = r.waitFor(t, at, "ctty True True")
	if err := term.Resize(120, 40); err != nil {
		t.Fatal(err)
	}
	w("stty size\r")
	at = r.waitFor(t, at, "40 120")
	// Ctrl-C reaches the foreground job through the terminal; the shell
	// goes on.
	w("sleep 300; echo n$((2+2))\r")
	time.Sleep(300 * time.Millisecond)
	w("\x03")
	w("echo m$((3+3))\r")
	at = r.waitFor(t, at, "m6")
	if strings.Contains(r.String(), "n4") {
		t.Errorf("Ctrl-C did not interrupt the foreground job: %q", r.String())
	}
	var listed bool
	for _, c := range ss.Commands() {
		listed = listed || c.ID == term.ID() && c.Terminal && c.State == spec.CommandRunning
	}
	if !listed {
		t.Errorf("the terminal is not listed as a running command: %+v", ss.Commands())
	}
	if _, err := ss.Pause(nil); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), term.ID()) {
		t.Errorf("pause with a terminal open: %v", err)
	}
	if err := ss.CommandStdin(term.ID(), []byte("x"), false); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("stdin of a terminal's shell: %v", err)
	}
	if r := call(t, ss, "print(x)"); string(r.Stdout) != "5\n" {
		t.Errorf("a call beside a terminal: %q", r.Stdout)
	}
	// A job left in the background ends with the shell.
	w("sleep 1000 & exit 3\r")
	select {
	case <-term.Done():
	case <-time.After(20 * time.Second):
		t.Fatalf("the shell did not end: %q", r.String())
	}
	<-r.eof
	ci := term.Close()
	if ci.State != spec.CommandExited || ci.Status != spec.StatusError || ci.Exit != 3 || ci.Signal != 0 {
		t.Errorf("the shell's end: %+v", ci)
	}
	if pids, err := ss.st.j.GroupPids(term.ID()); err == nil {
		t.Errorf("the terminal's group is left, with %v", pids)
	}
	if _, err := term.Read(make([]byte, 8)); !errors.Is(err, io.EOF) {
		t.Errorf("a read after the end: %v", err)
	}

	// Closed while running: killed, with everything it started.
	term, err = ss.StartTerminal(&spec.Terminal{})
	if err != nil {
		t.Fatal(err)
	}
	r = readTerminal(term)
	w("stty size; sleep 1000 & echo m$((4+4))\r")
	at = r.waitFor(t, 0, "24 80")
	r.waitFor(t, at, "m8")
	ci = term.Close()
	if ci.Status != spec.StatusKilled || ci.Signal == 0 {
		t.Errorf("a closed terminal: %+v", ci)
	}
	if pids, err := ss.st.j.GroupPids(term.ID()); err == nil {
		t.Errorf("the closed terminal's group is left, with %v", pids)
	}
	for _, bad := range []spec.Terminal{{Cols: 1001}, {Rows: -1}, {Term: "a b"}, {Cwd: "/etc"}} {
		if _, err := ss.StartTerminal(&bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("terminal %+v: %v", bad, err)
		}
	}
}
