package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
)

// A session's terminal (issue 29): GET /v1/sessions/{id}/pty upgrades to
// a WebSocket relaying a shell on a pseudo-terminal in the session's jail.
// Binary messages are the terminal's bytes both ways; the client's text
// messages are JSON controls ({"type":"resize","cols":N,"rows":N}); the
// daemon's last message is {"type":"exit",...}, then a normal close.
// Everything the daemon could refuse is refused before the upgrade, as a
// JSON error.

// TerminalSession is a Session with terminals (run.Session).
type TerminalSession interface {
	StartTerminal(t *spec.Terminal) (spec.TerminalIO, error)
}

// Terminal bounds: a client message (a resize, or input as typed or
// pasted), and the output read at once into one message.
const (
	maxTerminalMessage = 64 << 10
	terminalChunk      = 32 << 10
)

func (s *Server) sessionTerminal(w http.ResponseWriter, r *http.Request) error {
	who, sw := s.sessionCaller(r)
	id := r.PathValue("id")
	if _, err := s.sessions.Get(id, sw); err != nil {
		s.audit.refused(who, "session_terminal", err)
		return err
	}
	o, err := s.begin(w, r, "session_terminal", nil)
	if err != nil {
		return err
	}
	defer o.done()
	t, err := terminalRequest(r)
	if err != nil {
		return o.fail(err)
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return o.fail(errdefs.Field("Upgrade", "this endpoint is a WebSocket: send Connection: Upgrade and Upgrade: websocket"))
	}
	if err := sameOrigin(r); err != nil {
		return o.fail(err)
	}
	h, _, done, err := s.sessions.Begin(id, sw)
	if err != nil {
		return o.fail(err)
	}
	ts, ok := h.(TerminalSession)
	if !ok {
		done(0)
		return o.fail(errdefs.New(errdefs.ErrUnavailable, "sessions have no terminal on this daemon"))
	}
	term, err := ts.StartTerminal(t)
	done(0)
	if err != nil {
		return o.fail(err)
	}
	// Accept checks the origin again, and the rest of the handshake.
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		// Accept answered the client.
		term.Close()
		s.audit.refused(who, "session_terminal", errdefs.New(errdefs.ErrInvalidArgument, "the WebSocket handshake failed: %v", err))
		return nil
	}
	s.log.Info("audit", "op", "session_terminal", "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", id,
		"command_id", term.ID(), "cols", t.Cols, "rows", t.Rows)
	s.audit.metrics.Command("terminal", "started", 0, 0)
	sent, received := relayTerminal(r.Context(), c, term)
	s.audit.metrics.TerminalBytes(sent, received)
	ci := term.Close()
	s.log.Info("audit", "op", "session_terminal_end", "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", id,
		"command_id", ci.ID, "status", ci.Status, "exit_code", ci.Exit, "signal", ci.Signal,
		"bytes_to_jail", sent, "bytes_from_jail", received)
	return nil
}

// sameOrigin refuses a browser's request from a page of another origin
// (its Origin's host is not the request's): such a page must not open a
// terminal with the user's credentials. Clients that are not browsers
// send no Origin.
func sameOrigin(r *http.Request) error {
	o := r.Header.Get("Origin")
	if o == "" {
		return nil
	}
	u, err := url.Parse(o)
	if err != nil || !strings.EqualFold(u.Host, r.Host) {
		return errdefs.New(errdefs.ErrForbidden, "a page of origin %q cannot open a terminal of this daemon (%s)", trimHeader(o), trimHeader(r.Host))
	}
	return nil
}

// terminalRequest is the query of a terminal's request: cols, rows, cwd,
// term.
func terminalRequest(r *http.Request) (*spec.Terminal, error) {
	q := r.URL.Query()
	t := &spec.Terminal{Cwd: q.Get("cwd"), Term: q.Get("term")}
	for _, f := range []struct {
		name string
		v    *int
	}{{"cols", &t.Cols}, {"rows", &t.Rows}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > spec.MaxTerminalSize {
				return nil, errdefs.Field(f.name, "must be an integer in 1..%d, got %q", spec.MaxTerminalSize, trimHeader(v))
			}
			*f.v = n
		}
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return t, nil
}

// relayTerminal relays between the WebSocket and the terminal until the
// shell ends (then sends its exit and closes) or the client goes; it
// answers the bytes typed into the jail and the bytes of its output.
func relayTerminal(ctx context.Context, c *websocket.Conn, term spec.TerminalIO) (sent, received int64) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.SetReadLimit(maxTerminalMessage)
	var in atomic.Int64
	clientGone := make(chan struct{})
	go func() {
		defer close(clientGone)
		defer cancel()
		// The client gone (or its input refused), the shell is killed,
		// which ends the output's read below.
		defer term.Close()
		for {
			typ, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				n, err := term.Write(b)
				in.Add(int64(n))
				if err != nil {
					return
				}
				continue
			}
			if msg := terminalControl(term, b); msg != "" {
				eb, _ := json.Marshal(api.TerminalMessage{Type: "error", Message: msg})
				_ = c.Write(ctx, websocket.MessageText, eb)
			}
		}
	}()
	buf := make([]byte, terminalChunk)
	for {
		n, err := term.Read(buf)
		if n > 0 {
			if werr := c.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
				// The client is gone or stuck: the caller kills the shell.
				_ = c.CloseNow()
				return in.Load(), received
			}
			received += int64(n)
		}
		if err != nil {
			break
		}
	}
	// The output ends when nothing in the jail holds the terminal: the
	// shell's group is being removed; its end is waited for so that a
	// shell's own exit is not taken for a kill.
	select {
	case <-clientGone:
		_ = c.CloseNow()
		return in.Load(), received
	case <-term.Done():
	case <-time.After(10 * time.Second):
	}
	ci := term.Close()
	exit := api.TerminalMessage{Type: "exit", Status: string(ci.Status)}
	exit.ExitCode, exit.Signal = exitWire(ci.Exit, ci.Signal)
	eb, _ := json.Marshal(exit)
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	if c.Write(wctx, websocket.MessageText, eb) == nil {
		_ = c.Close(websocket.StatusNormalClosure, "")
	} else {
		_ = c.CloseNow()
	}
	return in.Load(), received
}

// terminalControl applies a client's text message; its answer is what
// was wrong with it ("" when nothing).
func terminalControl(term spec.TerminalIO, b []byte) string {
	var m api.TerminalControl
	if err := json.Unmarshal(b, &m); err != nil {
		return "a text message must be a JSON control: {\"type\":\"resize\",\"cols\":N,\"rows\":N}; input goes in binary messages"
	}
	switch m.Type {
	case "resize":
		if err := term.Resize(m.Cols, m.Rows); err != nil {
			return err.Error()
		}
		return ""
	}
	return "unknown control type " + strconv.Quote(trimHeader(m.Type)) + ": the controls are resize"
}
