package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/coder/websocket"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/version"
)

// A session's terminal (GET /v1/sessions/{id}/pty, a WebSocket).

// TerminalOptions are a terminal's size (0: the daemon's default,
// 80×24), working directory and TERM.
type TerminalOptions struct {
	Cols, Rows int
	Cwd        string
	Term       string
}

// Terminal is an open terminal of a session.
type Terminal struct {
	c *websocket.Conn
}

// maxTerminalMessage bounds one message of the daemon's.
const maxTerminalMessage = 1 << 20

// Terminal opens a shell on a terminal in session id. A refusal is the
// daemon's *Error, as for any request.
func (c *Client) Terminal(ctx context.Context, id string, o TerminalOptions) (*Terminal, error) {
	q := url.Values{}
	if o.Cols > 0 {
		q.Set("cols", strconv.Itoa(o.Cols))
	}
	if o.Rows > 0 {
		q.Set("rows", strconv.Itoa(o.Rows))
	}
	if o.Cwd != "" {
		q.Set("cwd", o.Cwd)
	}
	if o.Term != "" {
		q.Set("term", o.Term)
	}
	path := "/v1/sessions/" + url.PathEscape(id) + "/pty"
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: c.http.Transport},
		HTTPHeader: http.Header{"User-Agent": {"jaild-client/" + version.Version}},
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			defer resp.Body.Close()
			c.noteQuota(resp.Header)
			return nil, responseError(resp)
		}
		var ce *ConnectError
		if errors.As(err, &ce) {
			return nil, ce
		}
		return nil, fmt.Errorf("jaild GET %s: %w", path, err)
	}
	ws.SetReadLimit(maxTerminalMessage)
	return &Terminal{c: ws}, nil
}

// Send types b into the terminal.
func (t *Terminal) Send(ctx context.Context, b []byte) error {
	return t.c.Write(ctx, websocket.MessageBinary, b)
}

// Resize sets the terminal's size.
func (t *Terminal) Resize(ctx context.Context, cols, rows int) error {
	b, _ := json.Marshal(api.TerminalControl{Type: "resize", Cols: cols, Rows: rows})
	return t.c.Write(ctx, websocket.MessageText, b)
}

// Next is the terminal's next output, or its end: exit is how the shell
// ended (the daemon's last message), after which Next answers io.EOF-like
// errors. A control the daemon refused is an error naming why.
func (t *Terminal) Next(ctx context.Context) (out []byte, exit *api.TerminalMessage, err error) {
	typ, b, err := t.c.Read(ctx)
	if err != nil {
		return nil, nil, err
	}
	if typ == websocket.MessageBinary {
		return b, nil, nil
	}
	var m api.TerminalMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, nil, fmt.Errorf("the daemon sent a malformed terminal message: %w", err)
	}
	switch m.Type {
	case "exit":
		return nil, &m, nil
	case "error":
		return nil, nil, &TerminalError{Message: m.Message}
	}
	return nil, nil, fmt.Errorf("the daemon sent an unknown terminal message %q", m.Type)
}

// TerminalError is a control the daemon refused; the terminal goes on.
type TerminalError struct{ Message string }

func (e *TerminalError) Error() string { return "terminal: " + e.Message }

// Close ends the terminal (the daemon kills its shell if it still runs).
func (t *Terminal) Close() error {
	return t.c.Close(websocket.StatusNormalClosure, "")
}
