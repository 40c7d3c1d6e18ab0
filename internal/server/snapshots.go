package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/policy"
	"github.com/jaild/jaild/internal/sessions"
)

// Snapshots of sessions (issue 28): POST /v1/sessions/{id}/snapshots
// takes one, POST /v1/sessions/{id}/restore rolls the session back to
// one, POST /v1/sessions with from_snapshot starts a session from one,
// and /v1/snapshots lists, shows and deletes them. A snapshot is its
// session's owner's; another caller's is 404 as one that never existed.

func snapshotWire(i sessions.SnapshotInfo) api.Snapshot {
	out := api.Snapshot{SnapshotID: i.ID, SessionID: i.SessionID, UID: i.Owner, CreatedAt: i.Created.UTC(), Bytes: i.Bytes, Image: i.Image}
	if !i.Expires.IsZero() {
		at := i.Expires.UTC()
		out.ExpiresAt = &at
	}
	return out
}

func (s *Server) takeSnapshot(w http.ResponseWriter, r *http.Request) error {
	const op = "session_snapshot"
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
	start := time.Now()
	info, err := s.sessions.TakeSnapshot(id, sw, func(h sessions.Handle, record []byte) (sessions.SnapshotHandle, error) {
		ss, ok := h.(Session)
		if !ok {
			return nil, errdefs.New(errdefs.ErrUnavailable, "sessions cannot take snapshots on this daemon")
		}
		return s.engine.SnapshotSession(ss, record)
	})
	if err != nil {
		s.audit.refused(who, op, err)
		return err
	}
	s.log.Info("audit", "op", op, "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", id, "snapshot_id", info.ID, "bytes", info.Bytes, "took_ms", ms(time.Since(start)))
	writeJSON(w, http.StatusCreated, snapshotWire(info))
	return nil
}

func (s *Server) listSessionSnapshots(w http.ResponseWriter, r *http.Request) error {
	_, sw := s.sessionCaller(r)
	id := r.PathValue("id")
	if _, err := s.sessions.Get(id, sw); err != nil {
		return err
	}
	return s.writeSnapshots(w, s.sessions.Snapshots(sw, id))
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) error {
	if err := s.policy.Sessions(); err != nil {
		return err
	}
	_, sw := s.sessionCaller(r)
	return s.writeSnapshots(w, s.sessions.Snapshots(sw, ""))
}

func (s *Server) writeSnapshots(w http.ResponseWriter, list []sessions.SnapshotInfo) error {
	out := api.SnapshotList{Snapshots: make([]api.Snapshot, 0, len(list))}
	for _, i := range list {
		out.Snapshots = append(out.Snapshots, snapshotWire(i))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) error {
	_, sw := s.sessionCaller(r)
	info, err := s.sessions.Snapshot(r.PathValue("id"), sw)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, snapshotWire(info))
	return nil
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) error {
	who, sw := s.sessionCaller(r)
	info, err := s.sessions.DeleteSnapshot(r.PathValue("id"), sw)
	if err != nil {
		s.audit.refused(who, "snapshot_delete", err)
		return err
	}
	s.log.Info("audit", "op", "snapshot_delete", "uid", who.UID, "client", who.Client, "pid", who.PID, "snapshot_id", info.ID)
	writeJSON(w, http.StatusOK, snapshotWire(info))
	return nil
}

// rollbackSession serves POST /v1/sessions/{id}/restore.
func (s *Server) rollbackSession(w http.ResponseWriter, r *http.Request) error {
	const op = "session_restore"
	who, sw := s.sessionCaller(r)
	id := r.PathValue("id")
	if _, err := s.sessions.Get(id, sw); err != nil {
		s.audit.refused(who, op, err)
		return err
	}
	var req api.SessionRestoreRequest
	if err := decodeWithin(w, r, &req, maxInterruptBody); err != nil {
		s.audit.refused(who, op, err)
		return err
	}
	if req.SnapshotID == "" {
		err := errdefs.Field("snapshot_id", "is required: a snapshot of this session (GET /v1/sessions/%s/snapshots lists them)", id)
		s.audit.refused(who, op, err)
		return err
	}
	info, took, err := s.sessions.Rollback(id, req.SnapshotID, sw, func(h sessions.Handle, sn sessions.SnapshotHandle) (time.Duration, int, error) {
		ss, ok := h.(Session)
		if !ok {
			return 0, 0, errdefs.New(errdefs.ErrUnavailable, "sessions cannot roll back on this daemon")
		}
		return s.engine.RollbackSession(ss, sn)
	})
	if err != nil {
		s.audit.refused(who, op, err)
		return err
	}
	s.log.Info("audit", "op", op, "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", id, "snapshot_id", req.SnapshotID, "took_ms", ms(took))
	writeJSON(w, http.StatusOK, api.SessionPauseResponse{Session: sessionWire(info), TookMs: ms(took)})
	return nil
}

// sessionFromSnapshot makes the session of a POST /v1/sessions with
// from_snapshot: the snapshot's image, limits and state; the request may
// give its idle timeout and ttl only.
func (s *Server) sessionFromSnapshot(w http.ResponseWriter, r *http.Request, who peer.Caller, req *api.SessionCreateRequest) (sessions.Info, error) {
	for _, f := range []struct {
		name string
		set  bool
	}{{"limits", req.Limits != nil}, {"env", req.Env != nil}, {"network", req.Network != ""}, {"allow_hosts", req.AllowHosts != nil}, {"files", req.Files != nil}, {"image", req.Image != ""}, {"cpu_cores", req.CPUCores != nil}} {
		if f.set {
			return sessions.Info{}, errdefs.Field(f.name, "cannot be given with from_snapshot: the session is the snapshot's (its image, limits, CPU quota, environment and files)")
		}
	}
	sw := sessions.Caller{UID: who.UID, Admin: who.Admin}
	h, sn, done, err := s.sessions.SnapshotHandleOf(req.FromSnapshot, sw)
	if err != nil {
		return sessions.Info{}, errdefs.InField("from_snapshot", err)
	}
	defer done()
	parent, ok := sn.Meta.(*sessionMeta)
	if !ok {
		return sessions.Info{}, fmt.Errorf("snapshot %s has no session record", sn.ID)
	}
	plan, err := s.policy.Session(&api.SessionCreateRequest{IdleTimeoutS: req.IdleTimeoutS, TTLS: req.TTLS}, sn.Image, who, s.resolvers(sn.Image, who))
	if err != nil {
		return sessions.Info{}, err
	}
	policy.CloseFiles(plan.Spec.Files)
	res, err := s.sessions.Reserve(sw, parent.wireLimits.MemoryMB<<20)
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
	ss, err := s.engine.SessionFromSnapshot(h)
	release()
	if err != nil {
		res.Release()
		return sessions.Info{}, err
	}
	meta := *parent
	meta.h = ss
	info, err := s.sessions.Add(res, ss, plan.Idle, plan.TTL, &meta)
	if err != nil {
		return sessions.Info{}, err
	}
	if r.Context().Err() != nil {
		_, _ = s.sessions.Delete(info.ID, sw)
		return sessions.Info{}, errdefs.New(errdefs.ErrUnavailable, "client went away while the session was made; it was ended")
	}
	return info, nil
}

// AdoptSnapshot adds a snapshot of an earlier daemon to the table, with
// the record it was taken with (run.Recovered.Table).
func (s *Server) AdoptSnapshot(h sessions.SnapshotHandle, record []byte) (sessions.SnapshotInfo, error) {
	return s.sessions.AdoptSnapshot(h, record, func(raw json.RawMessage) (any, error) {
		var r sessionMetaRecord
		if err := json.Unmarshal(raw, &r); err != nil {
			return nil, err
		}
		return &sessionMeta{bounds: r.Bounds, wireLimits: r.WireLimits, network: r.Network, image: r.Image}, nil
	})
}
