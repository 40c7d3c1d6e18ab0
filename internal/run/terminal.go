package run

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
)

// A session's terminal (issue 29): a shell on a pseudo-terminal in the
// session's jail. The terminal is the host's (jail.OpenPTY), its terminal
// end the shell's fds 0-2 and, through setsid -c, its controlling
// terminal, so that job control, Ctrl-C and SIGWINCH work as on any
// terminal. The shell is a background command of the session (listed,
// counted, killed as one; the session stays thawed while it runs); its
// output is relayed to whoever holds the Terminal, not kept.

// terminalScript starts the image's bash, or its sh where it has none.
const terminalScript = `if command -v bash >/dev/null 2>&1; then exec bash -i; fi; exec sh -i`

// terminalArgv is the shell of a terminal: setsid -c makes it a session
// leader whose controlling terminal is its stdin.
var terminalArgv = []string{"/usr/bin/setsid", "-c", "/bin/sh", "-c", terminalScript}

// Terminal is a shell running on a pseudo-terminal in a session.
type Terminal struct {
	ss     *Session
	cmd    *command
	master *os.File
	once   sync.Once
}

// StartTerminal starts a shell on a terminal of t's size in the session.
// Read its output and Write its input; Close ends it.
func (ss *Session) StartTerminal(t *spec.Terminal) (spec.TerminalIO, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	env := map[string]string{}
	for k, v := range t.Env {
		env[k] = v
	}
	env["TERM"] = t.Term
	c := &spec.Command{Argv: terminalArgv, Cwd: t.Cwd, Env: env, Background: true}
	j, err := ss.beginCommand(c)
	if err != nil {
		return nil, err
	}
	defer ss.callMu.Unlock()
	if n := ss.runningCommands(nil); n >= spec.MaxBackgroundCommands {
		return nil, errdefs.New(errdefs.ErrRateLimited, "the session runs %d background commands and terminals, the most it may; DELETE one or let it end", n)
	}
	master, peer, err := jail.OpenPTY(t.Cols, t.Rows)
	if err != nil {
		return nil, fmt.Errorf("terminal: %w", err)
	}
	id := newCommandID()
	cmd := &command{id: id, argv: slices.Clone(terminalArgv), group: id, started: time.Now(), terminal: true,
		stdout: &ring{}, stderr: &ring{}, kill: make(chan struct{}), done: make(chan struct{})}
	p, err := ss.startCommand(j, c, id, peer, peer, peer)
	peer.Close()
	if err != nil {
		master.Close()
		return nil, err
	}
	cmd.proc, cmd.pid = p, p.JailPid()
	ss.cmdMu.Lock()
	ss.cmds = append(ss.cmds, cmd)
	ss.trimCommandsLocked()
	ss.activity = time.Now()
	ss.cmdMu.Unlock()
	go ss.awaitCommand(j, cmd, &sync.WaitGroup{})
	return &Terminal{ss: ss, cmd: cmd, master: master}, nil
}

// ID is the terminal's command id.
func (t *Terminal) ID() string { return t.cmd.id }

// Done is closed once the shell and everything it started have ended.
func (t *Terminal) Done() <-chan struct{} { return t.cmd.done }

// Info is the terminal's command as the session lists it.
func (t *Terminal) Info() spec.CommandInfo { return t.cmd.info(false) }

func (t *Terminal) active() {
	t.ss.cmdMu.Lock()
	t.ss.activity = time.Now()
	t.ss.cmdMu.Unlock()
}

// Read reads the terminal's output; io.EOF once nothing in the jail holds
// the terminal any more (the shell and what it started have ended) or
// after Close.
func (t *Terminal) Read(p []byte) (int, error) {
	n, err := t.master.Read(p)
	if n > 0 {
		t.active()
	}
	if err != nil && (errors.Is(err, syscall.EIO) || errors.Is(err, os.ErrClosed)) {
		err = io.EOF
	}
	return n, err
}

// Write writes input to the terminal, as typed; it blocks while the
// terminal's input queue is full.
func (t *Terminal) Write(p []byte) (int, error) {
	if len(p) > 0 {
		t.active()
	}
	return t.master.Write(p)
}

// Resize sets the terminal's size (the shell gets SIGWINCH).
func (t *Terminal) Resize(cols, rows int) error {
	if cols < 1 || cols > spec.MaxTerminalSize {
		return errdefs.Field("cols", "must be in 1..%d, got %d", spec.MaxTerminalSize, cols)
	}
	if rows < 1 || rows > spec.MaxTerminalSize {
		return errdefs.Field("rows", "must be in 1..%d, got %d", spec.MaxTerminalSize, rows)
	}
	if err := jail.ResizePTY(t.master, cols, rows); err != nil {
		return errdefs.New(errdefs.ErrConflict, "the terminal has ended")
	}
	return nil
}

// Close ends the terminal: its shell and everything it started are
// killed unless they have ended; the answer is how it ended. The
// terminal stays in the session's list of commands.
func (t *Terminal) Close() spec.CommandInfo {
	select {
	case <-t.cmd.done:
	default:
		t.cmd.mu.Lock()
		t.cmd.killed = true
		t.cmd.mu.Unlock()
		t.cmd.killOnce.Do(func() { close(t.cmd.kill) })
		select {
		case <-t.cmd.done:
		case <-time.After(10 * time.Second):
			t.ss.s.log.Error("terminal did not end within 10 s of SIGKILL", "id", t.ss.ID(), "command", t.cmd.id)
		}
	}
	t.once.Do(func() { t.master.Close() })
	return t.cmd.info(false)
}
