package cli

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/jaild/jaild/internal/loopback"
	"github.com/jaild/jaild/internal/mcp"
	"github.com/jaild/jaild/internal/version"
)

// MCPTokenEnv names the environment variable that gives `jailctl mcp
// --http` its token, when --token-file does not.
const MCPTokenEnv = "JAILD_MCP_TOKEN"

const mcpHelp = `Serves jaild's tools to AI agents over the Model Context Protocol:
run_python, lint_python and format_python, and open_session,
close_session, list_sessions, pause_session, fork_session,
snapshot_session and restore_session for
sessions that keep Python's state across calls, and run_command for
shell commands in one, forwarded to the daemon. By default MCP is spoken on stdin
and stdout, as desktop clients expect of a server they launch;
diagnostics go to stderr. With --http, MCP is served over Streamable HTTP
at http://ADDR/mcp instead, on a loopback address unless --allow-remote.
Every HTTP request must then carry a token, as the header
"Authorization: Bearer TOKEN", because any local account can reach the
port and would act as you: the token is read from --token-file, else
from $JAILD_MCP_TOKEN, else made at random and printed once on stdout.
An MCP connection reaches only the sessions it opened, unless
--all-sessions. It runs until stdin ends (stdio) or it is interrupted,
then closes the sessions opened through it. See docs/MCP.md for client
configuration.`

func runMCP(e *env, args []string) int {
	fs := e.flagSet("mcp")
	addr := fs.String("http", "", "serve Streamable HTTP on `ADDR` (HOST:PORT, a loopback address; port 0 picks one) instead of stdio")
	allowRemote := fs.Bool("allow-remote", false, "let --http listen on a non-loopback address (anyone who reaches it with the token runs code as you)")
	tokenFile := fs.String("token-file", "", "with --http, read the token clients must send from `FILE` (at least 32 characters) instead of $"+MCPTokenEnv+" or a random one")
	allSessions := fs.Bool("all-sessions", false, "let MCP clients list, run in and close all your sessions, not only those they opened")
	daemon := targetFlags(fs)
	if _, rc, ok := e.parse(fs, args, 0); !ok {
		return rc
	}
	if *allowRemote && *addr == "" {
		return e.usageError("mcp: --allow-remote needs --http")
	}
	if *tokenFile != "" && *addr == "" {
		return e.usageError("mcp: --token-file needs --http")
	}
	var token loopback.Token
	printToken := false
	if *addr != "" {
		var err error
		switch env := os.Getenv(MCPTokenEnv); {
		case *tokenFile != "":
			token, err = loopback.ReadToken(*tokenFile)
		case env != "":
			if token, err = loopback.ParseToken(env); err != nil {
				err = fmt.Errorf("$%s: %w", MCPTokenEnv, err)
			}
		default:
			token, err = loopback.NewToken()
			printToken = true
		}
		if err != nil {
			return e.usageError("mcp: %v", err)
		}
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
	srv, err := mcp.New(e.ctx, c, mcp.Options{Version: version.Version, AllSessions: *allSessions})
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
		fmt.Fprintf(e.stderr, "jailctl mcp: warning: whoever reaches %s with the token runs code as you\n", l.Addr())
	}
	if printToken {
		// Once, on stdout: what a script reads; the rest is diagnostics.
		fmt.Fprintf(e.stderr, "jailctl mcp: clients must send the header \"Authorization: Bearer TOKEN\" with this token (keep it to yourself):\n")
		fmt.Fprintln(e.stdout, token)
	}
	fmt.Fprintf(e.stderr, "jailctl mcp: serving MCP at http://%s%s\n", l.Addr(), mcp.Path)
	if err := srv.ServeHTTP(e.ctx, l, token); err != nil {
		return e.errorf("mcp: %v", err)
	}
	return exitOK
}
