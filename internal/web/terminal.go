package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/errdefs"
)

// The playground's terminal tab: GET /api/terminal upgrades to a
// WebSocket relaying a shell in a session of its own, made for it and
// ended with it (the daemon's GET /v1/sessions/{id}/pty; the same
// messages). A browser cannot set a header on a WebSocket, so the page
// offers the token as a subprotocol (TerminalProtocol and
// TokenProtocolPrefix+TOKEN; only the first is answered), and the
// handshake's Origin must be the page's host: another site's script can
// open WebSockets anywhere.

// The subprotocols of the terminal's WebSocket.
const (
	TerminalProtocol    = "jaild-terminal"
	TokenProtocolPrefix = "jaild-token."
)

// tokenProtocol is the token a WebSocket handshake offers as a
// subprotocol, or "".
func tokenProtocol(r *http.Request) string {
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(h, ",") {
			if t, ok := strings.CutPrefix(strings.TrimSpace(p), TokenProtocolPrefix); ok {
				return t
			}
		}
	}
	return ""
}

func (s *Server) terminal(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		writeError(w, errdefs.Field("Upgrade", "/api/terminal is a WebSocket"))
		return
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || !strings.EqualFold(u.Host, r.Host) {
			writeError(w, errdefs.New(errdefs.ErrForbidden, "cross-origin terminal refused"))
			return
		}
	}
	var o client.TerminalOptions
	for _, f := range []struct {
		name string
		v    *int
	}{{"cols", &o.Cols}, {"rows", &o.Rows}} {
		if v := r.URL.Query().Get(f.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				writeError(w, errdefs.Field(f.name, "must be an integer in 1..1000"))
				return
			}
			*f.v = n
		}
	}
	s.terms.Add(1)
	defer s.terms.Done()
	ctx := r.Context()
	sess, err := s.client.CreateSession(ctx, nil)
	if err != nil {
		writeError(w, err)
		return
	}
	defer func() {
		end, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = s.client.DeleteSession(end, sess.SessionID)
	}()
	term, err := s.client.Terminal(ctx, sess.SessionID, o)
	if err != nil {
		writeError(w, err)
		return
	}
	defer term.Close()
	// Accept checks that the Origin is the page's host.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{TerminalProtocol}})
	if err != nil {
		return // Accept answered
	}
	defer ws.CloseNow()
	if ws.Subprotocol() != TerminalProtocol {
		_ = ws.Close(websocket.StatusPolicyViolation, "offer the "+TerminalProtocol+" subprotocol")
		return
	}
	ws.SetReadLimit(64 << 10)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer cancel()
		for {
			typ, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			if typ == websocket.MessageBinary {
				if term.Send(ctx, b) != nil {
					return
				}
				continue
			}
			var c api.TerminalControl
			if json.Unmarshal(b, &c) == nil && c.Type == "resize" {
				err = term.Resize(ctx, c.Cols, c.Rows)
			} else {
				err = errors.New("a text message must be a resize control")
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		out, exit, err := term.Next(ctx)
		var te *client.TerminalError
		switch {
		case errors.As(err, &te):
			b, _ := json.Marshal(api.TerminalMessage{Type: "error", Message: te.Message})
			err = ws.Write(ctx, websocket.MessageText, b)
		case err != nil:
			_ = ws.Close(websocket.StatusGoingAway, "the session's terminal ended")
			return
		case exit != nil:
			b, _ := json.Marshal(exit)
			if ws.Write(ctx, websocket.MessageText, b) == nil {
				_ = ws.Close(websocket.StatusNormalClosure, "")
			}
			return
		default:
			err = ws.Write(ctx, websocket.MessageBinary, out)
		}
		if err != nil {
			return
		}
	}
}
