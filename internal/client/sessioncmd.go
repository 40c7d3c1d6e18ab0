package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"

	"github.com/jaild/jaild/internal/api"
)

// A session's commands (/v1/sessions/{id}/commands).

func sessionCommandsPath(id string) string {
	return "/v1/sessions/" + url.PathEscape(id) + "/commands"
}

func sessionCommandPath(id, cid string) string {
	return sessionCommandsPath(id) + "/" + url.PathEscape(cid)
}

// RunSessionCommand runs a foreground command (req.Background false) to
// its end.
func (c *Client) RunSessionCommand(ctx context.Context, id string, req api.CommandRequest) (*api.CommandResult, error) {
	var out api.CommandResult
	if err := c.call(ctx, http.MethodPost, sessionCommandsPath(id), req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// StartSessionCommand starts a background command.
func (c *Client) StartSessionCommand(ctx context.Context, id string, req api.CommandRequest) (*api.CommandInfo, error) {
	req.Background = true
	var out api.CommandInfo
	if err := c.call(ctx, http.MethodPost, sessionCommandsPath(id), req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SessionCommands lists a session's background commands.
func (c *Client) SessionCommands(ctx context.Context, id string) (*api.CommandList, error) {
	var out api.CommandList
	if err := c.call(ctx, http.MethodGet, sessionCommandsPath(id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SessionCommand is one background command with its output kept so far.
func (c *Client) SessionCommand(ctx context.Context, id, cid string) (*api.CommandInfo, error) {
	var out api.CommandInfo
	if err := c.call(ctx, http.MethodGet, sessionCommandPath(id, cid), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SessionCommandStdin writes data to a background command's stdin (eof:
// then closes it).
func (c *Client) SessionCommandStdin(ctx context.Context, id, cid, data string, eof bool) (*api.CommandInfo, error) {
	var out api.CommandInfo
	if err := c.call(ctx, http.MethodPost, sessionCommandPath(id, cid)+"/stdin", api.CommandStdinRequest{Data: data, EOF: eof}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SignalSessionCommand sends a signal (by name: SIGTERM) to a command.
func (c *Client) SignalSessionCommand(ctx context.Context, id, cid, signal string) (*api.CommandInfo, error) {
	var out api.CommandInfo
	if err := c.call(ctx, http.MethodPost, sessionCommandPath(id, cid)+"/signal", api.CommandSignalRequest{Signal: signal}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// KillSessionCommand kills a command and what it started, and returns
// it as it ended, with its output.
func (c *Client) KillSessionCommand(ctx context.Context, id, cid string) (*api.CommandInfo, error) {
	var out api.CommandInfo
	if err := c.call(ctx, http.MethodDelete, sessionCommandPath(id, cid), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PortProxy is a handler that sends each request it gets, its path as
// the path on the session's server, to the session's port through the
// daemon (/v1/sessions/{id}/ports/{port}/...), upgrades included.
func (c *Client) PortProxy(id string, port int) http.Handler {
	prefix := "/v1/sessions/" + url.PathEscape(id) + "/ports/" + strconv.Itoa(port)
	base, _ := url.Parse(c.base)
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = base.Scheme, base.Host
			pr.Out.URL.Path = prefix + pr.In.URL.Path
			pr.Out.URL.RawPath = ""
			pr.Out.Host = base.Host
		},
		Transport: c.http.Transport,
	}
}

// FollowSessionCommand streams a background command's output to on (1
// stdout, 2 stderr), what was kept first and then as it comes, until the
// command ends; the answer is how it ended (without its output). Nothing
// of the output is held here: an endless command streams for as long as
// ctx lasts.
func (c *Client) FollowSessionCommand(ctx context.Context, id, cid string, on func(stream int, text string) error) (*api.CommandInfo, error) {
	path := sessionCommandPath(id, cid)
	req, err := c.newRequest(ctx, http.MethodGet, path+"?follow=true", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", api.MediaNDJSON)
	resp, err := c.sendOK(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), int(min(c.maxResponse, 1<<30)))
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("jaild GET %s: malformed event: %w", path, err)
		}
		switch ev.Event {
		case api.EventStdout, api.EventStderr:
			var t api.EventText
			if err := json.Unmarshal(ev.Data, &t); err != nil {
				return nil, fmt.Errorf("jaild GET %s: malformed %s event: %w", path, ev.Event, err)
			}
			stream := 1
			if ev.Event == api.EventStderr {
				stream = 2
			}
			if err := on(stream, t.Text); err != nil {
				return nil, err
			}
		case api.EventDone:
			var ci api.CommandInfo
			if err := json.Unmarshal(ev.Data, &ci); err != nil {
				return nil, fmt.Errorf("jaild GET %s: malformed done event: %w", path, err)
			}
			return &ci, nil
		case api.EventError:
			var eb api.ErrorBody
			if err := json.Unmarshal(ev.Data, &eb); err != nil {
				return nil, fmt.Errorf("jaild GET %s: malformed error event: %w", path, err)
			}
			return nil, streamError(eb.Error)
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("jaild GET %s: %w", path, ctx.Err())
		}
		return nil, fmt.Errorf("jaild GET %s: %w", path, err)
	}
	return nil, fmt.Errorf("jaild GET %s: the stream ended before its done event", path)
}
