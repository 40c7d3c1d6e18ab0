package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/errdefs"
)

const replHelp = `Runs each statement or block read from stdin in one session, as the Python
REPL does: variables and imports persist from one input to the next, and
the value of a final expression is printed. A line ending in ":", inside
brackets or a triple-quoted string, or ending in "\" continues ("... "); an
empty line ends a compound statement (so does a new unindented statement).

Ctrl-C interrupts the call in progress (a second Ctrl-C abandons it) and
clears the line at the prompt. Ctrl-D ends the REPL and removes its
session; with --session ID the REPL uses that session and leaves it at
exit. Stdin need not be a terminal: a script piped in runs a statement or
block at a time, without prompts.

Exit status: 0 at the end of input; 1 when the session ended under the
REPL; 2 for usage errors and errors from the daemon.`

func runRepl(e *env, args []string) int {
	fs := e.flagSet("repl")
	var sf runFlags
	sf.register(fs, forRepl)
	attach := fs.String("session", "", "run in the existing session `ID` and leave it at exit (exclusive with the session flags)")
	daemon := targetFlags(fs)
	if _, rc, ok := e.parse(fs, args, 0); !ok {
		return rc
	}
	if *attach != "" && sf.n > 0 {
		return e.usageError("repl: --session takes an existing session; its flags are not the REPL's to set")
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	r := &repl{e: e, c: c, id: *attach, outDir: sf.outDir, tty: isTerminal(e.stdin)}
	if r.id == "" {
		req, cleanup, err := sf.sessionRequest(e, c)
		if err != nil {
			return e.daemonError(err)
		}
		s, err := c.CreateSession(e.ctx, req)
		cleanup()
		if err != nil {
			return e.daemonError(err)
		}
		r.id = s.SessionID
	} else {
		s, err := c.Session(e.ctx, r.id)
		if err != nil {
			return e.daemonError(err)
		}
		if s.State == api.SessionEnded {
			return e.errorf("session %s has ended (%s)", quoteName(r.id), endReasonText(s.EndReason))
		}
	}
	if r.tty {
		end := "ends it"
		if *attach != "" {
			end = "leaves it"
		}
		fmt.Fprintf(e.stderr, "jailctl repl: Python in session %s. Ctrl-D %s.\n", r.id, end)
	}

	sig := make(chan os.Signal, 4)
	stop := notifySignals(sig)
	code := r.loop(sig)
	stop()
	if *attach == "" {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), 10*time.Second)
		defer cancel()
		if _, err := c.DeleteSession(ctx, r.id); err != nil && !r.ended {
			if rc := e.errorf("cannot remove session %s: %v", r.id, err); code == exitOK {
				code = rc
			}
		}
	}
	return code
}

// repl is one REPL on one session.
type repl struct {
	e      *env
	c      *client.Client
	id     string
	outDir string
	tty    bool // prompts and notes for a person
	ended  bool // the session ended under the REPL
	failed bool // a call got an error from the daemon
}

// loop reads and runs blocks until the end of input, a SIGTERM, or the
// end of the session, and returns the exit status.
func (r *repl) loop(sig <-chan os.Signal) int {
	done := make(chan struct{})
	defer close(done)
	lines := make(chan string)
	readErr := make(chan error, 1)
	go func() {
		// A goroutine reads so that Ctrl-C at the prompt is seen while
		// the read blocks; the terminal itself drops the typed line.
		defer close(lines)
		br := bufio.NewReader(r.e.stdin)
		for {
			line, err := br.ReadString('\n')
			if line != "" {
				select {
				case lines <- line:
				case <-done:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					readErr <- err
				}
				return
			}
		}
	}()

	var b blockReader
	for {
		r.prompt(b.pending())
		select {
		case line, ok := <-lines:
			if !ok {
				if r.tty {
					fmt.Fprintln(r.e.stderr)
				}
				if code := b.flush(); code != "" {
					if rc, stop := r.run(code, sig); stop {
						return rc
					}
				}
				select {
				case err := <-readErr:
					return r.e.errorf("read stdin: %v", err)
				default:
				}
				if r.failed {
					return exitError
				}
				return exitOK
			}
			for _, code := range b.feed(line) {
				if rc, stop := r.run(code, sig); stop {
					return rc
				}
			}
		case s := <-sig:
			if s != os.Interrupt {
				return signalStatus(s)
			}
			b.reset()
			fmt.Fprintln(r.e.stderr, "\nKeyboardInterrupt")
		}
	}
}

func (r *repl) prompt(continued bool) {
	if !r.tty {
		return
	}
	if continued {
		fmt.Fprint(r.e.stderr, "... ")
	} else {
		fmt.Fprint(r.e.stderr, ">>> ")
	}
}

// run runs one block. stop says the REPL cannot go on; rc is then its
// exit status.
func (r *repl) run(code string, sig <-chan os.Signal) (rc int, stop bool) {
	e := r.e
	interactive := true
	res := e.sessionCall(r.c, sig, r.id, &api.SessionExecuteRequest{Code: code, LastLineInteractive: &interactive}, true)
	switch {
	case res.abandoned != nil:
		if res.abandoned != os.Interrupt {
			return signalStatus(res.abandoned), true
		}
		r.waitIdle()
		return 0, false
	case res.err != nil:
		rc := e.sessionError(r.c, r.id, res.err)
		// The session is gone (unknown now, or ended): nothing more can
		// run in it.
		if errors.Is(res.err, errdefs.ErrNotFound) {
			r.ended = true
			return rc, true
		}
		if errors.Is(res.err, errdefs.ErrConflict) {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), 5*time.Second)
			defer cancel()
			if s, err := r.c.Session(ctx, r.id); err == nil && s.State == api.SessionEnded {
				r.ended = true
				return exitFail, true
			}
		}
		r.failed = true
		return 0, false
	}
	// The output was printed as it came.
	resp := res.resp
	if resp.StdoutTruncated {
		fmt.Fprintln(e.stderr, "jailctl: the call's stdout was truncated")
	}
	if resp.StderrTruncated {
		fmt.Fprintln(e.stderr, "jailctl: the call's stderr was truncated")
	}
	e.printDisplays(&resp.ExecuteResponse)
	e.writeOutputs(&resp.ExecuteResponse, r.outDir)
	// An exception's traceback is on stderr already; other failures
	// (limits, signals) are said here.
	if msg := callMessage(resp); resp.Status != api.StatusOK && msg != "" && resp.Error == nil {
		fmt.Fprintf(e.stderr, "jailctl: %s\n", msg)
	}
	e.sessionNotes(&resp.Session)
	if resp.Session.State == api.SessionEnded {
		r.ended = true
		return exitFail, true
	}
	return 0, false
}

// waitIdle waits a while for the daemon to stop an abandoned call, so
// that the next input does not find it still running.
func (r *repl) waitIdle() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.e.ctx), 10*time.Second)
	defer cancel()
	for {
		s, err := r.c.Session(ctx, r.id)
		if err != nil || s.State != api.SessionRunning {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interruptRetry):
		}
	}
}

// isTerminal reports whether r is a terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// blockReader groups lines of input into the units the REPL runs, as
// Python's interactive loop does: a simple statement runs when its line
// ends outside brackets, strings and "\" continuations; a compound
// statement (a line ending in ":", a decorator, a keyword such as if or
// def) runs at an empty line, or when an unindented line that cannot
// continue it (not else, elif, except, finally) starts the next one. The
// latter is where it is kinder than Python's loop, for piped scripts.
type blockReader struct {
	lines     []string
	compound  bool
	decorator bool // the last complete logical line was a decorator
}

// pending reports whether a block has started.
func (b *blockReader) pending() bool { return len(b.lines) > 0 }

// reset drops the block in progress.
func (b *blockReader) reset() { *b = blockReader{} }

// flush returns the block in progress, if any, at the end of input.
func (b *blockReader) flush() string {
	if !b.pending() {
		return ""
	}
	return b.take()
}

func (b *blockReader) take() string {
	lines := b.lines
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	b.reset()
	return strings.Join(lines, "\n") + "\n"
}

// continuesBlock are the keywords of clauses that continue a compound
// statement at its own indentation.
var continuesBlock = map[string]bool{"else": true, "elif": true, "except": true, "finally": true}

// startsCompound are the keywords of compound statements. A line ending
// in ":" needs no list; these catch one-line forms like "if x: pass",
// after which an else may still follow.
var startsCompound = map[string]bool{
	"if": true, "for": true, "while": true, "try": true, "with": true, "def": true, "class": true, "async": true,
}

// feed takes one line of input and returns the blocks it completed, in
// order: none, one, or (when it both ends a compound statement and is a
// complete statement itself) two.
func (b *blockReader) feed(line string) []string {
	line = strings.TrimRight(line, "\r\n")
	var ready []string
	before := scanPython(strings.Join(b.lines, "\n"))
	if b.compound && !before.open() && !b.decorator && line != "" && !isSpace(line[0]) &&
		!strings.HasPrefix(line, "#") && !continuesBlock[firstWord(line)] {
		ready = append(ready, b.take())
		before = pyScan{}
	}
	if !b.pending() && isBlankOrComment(line) {
		return ready
	}
	b.lines = append(b.lines, line)
	logicalStart := !before.open()
	if logicalStart && !isBlankOrComment(line) {
		word := firstWord(strings.TrimLeft(line, " \t"))
		b.decorator = strings.HasPrefix(strings.TrimLeft(line, " \t"), "@")
		if len(b.lines) == 1 && (b.decorator || startsCompound[word]) {
			b.compound = true
		}
	}
	s := scanPython(strings.Join(b.lines, "\n"))
	switch {
	case s.open():
		return ready
	case strings.TrimSpace(line) == "":
		return append(ready, b.take())
	case s.last == ':':
		b.compound = true
	}
	if !b.compound {
		return append(ready, b.take())
	}
	return ready
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\f' }

func isBlankOrComment(line string) bool {
	t := strings.TrimLeft(line, " \t\f")
	return t == "" || t[0] == '#'
}

// firstWord returns the identifier line starts with.
func firstWord(line string) string {
	i := 0
	for i < len(line) && (line[i] == '_' || line[i] >= 'a' && line[i] <= 'z' || line[i] >= 'A' && line[i] <= 'Z' || i > 0 && line[i] >= '0' && line[i] <= '9') {
		i++
	}
	return line[:i]
}

// pyScan is what the end of some Python source leaves open.
type pyScan struct {
	depth     int  // open brackets
	triple    bool // inside a triple-quoted string
	backslash bool // ends in a line continuation
	last      byte // the last line's last character outside comments and strings' insides; 0 if none
}

// open reports whether the source cannot end here.
func (s pyScan) open() bool { return s.depth > 0 || s.triple || s.backslash }

// scanPython scans src as Python's tokenizer would for brackets, strings,
// comments and line continuations. It need not be exact: the interpreter
// judges the code; this only decides when to send it.
func scanPython(src string) pyScan {
	var s pyScan
	quote := ""
	for i := 0; i < len(src); {
		c := src[i]
		if quote != "" {
			switch {
			case c == '\\':
				i += 2
			case strings.HasPrefix(src[i:], quote):
				i += len(quote)
				quote = ""
				s.last = c
			case c == '\n' && len(quote) == 1:
				// An unterminated one-line string: the interpreter says so.
				quote = ""
				s.last = 0
				i++
			default:
				i++
			}
			continue
		}
		switch c {
		case '#':
			for i < len(src) && src[i] != '\n' {
				i++
			}
			continue
		case '\'', '"':
			quote = string(c)
			if strings.HasPrefix(src[i:], strings.Repeat(quote, 3)) {
				quote = strings.Repeat(quote, 3)
			}
			i += len(quote)
			s.last = c
			continue
		case '\\':
			if i+1 == len(src) {
				s.backslash = true
				return s
			}
			if src[i+1] == '\n' {
				i += 2
				continue
			}
			s.last = c
		case '(', '[', '{':
			s.depth++
			s.last = c
		case ')', ']', '}':
			if s.depth > 0 {
				s.depth--
			}
			s.last = c
		case '\n':
			s.last = 0
		case ' ', '\t', '\r', '\f':
		default:
			s.last = c
		}
		i++
	}
	s.triple = len(quote) == 3
	return s
}
