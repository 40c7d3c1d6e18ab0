package server

import (
	"context"
	"net/http"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/policy"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/sessions"
)

// A session's commands (issue 29): POST /v1/sessions/{id}/commands runs
// one in the session's jail, in the foreground (the answer is its end) or
// the background (202 with its id); GET lists the background ones and
// GET .../commands/{cid} gives one with its output kept so far; POST
// .../stdin writes to it, .../signal signals its program, DELETE kills it
// and everything it started.

// CommandSession is a Session that runs commands (run.Session).
type CommandSession interface {
	RunCommand(ctx context.Context, c *spec.Command) (*spec.CommandResult, error)
	StartCommand(c *spec.Command) (spec.CommandInfo, error)
	Commands() []spec.CommandInfo
	Command(id string) (spec.CommandInfo, error)
	CommandStdin(id string, data []byte, eof bool) error
	SignalCommand(id, signal string) error
	KillCommand(id string) (spec.CommandInfo, error)
	FollowCommand(ctx context.Context, id string, out func(stream int, p []byte) error) (spec.CommandInfo, error)
}

// maxCommandControlBody bounds the body of .../stdin (its data, escaped)
// and .../signal.
const maxCommandControlBody = 8*spec.MaxCommandStdin + 4<<10

// commandSessionOf looks the session up for who and has its commands.
func (s *Server) commandSessionOf(r *http.Request, op string) (CommandSession, sessions.Info, error) {
	who, sw := s.sessionCaller(r)
	info, err := s.sessions.Get(r.PathValue("id"), sw)
	if err != nil {
		s.audit.refused(who, op, err)
		return nil, info, err
	}
	meta, _ := info.Meta.(*sessionMeta)
	var cs CommandSession
	if meta != nil {
		cs, _ = meta.h.(CommandSession)
	}
	if cs == nil {
		err := errdefs.New(errdefs.ErrUnavailable, "sessions cannot run commands on this daemon")
		s.audit.refused(who, op, err)
		return nil, info, err
	}
	return cs, info, nil
}

func (s *Server) sessionCommand(w http.ResponseWriter, r *http.Request) error {
	who, sw := s.sessionCaller(r)
	id := r.PathValue("id")
	if _, err := s.sessions.Get(id, sw); err != nil {
		s.audit.refused(who, "session_command", err)
		return err
	}
	var req api.CommandRequest
	o, err := s.begin(w, r, "session_command", &req)
	if err != nil {
		return err
	}
	defer o.done()
	h, info, done, err := s.sessions.Begin(id, sw)
	if err != nil {
		return o.fail(err)
	}
	defer done(0)
	cs, ok := h.(CommandSession)
	if !ok {
		return o.fail(errdefs.New(errdefs.ErrUnavailable, "sessions cannot run commands on this daemon"))
	}
	meta := info.Meta.(*sessionMeta)
	c, err := policy.Command(&req, meta.bounds)
	if err != nil {
		return o.fail(err)
	}
	if c.Background {
		ci, err := cs.StartCommand(c)
		if err != nil {
			return o.fail(err)
		}
		s.log.Info("audit", "op", "session_command", "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", id,
			"command_id", ci.ID, "background", true, "argv_count", len(c.Argv))
		s.audit.metrics.Command("background", "started", 0, 0)
		writeJSON(w, http.StatusAccepted, commandWire(ci))
		return nil
	}
	if err := s.reserveRun(r.Context(), o.mem, c.OutputBytes, false); err != nil {
		return o.fail(err)
	}
	ctx := r.Context()
	var live *liveStream
	if format := streamFormat(r.Header.Get("Accept")); format != "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		live = newLiveStream(w, format == api.MediaSSE, cancel, s.pace())
		c.Output = live.output
		c.OnStart = func(cid string) { live.begin(w, format, api.EventStartData{RunID: cid}) }
	}
	release, err := s.admit(ctx, who)
	if err != nil {
		if ctx.Err() != nil {
			err = errdefs.New(errdefs.ErrUnavailable, "client went away while queued")
		}
		return o.fail(err)
	}
	res, err := cs.RunCommand(ctx, c)
	release()
	if err != nil {
		if live != nil && live.begun {
			s.audit.refused(who, "session_command", err)
			_ = live.end([]finalEvent{s.errorEvent(r, err)})
			return nil
		}
		return o.fail(err)
	}
	s.log.Info("audit", "op", "session_command", "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", id,
		"command_id", res.ID, "background", false, "argv_count", len(c.Argv), "status", res.Status, "exit_code", res.ExitCode,
		"signal", res.Signal, "run_ms", res.Duration.Milliseconds(), "cpu_ms", res.CPU.Milliseconds(), "total_ms", time.Since(o.start).Milliseconds())
	s.audit.metrics.Command("foreground", string(res.Status), len(res.Stdout), len(res.Stderr))
	out := api.CommandResult{CommandID: res.ID, Status: string(res.Status), Stdout: string(res.Stdout), Stderr: string(res.Stderr),
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated, OOMKilled: res.OOMKilled,
		Usage: api.CommandUsage{DurationMs: res.Duration.Milliseconds(), CPUMs: res.CPU.Milliseconds()}}
	out.ExitCode, out.Signal = exitWire(res.ExitCode, res.Signal)
	if live != nil {
		// The output went out as stdout and stderr events.
		_ = live.end([]finalEvent{{api.EventDone, out, nil}})
		return nil
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// exitWire is an exit code and signal on the wire: the code null after a
// signal, the signal null after an exit.
func exitWire(code, sig int) (*int, *int) {
	if sig != 0 {
		return nil, &sig
	}
	return &code, nil
}

func commandWire(c spec.CommandInfo) api.CommandInfo {
	out := api.CommandInfo{CommandID: c.ID, Argv: c.Argv, Pid: c.Pid, State: c.State, StartedAt: c.Started.UTC(),
		CPUMs: c.CPU.Milliseconds(), StdoutDroppedBytes: c.StdoutDropped, StderrDroppedBytes: c.StderrDropped, Terminal: c.Terminal}
	if out.Argv == nil {
		out.Argv = []string{}
	}
	if c.State == spec.CommandExited {
		st := string(c.Status)
		out.Status = &st
		out.ExitCode, out.Signal = exitWire(c.Exit, c.Signal)
		e := c.Ended.UTC()
		out.EndedAt = &e
	}
	if c.Stdout != nil || c.Stderr != nil {
		o, e := string(c.Stdout), string(c.Stderr)
		out.Stdout, out.Stderr = &o, &e
	}
	return out
}

func (s *Server) listCommands(w http.ResponseWriter, r *http.Request) error {
	cs, _, err := s.commandSessionOf(r, "session_commands")
	if err != nil {
		return err
	}
	list := api.CommandList{Commands: []api.CommandInfo{}}
	for _, c := range cs.Commands() {
		list.Commands = append(list.Commands, commandWire(c))
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

func (s *Server) getCommand(w http.ResponseWriter, r *http.Request) error {
	cs, _, err := s.commandSessionOf(r, "session_command_get")
	if err != nil {
		return err
	}
	switch f := r.URL.Query().Get("follow"); f {
	case "", "false":
	case "true":
		return s.followCommand(w, r, cs)
	default:
		return errdefs.Field("follow", "must be true or false, got %q", trimHeader(f))
	}
	c, err := cs.Command(r.PathValue("cid"))
	if err != nil {
		return err
	}
	if c.Stdout == nil {
		c.Stdout = []byte{}
	}
	if c.Stderr == nil {
		c.Stderr = []byte{}
	}
	writeJSON(w, http.StatusOK, commandWire(c))
	return nil
}

// maxFollowQueued bounds the output a follower's stream holds unsent: past
// it, the ring is read no further until the client has read.
const maxFollowQueued = 256 << 10

// followCommand streams a command's output (GET .../commands/{cid}?follow=true):
// a start event (the command's id as run_id), stdout and stderr events
// from the output kept so far on, then done with the command as it ended.
func (s *Server) followCommand(w http.ResponseWriter, r *http.Request, cs CommandSession) error {
	format := streamFormat(r.Header.Get("Accept"))
	if format == "" {
		return errdefs.Field("follow", "streams the output: send Accept: %s or %s", api.MediaNDJSON, api.MediaSSE)
	}
	cid := r.PathValue("cid")
	if _, err := cs.Command(cid); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	live := newLiveStream(w, format == api.MediaSSE, cancel, s.pace())
	live.begin(w, format, api.EventStartData{RunID: cid})
	ci, err := cs.FollowCommand(ctx, cid, func(stream int, p []byte) error {
		for live.queued() > maxFollowQueued {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		live.output(stream, p)
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			_ = live.end(nil)
			return nil // the client went away
		}
		_ = live.end([]finalEvent{s.errorEvent(r, err)})
		return nil
	}
	_ = live.end([]finalEvent{{api.EventDone, commandWire(ci), nil}})
	return nil
}

func (s *Server) commandStdin(w http.ResponseWriter, r *http.Request) error {
	var req api.CommandStdinRequest
	return s.commandControl(w, r, "session_command_stdin", &req, maxCommandControlBody, func(cs CommandSession, cid string) error {
		return cs.CommandStdin(cid, []byte(req.Data), req.EOF)
	})
}

func (s *Server) signalCommand(w http.ResponseWriter, r *http.Request) error {
	var req api.CommandSignalRequest
	return s.commandControl(w, r, "session_command_signal", &req, maxInterruptBody, func(cs CommandSession, cid string) error {
		return cs.SignalCommand(cid, req.Signal)
	})
}

// commandControl serves a POST to a command (stdin, signal): its body,
// at most limit bytes, decoded into req, then do; the answer is the
// command without its output.
func (s *Server) commandControl(w http.ResponseWriter, r *http.Request, op string, req any, limit int64, do func(cs CommandSession, cid string) error) error {
	cs, _, err := s.commandSessionOf(r, op)
	if err != nil {
		return err
	}
	if err := decodeWithin(w, r, req, limit); err != nil {
		return err
	}
	cid := r.PathValue("cid")
	if err := do(cs, cid); err != nil {
		return err
	}
	c, err := cs.Command(cid)
	if err != nil {
		return err
	}
	c.Stdout, c.Stderr = nil, nil
	writeJSON(w, http.StatusOK, commandWire(c))
	return nil
}

func (s *Server) deleteCommand(w http.ResponseWriter, r *http.Request) error {
	who, _ := s.sessionCaller(r)
	cs, info, err := s.commandSessionOf(r, "session_command_delete")
	if err != nil {
		return err
	}
	c, err := cs.KillCommand(r.PathValue("cid"))
	if err != nil {
		s.audit.refused(who, "session_command_delete", err)
		return err
	}
	s.log.Info("audit", "op", "session_command_delete", "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", info.ID, "command_id", c.ID)
	writeJSON(w, http.StatusOK, commandWire(c))
	return nil
}
