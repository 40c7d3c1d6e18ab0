package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/policy"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/sessions"
)

// Session is a live session of the engine: *run.Session, or a fake.
type Session interface {
	sessions.Handle
	Exec(ctx context.Context, c *spec.Call) (*spec.CallResult, error)
	Warm() bool
}

// sessionMeta is what the server keeps of a session beside its handle.
type sessionMeta struct {
	h          Session
	bounds     policy.CallBounds // the calls' defaults and bounds
	wireLimits api.LimitValues
	network    string
	image      string
}

// sessionMetaRecord is what a paused session keeps of its sessionMeta
// (sessions.Config.EncodeMeta), for the daemon that adopts it.
type sessionMetaRecord struct {
	Bounds     policy.CallBounds `json:"bounds"`
	WireLimits api.LimitValues   `json:"limits"`
	Network    string            `json:"network"`
	Image      string            `json:"image"`
}

func encodeSessionMeta(meta any) ([]byte, error) {
	m, ok := meta.(*sessionMeta)
	if !ok {
		return nil, fmt.Errorf("session meta of type %T", meta)
	}
	return json.Marshal(sessionMetaRecord{Bounds: m.bounds, WireLimits: m.wireLimits, Network: m.network, Image: m.image})
}

// AdoptSession adds a paused session of an earlier daemon (h, paused) to
// the table, with the record its pause kept (run.Recovered.Table): the
// same id, owner, limits and lifetime.
func (s *Server) AdoptSession(h Session, record []byte) (sessions.Info, error) {
	return s.sessions.Adopt(h, record, func(raw json.RawMessage, _ sessions.Handle) (any, error) {
		var r sessionMetaRecord
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, err
		}
		return &sessionMeta{h: h, bounds: r.Bounds, wireLimits: r.WireLimits, network: r.Network, image: r.Image}, nil
	})
}

func (s *Server) sessionCaller(r *http.Request) (peer.Caller, sessions.Caller) {
	who := callerOf(r)
	return who, sessions.Caller{UID: who.UID, Admin: who.Admin}
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	if err := s.policy.Sessions(); err != nil {
		s.audit.refused(callerOf(r), "session_create", err)
		return err
	}
	var req api.SessionCreateRequest
	o, err := s.begin(w, r, "session_create", &req)
	if err != nil {
		return err
	}
	defer o.done()
	who, fail := o.who, o.fail
	if req.FromSnapshot != "" {
		info, err := s.sessionFromSnapshot(w, r, who, &req)
		if err != nil {
			return fail(err)
		}
		s.log.Info("audit", "op", "session_create", "uid", who.UID, "client", who.Client, "pid", who.PID, "admin", who.Admin,
			"session_id", info.ID, "from_snapshot", req.FromSnapshot)
		writeJSON(w, http.StatusCreated, sessionWire(info))
		return nil
	}
	im, err := s.image(req.Image)
	if err != nil {
		return fail(err)
	}
	plan, err := s.policy.Session(&req, im.Name, who, s.resolvers(im.Name, who))
	if err != nil {
		return fail(err)
	}
	defer policy.CloseFiles(plan.Spec.Files)
	info, err := s.makeSession(w, r, who, plan)
	if err != nil {
		return fail(err)
	}
	meta := info.Meta.(*sessionMeta)
	s.log.Info("audit", "op", "session_create", "uid", who.UID, "client", who.Client, "pid", who.PID, "admin", who.Admin,
		"session_id", info.ID, "image", im.Name, "warm", meta.h.Warm(), "memory_mb", plan.Limits.MemoryBytes>>20, "pids", plan.Limits.Pids,
		"idle_timeout_s", int64(plan.Idle/time.Second), "ttl_s", int64(plan.TTL/time.Second), "network", meta.network)
	writeJSON(w, http.StatusCreated, sessionWire(info))
	return nil
}

// makeSession reserves the session's place in the table and its memory
// (before its jail is made; the table gives it back when the session
// ends, however it ends), admits the
// creation (a jail holds a run slot and counts against the caller's rate
// and quota, as a run does), makes it and adds it to the table.
func (s *Server) makeSession(w http.ResponseWriter, r *http.Request, who peer.Caller, plan *policy.Session) (sessions.Info, error) {
	res, err := s.sessions.Reserve(sessions.Caller{UID: who.UID, Admin: who.Admin}, plan.Limits.MemoryBytes)
	if err != nil {
		return sessions.Info{}, err
	}
	release, err := s.admit(r.Context(), who)
	s.setQuotaHeader(w, who)
	if err != nil {
		res.Release()
		if r.Context().Err() != nil {
			err = errdefs.New(errdefs.ErrUnavailable, "client went away while queued")
		}
		return sessions.Info{}, err
	}
	h, err := s.engine.NewSession(plan.Spec)
	release()
	if err != nil {
		res.Release()
		return sessions.Info{}, fmt.Errorf("create session: %w", err)
	}
	meta := &sessionMeta{h: h, bounds: plan.Bounds, wireLimits: policy.WireLimits(plan.Limits), network: api.NetworkNone, image: plan.Spec.Image}
	if plan.Spec.Network != nil {
		meta.network = api.NetworkInternet
	}
	info, err := s.sessions.Add(res, h, plan.Idle, plan.TTL, meta)
	if err != nil {
		return sessions.Info{}, err
	}
	if r.Context().Err() != nil {
		// Nobody will learn this session's id: end it now rather than at
		// its idle timeout.
		_, _ = s.sessions.Delete(info.ID, sessions.Caller{UID: who.UID, Admin: who.Admin})
		return sessions.Info{}, errdefs.New(errdefs.ErrUnavailable, "client went away while the session was made; it was ended")
	}
	return info, nil
}

func sessionWire(i sessions.Info) api.Session {
	out := api.Session{
		SessionID: i.ID, CreatedAt: i.Created.UTC(), ExpiresAt: i.Expires.UTC(), IdleTimeoutS: int64(i.IdleTimeout / time.Second),
		State: i.State, ExecutionCount: i.Calls, LastUsedAt: i.LastUsed.UTC(), UID: i.Owner,
	}
	if m, ok := i.Meta.(*sessionMeta); ok {
		out.Limits, out.Network, out.Warm, out.Image = m.wireLimits, m.network, m.h.Warm(), m.image
		out.CPUCores = m.bounds.Limits.CPUCores
		if c, ok := m.h.(interface{ CPU() time.Duration }); ok {
			out.CPUMs = c.CPU().Milliseconds()
		}
	}
	if i.EndReason != "" {
		reason := i.EndReason
		out.EndReason = &reason
	}
	if i.State == sessions.StatePaused {
		at := i.PausedAt.UTC()
		out.PausedAt, out.PausedBytes = &at, i.PausedBytes
	}
	return out
}

// sessionExecute serves POST /v1/sessions/{id}/execute. It is long
// because it is one sequence whose steps share the call's state (the
// session's turn, the memory reserved, the admission slot, the stream):
// refuse an unknown id before reading the body, reserve, check the
// fields against the session's bounds, wait for admission, run, then
// answer in JSON or end the stream. Each step's own logic lives in the
// helpers it calls (policy, reserveRun, admit, liveStream, response).
func (s *Server) sessionExecute(w http.ResponseWriter, r *http.Request) error {
	// An unknown id costs nothing: it is refused before the body is read
	// (which counts against the memory budget as it arrives).
	who, sw := s.sessionCaller(r)
	if _, err := s.sessions.Get(r.PathValue("id"), sw); err != nil {
		s.audit.refused(who, "session_execute", err)
		return err
	}
	var req api.SessionExecuteRequest
	o, err := s.begin(w, r, "session_execute", &req)
	if err != nil {
		return err
	}
	defer o.done()
	start, mem, fail := o.start, o.mem, o.fail
	id := r.PathValue("id")
	if err := policy.CallFields(&req); err != nil {
		return fail(err)
	}
	_, info, done, err := s.sessions.Begin(id, sw)
	if err != nil {
		return fail(err)
	}
	defer done(0) // a call refused or failed before it ran
	meta := info.Meta.(*sessionMeta)
	call, err := policy.Call(&req, meta.bounds, s.resolvers(meta.image, who))
	if err != nil {
		return fail(err)
	}
	defer policy.CloseFiles(call.Files)
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
		live = newLiveStream(w, format == api.MediaSSE, cancel, s.pace())
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
	var unsent int64 // output a stream has not sent yet
	if live != nil {
		unsent = live.queued()
	}
	if err != nil {
		mem.shrinkRun(unsent)
		err = fmt.Errorf("session call failed: %w", err)
		if began {
			s.audit.refused(who, "session_execute", err)
			_ = live.end([]finalEvent{s.errorEvent(r, err)})
			return nil
		}
		return fail(err)
	}
	mem.shrinkRun(resultBytes(&res.Result, unsent))
	done(res.Count)
	res.Result.Image = meta.image
	l := meta.bounds.Limits
	l.Timeout, l.OutputBytes = call.Timeout, call.OutputBytes
	bulk := newBulkSet()
	var events []finalEvent
	if live != nil {
		events = finalEvents(&res.Result, bulk, &res.Count)
	}
	resp := &api.SessionExecuteResponse{ExecuteResponse: *response(&res.Result, l, bulk), ExecutionCount: res.Count}
	for i := range resp.Outputs {
		if resp.Outputs[i].OutputType == api.OutputExecuteResult {
			resp.Outputs[i].ExecutionCount = &resp.ExecutionCount
		}
	}
	after, err := s.sessions.Get(id, sw)
	if err != nil { // dropped from the table meanwhile
		after = info
		after.State, after.EndReason = sessions.StateEnded, res.EndReason
	}
	sessionStatus(resp, id, after, res)
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
	s.writeBulk(w, http.StatusOK, resp, bulk)
	return nil
}

// sessionStatus fills in what became of the session id after a call
// (after: the table's view of it then) and says so in the message.
func sessionStatus(resp *api.SessionExecuteResponse, id string, after sessions.Info, res *spec.CallResult) {
	resp.Session = api.SessionStatus{SessionID: id, State: after.State, StateLost: res.StateLost, Resumed: res.Resumed}
	if res.Resumed {
		resp.Session.RestoreMs = ms(res.Restore)
	}
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

func (s *Server) pauseSession(w http.ResponseWriter, r *http.Request) error {
	return s.pauseOrResume(w, r, "session_pause", s.sessions.Pause)
}

func (s *Server) resumeSession(w http.ResponseWriter, r *http.Request) error {
	return s.pauseOrResume(w, r, "session_resume", s.sessions.Resume)
}

// pauseOrResume serves POST /v1/sessions/{id}/pause and /resume, whose
// body is empty or an empty JSON object, as an interrupt's.
func (s *Server) pauseOrResume(w http.ResponseWriter, r *http.Request, op string, f func(string, sessions.Caller) (sessions.Info, time.Duration, error)) error {
	who, sw := s.sessionCaller(r)
	id := r.PathValue("id")
	if _, err := s.sessions.Get(id, sw); err != nil {
		s.audit.refused(who, op, err)
		return err
	}
	if r.ContentLength != 0 {
		var body struct{}
		if err := decodeWithin(w, r, &body, maxInterruptBody); err != nil {
			s.audit.refused(who, op, err)
			return err
		}
	}
	info, took, err := f(id, sw)
	if err != nil {
		s.audit.refused(who, op, err)
		return err
	}
	s.log.Info("audit", "op", op, "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", id, "took_ms", ms(took), "paused_bytes", info.PausedBytes)
	writeJSON(w, http.StatusOK, api.SessionPauseResponse{Session: sessionWire(info), TookMs: ms(took)})
	return nil
}

// forkSession serves POST /v1/sessions/{id}/fork: count new sessions of
// the caller's, each a copy of the session's state in a jail of its own.
func (s *Server) forkSession(w http.ResponseWriter, r *http.Request) error {
	const op = "session_fork"
	who, sw := s.sessionCaller(r)
	id := r.PathValue("id")
	if _, err := s.sessions.Get(id, sw); err != nil {
		s.audit.refused(who, op, err)
		return err
	}
	var req api.SessionForkRequest
	if err := decodeWithin(w, r, &req, maxInterruptBody); err != nil {
		s.audit.refused(who, op, err)
		return err
	}
	if req.Count < 1 || req.Count > api.MaxForks {
		err := errdefs.Field("count", "must be in 1..%d, got %d", api.MaxForks, req.Count)
		s.audit.refused(who, op, err)
		return err
	}
	// One run slot for the fork (its restores run one at a time), counted
	// against the caller's rate and quota as a creation is.
	release, err := s.admit(r.Context(), who)
	s.setQuotaHeader(w, who)
	if err != nil {
		s.audit.refused(who, op, err)
		return err
	}
	start := time.Now()
	kids, err := s.sessions.Fork(id, sw, req.Count, func(p sessions.Handle, n int) ([]sessions.Handle, error) {
		ps, ok := p.(Session)
		if !ok {
			return nil, errdefs.New(errdefs.ErrUnavailable, "sessions cannot fork on this daemon")
		}
		made, err := s.engine.ForkSession(ps, n)
		if err != nil {
			return nil, err
		}
		out := make([]sessions.Handle, len(made))
		for i, k := range made {
			out[i] = k
		}
		return out, nil
	}, func(pm any, k sessions.Handle) any {
		m := *pm.(*sessionMeta)
		m.h = k.(Session)
		return &m
	})
	release()
	if err != nil {
		s.audit.refused(who, op, err)
		return err
	}
	resp := api.SessionForkResponse{Sessions: make([]api.Session, 0, len(kids)), TookMs: ms(time.Since(start))}
	ids := make([]string, 0, len(kids))
	for _, k := range kids {
		resp.Sessions = append(resp.Sessions, sessionWire(k))
		ids = append(ids, k.ID)
	}
	s.log.Info("audit", "op", op, "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", id, "children", strings.Join(ids, ","), "took_ms", resp.TookMs)
	writeJSON(w, http.StatusOK, resp)
	return nil
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// maxInterruptBody bounds an interrupt's body, which must be empty or a
// JSON object with nothing in it: a larger one is refused after at most
// this much is read, and counts for nothing in the memory budget.
const maxInterruptBody = 4 << 10

func (s *Server) interruptSession(w http.ResponseWriter, r *http.Request) error {
	who, sw := s.sessionCaller(r)
	id := r.PathValue("id")
	// An unknown id costs nothing: it is refused before the body is read.
	if _, err := s.sessions.Get(id, sw); err != nil {
		s.audit.refused(who, "session_interrupt", err)
		return err
	}
	// The body, if any, must be a JSON object; nothing in it is read.
	if r.ContentLength != 0 {
		var body struct{}
		if err := decodeWithin(w, r, &body, maxInterruptBody); err != nil {
			s.audit.refused(who, "session_interrupt", err)
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
