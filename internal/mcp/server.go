// Package mcp serves jaild to AI agents over the Model Context Protocol:
// the tools run_python, lint_python and format_python, and open_session,
// close_session, list_sessions, pause_session, fork_session,
// snapshot_session and restore_session for
// stateful sessions, and run_command for shell commands in one, all
// forwarded to
// the daemon's HTTP API through package client. It never runs code itself;
// every run happens in the daemon's jails.
//
// The server speaks MCP over stdio (the transport desktop clients launch)
// or over Streamable HTTP on a loopback address, with the official Go SDK.
// Tool descriptions are built from the daemon's GET /v1/info at start-up,
// so they tell the model the images it can choose (with the tools' image
// argument, when there are several), their Python versions and packages,
// and the limits it will really get.
//
// Sessions opened through an MCP connection end with it: the server
// deletes them when the connection closes, and all that remain when it
// stops serving. A connection reaches only the sessions it opened (unless
// Options.AllSessions): not those its user opened otherwise, nor another
// connection's.
//
// Over HTTP every request must carry the server's token as a bearer
// credential (Authorization: Bearer TOKEN); the port is open to every
// local account, and whoever passes acts as the user running the server.
//
// A call whose client gave a progress token runs streamed, and the client
// gets progress notifications with the recent output while it runs. When
// the daemon has a file store, the caller's stored files are resources,
// jaild://files/{file_id}, listed and read through the daemon.
package mcp

import (
	"context"
	"fmt"
	"io"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
)

// maxMessageBytes bounds one inbound MCP message on either transport. A
// run_python call carries its files base64-encoded, like the daemon's own
// request, whose default bound (max_body_bytes) is 64 MiB.
const maxMessageBytes = 65 << 20

// instructions is the server's advice to the model, sent at
// initialization.
func instructions(sessions bool) string {
	s := `jaild runs Python in isolated jails, without network access.
Use run_python to compute, analyse data or plot (figures come back as images), and print() what you want to see. `
	if !sessions {
		return s + `Each call starts from a clean state, so send everything a task needs in one call.
Use lint_python and format_python to check and tidy code without running it.`
	}
	return s + `Without a session each call starts from a clean state, so send everything a task needs in one call.
To keep variables, imports and files from one call to the next, open a session with open_session, pass its session_id to run_python, and close it with close_session when done; a session ends on its own after a while without calls, and when this connection closes.
Use lint_python and format_python to check and tidy code without running it.`
}

// Options are a Server's settings.
type Options struct {
	// Version is reported to MCP clients as the server's version.
	Version string
	// AllSessions lets every MCP connection list, run in and close all
	// the caller's sessions, however they were opened; without it a
	// connection reaches only those it opened with open_session.
	AllSessions bool
}

// Server is jaild's MCP server. One Server serves any number of sessions.
type Server struct {
	client      *client.Client
	info        *api.Info
	mcp         *sdk.Server
	owned       *owned
	allSessions bool
}

// New reads the daemon's info through c, for the tool descriptions, and
// returns a server whose tools forward to c. An error is one of reaching
// the daemon (see package client); nothing is served then.
func New(ctx context.Context, c *client.Client, opts Options) (*Server, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the daemon's info: %w", err)
	}
	s := &Server{client: c, info: info, allSessions: opts.AllSessions}
	s.owned = &owned{end: s.endSessions, conns: map[*sdk.ServerSession]map[string]bool{}}
	// Logging is the SDK's default capability. Resources are listed afresh
	// on each resources/list, and nothing tells the server that the store
	// changed: no listChanged.
	caps := &sdk.ServerCapabilities{Logging: &sdk.LoggingCapabilities{}}
	if info.Files.Enabled {
		caps.Resources = &sdk.ResourceCapabilities{}
	}
	s.mcp = sdk.NewServer(&sdk.Implementation{Name: "jaild", Title: "jaild: Python in jails", Version: opts.Version},
		&sdk.ServerOptions{Instructions: instructions(info.Sessions.Enabled), Capabilities: caps})
	if err := s.addTools(); err != nil {
		return nil, err
	}
	if info.Files.Enabled {
		s.addResources()
	}
	return s, nil
}

// ServeStdio serves one session of newline-delimited JSON-RPC read from r
// and written to w, until r ends (nil) or ctx is done (ctx's error). Then
// it ends the daemon sessions opened through it, waiting at most
// EndTimeout; sessions it could not end make an error that wraps
// ErrSessionsLeft, returned in place of nil or ctx's error. A Server
// serves once: later calls to open_session are refused.
func (s *Server) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) error {
	t := &sdk.IOTransport{Reader: io.NopCloser(r), Writer: nopWriteCloser{w}, MaxLineLength: maxMessageBytes}
	err := s.mcp.Run(ctx, t)
	if endErr := s.owned.endAll(ctx); endErr != nil && (err == nil || ctx.Err() != nil) {
		return endErr
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
