package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/errdefs"
)

const sessionHelp = `A session is a jail whose Python interpreter lives across calls: variables,
imports and workspace files persist from one "session exec" to the next,
until the session is removed (rm), is idle for its idle timeout, or reaches
its time to live. "jailctl repl" is a prompt on a session.`

const sessionExecHelp = `Code comes from -c CODE, or FILE, or stdin ("-" or no FILE). It runs in the
session's interpreter, so it sees what earlier calls defined; the value of
a final expression is printed, as the Python REPL does (--interactive=false
turns that off). Output, returned files and figures are handled as by
"jailctl exec".

Ctrl-C interrupts the call (KeyboardInterrupt in the session; its state is
kept); a second Ctrl-C abandons it.

When the call cost the session its interpreter (a timeout it would not
stop at, the memory limit, a crash), a note on stderr says so: the next
call starts afresh, with the workspace's files kept. When the session
ended, the note says why.

Exit status: as "jailctl exec": the call's exit code, 124 for a timeout,
128+N for signal N, 137 for the memory limit, 1 for other failed calls; 130
when Ctrl-C interrupted a call that then failed; 2 for usage errors and
errors from the daemon (an unknown session, a session that ended, a call
while another runs).`

// subcommand is one command of "jailctl session".
type subcommand struct {
	name    string
	args    string
	summary string
	help    string
	run     func(e *env, sc *subcommand, args []string) int
}

// sessionCommands is set in init for the same reason as commands.
var sessionCommands []subcommand

func init() {
	sessionCommands = []subcommand{
		{"new", "[flags]", "start a session and print its ID (S=$(jailctl session new))", "", runSessionNew},
		{"exec", "[flags] ID [FILE|-]", "run Python code in a session", sessionExecHelp, runSessionExec},
		{"ls", "[flags]", "list your sessions (an admin's: everyone's)", "", runSessionList},
		{"show", "[flags] ID", "describe a session", "", runSessionShow},
		{"interrupt", "[flags] ID", "interrupt a session's call in progress (exit status 1 when none was running)", "", runSessionInterrupt},
		{"pause", "[flags] ID", "pause a session to disk: its jail goes, its state stays; its next call restores it", "", runSessionPause},
		{"resume", "[flags] ID", "restore a paused session now (a call does too)", "", runSessionResume},
		{"fork", "[flags] ID", "copy a session into new ones, each in a jail of its own; print their IDs (for S in $(jailctl session fork -n 3 ID))", "", runSessionFork},
		{"snapshot", "[flags] ID", "take a snapshot of a session (it runs on) and print its ID", "", runSessionSnapshot},
		{"snapshots", "[flags] [ID]", "list your snapshots (of session ID only, when given)", "", runSessionSnapshots},
		{"restore", "[flags] ID SNAPSHOT", "roll a session back to a snapshot of it", "", runSessionRestore},
		{"snapshot-rm", "[flags] SNAPSHOT...", "delete snapshots", "", runSnapshotRemove},
		{"ls-files", "[flags] ID [PATH]", "list a directory of a session (default /workspace)", "", runSessionLsFiles},
		{"cat", "[flags] ID PATH", "print a session's file (-o FILE: write it there)", "", runSessionCat},
		{"put", "[flags] ID LOCAL|- PATH", "write a local file (or stdin) to the session's PATH (-p: make its directories)", "", runSessionPut},
		{"mkdir", "[flags] ID PATH", "make a directory in a session (-p: and its parents)", "", runSessionMkdir},
		{"mv", "[flags] ID PATH TO", "move a session's file (never over one that exists)", "", runSessionMove},
		{"rm-file", "[flags] ID PATH", "remove a session's file or empty directory", "", runSessionRemoveFile},
		{"run", "[flags] ID [--] COMMAND...", "run a shell command in a session (--bg: in the background, print its ID)", sessionRunHelp, runSessionRun},
		{"cmds", "[flags] ID", "list a session's background commands", "", runSessionCmds},
		{"cmd-log", "[flags] ID COMMAND_ID", "print a background command's output kept so far (-f: and follow it to its end)", "", runSessionCmdLog},
		{"cmd-kill", "[flags] ID COMMAND_ID", "kill a background command and everything it started; print its output", "", runSessionCmdKill},
		{"shell", "[flags] ID", "attach this terminal to a shell in a session (Ctrl-D ends it)", sessionShellHelp, runSessionShell},
		{"open-port", "[flags] ID PORT", "serve a session's port on a local URL for a browser", sessionOpenPortHelp, runSessionOpenPort},
		{"rm", "[flags] ID...", "end sessions", "", runSessionRemove},
	}
}

func runSession(e *env, args []string) int {
	return e.runGroup("session", sessionHelp, sessionCommands, args)
}

// runGroup runs the subcommand of group (session, files) that args name.
func (e *env) runGroup(group, help string, cmds []subcommand, args []string) int {
	if len(args) == 0 {
		e.groupUsage(e.stderr, group, help, cmds)
		return exitError
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if args[0] == "help" && len(args) > 1 {
			return e.runGroup(group, help, cmds, []string{args[1], "-h"})
		}
		e.groupUsage(e.stdout, group, help, cmds)
		return exitOK
	}
	for i := range cmds {
		if sc := &cmds[i]; sc.name == args[0] {
			return sc.run(e, sc, args[1:])
		}
	}
	return e.usageError("%s: unknown command %q", group, args[0])
}

func (e *env) groupUsage(w io.Writer, group, help string, cmds []subcommand) {
	fmt.Fprintf(w, "Usage: jailctl %s COMMAND [flags] [args]\n\n%s\n\nCommands:\n", group, help)
	for _, sc := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", sc.name, sc.summary)
	}
	fmt.Fprintf(w, "\nRun \"jailctl %s COMMAND -h\" for a command's flags.\n", group)
}

// parseSub is env.parse for a command of a group: between minPos and
// maxPos positional arguments (maxPos < 0: any number). fs is named
// "jailctl GROUP COMMAND", as e.flagSet("GROUP COMMAND") names it.
func (e *env) parseSub(fs *flag.FlagSet, sc *subcommand, args []string, minPos, maxPos int) (pos []string, code int, ok bool) {
	cmd := strings.TrimPrefix(fs.Name(), "jailctl ")
	flags, pos := splitArgs(fs, args)
	if err := fs.Parse(flags); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(e.stdout, "Usage: jailctl %s %s\n\n%s.\n", cmd, sc.args, capitalize(sc.summary))
			if sc.help != "" {
				fmt.Fprintf(e.stdout, "\n%s\n", sc.help)
			}
			fmt.Fprintf(e.stdout, "\nFlags:\n")
			printFlags(e.stdout, fs)
			return nil, exitOK, false
		}
		return nil, e.usageError("%s: %v", cmd, err), false
	}
	switch {
	case len(pos) < minPos:
		return nil, e.usageError("%s: want %s", cmd, strings.TrimPrefix(sc.args, "[flags] ")), false
	case maxPos >= 0 && len(pos) > maxPos:
		return nil, e.usageError("%s: unexpected argument %q", cmd, pos[maxPos]), false
	}
	return pos, 0, true
}

func sessionPath(id string) string { return "/v1/sessions/" + url.PathEscape(id) }

func runSessionNew(e *env, sc *subcommand, args []string) int {
	fs := e.flagSet("session new")
	var sf runFlags
	sf.register(fs, forSession)
	jsonOut := fs.Bool("json", false, "print the daemon's response JSON (the whole session) instead of the ID")
	fromSnapshot := fs.String("from-snapshot", "", "start the session from `SNAPSHOT` (its state, image and limits; only --idle-timeout and --ttl may be given with it)")
	daemon := targetFlags(fs)
	if _, rc, ok := e.parseSub(fs, sc, args, 0, 0); !ok {
		return rc
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	req, cleanup, err := sf.sessionRequest(e, c)
	if err != nil {
		return e.daemonError(err)
	}
	defer cleanup()
	req.FromSnapshot = *fromSnapshot
	raw, err := c.Do(e.ctx, http.MethodPost, "/v1/sessions", req)
	if err != nil {
		return e.daemonError(err)
	}
	var s api.Session
	if err := json.Unmarshal(raw, &s); err != nil || s.SessionID == "" {
		return e.errorf("malformed response: no session_id")
	}
	if *jsonOut {
		e.printJSON(raw)
	} else {
		fmt.Fprintln(e.stdout, s.SessionID)
	}
	return exitOK
}

func runSessionExec(e *env, sc *subcommand, args []string) int {
	fs := e.flagSet("session exec")
	var f runFlags
	f.register(fs, forCall)
	daemon := targetFlags(fs)
	pos, rc, ok := e.parseSub(fs, sc, args, 1, 2)
	if !ok {
		return rc
	}
	id := pos[0]
	req := &api.SessionExecuteRequest{ReturnFiles: f.get, LastLineInteractive: &f.interactive, Limits: f.limitsPtr(), ReturnFilesAs: f.returnAs()}
	if req.Code, req.Stdin, rc, ok = f.readCode(e, "session exec", pos[1:]); !ok {
		return rc
	}
	c, cleanup, rc, ok := e.dial(daemon, &f, &req.Files)
	if !ok {
		return rc
	}
	defer cleanup()
	sig := make(chan os.Signal, 4)
	stop := notifySignals(sig)
	defer stop()
	res := e.sessionCall(c, sig, id, req, !f.json)
	switch {
	case res.abandoned != nil:
		return signalStatus(res.abandoned)
	case res.err != nil:
		return e.sessionError(c, id, res.err)
	}
	var status int
	if f.json {
		e.printJSON(res.raw)
		status = exitCode(&res.resp.ExecuteResponse)
	} else {
		status = e.reportSession(res.resp, f.outDir)
	}
	if res.interrupted && status != exitOK {
		status = exitInterrupted
	}
	return status
}

// notifySignals sends SIGINT and SIGTERM to c until stop is called. A
// session call handles Ctrl-C itself (it interrupts the call rather than
// abandoning it), so while c is registered the first Ctrl-C does not end
// jailctl. Tests replace it to deliver signals in-process.
var notifySignals = func(c chan<- os.Signal) (stop func()) {
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	return func() { signal.Stop(c) }
}

// signalStatus is the exit status after sig ended a command.
func signalStatus(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok && s != syscall.SIGINT {
		return 128 + int(s)
	}
	return exitInterrupted
}

// callResult is the outcome of sessionCall.
type callResult struct {
	resp *api.SessionExecuteResponse
	raw  json.RawMessage
	// interrupted: a Ctrl-C interrupted the call, which then returned.
	interrupted bool
	// abandoned is the signal that abandoned the call: a second Ctrl-C,
	// or SIGTERM. resp and err are nil then.
	abandoned os.Signal
	err       error
}

// Interrupting a call whose request has not reached the daemon yet finds
// no call running; sessionCall tries again this often, this long.
const (
	interruptRetry = 100 * time.Millisecond
	interruptFor   = 3 * time.Second
)

// sessionCall runs one call in session id. The first SIGINT on sig sends
// the call an interrupt and keeps waiting for its result, as Ctrl-C does
// in Python; a second SIGINT, or SIGTERM, abandons the call (the daemon
// then stops it). e.ctx is not used for the call: main cancels it at the
// first Ctrl-C. With stream, the call's output is printed as it arrives
// (printOutput) and the result has no raw JSON; without, nothing is
// printed but notes.
func (e *env) sessionCall(c *client.Client, sig <-chan os.Signal, id string, req *api.SessionExecuteRequest, stream bool) callResult {
	base := context.WithoutCancel(e.ctx)
	ctx, cancel := context.WithCancel(base)
	defer cancel()
	type reply struct {
		raw  json.RawMessage
		resp *api.SessionExecuteResponse
		err  error
	}
	done := make(chan reply, 1)
	// The events are printed here, by the loop below, so that they and
	// its notes are written by one goroutine.
	events := make(chan api.Event)
	go func() {
		if !stream {
			raw, err := c.Do(ctx, http.MethodPost, sessionPath(id)+"/execute", req)
			done <- reply{raw: raw, err: err}
			return
		}
		resp, err := c.SessionExecuteStream(ctx, id, req, func(ev api.Event) error {
			select {
			case events <- ev:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		done <- reply{resp: resp, err: err}
	}()
	show := e.printOutput()

	ictx, icancel := context.WithCancel(base)
	defer icancel()
	var wg sync.WaitGroup
	var ierr error
	var res callResult
	for {
		select {
		case ev := <-events:
			show(ev)
		case rep := <-done:
			icancel()
			wg.Wait()
			if ierr != nil {
				fmt.Fprintf(e.stderr, "jailctl: cannot interrupt the call: %v\n", ierr)
			}
			if rep.err != nil {
				res.err = rep.err
				return res
			}
			if rep.resp != nil {
				res.resp = rep.resp
				return res
			}
			var resp api.SessionExecuteResponse
			if err := json.Unmarshal(rep.raw, &resp); err != nil || resp.Status == "" {
				res.err = errors.New("malformed response: no status")
				return res
			}
			res.resp, res.raw = &resp, rep.raw
			return res
		case s := <-sig:
			if s == os.Interrupt && !res.interrupted {
				res.interrupted = true
				fmt.Fprintln(e.stderr, "jailctl: interrupting the call (Ctrl-C again to abandon it)")
				wg.Add(1)
				go func() {
					defer wg.Done()
					ierr = interruptCall(ictx, c, id)
				}()
				continue
			}
			cancel()
			icancel()
			wg.Wait()
			<-done
			fmt.Fprintln(e.stderr, "jailctl: call abandoned; the daemon stops it (with a fresh interpreter if it must)")
			return callResult{abandoned: s}
		}
	}
}

// interruptCall interrupts session id's call, trying again while the
// daemon has none running yet. It returns nil when ctx ends first: the
// call returned.
func interruptCall(ctx context.Context, c *client.Client, id string) error {
	deadline := time.Now().Add(interruptFor)
	for {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := c.InterruptSession(rctx, id)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return err
		case resp.Interrupted || resp.Session.State == api.SessionEnded:
			return nil
		case time.Now().After(deadline):
			return errors.New("the daemon has no call of the session running")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interruptRetry):
		}
	}
}

// sessionError reports an error of a call in session id. A conflict is
// either another call in progress or a session that ended: the session's
// state says which, and the note names the end.
func (e *env) sessionError(c *client.Client, id string, err error) int {
	code := e.daemonError(err)
	if !errors.Is(err, errdefs.ErrConflict) {
		return code
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), 5*time.Second)
	defer cancel()
	s, gerr := c.Session(ctx, id)
	if gerr != nil {
		return code
	}
	switch s.State {
	case api.SessionEnded:
		if s.EndReason == nil || !strings.Contains(err.Error(), *s.EndReason) {
			fmt.Fprintf(e.stderr, "jailctl: session %s has ended (%s)\n", id, endReasonText(s.EndReason))
		}
	case api.SessionRunning:
		fmt.Fprintf(e.stderr, "jailctl: another call is running in session %s; \"jailctl session interrupt %s\" interrupts it\n", id, id)
	}
	return code
}

// reportSession prints a call's outcome as report does a run's (after
// its output, printed as it came), then what became of the session.
func (e *env) reportSession(resp *api.SessionExecuteResponse, outDir string) int {
	r := resp.ExecuteResponse
	// The runner printed the value of a final expression on stdout already.
	r.Result = nil
	r.Message = callMessage(resp)
	code := e.report(&r, outDir)
	e.sessionNotes(&resp.Session)
	return code
}

// sessionMarkers start what the daemon appends to a call's message about
// the session: session.state_lost and session.end_reason carry the same.
var sessionMarkers = []string{"The interpreter was lost (", "The session has ended ("}

// callMessage is a call's message about the call alone; sessionNotes says
// what became of the session, in jailctl's words.
func callMessage(resp *api.SessionExecuteResponse) string {
	m := resp.Message
	if resp.Session.StateLost || resp.Session.State == api.SessionEnded {
		for _, marker := range sessionMarkers {
			if i := strings.Index(m, marker); i >= 0 {
				m = m[:i]
			}
		}
	}
	return strings.TrimSpace(m)
}

// sessionNotes says on stderr when a call cost the session its
// interpreter, or the session ended.
func (e *env) sessionNotes(st *api.SessionStatus) {
	switch {
	case st.State == api.SessionEnded:
		fmt.Fprintf(e.stderr, "jailctl: the session has ended (%s)\n", endReasonText(st.EndReason))
	case st.StateLost:
		fmt.Fprintf(e.stderr, "jailctl: the session's interpreter was restarted (%s): variables and imports are gone; files are kept\n", lostReasonText(st.LostReason))
	}
}

// lostReasonText says why a session lost its interpreter.
func lostReasonText(reason *string) string {
	if reason == nil {
		return "it ended"
	}
	switch *reason {
	case "timeout":
		return "the call timed out and did not stop at the interrupt"
	case "memory_limit":
		return "the memory limit"
	case "cpu_limit":
		return "the CPU time limit"
	case "output_limit":
		return "the output limit"
	case "cancelled":
		return "the call was abandoned and did not stop"
	case "crashed":
		return "it crashed"
	case "exited":
		return "it exited"
	}
	return *reason
}

// endReasonText names why a session ended: the daemon's reason, and what
// it means.
func endReasonText(reason *string) string {
	if reason == nil {
		return "no reason given"
	}
	text := map[string]string{
		"deleted":           "it was removed",
		"idle_timeout":      "it was idle for its idle timeout",
		"expired":           "it reached its time to live",
		"repeated_losses":   "its interpreter was lost in too many calls in a row",
		"daemon_shutdown":   "the daemon shut down",
		"jail_ended":        "its jail ended",
		"restart_failed":    "a fresh interpreter could not be started",
		"connection_closed": "the connection that owned it closed",
	}[*reason]
	if text == "" {
		return *reason
	}
	return *reason + ": " + text
}

func runSessionList(e *env, sc *subcommand, args []string) int {
	return runList(e, sc, args, "session ls", "/v1/sessions", func(w io.Writer, l api.SessionList, now time.Time) {
		writeSessionTable(w, l.Sessions, now)
	})
}

// runList is an `ls` subcommand: GET path, printed as the daemon's JSON
// with --json, else as table prints it.
func runList[L any](e *env, sc *subcommand, args []string, name, path string, table func(io.Writer, L, time.Time)) int {
	a, rc, ok := e.ask(name, jsonUsage, sc, args, 0, 0)
	if !ok {
		return rc
	}
	var list L
	if rc, ok := e.fetch(a.c, http.MethodGet, path, nil, &list, a.json); !ok || a.json {
		return rc
	}
	table(e.stdout, list, time.Now())
	return exitOK
}

// writeSessionTable writes sessions as a table, oldest first.
func writeSessionTable(w io.Writer, sessions []api.Session, now time.Time) {
	sessions = append([]api.Session(nil), sessions...)
	sort.SliceStable(sessions, func(i, j int) bool { return sessions[i].CreatedAt.Before(sessions[j].CreatedAt) })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tIMAGE\tCALLS\tIDLE TIMEOUT\tEXPIRES\tLAST USED\tEND REASON")
	for _, s := range sessions {
		end := "-"
		if s.EndReason != nil {
			end = *s.EndReason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", quoteName(s.SessionID), quoteName(s.State), orDash(s.Image), s.ExecutionCount,
			shortDuration(time.Duration(s.IdleTimeoutS)*time.Second), expires(&s, now), lastUsed(&s, now), quoteName(end))
	}
	tw.Flush()
}

func expires(s *api.Session, now time.Time) string {
	switch {
	case s.State == api.SessionEnded || s.ExpiresAt.IsZero():
		return "-"
	case !s.ExpiresAt.After(now):
		return "now"
	}
	return "in " + shortDuration(s.ExpiresAt.Sub(now))
}

func lastUsed(s *api.Session, now time.Time) string {
	switch {
	case s.ExecutionCount == 0:
		return "never"
	case s.LastUsedAt.IsZero():
		return "-"
	}
	return ago(s.LastUsedAt, now)
}

func ago(t, now time.Time) string {
	if d := now.Sub(t); d >= time.Second {
		return shortDuration(d) + " ago"
	}
	return "just now"
}

// shortDuration formats d in at most two units: 45s, 1m30s, 10m, 2h5m,
// 3d4h.
func shortDuration(d time.Duration) string {
	s := int64((d + time.Second/2) / time.Second)
	two := func(a int64, ua string, b int64, ub string) string {
		if b == 0 {
			return fmt.Sprintf("%d%s", a, ua)
		}
		return fmt.Sprintf("%d%s%d%s", a, ua, b, ub)
	}
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return two(s/60, "m", s%60, "s")
	case s < 86400:
		return two(s/3600, "h", s%3600/60, "m")
	}
	return two(s/86400, "d", s%86400/3600, "h")
}

func runSessionShow(e *env, sc *subcommand, args []string) int {
	a, rc, ok := e.ask("session show", jsonUsage, sc, args, 1, 1)
	if !ok {
		return rc
	}
	var s api.Session
	if rc, ok := e.fetch(a.c, http.MethodGet, sessionPath(a.pos[0]), nil, &s, a.json); !ok || a.json {
		return rc
	}
	writeSession(e.stdout, &s, time.Now())
	return exitOK
}

// writeSession describes one session, a field a line.
func writeSession(w io.Writer, s *api.Session, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	row("session:", "%s", quoteName(s.SessionID))
	row("state:", "%s", quoteName(s.State))
	if s.EndReason != nil {
		row("end reason:", "%s", quoteName(endReasonText(s.EndReason)))
	}
	if s.PausedAt != nil {
		row("paused:", "%s, %s on disk", s.PausedAt.Local().Format(time.RFC3339), humanSize(s.PausedBytes))
	}
	stamp := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Local().Format(time.DateTime)
	}
	row("created:", "%s (%s)", stamp(s.CreatedAt), ago(s.CreatedAt, now))
	row("expires:", "%s (%s)", stamp(s.ExpiresAt), expires(s, now))
	row("idle timeout:", "%s", shortDuration(time.Duration(s.IdleTimeoutS)*time.Second))
	row("calls:", "%d", s.ExecutionCount)
	row("last used:", "%s", lastUsed(s, now))
	row("limits:", "%s", limitsString(s.Limits))
	row("network:", "%s", quoteName(s.Network))
	row("image:", "%s", orDash(s.Image))
	warm := "no"
	if s.Warm {
		warm = "yes"
	}
	row("warm jail:", "%s", warm)
	row("owner:", "uid %d", s.UID)
	tw.Flush()
}

func runSessionInterrupt(e *env, sc *subcommand, args []string) int {
	a, rc, ok := e.ask("session interrupt", jsonUsage, sc, args, 1, 1)
	if !ok {
		return rc
	}
	var resp api.SessionInterruptResponse
	if rc, ok := e.fetch(a.c, http.MethodPost, sessionPath(a.pos[0])+"/interrupt", struct{}{}, &resp, a.json); !ok {
		return rc
	}
	if !resp.Interrupted {
		if !a.json {
			fmt.Fprintf(e.stderr, "jailctl: no call of session %s was running\n", quoteName(a.pos[0]))
		}
		return exitFail
	}
	return exitOK
}

func runSessionPause(e *env, sc *subcommand, args []string) int {
	return runPauseResume(e, sc, args, "pause", "paused", "took")
}

func runSessionResume(e *env, sc *subcommand, args []string) int {
	return runPauseResume(e, sc, args, "resume", "restored", "restore took")
}

// runPauseResume posts to a session's /pause or /resume and says what
// became of it (the session as JSON with --json).
func runPauseResume(e *env, sc *subcommand, args []string, verb, done, took string) int {
	a, rc, ok := e.ask("session "+verb, jsonUsage, sc, args, 1, 1)
	if !ok {
		return rc
	}
	var resp api.SessionPauseResponse
	if rc, ok := e.fetch(a.c, http.MethodPost, sessionPath(a.pos[0])+"/"+verb, struct{}{}, &resp, a.json); !ok {
		return rc
	}
	if a.json {
		return exitOK
	}
	switch {
	case resp.TookMs == 0 && verb == "pause":
		fmt.Fprintf(e.stdout, "session %s was paused already (%s on disk)\n", resp.Session.SessionID, humanSize(resp.Session.PausedBytes))
	case resp.TookMs == 0:
		fmt.Fprintf(e.stdout, "session %s was not paused\n", resp.Session.SessionID)
	case verb == "pause":
		fmt.Fprintf(e.stdout, "session %s %s (%s on disk; %s %.0f ms)\n", resp.Session.SessionID, done, humanSize(resp.Session.PausedBytes), took, resp.TookMs)
	default:
		fmt.Fprintf(e.stdout, "session %s %s (%s %.0f ms)\n", resp.Session.SessionID, done, took, resp.TookMs)
	}
	return exitOK
}

func runSessionFork(e *env, sc *subcommand, args []string) int {
	fs := e.flagSet("session fork")
	var jsonOut bool
	fs.BoolVar(&jsonOut, "json", false, jsonUsage)
	n := fs.Int("n", 1, "how many children (1 to 16)")
	daemon := targetFlags(fs)
	pos, rc, ok := e.parseSub(fs, sc, args, 1, 1)
	if !ok {
		return rc
	}
	if *n < 1 || *n > api.MaxForks {
		return e.usageError("session fork: -n must be in 1..%d, got %d", api.MaxForks, *n)
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	var resp api.SessionForkResponse
	if rc, ok := e.fetch(c, http.MethodPost, sessionPath(pos[0])+"/fork", api.SessionForkRequest{Count: *n}, &resp, jsonOut); !ok {
		return rc
	}
	if !jsonOut {
		for _, s := range resp.Sessions {
			fmt.Fprintln(e.stdout, s.SessionID)
		}
	}
	return exitOK
}

func runSessionSnapshot(e *env, sc *subcommand, args []string) int {
	a, rc, ok := e.ask("session snapshot", jsonUsage, sc, args, 1, 1)
	if !ok {
		return rc
	}
	var sn api.Snapshot
	if rc, ok := e.fetch(a.c, http.MethodPost, sessionPath(a.pos[0])+"/snapshots", struct{}{}, &sn, a.json); !ok {
		return rc
	}
	if !a.json {
		fmt.Fprintln(e.stdout, sn.SnapshotID)
	}
	return exitOK
}

func runSessionSnapshots(e *env, sc *subcommand, args []string) int {
	a, rc, ok := e.ask("session snapshots", jsonUsage, sc, args, 0, 1)
	if !ok {
		return rc
	}
	path := "/v1/snapshots"
	if len(a.pos) == 1 {
		path = sessionPath(a.pos[0]) + "/snapshots"
	}
	var list api.SnapshotList
	if rc, ok := e.fetch(a.c, http.MethodGet, path, nil, &list, a.json); !ok || a.json {
		return rc
	}
	now := time.Now()
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSESSION\tIMAGE\tSIZE\tTAKEN\tEXPIRES")
	for _, sn := range list.Snapshots {
		exp := "-"
		if sn.ExpiresAt != nil {
			exp = "in " + shortDuration(sn.ExpiresAt.Sub(now).Round(time.Minute))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s ago\t%s\n", quoteName(sn.SnapshotID), quoteName(sn.SessionID), orDash(sn.Image), humanSize(sn.Bytes),
			shortDuration(now.Sub(sn.CreatedAt).Round(time.Second)), exp)
	}
	tw.Flush()
	return exitOK
}

func runSessionRestore(e *env, sc *subcommand, args []string) int {
	a, rc, ok := e.ask("session restore", jsonUsage, sc, args, 2, 2)
	if !ok {
		return rc
	}
	var resp api.SessionPauseResponse
	if rc, ok := e.fetch(a.c, http.MethodPost, sessionPath(a.pos[0])+"/restore", api.SessionRestoreRequest{SnapshotID: a.pos[1]}, &resp, a.json); !ok {
		return rc
	}
	if !a.json {
		fmt.Fprintf(e.stdout, "session %s rolled back to %s (restore took %.0f ms)\n", resp.Session.SessionID, a.pos[1], resp.TookMs)
	}
	return exitOK
}

func runSnapshotRemove(e *env, sc *subcommand, args []string) int {
	return runRemove(e, sc, args, "session snapshot-rm", func(c *client.Client, id string) error {
		_, err := c.Do(e.ctx, http.MethodDelete, "/v1/snapshots/"+url.PathEscape(id), nil)
		return err
	})
}

func runSessionRemove(e *env, sc *subcommand, args []string) int {
	return runRemove(e, sc, args, "session rm", func(c *client.Client, id string) error {
		_, err := c.DeleteSession(e.ctx, id)
		return err
	})
}

// runRemove is an `rm` subcommand: del for each id given, each failure
// reported (naming its id) and the last one's exit code returned; an
// interrupt stops at once.
func runRemove(e *env, sc *subcommand, args []string, name string, del func(*client.Client, string) error) int {
	fs := e.flagSet(name)
	daemon := targetFlags(fs)
	pos, rc, ok := e.parseSub(fs, sc, args, 1, -1)
	if !ok {
		return rc
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	code := exitOK
	for _, id := range pos {
		if err := del(c, id); err != nil {
			if e.ctx.Err() != nil {
				return e.daemonError(err)
			}
			if msg := err.Error(); !strings.Contains(msg, id) {
				err = fmt.Errorf("%s: %w", quoteName(id), err)
			}
			code = e.daemonError(err)
		}
	}
	return code
}
