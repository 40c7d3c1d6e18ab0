package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/loopback"
)

// A session's commands (issue 29): jailctl session run | cmds | cmd-log |
// cmd-kill, over /v1/sessions/{id}/commands.

const sessionRunHelp = `The command line is run by the session's /bin/sh -c, as ssh runs one:
its words are joined by spaces. Put -- before it when a word starts with
a dash: jailctl session run $S -- ls -l.

In the foreground (the default) its stdout and stderr are printed as
they came and jailctl exits with its exit status (124 after its
timeout, 128+N when signal N killed it). With --bg it runs on in the
background and jailctl prints its ID: jailctl session cmd-log $S ID
shows its output, jailctl session cmd-kill $S ID ends it and everything
it started.`

func runSessionRun(e *env, sc *subcommand, args []string) int {
	fs := e.flagSet("session run")
	bg := fs.Bool("bg", false, "run it in the background and print its ID")
	cwd := fs.String("cwd", "", "working `DIR` in the session (default /workspace)")
	stdin := fs.Bool("i", false, "send jailctl's stdin to the command")
	timeout := fs.Int64("timeout", 0, "a foreground command's timeout in `MS` (default: the session's call timeout)")
	jsonOut := fs.Bool("json", false, jsonUsage)
	env := map[string]string{}
	fs.Func("env", "set `NAME=VALUE` in the command's environment; repeatable", setEnv(env))
	daemon := targetFlags(fs)
	pos, rc, ok := e.parseSub(fs, sc, args, 2, -1)
	if !ok {
		return rc
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	req := api.CommandRequest{Cmd: strings.Join(pos[1:], " "), Cwd: *cwd, Background: *bg}
	if len(env) > 0 {
		req.Env = env
	}
	if *timeout > 0 {
		req.TimeoutMs = timeout
	}
	if *stdin {
		b, err := io.ReadAll(io.LimitReader(e.stdin, 1<<20+1))
		if err != nil {
			return e.errorf("read stdin: %v", err)
		}
		s := string(b)
		req.Stdin = &s
	}
	if *bg {
		ci, err := c.StartSessionCommand(e.ctx, pos[0], req)
		if err != nil {
			return e.daemonError(err)
		}
		if *jsonOut {
			b, _ := json.Marshal(ci)
			e.printJSON(b)
		} else {
			fmt.Fprintln(e.stdout, ci.CommandID)
		}
		return exitOK
	}
	r, err := c.RunSessionCommand(e.ctx, pos[0], req)
	if err != nil {
		return e.daemonError(err)
	}
	if *jsonOut {
		b, _ := json.Marshal(r)
		e.printJSON(b)
	} else {
		io.WriteString(e.stdout, r.Stdout)
		io.WriteString(e.stderr, r.Stderr)
		if r.StdoutTruncated || r.StderrTruncated {
			fmt.Fprintln(e.stderr, "jailctl: the output was cut at its bound (output_limit)")
		}
	}
	return commandExit(r.Status, r.ExitCode, r.Signal)
}

// commandExit maps a command's end to jailctl's exit status, as exitCode
// does a run's.
func commandExit(status string, code, sig *int) int {
	switch {
	case status == api.StatusTimeout:
		return 124
	case sig != nil && *sig > 0 && *sig < 128:
		return 128 + *sig
	case code != nil && *code > 0 && *code < 256:
		return *code
	case status == api.StatusOK:
		return exitOK
	}
	return exitError
}

func runSessionCmds(e *env, sc *subcommand, args []string) int {
	a, rc, ok := e.ask("session cmds", jsonUsage, sc, args, 1, 1)
	if !ok {
		return rc
	}
	l, err := a.c.SessionCommands(e.ctx, a.pos[0])
	if err != nil {
		return e.daemonError(err)
	}
	if a.json {
		b, _ := json.Marshal(l)
		e.printJSON(b)
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tSTATUS\tPID\tSTARTED\tCOMMAND")
	for _, ci := range l.Commands {
		status := "-"
		if ci.Status != nil {
			status = *ci.Status
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", ci.CommandID, ci.State, status, ci.Pid, ci.StartedAt.Local().Format(time.DateTime), quoteName(strings.Join(ci.Argv, " ")))
	}
	tw.Flush()
	return exitOK
}

func runSessionCmdLog(e *env, sc *subcommand, args []string) int {
	fs := e.flagSet("session cmd-log")
	follow := fs.Bool("f", false, "follow: print the output as it comes until the command ends; exit as it did")
	asJSON := fs.Bool("json", false, jsonUsage)
	daemon := targetFlags(fs)
	pos, rc, ok := e.parseSub(fs, sc, args, 2, 2)
	if !ok {
		return rc
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	if *follow {
		if *asJSON {
			return e.usageError("session cmd-log: -f streams the output; it has no --json")
		}
		ci, err := c.FollowSessionCommand(e.ctx, pos[0], pos[1], func(stream int, text string) error {
			w := e.stdout
			if stream == 2 {
				w = e.stderr
			}
			_, err := io.WriteString(w, text)
			return err
		})
		if err != nil {
			return e.daemonError(err)
		}
		if n := ci.StdoutDroppedBytes + ci.StderrDroppedBytes; n > 0 {
			fmt.Fprintf(e.stderr, "jailctl: %d bytes of output were not kept (the command wrote faster than they were read)\n", n)
		}
		switch {
		case ci.Signal != nil:
			return 128 + *ci.Signal
		case ci.ExitCode != nil:
			return *ci.ExitCode
		}
		return exitError
	}
	a := asked{c: c, pos: pos, json: *asJSON}
	ci, err := a.c.SessionCommand(e.ctx, a.pos[0], a.pos[1])
	if err != nil {
		return e.daemonError(err)
	}
	return e.printCommand(ci, a.json)
}

func runSessionCmdKill(e *env, sc *subcommand, args []string) int {
	a, rc, ok := e.ask("session cmd-kill", jsonUsage, sc, args, 2, 2)
	if !ok {
		return rc
	}
	ci, err := a.c.KillSessionCommand(e.ctx, a.pos[0], a.pos[1])
	if err != nil {
		return e.daemonError(err)
	}
	return e.printCommand(ci, a.json)
}

// printCommand prints a command's output kept so far (or its JSON) and,
// on stderr, how much was dropped.
func (e *env) printCommand(ci *api.CommandInfo, asJSON bool) int {
	if asJSON {
		b, _ := json.Marshal(ci)
		e.printJSON(b)
		return exitOK
	}
	if ci.Stdout != nil {
		io.WriteString(e.stdout, *ci.Stdout)
	}
	if ci.Stderr != nil {
		io.WriteString(e.stderr, *ci.Stderr)
	}
	if n := ci.StdoutDroppedBytes + ci.StderrDroppedBytes; n > 0 {
		fmt.Fprintf(e.stderr, "jailctl: %d older bytes of output were not kept\n", n)
	}
	return exitOK
}

const sessionOpenPortHelp = `Serves, on a loopback address of this host, a session's port: a server
that a background command of the session runs (jailctl session run --bg
$S -- python3 -m http.server 8000). It prints a URL to open in a browser;
the URL's first path element is a random token, and a request without it
is 404. Every request goes through the daemon, as the uid that started
jailctl. It runs until interrupted (Ctrl-C).`

func runSessionOpenPort(e *env, sc *subcommand, args []string) int {
	fs := e.flagSet("session open-port")
	addr := fs.String("listen", "127.0.0.1:0", "the loopback `HOST:PORT` to serve on")
	daemon := targetFlags(fs)
	pos, rc, ok := e.parseSub(fs, sc, args, 2, 2)
	if !ok {
		return rc
	}
	port, err := strconv.Atoi(pos[1])
	if err != nil || port < 1 || port > 65535 {
		return e.usageError("session open-port: PORT must be a TCP port in 1..65535, not %q", pos[1])
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	if _, err := c.SessionCommands(e.ctx, pos[0]); err != nil {
		return e.daemonError(err) // no such session: said before serving
	}
	l, err := loopback.Listen(*addr, false)
	if err != nil {
		return e.errorf("%v", err)
	}
	tok, err := loopback.NewToken()
	if err != nil {
		l.Close()
		return e.errorf("%v", err)
	}
	proxy := c.PortProxy(pos[0], port)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		first, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if !loopback.IsHostHeader(r.Host) || !tok.Equal(first) {
			http.NotFound(w, r)
			return
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path, r2.URL.RawPath = "/"+rest, ""
		proxy.ServeHTTP(w, r2)
	})
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(e.stderr, "jailctl: serving port %d of session %s; open this URL (it holds the token):\n", port, pos[0])
	fmt.Fprintf(e.stdout, "http://%s/%s/\n", l.Addr(), tok)
	go func() {
		<-e.ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return e.errorf("%v", err)
	}
	return exitOK
}
