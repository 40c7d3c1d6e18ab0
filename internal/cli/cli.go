// Package cli is jailctl, the command-line client of jaild: it runs, lints
// and formats Python in the daemon's jails and shows the daemon's state.
// It talks to the daemon through package client: on its Unix socket, or
// on its TLS listener with a client certificate (--host, --cert, --key,
// --ca). It links no daemon code: the host probes that need the daemon's
// libraries are jaild's ("jaild doctor"), which doctor runs or asks the
// running daemon about.
//
// Exit status: a run's own status for exec (see exitCode), 1 for lint
// findings or a format --check that would change the file, and 2 for
// usage errors and errors from or reaching the daemon.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/version"
)

// Exit statuses of jailctl itself.
const (
	exitOK          = 0
	exitFail        = 1 // lint findings, format --check changes, a failed run
	exitError       = 2 // usage errors and daemon errors
	exitInterrupted = 130
)

// command is one subcommand. Adding a subcommand is one entry in commands.
type command struct {
	name    string
	args    string // synopsis after the name
	summary string
	help    string // more about the command, if it needs it
	run     func(e *env, args []string) int
}

// commands is set in init: the commands' usage reads the table, and a
// variable initializer that refers to itself is an initialization cycle.
var commands []command

func init() {
	commands = []command{
		{"exec", "[flags] [FILE|-]", "run Python code in a jail", execHelp, runExec},
		{"session", "COMMAND [flags] [args]", "run Python in a session, whose interpreter keeps its state across calls", sessionHelp, runSession},
		{"repl", "[flags]", "an interactive Python prompt whose inputs run in one session", replHelp, runRepl},
		{"files", "COMMAND [flags] [args]", "keep files in the daemon's file store for runs to use", filesHelp, runFiles},
		{"lint", "[flags] [FILE|-]", "lint Python code with ruff", lintHelp, runLint},
		{"format", "[flags] [FILE|-]", "format Python code with ruff", formatHelp, runFormat},
		{"info", "[flags]", "show the daemon's version, images, limits and capacity", "", runInfo},
		{"images", "[flags]", "list the images the daemon serves: runs pick one with --image", imagesHelp, runImages},
		{"health", "[flags]", "check that the daemon is serving", "", runHealth},
		{"doctor", "[flags]", "check the host, the image and the socket before use; each failed check names its fix", doctorHelp, runDoctor},
		{"mcp", "[flags]", "serve the daemon's tools to AI agents over MCP (stdio, or --http)", mcpHelp, runMCP},
		{"web", "[flags]", "serve a playground page: an editor to run, lint and format code, and the API reference", webHelp, runWeb},
		{"version", "", "print jailctl's version", "", runVersion},
	}
}

func lookup(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

// env is what a command runs with; tests build one around buffers.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	global target // the global --socket, --host, --cert, --key and --ca
}

// Main is jailctl without the process: it parses args, runs the command
// and returns the exit status. A cancelled ctx is the user's interrupt.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	fs := flag.NewFlagSet("jailctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	e.global.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			e.usage(stdout)
			return exitOK
		}
		return e.usageError("%v", err)
	}
	args = fs.Args()
	if len(args) == 0 {
		e.usage(stderr)
		return exitError
	}
	name, args := args[0], args[1:]
	if name == "help" {
		if len(args) == 0 {
			e.usage(stdout)
			return exitOK
		}
		name, args = args[0], []string{"-h"}
	}
	cmd := lookup(name)
	if cmd == nil {
		return e.usageError("unknown command %q", name)
	}
	return cmd.run(e, args)
}

func (e *env) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: jailctl [--socket PATH | --host URL --cert FILE --key FILE --ca FILE] COMMAND [flags] [args]\n\n")
	fmt.Fprintf(w, "jailctl runs Python in jaild's jails.\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-8s %s\n", "help", "show this help, or a command's with \"help COMMAND\"")
	fmt.Fprintf(w, "\nThe daemon's socket is --socket, else $%s, else %s (now: %s).\n",
		client.SocketEnv, client.DefaultSocketPath, e.socketPath(""))
	fmt.Fprintf(w, "A daemon's TLS listener instead: --host https://HOST:PORT (else $%s) with the client's\n"+
		"certificate and key, --cert and --key (else $%s, $%s), and --ca, the CA that signed the\n"+
		"daemon's certificate (else $%s). Flags win over the environment; --host and --socket\n"+
		"together are an error. Commands take these flags too.\n",
		client.HostEnv, client.CertEnv, client.KeyEnv, client.CAEnv)
	fmt.Fprintf(w, "Run \"jailctl COMMAND -h\" for a command's flags.\n")
}

// usageError reports a usage error and returns exitError.
func (e *env) usageError(format string, a ...any) int {
	fmt.Fprintf(e.stderr, "jailctl: "+format+"\n", a...)
	fmt.Fprintf(e.stderr, "Run \"jailctl help\" for usage.\n")
	return exitError
}

// errorf reports an error that is not the user's usage and returns
// exitError.
func (e *env) errorf(format string, a ...any) int {
	fmt.Fprintf(e.stderr, "jailctl: "+format+"\n", a...)
	return exitError
}

// daemonError reports an error from a client call. The daemon's message is
// the whole story (client.Error prints just it); a cancelled request is
// the user's interrupt.
func (e *env) daemonError(err error) int {
	if e.ctx.Err() != nil && errors.Is(err, e.ctx.Err()) {
		fmt.Fprintln(e.stderr, "jailctl: interrupted")
		return exitInterrupted
	}
	return e.errorf("%v", err)
}

// flagSet returns a subcommand's flag set. Parse it with e.parse.
func (e *env) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("jailctl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// target is the daemon a command talks to, as the flags name it: its
// socket, or its TLS listener's URL with the client's certificate and key
// and the CA of the daemon's certificate. "" is a flag not given.
type target struct {
	socket, host, cert, key, ca string
}

// addFlags adds --socket, --host, --cert, --key and --ca to fs.
func (t *target) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&t.socket, "socket", "", "daemon socket `PATH` (default $"+client.SocketEnv+", else "+client.DefaultSocketPath+")")
	fs.StringVar(&t.host, "host", "", "reach the daemon's TLS listener at `URL` (https://HOST:PORT) instead of a socket (default $"+client.HostEnv+")")
	fs.StringVar(&t.cert, "cert", "", "with --host: the client certificate `FILE` (PEM; default $"+client.CertEnv+")")
	fs.StringVar(&t.key, "key", "", "with --host: the client certificate's private key `FILE` (PEM; default $"+client.KeyEnv+")")
	fs.StringVar(&t.ca, "ca", "", "with --host: the `FILE` of the CA certificates that signed the daemon's (PEM; default $"+client.CAEnv+")")
}

// targetFlags adds the flags that choose the daemon to a subcommand; its
// client is e.client of what they hold.
func targetFlags(fs *flag.FlagSet) *target {
	t := &target{}
	t.addFlags(fs)
	return t
}

// socketFlag adds --socket alone, for a command that needs the local
// daemon (doctor).
func socketFlag(fs *flag.FlagSet) *string {
	return fs.String("socket", "", "daemon socket `PATH` (default $"+client.SocketEnv+", else "+client.DefaultSocketPath+")")
}

func (e *env) socketPath(flagValue string) string {
	switch {
	case flagValue != "":
		return flagValue
	case e.global.socket != "":
		return e.global.socket
	}
	return client.DefaultSocket()
}

// client returns the client of the daemon that t (a command's flags), the
// global flags and the environment name, in that order. ok is false when
// the command should return code: the flags contradict each other, or the
// TLS client's files do not load.
func (e *env) client(t *target) (c *client.Client, code int, ok bool) {
	// A setting's value, and whether a flag (else the environment) gave it.
	type setting struct {
		value, flag, env string
		fromFlag         bool
	}
	pick := func(cmd, global, flagName, envName string) setting {
		s := setting{value: cmd, flag: "--" + flagName, env: "$" + envName, fromFlag: true}
		switch {
		case cmd != "":
		case global != "":
			s.value = global
		default:
			s.value, s.fromFlag = os.Getenv(envName), false
		}
		return s
	}
	socket := pick(t.socket, e.global.socket, "socket", client.SocketEnv)
	host := pick(t.host, e.global.host, "host", client.HostEnv)
	files := []setting{
		pick(t.cert, e.global.cert, "cert", client.CertEnv),
		pick(t.key, e.global.key, "key", client.KeyEnv),
		pick(t.ca, e.global.ca, "ca", client.CAEnv),
	}
	// A flag chooses over the environment; two choices of one rank are
	// ambiguous.
	useHost := false
	switch {
	case host.fromFlag && socket.fromFlag:
		return nil, e.usageError("--host and --socket: give one, the daemon's TLS listener or its socket"), false
	case host.fromFlag:
		useHost = true
	case socket.fromFlag:
	case host.value != "" && socket.value != "":
		return nil, e.usageError("$%s and $%s are both set: unset one, or choose with --host or --socket", client.HostEnv, client.SocketEnv), false
	case host.value != "":
		useHost = true
	}
	if !useHost {
		for _, f := range files {
			if f.fromFlag {
				return nil, e.usageError("%s is for --host (a daemon's TLS listener), not for a socket", f.flag), false
			}
		}
		if socket.value == "" {
			socket.value = client.DefaultSocketPath
		}
		return client.New(socket.value), 0, true
	}
	where := host.flag
	if !host.fromFlag {
		where = host.env
	}
	var missing []string
	for _, f := range files {
		if f.value == "" {
			missing = append(missing, f.flag+" (or "+f.env+")")
		}
	}
	if len(missing) > 0 {
		return nil, e.usageError("%s %s needs the client's certificate and key and the CA of the daemon's certificate: missing %s",
			where, host.value, strings.Join(missing, ", ")), false
	}
	if !strings.HasPrefix(host.value, "https://") {
		return nil, e.usageError("%s %q: not an https:// URL; want https://HOST:PORT (the daemon's tls.listen)", where, host.value), false
	}
	c, err := client.NewTLS(host.value, files[0].value, files[1].value, files[2].value)
	if err != nil {
		return nil, e.errorf("%v", err), false
	}
	return c, 0, true
}

// parse parses a subcommand's args, allowing flags after positional
// arguments ("jailctl lint x.py --select F"); "--" ends the flags. ok is
// false when the command should return code: after -h, or a usage error.
func (e *env) parse(fs *flag.FlagSet, args []string, maxPos int) (pos []string, code int, ok bool) {
	flags, pos := splitArgs(fs, args)
	if err := fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			e.commandUsage(fs, e.stdout)
			return nil, exitOK, false
		}
		return nil, e.usageError("%s: %v", strings.TrimPrefix(fs.Name(), "jailctl "), err), false
	}
	if len(pos) > maxPos {
		return nil, e.usageError("%s: unexpected argument %q", strings.TrimPrefix(fs.Name(), "jailctl "), pos[maxPos]), false
	}
	return pos, 0, true
}

func (e *env) commandUsage(fs *flag.FlagSet, w io.Writer) {
	if c := lookup(strings.TrimPrefix(fs.Name(), "jailctl ")); c != nil {
		fmt.Fprintf(w, "Usage: jailctl %s %s\n\n%s.\n", c.name, c.args, capitalize(c.summary))
		if c.help != "" {
			fmt.Fprintf(w, "\n%s\n", c.help)
		}
	}
	fmt.Fprintf(w, "\nFlags:\n")
	printFlags(w, fs)
}

// printFlags is flag.PrintDefaults with the GNU spelling this tool's
// documentation uses: --name for long flags.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		dashes := "--"
		if len(f.Name) == 1 {
			dashes = "-"
		}
		arg, usage := flag.UnquoteUsage(f)
		line := "  " + dashes + f.Name
		if arg != "" {
			line += " " + arg
		}
		if f.DefValue != "" && f.DefValue != "false" {
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, usage)
	})
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// splitArgs separates flags (with their values) from positional
// arguments, so that flags may follow them.
func splitArgs(fs *flag.FlagSet, args []string) (flags, pos []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return flags, append(pos, args[i+1:]...)
		case a == "-" || !strings.HasPrefix(a, "-"):
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil || isBoolFlag(f) || i+1 == len(args) {
			continue
		}
		i++
		flags = append(flags, args[i])
	}
	return flags, pos
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func runVersion(e *env, args []string) int {
	fs := e.flagSet("version")
	if _, code, ok := e.parse(fs, args, 0); !ok {
		return code
	}
	fmt.Fprintf(e.stdout, "jailctl %s\n", version.Version)
	return exitOK
}

// asked is a command that asks the daemon something, parsed: its
// positional arguments, the client and --json.
type asked struct {
	pos  []string
	c    *client.Client
	json bool
}

// ask parses a command that asks the daemon something: --json (with
// jsonUsage), the daemon's flags, and positional arguments (sc: a group's
// command, between minPos and maxPos; nil: a command, at most maxPos).
// ok is false when the command must return rc.
func (e *env) ask(name, jsonUsage string, sc *subcommand, args []string, minPos, maxPos int) (a asked, rc int, ok bool) {
	fs := e.flagSet(name)
	fs.BoolVar(&a.json, "json", false, jsonUsage)
	daemon := targetFlags(fs)
	if sc != nil {
		a.pos, rc, ok = e.parseSub(fs, sc, args, minPos, maxPos)
	} else {
		a.pos, rc, ok = e.parse(fs, args, maxPos)
	}
	if ok {
		a.c, rc, ok = e.client(daemon)
	}
	return a, rc, ok
}

// jsonUsage is --json's usage in most commands.
const jsonUsage = "print the daemon's response JSON"

// fetch sends req (nil: no body) to path and decodes the answer into
// out; with jsonOut it prints the answer as it came. ok is false when the
// command must return rc.
func (e *env) fetch(c *client.Client, method, path string, req, out any, jsonOut bool) (rc int, ok bool) {
	raw, err := c.Do(e.ctx, method, path, req)
	if err != nil {
		return e.daemonError(err), false
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return e.errorf("malformed response: %v", err), false
	}
	if jsonOut {
		e.printJSON(raw)
	}
	return exitOK, true
}

// printJSON writes a daemon response on stdout as it came, ending in one
// newline.
func (e *env) printJSON(raw []byte) {
	e.stdout.Write(append(bytes.TrimRight(raw, " \t\r\n"), '\n'))
}
