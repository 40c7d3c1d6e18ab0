package spec

import (
	"strings"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
)

// A session's commands (issue 29): programs run in the session's jail
// beside its interpreter, in the foreground (the answer waits for the
// end) or in the background (they keep running between calls).

// Command bounds.
const (
	MaxCommandArgs      = 1024
	MaxCommandArgvBytes = 128 << 10 // argv and env together
	MaxCommandStdin     = 1 << 20   // a foreground command's stdin; one stdin write of a background one
	// MaxBackgroundCommands run at once in one session.
	MaxBackgroundCommands = 8
	// CommandRing is how much of each output stream of a background
	// command is kept: the last bytes, the older ones counted as dropped.
	CommandRing = 1 << 20
	// MaxCommandsKept is how many commands a session lists (ended ones
	// go oldest first).
	MaxCommandsKept = 64
)

// Command is a command to run in a session: Argv as given (its first
// element looked up in PATH when it has no slash).
type Command struct {
	Argv        []string
	Cwd         string // an absolute path beneath /workspace or /tmp; "" is /workspace
	Env         map[string]string
	Stdin       []byte
	Timeout     time.Duration // a foreground command's
	OutputBytes int64         // a foreground command's bound per stream
	Background  bool
	// Output, when set, receives a foreground command's output as it
	// arrives (1 stdout, 2 stderr) within OutputBytes; the result's
	// Stdout and Stderr are then empty. OnStart is called with its id
	// once it runs.
	Output  OutputFunc
	OnStart func(id string)
}

// Validate checks the command; the error is of class
// errdefs.ErrInvalidArgument and names the field.
func (c *Command) Validate() error {
	if len(c.Argv) == 0 {
		return errdefs.Field("argv", "is empty")
	}
	if len(c.Argv) > MaxCommandArgs {
		return errdefs.Field("argv", "at most %d arguments, got %d", MaxCommandArgs, len(c.Argv))
	}
	n := 0
	for i, a := range c.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return errdefs.Field("argv", "argument %d holds a NUL byte", i)
		}
		n += len(a) + 1
	}
	if c.Argv[0] == "" {
		return errdefs.Field("argv", "the program (argv[0]) is empty")
	}
	for k, v := range c.Env {
		n += len(k) + len(v) + 2
	}
	if n > MaxCommandArgvBytes {
		return errdefs.Field("argv", "argv and env are %d bytes together; at most %d", n, MaxCommandArgvBytes)
	}
	if err := ValidateEnv(c.Env); err != nil {
		return err
	}
	if c.Cwd != "" {
		if err := commandCwd(c.Cwd); err != nil {
			return err
		}
	}
	if len(c.Stdin) > MaxCommandStdin {
		return errdefs.Field("stdin", "at most %d bytes, got %d", MaxCommandStdin, len(c.Stdin))
	}
	if !c.Background {
		if c.Timeout <= 0 {
			return errdefs.Field("timeout_ms", "must be positive")
		}
		if c.OutputBytes <= 0 {
			return errdefs.Field("output_bytes", "must be positive")
		}
	}
	return nil
}

// commandCwd checks a command's working directory: /workspace or /tmp
// or a clean path beneath them.
func commandCwd(p string) error {
	first, _, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	if !strings.HasPrefix(p, "/") || first != "workspace" && first != "tmp" {
		return errdefs.Field("cwd", "must be /workspace or /tmp or beneath them")
	}
	if err := ValidatePath(strings.TrimSuffix(p[1:], "/")); err != nil {
		return errdefs.Field("cwd", "%v", err)
	}
	return nil
}

// Command states.
const (
	CommandRunning = "running"
	CommandExited  = "exited"
)

// CommandResult is how a foreground command ended, with its output.
type CommandResult struct {
	ID              string
	Status          Status
	ExitCode        int // -1 when killed by a signal
	Signal          int
	Stdout, Stderr  []byte
	StdoutTruncated bool
	StderrTruncated bool
	Duration        time.Duration
	CPU             time.Duration
	OOMKilled       bool
}

// CommandInfo is a background command as the session knows it, with the
// output kept so far.
type CommandInfo struct {
	ID      string
	Argv    []string
	Pid     int // in the jail; 0 unknown
	State   string
	Status  Status // once exited
	Exit    int    // exit code once exited; -1 after a signal
	Signal  int
	Started time.Time
	Ended   time.Time // zero while running
	// Terminal says the command is a terminal's shell (StartTerminal):
	// its output went to the terminal, none is kept.
	Terminal bool
	CPU      time.Duration
	Stdout   []byte
	Stderr   []byte
	// StdoutDropped and StderrDropped count the older bytes past
	// CommandRing that were not kept.
	StdoutDropped, StderrDropped int64
}

// Terminal is a shell on a pseudo-terminal in a session (issue 29): the
// image's bash (its sh where it has none), interactive, its controlling
// terminal the one the daemon relays. It is a background command of the
// session, listed and killed as one, and counted in
// MaxBackgroundCommands.
type Terminal struct {
	Cols, Rows int    // 0 is DefaultTerminalCols, DefaultTerminalRows
	Cwd        string // as a Command's
	Term       string // TERM; "" is DefaultTerm
	Env        map[string]string
}

// TerminalIO is a running terminal: Read its output (io.EOF once the
// shell and what it started have ended), Write its input.
type TerminalIO interface {
	Read(p []byte) (int, error)
	Write(p []byte) (int, error)
	// ID is its command's id in the session.
	ID() string
	// Resize sets its size; the shell gets SIGWINCH.
	Resize(cols, rows int) error
	// Done is closed once the shell and what it started have ended.
	Done() <-chan struct{}
	// Close kills what still runs and answers how the shell ended.
	Close() CommandInfo
}

// Terminal defaults and bounds.
const (
	DefaultTerminalCols = 80
	DefaultTerminalRows = 24
	MaxTerminalSize     = 1000 // columns or rows
	DefaultTerm         = "xterm-256color"
	maxTermName         = 64
)

// Validate checks the terminal's request, filling in its defaults; the
// error is of class errdefs.ErrInvalidArgument and names the field.
func (t *Terminal) Validate() error {
	if t.Cols == 0 {
		t.Cols = DefaultTerminalCols
	}
	if t.Rows == 0 {
		t.Rows = DefaultTerminalRows
	}
	if t.Cols < 1 || t.Cols > MaxTerminalSize {
		return errdefs.Field("cols", "must be in 1..%d, got %d", MaxTerminalSize, t.Cols)
	}
	if t.Rows < 1 || t.Rows > MaxTerminalSize {
		return errdefs.Field("rows", "must be in 1..%d, got %d", MaxTerminalSize, t.Rows)
	}
	if t.Term == "" {
		t.Term = DefaultTerm
	}
	if len(t.Term) > maxTermName || strings.TrimLeft(t.Term, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.+-_") != "" {
		return errdefs.Field("term", "must be a terminal type name (letters, digits, '.+-_'; at most %d bytes)", maxTermName)
	}
	if t.Cwd != "" {
		if err := commandCwd(t.Cwd); err != nil {
			return err
		}
	}
	c := Command{Argv: []string{"/bin/sh"}, Env: t.Env, Background: true}
	return c.Validate()
}

// MaxPortConns bounds the proxied connections open at once to one
// session's ports.
const MaxPortConns = 16
