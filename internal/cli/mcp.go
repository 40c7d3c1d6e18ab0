package cli

import (
	"errors"
	"fmt"
	"net"

	"github.com/jaild/jaild/internal/mcp"
	"github.com/jaild/jaild/internal/version"
)

const mcpHelp = `Serves jaild's tools to AI agents over the Model Context Protocol:
run_python, lint_python and format_python, and open_session,
close_session and list_sessions for sessions that keep Python's state
across calls, forwarded to the daemon. By default MCP is spoken on stdin
and stdout, as desktop clients expect of a server they launch;
diagnostics go to stderr. With --http, MCP is served over Streamable HTTP
at http://ADDR/mcp instead, on a loopback address unless --allow-remote.
It runs until stdin ends (stdio) or it is interrupted, then closes the
sessions opened through it. See docs/MCP.md for client configuration.`

func runMCP(e *env, args []string) int {
	fs := e.flagSet("mcp")
	addr := fs.String("http", "", "serve Streamable HTTP on `ADDR` (HOST:PORT, a loopback address; port 0 picks one) instead of stdio")
	allowRemote := fs.Bool("allow-remote", false, "let --http listen on a non-loopback address (no authentication: anyone who reaches it runs code)")
	daemon := targetFlags(fs)
	if _, rc, ok := e.parse(fs, args, 0); !ok {
		return rc
	}
	if *allowRemote && *addr == "" {
		return e.usageError("mcp: --allow-remote needs --http")
	}
	// The address is checked before the daemon is asked anything.
	var l net.Listener
	if *addr != "" {
		var err error
		l, err = mcp.Listen(*addr, *allowRemote)
		if errors.Is(err, mcp.ErrNotLoopback) {
			return e.usageError("mcp: --http %v; pass --allow-remote to listen there anyway", err)
		}
		if err != nil {
			return e.errorf("mcp: --http: %v", err)
		}
		defer l.Close()
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	srv, err := mcp.New(e.ctx, c, version.Version)
	if err != nil {
		return e.daemonError(err)
	}
	if l == nil {
		if err := srv.ServeStdio(e.ctx, e.stdin, e.stdout); err != nil && (e.ctx.Err() == nil || errors.Is(err, mcp.ErrSessionsLeft)) {
			return e.errorf("mcp: %v", err)
		}
		return exitOK
	}
	if *allowRemote {
		fmt.Fprintf(e.stderr, "jailctl mcp: warning: no authentication: whoever reaches %s runs code as you\n", l.Addr())
	}
	fmt.Fprintf(e.stderr, "jailctl mcp: serving MCP at http://%s%s\n", l.Addr(), mcp.Path)
	if err := srv.ServeHTTP(e.ctx, l); err != nil {
		return e.errorf("mcp: %v", err)
	}
	return exitOK
}
