package server

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/sessions"
)

// maxSessionStdinBytes bounds a session call's stdin: escaped as JSON in
// the call's job (at most 6 bytes each), with the code, it stays within
// spec.MaxJobBytes.
const maxSessionStdinBytes = 8 << 20

// Session is a live session of the engine: *run.Session, or a fake.
type Session interface {
	sessions.Handle
	Exec(ctx context.Context, c *spec.Call) (*spec.CallResult, error)
	Warm() bool
}

// sessionMeta is what the server keeps of a session beside its handle.
type sessionMeta struct {
	h           Session
	limits      spec.Limits // the jail's, with the calls' default timeout and output bound
	wireLimits  api.LimitValues
	network     string
	image       string
	maxTimeout  int64 // the owner's maxima for a call
	maxOutput   int64
	workspaceSz int64
}

func (s *Server) sessionCaller(r *http.Request) (peer.Caller, sessions.Caller) {
	who := callerOf(r)
	return who, sessions.Caller{UID: who.UID, Admin: who.Admin}
}

func (s *Server) sessionsEnabled() error {
	if !s.cfg.Sessions.Enabled {
		return errdefs.New(errdefs.ErrForbidden, "sessions are disabled on this daemon (sessions.enabled in its configuration)")
	}
	return nil
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	who, _ := s.sessionCaller(r)
	fail := func(err error) error {
		s.audit.refused(who, "session_create", err)
		return err
	}
	if err := s.sessionsEnabled(); err != nil {
		return fail(err)
	}
	mem := s.newLease(who)
	defer mem.release()
	s.budgetBody(r, mem)
	var req api.SessionCreateRequest
	if err := s.decode(w, r, &req); err != nil {
		return fail(err)
	}
	im, err := s.image(req.Image)
	if err != nil {
		return fail(err)
	}
	limits, err := s.limits(req.Limits, who, im.Name)
	if err != nil {
		return fail(err)
	}
	sc := s.cfg.Sessions
	idle, err := seconds("idle_timeout_s", req.IdleTimeoutS, sc.IdleTimeout.Duration, sc.MaxIdleTimeout.Duration)
	if err != nil {
		return fail(err)
	}
	maxTTL := sc.MaxTTL.Duration
	if who.Admin {
		maxTTL = sc.AdminMaxTTL.Duration
	}
	ttl, err := seconds("ttl_s", req.TTLS, sc.TTL.Duration, maxTTL)
	if err != nil {
		return fail(err)
	}
	if err := spec.ValidateEnv(req.Env); err != nil {
		return fail(err)
	}
	files, err := s.decodeFiles(req.Files, limits.WorkspaceBytes, who)
	if err != nil {
		return fail(err)
	}
	defer closeFiles(files)
	netw, err := s.network(&api.ExecuteRequest{Network: req.Network, AllowHosts: req.AllowHosts}, who)
	if err != nil {
		return fail(err)
	}
	if err := memoryFits(limits.MemoryBytes); err != nil {
		return fail(err)
	}
	res, err := s.sessions.Reserve(who.UID)
	if err != nil {
		return fail(err)
	}
	// Creating a jail holds a run slot and counts against the caller's
	// rate and quota, as a run does.
	release, err := s.admit(r.Context(), who)
	s.setQuotaHeader(w, who)
	if err != nil {
		res.Release()
		if r.Context().Err() != nil {
			err = errdefs.New(errdefs.ErrUnavailable, "client went away while queued")
		}
		return fail(err)
	}
	limitsLife := limits
	limitsLife.Timeout = ttl // RLIMIT_CPU's hard limit: one interpreter's CPU over the session's life
	h, err := s.engine.NewSession(spec.SessionSpec{Limits: limitsLife, Network: netw, Files: files, Env: req.Env, Image: im.Name})
	release()
	if err != nil {
		res.Release()
		return fail(fmt.Errorf("create session: %w", err))
	}
	m := s.cfg.Maxima
	if who.Admin {
		m = s.cfg.AdminMaxima
	}
	meta := &sessionMeta{
		h: h, limits: limits, wireLimits: wireOf(limits), network: api.NetworkNone, image: im.Name,
		maxTimeout: m.TimeoutMs, maxOutput: m.OutputBytes, workspaceSz: limits.WorkspaceBytes,
	}
	if netw != nil {
		meta.network = api.NetworkInternet
	}
	info, err := s.sessions.Add(res, h, idle, ttl, meta)
	if err != nil {
		return fail(err)
	}
	if r.Context().Err() != nil {
		// Nobody will learn this session's id: end it now rather than at
		// its idle timeout.
		_, _ = s.sessions.Delete(info.ID, sessions.Caller{UID: who.UID, Admin: who.Admin})
		return fail(errdefs.New(errdefs.ErrUnavailable, "client went away while the session was made; it was ended"))
	}
	s.log.Info("audit", "op", "session_create", "uid", who.UID, "client", who.Client, "pid", who.PID, "admin", who.Admin,
		"session_id", info.ID, "image", im.Name, "warm", h.Warm(), "memory_mb", limits.MemoryBytes>>20, "pids", limits.Pids,
		"idle_timeout_s", int64(idle/time.Second), "ttl_s", int64(ttl/time.Second), "network", meta.network)
	writeJSON(w, http.StatusCreated, sessionWire(info))
	return nil
}

// seconds resolves an optional duration field in seconds.
func seconds(field string, v *int64, def, most time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	maxS := int64(most / time.Second)
	if *v < 1 || *v > maxS {
		return 0, errdefs.Field(field, "must be in 1..%d for this caller, got %d", maxS, *v)
	}
	return time.Duration(*v) * time.Second, nil
}

// memoryFits refuses a session whose memory limit the host's available
// memory could not hold (503): a session holds its memory between calls.
func memoryFits(limit int64) error {
	avail, ok := memAvailable()
	if !ok || avail >= uint64(limit) {
		return nil
	}
	return errdefs.New(errdefs.ErrUnavailable, "the host has %d MiB of memory available, less than the session's memory_mb of %d; try later or ask for less", avail>>20, limit>>20)
}

func memAvailable() (uint64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

func wireOf(l spec.Limits) api.LimitValues {
	return api.LimitValues{
		TimeoutMs: l.Timeout.Milliseconds(), MemoryMB: l.MemoryBytes >> 20, Pids: l.Pids,
		FileSizeMB: l.FileSizeBytes >> 20, OutputBytes: l.OutputBytes,
	}
}

func sessionWire(i sessions.Info) api.Session {
	out := api.Session{
		SessionID: i.ID, CreatedAt: i.Created.UTC(), ExpiresAt: i.Expires.UTC(), IdleTimeoutS: int64(i.IdleTimeout / time.Second),
		State: i.State, ExecutionCount: i.Calls, LastUsedAt: i.LastUsed.UTC(), UID: i.Owner,
	}
	if m, ok := i.Meta.(*sessionMeta); ok {
		out.Limits, out.Network, out.Warm, out.Image = m.wireLimits, m.network, m.h.Warm(), m.image
	}
	if i.EndReason != "" {
		reason := i.EndReason
		out.EndReason = &reason
	}
	return out
}

func (s *Server) sessionExecute(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	who, sw := s.sessionCaller(r)
	id := r.PathValue("id")
	fail := func(err error) error {
		s.audit.refused(who, "session_execute", err)
		return err
	}
	mem := s.newLease(who)
	defer mem.release()
	s.budgetBody(r, mem)
	var req api.SessionExecuteRequest
	if err := s.decode(w, r, &req); err != nil {
		return fail(err)
	}
	if err := sessionCallFields(&req); err != nil {
		return fail(err)
	}
	_, info, done, err := s.sessions.Begin(id, sw)
	if err != nil {
		return fail(err)
	}
	defer done(0) // a call refused or failed before it ran
	meta := info.Meta.(*sessionMeta)
	call, err := s.sessionCall(&req, meta, who)
	if err != nil {
		return fail(err)
	}
	defer closeFiles(call.Files)
	if err := s.reserveRun(r.Context(), mem, call.OutputBytes, len(call.ReturnFiles) > 0 && call.Store == nil); err != nil {
		return fail(err)
	}
	var live *liveStream
	ctx := r.Context()
	format := streamFormat(r.Header.Get("Accept"))
	began := false
	if format != "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		live = newLiveStream(w, format == api.MediaSSE, cancel)
		call.Output = live.output
		call.OnStart = func(id string, warm bool) {
			began = true
			live.begin(w, format, api.EventStartData{RunID: id, Warm: warm})
		}
	}
	release, err := s.admit(ctx, who)
	s.setQuotaHeader(w, who)
	if err != nil {
		if ctx.Err() != nil {
			err = errdefs.New(errdefs.ErrUnavailable, "client went away while queued")
		}
		return fail(err)
	}
	queued := time.Since(start)
	res, err := meta.h.Exec(ctx, call)
	release()
	if err != nil {
		err = fmt.Errorf("session call failed: %w", err)
		if began {
			s.audit.refused(who, "session_execute", err)
			_ = live.end([]finalEvent{s.errorEvent(r, err)})
			return nil
		}
		return fail(err)
	}
	done(res.Count)
	res.Result.Image = meta.image
	l := meta.limits
	l.Timeout, l.OutputBytes = call.Timeout, call.OutputBytes
	bulk := newBulkSet()
	var events []finalEvent
	if live != nil {
		events = finalEvents(&res.Result, bulk)
	}
	resp := &api.SessionExecuteResponse{ExecuteResponse: *response(&res.Result, l, bulk), ExecutionCount: res.Count}
	after, err := s.sessions.Get(id, sw)
	if err != nil { // dropped from the table meanwhile
		after = info
		after.State, after.EndReason = sessions.StateEnded, res.EndReason
	}
	resp.Session = api.SessionStatus{SessionID: id, State: after.State, StateLost: res.StateLost}
	if after.EndReason != "" {
		reason := after.EndReason
		resp.Session.EndReason = &reason
	}
	if res.StateLost {
		reason := res.LostReason
		resp.Session.LostReason = &reason
		resp.Message = sentences(resp.Message, lostMessage(res))
	}
	if res.Ended || after.State == sessions.StateEnded {
		resp.Session.State = sessions.StateEnded
		reason := after.EndReason
		if reason == "" {
			reason = res.EndReason
		}
		resp.Message = sentences(resp.Message, "The session has ended ("+reason+").")
	}
	s.audit.ranSession(who, id, res.Count, req.Code, l, res, queued, time.Since(start))
	if live != nil {
		if !began {
			call.OnStart(res.ID, res.Warm)
		}
		if err := live.end(append(events, finalEvent{api.EventDone, resp, bulk})); err != nil {
			s.log.Info("streamed session call: client stopped reading", "session_id", id, "err", err)
		}
		return nil
	}
	writeBulk(w, http.StatusOK, resp, bulk)
	return nil
}

func lostMessage(res *spec.CallResult) string {
	if res.Ended {
		return "The interpreter was lost (" + res.LostReason + ")."
	}
	return "The interpreter was lost (" + res.LostReason + ") and a fresh one started: variables and imports are gone; the workspace and /tmp are kept."
}

// sentences joins a message and a sentence.
func sentences(msg, more string) string {
	msg = strings.TrimSpace(msg)
	switch {
	case msg == "":
		return more
	case strings.HasSuffix(msg, "."):
		return msg + " " + more
	}
	return msg + ". " + more
}

// sessionCallFields refuses the fields that are the session's.
func sessionCallFields(req *api.SessionExecuteRequest) error {
	const why = "is the session's, set when it was created; a call cannot change it"
	switch {
	case len(req.Env) > 0:
		return errdefs.Field("env", why)
	case req.Network != "":
		return errdefs.Field("network", why)
	case len(req.AllowHosts) > 0:
		return errdefs.Field("allow_hosts", why)
	}
	if l := req.Limits; l != nil {
		switch {
		case l.MemoryMB != nil:
			return errdefs.Field("limits.memory_mb", why)
		case l.Pids != nil:
			return errdefs.Field("limits.pids", why)
		case l.FileSizeMB != nil:
			return errdefs.Field("limits.file_size_mb", why)
		}
	}
	return nil
}

// sessionCall validates a call into the engine's form: the session's
// defaults for what it leaves out, the owner's maxima as the bounds.
func (s *Server) sessionCall(req *api.SessionExecuteRequest, m *sessionMeta, who peer.Caller) (*spec.Call, error) {
	if err := checkRunCode(req.Code); err != nil {
		return nil, err
	}
	c := &spec.Call{Code: req.Code, Timeout: m.limits.Timeout, OutputBytes: m.limits.OutputBytes, LastLineInteractive: true}
	if req.LastLineInteractive != nil {
		c.LastLineInteractive = *req.LastLineInteractive
	}
	if l := req.Limits; l != nil {
		if v := l.TimeoutMs; v != nil {
			if *v < 1 || *v > m.maxTimeout {
				return nil, errdefs.Field("limits.timeout_ms", "must be in 1..%d for this caller, got %d", m.maxTimeout, *v)
			}
			c.Timeout = time.Duration(*v) * time.Millisecond
		}
		if v := l.OutputBytes; v != nil {
			if *v < 1 || *v > m.maxOutput {
				return nil, errdefs.Field("limits.output_bytes", "must be in 1..%d for this caller, got %d", m.maxOutput, *v)
			}
			c.OutputBytes = *v
		}
	}
	if req.Stdin != nil {
		// A call's stdin travels in its job, escaped: a smaller bound than
		// a run's.
		if len(*req.Stdin) > maxSessionStdinBytes {
			return nil, errdefs.Field("stdin", "is %d bytes; the maximum in a session call is %d", len(*req.Stdin), maxSessionStdinBytes)
		}
		c.Stdin = []byte(*req.Stdin)
	}
	if err := checkPatterns(req.ReturnFiles); err != nil {
		return nil, err
	}
	c.ReturnFiles = req.ReturnFiles
	var err error
	if c.Store, err = s.returnSink(req.ReturnFilesAs, who); err != nil {
		return nil, err
	}
	if c.Files, err = s.decodeFiles(req.Files, m.workspaceSz, who); err != nil {
		return nil, err
	}
	return c, nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) error {
	_, sw := s.sessionCaller(r)
	out := api.SessionList{Sessions: []api.Session{}}
	for _, i := range s.sessions.List(sw) {
		out.Sessions = append(out.Sessions, sessionWire(i))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	_, sw := s.sessionCaller(r)
	info, err := s.sessions.Get(r.PathValue("id"), sw)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sessionWire(info))
	return nil
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) error {
	who, sw := s.sessionCaller(r)
	id := r.PathValue("id")
	info, err := s.sessions.Delete(id, sw)
	if err != nil {
		s.audit.refused(who, "session_delete", err)
		return err
	}
	s.log.Info("audit", "op", "session_delete", "uid", who.UID, "client", who.Client, "pid", who.PID, "admin", who.Admin, "session_id", id, "calls", info.Calls)
	writeJSON(w, http.StatusOK, sessionWire(info))
	return nil
}

func (s *Server) interruptSession(w http.ResponseWriter, r *http.Request) error {
	who, sw := s.sessionCaller(r)
	id := r.PathValue("id")
	// The body, if any, must be a JSON object; nothing in it is read.
	if r.ContentLength != 0 {
		var body struct{}
		if err := s.decode(w, r, &body); err != nil {
			return err
		}
	}
	ok, info, err := s.sessions.Interrupt(id, sw)
	if err != nil {
		s.audit.refused(who, "session_interrupt", err)
		return err
	}
	s.log.Info("audit", "op", "session_interrupt", "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", id, "interrupted", ok)
	writeJSON(w, http.StatusOK, api.SessionInterruptResponse{Interrupted: ok, Session: sessionWire(info)})
	return nil
}
