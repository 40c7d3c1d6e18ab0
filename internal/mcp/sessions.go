package mcp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
)

// Session tool names.
const (
	OpenSessionTool  = "open_session"
	CloseSessionTool = "close_session"
	ListSessionsTool = "list_sessions"
	PauseSessionTool = "pause_session"
	ForkSessionTool  = "fork_session"
)

// EndTimeout bounds the deletes that end the sessions of a connection that
// closed, all of them together.
const EndTimeout = 10 * time.Second

// endTimeout is EndTimeout; tests shorten it.
var endTimeout = EndTimeout

// ErrSessionsLeft is wrapped by the error of ServeStdio and ServeHTTP when
// sessions opened through them could not all be ended. The daemon ends
// them at their idle timeout.
var ErrSessionsLeft = errors.New("sessions left open")

// OpenSessionInput is the arguments of open_session.
type OpenSessionInput struct {
	MemoryMB           int64       `json:"memory_mb,omitempty" jsonschema:"memory limit of the whole session in MB, for all its calls together"`
	TimeoutSeconds     float64     `json:"timeout_seconds,omitempty" jsonschema:"default wall-clock limit of each call in seconds; a call's own timeout_seconds overrides it"`
	IdleTimeoutSeconds int64       `json:"idle_timeout_seconds,omitempty" jsonschema:"the session ends after this many seconds without a call, counted from the end of the last call (default: the daemon's)"`
	TTLSeconds         int64       `json:"ttl_seconds,omitempty" jsonschema:"the session ends this many seconds after it opened, however busy (default: the daemon's)"`
	Files              []FileInput `json:"files,omitempty" jsonschema:"files written into /workspace when the session opens"`
	Image              string      `json:"image,omitempty" jsonschema:"the image the session runs in, all its calls"`
	FromSnapshot       string      `json:"from_snapshot,omitempty" jsonschema:"start the session from a snapshot taken with snapshot_session: its state, image and limits are the snapshot's (only idle_timeout_seconds and ttl_seconds may be given with it)"`
}

// SessionInfo describes a session to the model.
type SessionInfo struct {
	SessionID          string  `json:"session_id" jsonschema:"pass it to run_python as session_id"`
	State              string  `json:"state" jsonschema:"idle (ready for a call), running (a call is in progress), paused (on disk after its idle timeout: the next call restores it, as it was) or ended"`
	EndReason          string  `json:"end_reason,omitempty" jsonschema:"why an ended session ended"`
	ExpiresAt          string  `json:"expires_at" jsonschema:"when the session ends at the latest, RFC 3339 (its time to live)"`
	IdleTimeoutSeconds int64   `json:"idle_timeout_seconds" jsonschema:"the session ends after this many seconds without a call, counted from the end of the last call"`
	LastUsedAt         string  `json:"last_used_at,omitempty" jsonschema:"when the last call ended (or the session opened), RFC 3339"`
	ExecutionCount     int     `json:"execution_count" jsonschema:"calls run in the session so far"`
	MemoryMB           int64   `json:"memory_mb" jsonschema:"memory limit of the whole session"`
	TimeoutSeconds     float64 `json:"timeout_seconds" jsonschema:"default wall-clock limit of each call"`
	Image              string  `json:"image,omitempty" jsonschema:"the image the session runs in"`
}

// CloseSessionInput is the arguments of close_session.
type CloseSessionInput struct {
	SessionID string `json:"session_id" jsonschema:"the session to end, as open_session returned it"`
}

// PauseSessionInput is the arguments of pause_session.
type PauseSessionInput struct {
	SessionID string `json:"session_id" jsonschema:"the session to pause, as open_session returned it"`
}

// ForkSessionInput is the arguments of fork_session.
type ForkSessionInput struct {
	SessionID string `json:"session_id" jsonschema:"the session to copy, as open_session returned it"`
	Count     int    `json:"count,omitempty" jsonschema:"how many copies (default 1)"`
}

// ForkSessionOutput is fork_session's structured result.
type ForkSessionOutput struct {
	Sessions []SessionInfo `json:"sessions" jsonschema:"the copies: new sessions, each with its own session_id"`
}

// ListSessionsInput is the (absent) arguments of list_sessions.
type ListSessionsInput struct{}

// ListSessionsOutput is list_sessions' structured result.
type ListSessionsOutput struct {
	Sessions []SessionInfo `json:"sessions" jsonschema:"your sessions, live ones and those that ended recently"`
}

// CallSession is what became of the session during a run_python call with
// a session_id.
type CallSession struct {
	SessionID      string `json:"session_id"`
	ExecutionCount int    `json:"execution_count" jsonschema:"the call's number in the session, from 1"`
	State          string `json:"state" jsonschema:"idle (ready for the next call) or ended"`
	EndReason      string `json:"end_reason,omitempty" jsonschema:"why the session ended, when it did during the call"`
	StateLost      bool   `json:"state_lost" jsonschema:"the interpreter was restarted: variables and imports are gone, files in /workspace and /tmp are kept"`
	LostReason     string `json:"lost_reason,omitempty" jsonschema:"why the state was lost: timeout, memory_limit, cpu_limit, output_limit, cancelled, crashed or exited"`
}

func (s *Server) sessionDescriptions() (open, closeD, list string) {
	d, m, ses := s.info.Defaults, s.maxima(), s.info.Sessions
	var b strings.Builder
	fmt.Fprintf(&b, "Open a session: a sandbox whose Python interpreter lives across run_python calls, like a notebook. Pass the session_id it returns to run_python; close it with %s when you are done.\n\n", CloseSessionTool)
	fmt.Fprintf(&b, "- What persists from call to call: variables, functions, imports, and the files in /workspace (the working directory) and /tmp. The value of a last line that is an expression is printed, as in a REPL.\n")
	fmt.Fprintf(&b, "- For how long: the session ends %s after the end of its last call (idle_timeout_seconds, at most %s), and %s after it opened at the latest (ttl_seconds, at most %s; the result's expires_at), whichever comes first. It also ends when this MCP connection closes. An ended session is gone with all its variables and files: print what you need, or send files back with return_files.\n",
		span(ses.IdleTimeoutS), span(ses.MaxIdleTimeoutS), span(ses.TTLS), span(ses.MaxTTLS))
	fmt.Fprintf(&b, "- One call runs at a time in a session; another call meanwhile is refused.\n")
	fmt.Fprintf(&b, "- Each call has its own wall-clock limit (run_python's timeout_seconds, else the session's timeout_seconds: %s by default, at most %s) and output limit. A call past its limit is interrupted with KeyboardInterrupt; if the code stops within %s the state is kept. Otherwise, or when the memory limit is hit, the interpreter is restarted: variables and imports are lost but files are kept, and the result says state_lost. A session whose interpreter is lost three times in a row ends.\n",
		seconds(d.TimeoutMs), seconds(m.TimeoutMs), seconds(ses.InterruptGraceMs))
	fmt.Fprintf(&b, "- memory_mb holds for the whole session, all its calls together: %d MB by default, at most %d MB. There is no network access.\n", d.MemoryMB, m.MemoryMB)
	if s.multiImage() {
		fmt.Fprintf(&b, "- image picks the image the session runs in, for all its calls: %s (default: %s). %s's description says what Python and packages each has, and its default limits where they differ.\n",
			strings.Join(s.imageNames(false), ", "), s.defaultImage(), RunTool)
	}
	fmt.Fprintf(&b, "- You may have at most %d sessions open at once: close the ones you no longer need. For a one-off computation, call run_python without a session.", ses.MaxPerUID)
	whose := "the sessions opened through this connection"
	if s.allSessions {
		whose = "your sessions, however they were opened"
	}
	return b.String(),
		"End a session at once (its variables and files are gone) and free its resources; a call in progress in it is killed. Ending one that has already ended is not an error.",
		"List " + whose + ", live ones and those that ended recently, with their state, when each ends and how many calls each ran. Use it to find a session_id again."
}

// approx renders a time to come for a model: to the second below ten
// minutes, else to the minute.
func approx(d time.Duration) string {
	if d < 10*time.Minute {
		return span(int64(max(d.Round(time.Second), 0) / time.Second))
	}
	return span(int64(d.Round(time.Minute) / time.Second))
}

// span renders a duration in seconds for a model: "10 min", "1 h", "90 s".
func span(sec int64) string {
	switch {
	case sec >= 3600 && sec%3600 == 0:
		return fmt.Sprintf("%d h", sec/3600)
	case sec >= 60 && sec%60 == 0:
		return fmt.Sprintf("%d min", sec/60)
	}
	return fmt.Sprintf("%d s", sec)
}

func (s *Server) addSessionTools() error {
	openD, closeD, listD := s.sessionDescriptions()
	err := addTool(s, &sdk.Tool{
		Name:        OpenSessionTool,
		Title:       "Open a Python session",
		Description: openD,
		Annotations: hints(false, false, false),
	}, s.openSession, s.fitOpenSession)
	if err != nil {
		return err
	}
	err = addTool(s, &sdk.Tool{
		Name:        CloseSessionTool,
		Title:       "Close a Python session",
		Description: closeD,
		Annotations: hints(false, true, true),
	}, s.closeSession, func(in *jsonschema.Schema) { nonEmpty(in, "session_id") })
	if err != nil {
		return err
	}
	err = addTool(s, &sdk.Tool{
		Name:        ListSessionsTool,
		Title:       "List Python sessions",
		Description: listD,
		Annotations: hints(true, false, true),
	}, s.listSessions, nil)
	if err != nil {
		return err
	}
	err = addTool(s, &sdk.Tool{
		Name:  PauseSessionTool,
		Title: "Pause a Python session to disk",
		Description: "Pause a session you will not use for a while: its whole state (variables, imports, open files, /workspace and /tmp) is written to the daemon's disk and its sandbox's memory is freed. " +
			"The next run_python call with its session_id restores it as it was, transparently (a little slower than usual). Idle sessions are paused this way on their own where the host can.",
		Annotations: hints(false, false, true),
	}, s.pauseSession, func(in *jsonschema.Schema) { nonEmpty(in, "session_id") })
	if err != nil {
		return err
	}
	err = addTool(s, &sdk.Tool{
		Name:  ForkSessionTool,
		Title: "Copy a Python session",
		Description: fmt.Sprintf("Copy a session into new ones (count, 1 to %d), to try alternatives side by side: each copy starts with the session's variables, imports and files, in a sandbox of its own; what one does is not seen by the others nor by the original, which goes on as it was. "+
			"Random generators (random, numpy.random) are reseeded in each copy. Each copy counts as an open session (close them with %s).", api.MaxForks, CloseSessionTool),
		Annotations: hints(false, false, false),
	}, s.forkSession, func(in *jsonschema.Schema) {
		nonEmpty(in, "session_id")
		in.Properties["count"].Minimum = jsonschema.Ptr(1.0)
		in.Properties["count"].Maximum = jsonschema.Ptr(float64(api.MaxForks))
	})
	if err != nil {
		return err
	}
	if err := s.addSnapshotTools(); err != nil {
		return err
	}
	return s.addCommandTools()
}

// fitOpenSession bounds open_session's arguments by what this caller may
// ask for.
func (s *Server) fitOpenSession(in *jsonschema.Schema) {
	m := s.maxima()
	timeout := in.Properties["timeout_seconds"]
	timeout.ExclusiveMinimum = jsonschema.Ptr(0.0)
	timeout.Maximum = jsonschema.Ptr(float64(m.TimeoutMs) / 1000)
	memory := in.Properties["memory_mb"]
	memory.Minimum = jsonschema.Ptr(1.0)
	if m.MemoryMB > 0 {
		memory.Maximum = jsonschema.Ptr(float64(m.MemoryMB))
	}
	ses := s.info.Sessions
	for name, max := range map[string]int64{"idle_timeout_seconds": ses.MaxIdleTimeoutS, "ttl_seconds": ses.MaxTTLS} {
		p := in.Properties[name]
		p.Minimum = jsonschema.Ptr(1.0)
		if max > 0 {
			p.Maximum = jsonschema.Ptr(float64(max))
		}
	}
	s.filesSchema(in.Properties["files"].Items)
	s.imageArgument(in, s.imageNames(false), "the image the session runs in, all its calls")
}

func (s *Server) pauseSession(ctx context.Context, req *sdk.CallToolRequest, in PauseSessionInput) (*sdk.CallToolResult, *SessionInfo, error) {
	if err := s.reachable(req.Session, in.SessionID); err != nil {
		return nil, nil, err
	}
	resp, err := s.client.PauseSession(ctx, in.SessionID)
	if err != nil {
		return nil, nil, fmt.Errorf("jaild did not pause the session: %w", err)
	}
	out := sessionInfo(&resp.Session)
	return textResult(fmt.Sprintf("Session %s is paused: its state is on disk and its memory is free. The next run_python call with its session_id restores it as it was.", out.SessionID)), out, nil
}

func (s *Server) forkSession(ctx context.Context, req *sdk.CallToolRequest, in ForkSessionInput) (*sdk.CallToolResult, *ForkSessionOutput, error) {
	if err := s.reachable(req.Session, in.SessionID); err != nil {
		return nil, nil, err
	}
	n := in.Count
	if n == 0 {
		n = 1
	}
	resp, err := s.client.ForkSession(ctx, in.SessionID, n)
	if err != nil {
		return nil, nil, fmt.Errorf("jaild did not copy the session: %w", err)
	}
	out := &ForkSessionOutput{Sessions: []SessionInfo{}}
	var ids []string
	for i := range resp.Sessions {
		k := sessionInfo(&resp.Sessions[i])
		if !s.owned.add(req.Session, k.SessionID) {
			var all []string
			for _, c := range resp.Sessions {
				all = append(all, c.SessionID)
			}
			err := s.endSessions(context.WithoutCancel(ctx), all)
			return nil, nil, errors.Join(errors.New("the MCP server is shutting down; the copies were closed"), err)
		}
		out.Sessions = append(out.Sessions, *k)
		ids = append(ids, k.SessionID)
	}
	return textResult(fmt.Sprintf("Copies of session %s: %s. Pass one to run_python as session_id; each has the session's variables and files and goes its own way.", in.SessionID, strings.Join(ids, ", "))), out, nil
}

// createRequest maps open_session's arguments to the daemon's request.
func createRequest(in OpenSessionInput) (*api.SessionCreateRequest, error) {
	req := &api.SessionCreateRequest{Files: filesIn(in.Files), Image: in.Image, FromSnapshot: in.FromSnapshot}
	var limits api.Limits
	if in.TimeoutSeconds != 0 {
		ms, err := timeoutMs(in.TimeoutSeconds)
		if err != nil {
			return nil, err
		}
		limits.TimeoutMs = &ms
	}
	if in.MemoryMB != 0 {
		limits.MemoryMB = &in.MemoryMB
	}
	if limits != (api.Limits{}) {
		req.Limits = &limits
	}
	if in.IdleTimeoutSeconds != 0 {
		req.IdleTimeoutS = &in.IdleTimeoutSeconds
	}
	if in.TTLSeconds != 0 {
		req.TTLS = &in.TTLSeconds
	}
	return req, nil
}

// timeoutMs converts a timeout in seconds to the daemon's milliseconds.
func timeoutMs(sec float64) (int64, error) {
	// The bound keeps the conversion exact; the daemon's maximum is far
	// lower and it names it.
	if !(sec > 0) || sec > math.MaxInt32 {
		return 0, fmt.Errorf("timeout_seconds: want a positive number of seconds, not %g", sec)
	}
	return int64(math.Ceil(sec * 1000)), nil
}

func (s *Server) openSession(ctx context.Context, req *sdk.CallToolRequest, in OpenSessionInput) (*sdk.CallToolResult, *SessionInfo, error) {
	if err := s.fromSnapshot(req, in); err != nil {
		return nil, nil, err
	}
	creq, err := createRequest(in)
	if err != nil {
		return nil, nil, err
	}
	sess, err := s.client.CreateSession(ctx, creq)
	if err != nil {
		return nil, nil, fmt.Errorf("jaild did not open a session: %w", err)
	}
	if !s.owned.add(req.Session, sess.SessionID) {
		// The server is shutting down: nothing would end this session.
		err := s.endSessions(context.WithoutCancel(ctx), []string{sess.SessionID})
		return nil, nil, errors.Join(errors.New("the MCP server is shutting down; the session was closed"), err)
	}
	out := sessionInfo(sess)
	var b strings.Builder
	fmt.Fprintf(&b, "session_id: %s\n", out.SessionID)
	fmt.Fprintf(&b, "Pass it to run_python as session_id: variables, imports and the files in /workspace and /tmp persist from one call to the next. One call runs at a time.\n")
	fmt.Fprintf(&b, "The session ends after %s without a call (counted from the end of the last call), at %s at the latest (in %s), or when this MCP connection closes; close it with %s when done.\n",
		span(out.IdleTimeoutSeconds), out.ExpiresAt, approx(time.Until(sess.ExpiresAt)), CloseSessionTool)
	fmt.Fprintf(&b, "Limits: %s of wall-clock time per call by default, %d MB of memory for the whole session.", seconds(sess.Limits.TimeoutMs), sess.Limits.MemoryMB)
	if s.multiImage() && sess.Image != "" {
		fmt.Fprintf(&b, "\nIt runs in the image %s.", sess.Image)
	}
	return textResult(b.String()), out, nil
}

func (s *Server) closeSession(ctx context.Context, req *sdk.CallToolRequest, in CloseSessionInput) (*sdk.CallToolResult, *SessionInfo, error) {
	if err := s.reachable(req.Session, in.SessionID); err != nil {
		return nil, nil, err
	}
	// Deleting an ended session answers it, with its end_reason.
	sess, err := s.client.DeleteSession(ctx, in.SessionID)
	if err != nil {
		return nil, nil, fmt.Errorf("jaild did not close the session: %w", err)
	}
	s.owned.remove(in.SessionID)
	out := sessionInfo(sess)
	text := fmt.Sprintf("Session %s is closed after %d calls; its variables and files are gone.", out.SessionID, out.ExecutionCount)
	if out.EndReason != "" && out.EndReason != "deleted" {
		text = fmt.Sprintf("Session %s had already ended: %s.", out.SessionID, endReasonText(out.EndReason))
	}
	return textResult(text), out, nil
}

func (s *Server) listSessions(ctx context.Context, req *sdk.CallToolRequest, _ ListSessionsInput) (*sdk.CallToolResult, *ListSessionsOutput, error) {
	list, err := s.client.Sessions(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("jaild did not list the sessions: %w", err)
	}
	out := &ListSessionsOutput{Sessions: []SessionInfo{}}
	var b strings.Builder
	for i := range list.Sessions {
		sess := &list.Sessions[i]
		// An admin's list holds everyone's.
		if sess.UID != s.info.Caller.UID || (!s.allSessions && !s.owned.owns(req.Session, sess.SessionID)) {
			continue
		}
		info := sessionInfo(sess)
		out.Sessions = append(out.Sessions, *info)
		if info.State == api.SessionEnded {
			fmt.Fprintf(&b, "%s: ended after %d calls: %s\n", info.SessionID, info.ExecutionCount, endReasonText(info.EndReason))
			continue
		}
		in := ""
		if s.multiImage() && info.Image != "" {
			in = " in the image " + info.Image
		}
		fmt.Fprintf(&b, "%s: %s%s, %d calls, ends after %s without a call and at %s at the latest\n",
			info.SessionID, info.State, in, info.ExecutionCount, span(info.IdleTimeoutSeconds), info.ExpiresAt)
	}
	if len(out.Sessions) == 0 {
		b.WriteString("No sessions.")
	}
	return textResult(strings.TrimSuffix(b.String(), "\n")), out, nil
}

func textResult(text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}

func sessionInfo(sess *api.Session) *SessionInfo {
	out := &SessionInfo{
		SessionID:          sess.SessionID,
		State:              sess.State,
		ExpiresAt:          sess.ExpiresAt.UTC().Format(time.RFC3339),
		IdleTimeoutSeconds: sess.IdleTimeoutS,
		ExecutionCount:     sess.ExecutionCount,
		MemoryMB:           sess.Limits.MemoryMB,
		TimeoutSeconds:     float64(sess.Limits.TimeoutMs) / 1000,
		Image:              sess.Image,
	}
	if sess.EndReason != nil {
		out.EndReason = *sess.EndReason
	}
	if !sess.LastUsedAt.IsZero() {
		out.LastUsedAt = sess.LastUsedAt.UTC().Format(time.RFC3339)
	}
	return out
}

// endReasonText says why a session ended, for the model.
func endReasonText(reason string) string {
	why := map[string]string{
		"deleted":           "it was closed",
		"idle_timeout":      "no call came within its idle timeout",
		"expired":           "it reached its time to live",
		"repeated_losses":   "its interpreter was lost several times in a row",
		"daemon_shutdown":   "the jaild daemon shut down",
		"daemon_restart":    "the jaild daemon restarted",
		"jail_ended":        "its sandbox ended",
		"restart_failed":    "a fresh interpreter could not be started",
		"connection_closed": "the connection that opened it closed",
	}[reason]
	if why == "" {
		return reason
	}
	return why + " (" + reason + ")"
}

// reachable refuses a session that the connection ss may not reach: one
// it did not open, unless the server serves all the caller's sessions.
// The refusal is the same whether the session exists or not, and nothing
// is asked of the daemon.
func (s *Server) reachable(ss *sdk.ServerSession, id string) error {
	if s.allSessions || s.owned.owns(ss, id) {
		return nil
	}
	return fmt.Errorf("there is no session %s in this MCP connection: only the sessions opened here with %s can be used (or the session ended a while ago). Open one with %s, or call run_python without session_id", id, OpenSessionTool, OpenSessionTool)
}

// runInSession runs run_python's code in a session.
func (s *Server) runInSession(ctx context.Context, creq *sdk.CallToolRequest, in RunInput) (*sdk.CallToolResult, *RunOutput, error) {
	if err := s.reachable(creq.Session, in.SessionID); err != nil {
		return nil, nil, err
	}
	req, err := sessionExecuteRequest(in)
	if err != nil {
		return nil, nil, err
	}
	var resp *api.SessionExecuteResponse
	if p := startProgress(ctx, creq); p != nil {
		resp, err = s.client.SessionExecuteStream(ctx, in.SessionID, req, p.event)
		p.finish()
	} else {
		resp, err = s.client.SessionExecute(ctx, in.SessionID, req)
	}
	if err != nil {
		return nil, nil, s.sessionCallError(ctx, in.SessionID, err)
	}
	cs := &CallSession{
		SessionID:      resp.Session.SessionID,
		ExecutionCount: resp.ExecutionCount,
		State:          resp.Session.State,
		StateLost:      resp.Session.StateLost,
	}
	if cs.SessionID == "" {
		cs.SessionID = in.SessionID
	}
	if resp.Session.EndReason != nil {
		cs.EndReason = *resp.Session.EndReason
	}
	if resp.Session.LostReason != nil {
		cs.LostReason = *resp.Session.LostReason
	}
	if cs.State == api.SessionEnded {
		s.owned.remove(cs.SessionID)
	}
	// run_id is the session's jail, the same for every call: a returned
	// file's URI names the call.
	resp.RunID = fmt.Sprintf("%s.%d", cs.SessionID, cs.ExecutionCount)
	return runResult(&resp.ExecuteResponse, cs)
}

// sessionExecuteRequest maps run_python's arguments to the daemon's
// request for a session call. Every run_python argument applies to a call;
// the session's own limits are open_session's.
func sessionExecuteRequest(in RunInput) (*api.SessionExecuteRequest, error) {
	r, err := executeRequest(in)
	if err != nil {
		return nil, err
	}
	return &api.SessionExecuteRequest{Code: r.Code, Stdin: r.Stdin, Files: r.Files, ReturnFiles: r.ReturnFiles, ReturnFilesAs: r.ReturnFilesAs, Limits: r.Limits}, nil
}

// sessionCallError explains a refused session call: a session that ended
// or does not exist, or a call already in progress.
func (s *Server) sessionCallError(ctx context.Context, id string, err error) error {
	err = fmt.Errorf("jaild did not run the code: %w", err)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return fmt.Errorf("%w\nThere is no session %s (or it ended a while ago). Open one with %s, or call run_python without session_id.", err, id, OpenSessionTool)
	case !errors.Is(err, errdefs.ErrConflict):
		return err
	}
	sess, gerr := s.client.Session(ctx, id)
	switch {
	case gerr != nil:
		return err
	case sess.State == api.SessionEnded:
		s.owned.remove(id)
		reason := "unknown"
		if sess.EndReason != nil {
			reason = *sess.EndReason
		}
		return fmt.Errorf("%w\nSession %s has ended: %s. It takes no more calls; its variables and files are gone. Open a new one with %s.", err, id, endReasonText(reason), OpenSessionTool)
	case sess.State == api.SessionRunning:
		return fmt.Errorf("%w\nAnother call is running in session %s: one call runs at a time. Wait for it to finish, then call again.", err, id)
	}
	return err
}

// owned records which sessions each MCP connection opened, so that they
// end with it: when a connection's ServerSession closes (stdin's end, an
// HTTP DELETE, the server's shutdown), its sessions are deleted. It also
// says which sessions a connection may reach: those it opened, ended ones
// included (the daemon still answers for them a while), until it closes.
type owned struct {
	end func(ctx context.Context, ids []string) error

	mu sync.Mutex
	// conns holds each connection's sessions: true while the session is
	// to be ended with the connection, false once it ended otherwise.
	conns   map[*sdk.ServerSession]map[string]bool
	closing bool           // endAll ran: no session may be added
	ending  sync.WaitGroup // deletes in progress
	failed  []error        // of the deletes of connections that closed
}

// add records that ss opened session id, and false if the server is
// shutting down (the caller must end the session itself). The first
// session of a connection starts a watcher that ends the connection's
// sessions when it closes.
func (o *owned) add(ss *sdk.ServerSession, id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closing {
		return false
	}
	ids, ok := o.conns[ss]
	if !ok {
		ids = map[string]bool{}
		o.conns[ss] = ids
		// A connection that closed already returns at once from Wait.
		go o.watch(ss)
	}
	ids[id] = true
	return true
}

// remove notes that a session ended otherwise: nothing is left to end.
func (o *owned) remove(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, ids := range o.conns {
		if _, ok := ids[id]; ok {
			ids[id] = false
		}
	}
}

// owns reports whether ss opened session id.
func (o *owned) owns(ss *sdk.ServerSession, id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.conns[ss][id]
	return ok
}

// live are the sessions of ids still to be ended.
func live(ids map[string]bool) []string {
	var l []string
	for id, open := range ids {
		if open {
			l = append(l, id)
		}
	}
	return l
}

func (o *owned) watch(ss *sdk.ServerSession) {
	ss.Wait()
	o.mu.Lock()
	ids := live(o.conns[ss])
	delete(o.conns, ss)
	if len(ids) > 0 {
		// Added under mu: endAll, which waits for it, takes mu first or
		// finds nothing to wait for.
		o.ending.Add(1)
	}
	o.mu.Unlock()
	if len(ids) > 0 {
		defer o.ending.Done()
		// endAll reports the error, if the server stops; meanwhile the
		// daemon's idle timeout ends what is left.
		if err := o.end(context.Background(), ids); err != nil {
			o.mu.Lock()
			o.failed = append(o.failed, err)
			o.mu.Unlock()
		}
	}
}

// endAll ends every session still recorded, and waits for the deletes
// of connections that closed just before, all within EndTimeout. Its
// error is theirs and its own. Later sessions are refused (add returns
// false).
func (o *owned) endAll(ctx context.Context) error {
	deadline := time.NewTimer(endTimeout)
	defer deadline.Stop()
	o.mu.Lock()
	o.closing = true
	var ids []string
	for _, set := range o.conns {
		ids = append(ids, live(set)...)
	}
	clear(o.conns)
	o.mu.Unlock()
	err := o.end(ctx, ids)
	done := make(chan struct{})
	go func() { o.ending.Wait(); close(done) }()
	select {
	case <-done:
	case <-deadline.C:
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return errors.Join(append(o.failed, err)...)
}

// endSessions deletes the sessions ids at once, all within EndTimeout of
// ctx (whose cancellation does not stop them). A session that ended
// already, or that the daemon no longer knows, is no error.
func (s *Server) endSessions(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			err := s.endOne(ctx, id)
			if err != nil && !errors.Is(err, errdefs.ErrConflict) && !errors.Is(err, errdefs.ErrNotFound) {
				errs[i] = fmt.Errorf("%s %s: %w", kindOf(id), id, err)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrSessionsLeft, err)
	}
	return nil
}
