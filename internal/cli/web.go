package cli

import (
	"errors"
	"fmt"

	"github.com/jaild/jaild/internal/loopback"
	"github.com/jaild/jaild/internal/web"
)

const webHelp = `Serves a playground page: a Python editor whose code runs, lints and
formats in the daemon's jails, with the output, the exception's line
marked, figures inline, returned files to download, the limits to set,
and the API reference. It prints the URL to open; the URL holds a random
token that the page and its API need, because whoever uses the page runs
code as you. The token stays in the address bar (a reload works) and is
never stored in a cookie; keep the URL to yourself. It listens on a
loopback address unless --allow-remote, and runs until it is
interrupted.`

func runWeb(e *env, args []string) int {
	fs := e.flagSet("web")
	addr := fs.String("http", "127.0.0.1:8080", "listen on `ADDR` (HOST:PORT, a loopback address; port 0 picks one)")
	allowRemote := fs.Bool("allow-remote", false, "let --http listen on a non-loopback address (anyone who reaches it with the token runs code as you)")
	daemon := targetFlags(fs)
	if _, rc, ok := e.parse(fs, args, 0); !ok {
		return rc
	}
	l, err := loopback.Listen(*addr, *allowRemote)
	if errors.Is(err, loopback.ErrNotLoopback) {
		return e.usageError("web: --http %v; pass --allow-remote to listen there anyway", err)
	}
	if err != nil {
		return e.errorf("web: --http: %v", err)
	}
	defer l.Close()
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	// A daemon that cannot be reached is said now, not on the first run.
	if _, err := c.Health(e.ctx); err != nil {
		return e.daemonError(err)
	}
	srv, err := web.New(c, *allowRemote)
	if err != nil {
		return e.errorf("web: %v", err)
	}
	if *allowRemote {
		fmt.Fprintf(e.stderr, "jailctl web: warning: whoever reaches %s with the token runs code as you\n", l.Addr())
	}
	fmt.Fprintf(e.stderr, "jailctl web: serving the playground; open this URL (it holds the token):\n")
	fmt.Fprintln(e.stdout, srv.URL(l.Addr()))
	if err := srv.Serve(e.ctx, l); err != nil {
		return e.errorf("web: %v", err)
	}
	return exitOK
}
