package servertest

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run"
	"github.com/jaild/jaild/internal/run/spec"
)

// A fake session's commands "echo" their argv (joined by spaces) to
// stdout and end ok; a background one runs until it is signalled or
// deleted. Real commands are tested with real jails in internal/run and
// tests/.

type fakeCommand struct {
	info  spec.CommandInfo
	stdin []byte
	eof   bool
}

// RunCommand answers a foreground command.
func (s *Session) RunCommand(_ context.Context, c *spec.Command) (*spec.CommandResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.cmdSeq++
	id := fmt.Sprintf("c-%016x", s.cmdSeq)
	s.mu.Unlock()
	out := []byte(strings.Join(c.Argv, " "))
	if c.OnStart != nil {
		c.OnStart(id)
	}
	if c.Output != nil {
		c.Output(1, out)
		out = nil
	}
	return &spec.CommandResult{ID: id, Status: spec.StatusOK, Stdout: out, Duration: time.Millisecond}, nil
}

// StartCommand starts a fake background command.
func (s *Session) StartCommand(c *spec.Command) (spec.CommandInfo, error) {
	if err := c.Validate(); err != nil {
		return spec.CommandInfo{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cmdSeq++
	fc := &fakeCommand{info: spec.CommandInfo{ID: fmt.Sprintf("c-%016x", s.cmdSeq), Argv: slices.Clone(c.Argv), Pid: 10 + int(s.cmdSeq),
		State: spec.CommandRunning, Started: time.Now(), Stdout: []byte(strings.Join(c.Argv, " "))}}
	s.cmds = append(s.cmds, fc)
	return fc.public(false), nil
}

func (f *fakeCommand) public(output bool) spec.CommandInfo {
	in := f.info
	in.Argv = slices.Clone(in.Argv)
	if output {
		in.Stdout, in.Stderr = slices.Clone(f.info.Stdout), []byte{}
	} else {
		in.Stdout, in.Stderr = nil, nil
	}
	return in
}

func (s *Session) command(id string) (*fakeCommand, error) {
	for _, c := range s.cmds {
		if c.info.ID == id {
			return c, nil
		}
	}
	return nil, errdefs.New(errdefs.ErrNotFound, "no command %q in this session", id)
}

// Commands lists the fake background commands.
func (s *Session) Commands() []spec.CommandInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []spec.CommandInfo{}
	for _, c := range s.cmds {
		out = append(out, c.public(false))
	}
	return out
}

// Command is one fake background command with its output.
func (s *Session) Command(id string) (spec.CommandInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.command(id)
	if err != nil {
		return spec.CommandInfo{}, err
	}
	return c.public(true), nil
}

// CommandStdin keeps what is written.
func (s *Session) CommandStdin(id string, data []byte, eof bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.command(id)
	if err != nil {
		return err
	}
	if c.eof || c.info.State != spec.CommandRunning {
		return errdefs.New(errdefs.ErrConflict, "command %s has ended or its stdin was closed", id)
	}
	c.stdin = append(c.stdin, data...)
	c.eof = eof
	return nil
}

// SignalCommand ends a fake command as killed by the signal.
func (s *Session) SignalCommand(id, name string) error {
	if !slices.Contains(run.CommandSignalNames(), name) {
		return errdefs.Field("signal", "must be one of %s", strings.Join(run.CommandSignalNames(), ", "))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.command(id)
	if err != nil {
		return err
	}
	if c.info.State != spec.CommandRunning {
		return errdefs.New(errdefs.ErrConflict, "command %s has ended", id)
	}
	c.info.State, c.info.Status, c.info.Exit, c.info.Signal, c.info.Ended = spec.CommandExited, spec.StatusKilled, -1, 15, time.Now()
	return nil
}

// KillCommand forgets a fake command.
func (s *Session) KillCommand(id string) (spec.CommandInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.command(id)
	if err != nil {
		return spec.CommandInfo{}, err
	}
	if c.info.State == spec.CommandRunning {
		c.info.State, c.info.Status, c.info.Exit, c.info.Signal, c.info.Ended = spec.CommandExited, spec.StatusKilled, -1, 9, time.Now()
	}
	s.cmds = slices.DeleteFunc(s.cmds, func(x *fakeCommand) bool { return x == c })
	return c.public(true), nil
}

// FollowCommand passes a fake command's output, then waits until it is
// signalled (or ctx ends).
func (s *Session) FollowCommand(ctx context.Context, id string, out func(stream int, p []byte) error) (spec.CommandInfo, error) {
	s.mu.Lock()
	c, err := s.command(id)
	if err != nil {
		s.mu.Unlock()
		return spec.CommandInfo{}, err
	}
	b := slices.Clone(c.info.Stdout)
	s.mu.Unlock()
	if err := out(1, b); err != nil {
		return spec.CommandInfo{}, err
	}
	for {
		s.mu.Lock()
		ci := c.public(false)
		s.mu.Unlock()
		if ci.State != spec.CommandRunning {
			return ci, nil
		}
		select {
		case <-ctx.Done():
			return spec.CommandInfo{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// DialPort dials the test's server for port (Engine.Ports).
func (s *Session) DialPort(port int) (net.Conn, error) {
	s.e.mu.Lock()
	addr, ok := s.e.Ports[port]
	s.e.mu.Unlock()
	if !ok {
		return nil, errdefs.New(errdefs.ErrBadGateway, "nothing listens on port %d in the session", port)
	}
	return net.Dial("tcp", addr)
}

// StartTerminal starts a fake terminal: it echoes what is typed, says
// "size COLSxROWS" on a resize, and its shell ends (exit 0) when "exit\r"
// or a Ctrl-D is typed.
func (s *Session) StartTerminal(t *spec.Terminal) (spec.TerminalIO, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.cmdSeq++
	ft := &fakeTerminal{id: fmt.Sprintf("c-%016x", s.cmdSeq), done: make(chan struct{}), started: time.Now()}
	s.mu.Unlock()
	ft.r, ft.w = io.Pipe()
	return ft, nil
}

type fakeTerminal struct {
	id      string
	started time.Time
	r       *io.PipeReader
	w       *io.PipeWriter
	mu      sync.Mutex
	typed   []byte
	done    chan struct{}
	once    sync.Once
	killed  bool
}

func (t *fakeTerminal) ID() string                 { return t.id }
func (t *fakeTerminal) Done() <-chan struct{}      { return t.done }
func (t *fakeTerminal) Read(p []byte) (int, error) { return t.r.Read(p) }

func (t *fakeTerminal) Write(p []byte) (int, error) {
	if _, err := t.w.Write(p); err != nil {
		return 0, err
	}
	t.mu.Lock()
	t.typed = append(t.typed, p...)
	exit := strings.HasSuffix(string(t.typed), "exit\r") || strings.HasSuffix(string(t.typed), "\x04")
	t.mu.Unlock()
	if exit {
		t.end(false)
	}
	return len(p), nil
}

func (t *fakeTerminal) Resize(cols, rows int) error {
	if cols < 1 || cols > spec.MaxTerminalSize {
		return errdefs.Field("cols", "must be in 1..%d, got %d", spec.MaxTerminalSize, cols)
	}
	if rows < 1 || rows > spec.MaxTerminalSize {
		return errdefs.Field("rows", "must be in 1..%d, got %d", spec.MaxTerminalSize, rows)
	}
	_, err := fmt.Fprintf(t.w, "size %dx%d\r\n", cols, rows)
	return err
}

func (t *fakeTerminal) end(killed bool) {
	t.once.Do(func() {
		t.mu.Lock()
		t.killed = killed
		t.mu.Unlock()
		t.w.Close()
		close(t.done)
	})
}

func (t *fakeTerminal) Close() spec.CommandInfo {
	t.end(true)
	t.mu.Lock()
	defer t.mu.Unlock()
	ci := spec.CommandInfo{ID: t.id, Argv: []string{"/bin/bash", "-i"}, State: spec.CommandExited, Started: t.started, Ended: time.Now(), Terminal: true, Status: spec.StatusOK}
	if t.killed {
		ci.Status, ci.Exit, ci.Signal = spec.StatusKilled, -1, 9
	}
	return ci
}
