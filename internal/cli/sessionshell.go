package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/client"
)

// jailctl session shell: the local terminal attached to a shell on a
// terminal in a session (GET /v1/sessions/{id}/pty). On a terminal, the
// local one is put in raw mode (every key goes to the session's shell:
// Ctrl-C interrupts there, Ctrl-D ends it) and its size follows
// SIGWINCH; otherwise stdin is relayed as it is, and its end is a Ctrl-D.
// The exit status is the shell's (128+N after signal N).

const sessionShellHelp = `The shell is the session image's bash (sh where it has none), with the
session's environment, on a terminal of the local terminal's size. Background
jobs end with it. The session stays thawed while the shell runs, and cannot
pause, snapshot or fork until it ends.`

func runSessionShell(e *env, sc *subcommand, args []string) int {
	fs := e.flagSet("session shell")
	cwd := fs.String("cwd", "", "the working `DIR` (/workspace, /tmp or beneath them)")
	daemon := targetFlags(fs)
	pos, rc, ok := e.parseSub(fs, sc, args, 1, 1)
	if !ok {
		return rc
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	in, _ := e.stdin.(*os.File)
	tty := in != nil && isTerminal(in)
	// The local terminal's TERM where the daemon takes it (else its
	// default); a pipe is a dumb terminal.
	o := client.TerminalOptions{Cwd: *cwd, Term: "dumb"}
	if tty {
		o.Cols, o.Rows = terminalSize(in)
		o.Term = os.Getenv("TERM")
		if len(o.Term) > 64 || strings.TrimLeft(o.Term, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.+-_") != "" {
			o.Term = ""
		}
	}
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	term, err := c.Terminal(ctx, pos[0], o)
	if err != nil {
		return e.daemonError(err)
	}
	defer term.Close()
	if tty {
		restore, err := makeRaw(in)
		if err != nil {
			return e.errorf("the local terminal: %v", err)
		}
		defer restore()
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-winch:
					if cols, rows := terminalSize(in); cols > 0 {
						_ = term.Resize(ctx, cols, rows)
					}
				}
			}
		}()
	}
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := e.stdin.Read(buf)
			if n > 0 && term.Send(ctx, buf[:n]) != nil {
				return
			}
			if err != nil {
				if errors.Is(err, io.EOF) && !tty {
					_ = term.Send(ctx, []byte{4}) // Ctrl-D
				}
				return
			}
		}
	}()
	for {
		out, exit, err := term.Next(ctx)
		if err != nil {
			var te *client.TerminalError
			if errors.As(err, &te) {
				continue // a resize refused: the shell goes on
			}
			if e.ctx.Err() != nil {
				return exitError
			}
			return e.errorf("the session's terminal ended: %v", err)
		}
		if exit != nil {
			switch {
			case exit.Signal != nil:
				return 128 + *exit.Signal
			case exit.ExitCode != nil:
				return *exit.ExitCode
			}
			return exitError
		}
		if _, err := e.stdout.Write(out); err != nil {
			return exitError
		}
	}
}

// terminalSize is f's terminal's columns and rows (0, 0 unknown).
func terminalSize(f *os.File) (int, int) {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 || ws.Row == 0 {
		return 0, 0
	}
	return int(ws.Col), int(ws.Row)
}

// makeRaw puts f's terminal in raw mode (as cfmakeraw) and returns what
// restores it.
func makeRaw(f *os.File) (func(), error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, fmt.Errorf("raw mode: %w", err)
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}
