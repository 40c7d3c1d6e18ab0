// Package mcp serves jaild to AI agents over the Model Context Protocol:
// three tools, run_python, lint_python and format_python, that forward to
// the daemon's HTTP API through package client. It never runs code itself;
// every run happens in the daemon's jails.
//
// The server speaks MCP over stdio (the transport desktop clients launch)
// or over Streamable HTTP on a loopback address, with the official Go SDK.
// Tool descriptions are built from the daemon's GET /v1/info at start-up,
// so they tell the model the Python version, the installed packages and
// the limits it will really get.
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

// instructions is the server's advice to the model, sent at initialization.
const instructions = `jaild runs Python in a fresh, isolated jail per call, without network access.
Use run_python to compute, analyse data or plot (figures come back as images); each call starts from a clean state, so send everything a task needs in one call and print() what you want to see.
Use lint_python and format_python to check and tidy code without running it.`

// Server is jaild's MCP server. One Server serves any number of sessions.
type Server struct {
	client *client.Client
	info   *api.Info
	mcp    *sdk.Server
}

// New reads the daemon's info through c, for the tool descriptions, and
// returns a server whose tools forward to c. version is reported to MCP
// clients as the server's version. An error is one of reaching the daemon
// (see package client); nothing is served then.
func New(ctx context.Context, c *client.Client, version string) (*Server, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the daemon's info: %w", err)
	}
	s := &Server{client: c, info: info}
	s.mcp = sdk.NewServer(&sdk.Implementation{Name: "jaild", Title: "jaild: Python in jails", Version: version},
		&sdk.ServerOptions{Instructions: instructions})
	if err := s.addTools(); err != nil {
		return nil, err
	}
	return s, nil
}

// ServeStdio serves one session of newline-delimited JSON-RPC read from r
// and written to w, until r ends (nil) or ctx is done (ctx's error).
func (s *Server) ServeStdio(ctx context.Context, r io.Reader, w io.Writer) error {
	t := &sdk.IOTransport{Reader: io.NopCloser(r), Writer: nopWriteCloser{w}, MaxLineLength: maxMessageBytes}
	return s.mcp.Run(ctx, t)
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
