package server_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/errdefs"
)

// The terminal's WebSocket protocol against the fake session's terminal
// (it echoes what is typed, says "size CxR" on a resize, ends on
// "exit\r"); a real shell on a real terminal is tested in tests/.
func TestSessionTerminalProtocol(t *testing.T) {
	h := harness(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := h.Client.CreateSession(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	term, err := h.Client.Terminal(ctx, s.SessionID, client.TerminalOptions{Cols: 100, Rows: 30})
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	until := func(want string) {
		t.Helper()
		for !strings.Contains(got.String(), want) {
			out, exit, err := term.Next(ctx)
			if err != nil || exit != nil {
				t.Fatalf("waiting for %q in %q: %v %+v", want, got.String(), err, exit)
			}
			got.Write(out)
		}
	}
	if err := term.Send(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	until("hello")
	if err := term.Resize(ctx, 120, 40); err != nil {
		t.Fatal(err)
	}
	until("size 120x40")
	// A bad resize is an error message naming the bound; the terminal
	// goes on.
	if err := term.Resize(ctx, 5000, 40); err != nil {
		t.Fatal(err)
	}
	_, _, err = term.Next(ctx)
	var te *client.TerminalError
	if !errors.As(err, &te) || !strings.Contains(te.Message, "cols") || !strings.Contains(te.Message, "1000") {
		t.Fatalf("a resize to 5000 columns: %v", err)
	}
	if err := term.Send(ctx, []byte(" exit\r")); err != nil {
		t.Fatal(err)
	}
	for {
		out, exit, err := term.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for the exit: %v (output %q)", err, got.String())
		}
		got.Write(out)
		if exit != nil {
			if exit.Type != "exit" || exit.Status != "ok" || exit.ExitCode == nil || *exit.ExitCode != 0 || exit.Signal != nil {
				t.Fatalf("exit message %+v", exit)
			}
			break
		}
	}
	// The daemon closes normally after the exit.
	if _, _, err := term.Next(ctx); websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after the exit: %v", err)
	}
	if c := h.Count("GET /v1/sessions/" + s.SessionID + "/pty"); c != 1 {
		t.Errorf("pty requests seen: %d", c)
	}

	// Refusals before the upgrade are JSON errors naming the field.
	for _, c := range []struct {
		o     client.TerminalOptions
		field string
	}{
		{client.TerminalOptions{Cols: 1001}, "cols"},
		{client.TerminalOptions{Rows: 5000}, "rows"},
		{client.TerminalOptions{Cwd: "/etc"}, "cwd"},
		{client.TerminalOptions{Term: "xterm;rm -rf"}, "term"},
	} {
		_, err := h.Client.Terminal(ctx, s.SessionID, c.o)
		var ae *api.Error
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !errors.As(err, &ae) || ae.Field != c.field {
			t.Errorf("terminal %+v: %v, want a 400 naming %s", c.o, err, c.field)
		}
	}
	if _, err := h.Client.Terminal(ctx, "s-0000000000000000", client.TerminalOptions{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another session's terminal: %v", err)
	}
	status, _, body := raw(t, h, http.MethodGet, "/v1/sessions/"+s.SessionID+"/pty", "", "")
	if status != http.StatusBadRequest || !strings.Contains(body.Message, "WebSocket") {
		t.Errorf("a plain GET of the terminal: %d %+v", status, body)
	}
	// A page of another origin cannot open it with the user's
	// credentials.
	_, resp, err := websocket.Dial(ctx, "http://jaild/v1/sessions/"+s.SessionID+"/pty", &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", h.Socket)
		}}},
		HTTPHeader: http.Header{"Origin": {"https://evil.example"}},
	})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("a cross-origin terminal: %v %v", resp, err)
	}
}
