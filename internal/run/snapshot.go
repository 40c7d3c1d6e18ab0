package run

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/runner"
)

// A snapshot is a checkpoint of a live session kept for later, the
// session running on: its session rolls back to it (Rollback), and new
// sessions start from it (FromSnapshot), any number of times. It is a
// directory "n-ID" of the checkpoint directory, signed as a pause's is,
// with its caller's record (the table's), so that a later daemon adopts
// it (RecoverPaused).

// Snapshot is a session's checkpoint kept for later.
type Snapshot struct {
	s    *Service
	id   string
	dir  string
	info jail.CheckpointInfo
	rec  sessionRecord
}

// ID is the snapshot's directory name without its "n-": for logs.
func (sn *Snapshot) ID() string { return sn.id }

// Bytes is the snapshot's size on disk.
func (sn *Snapshot) Bytes() int64 { return sn.info.Bytes }

// Created is when it was taken.
func (sn *Snapshot) Created() time.Time { return sn.info.Created }

// Image is the name of its session's image.
func (sn *Snapshot) Image() string { return sn.info.Image }

// Remove deletes the snapshot (a rename at once, the files in the
// background). Sessions restored from it keep running.
func (sn *Snapshot) Remove() { sn.s.removeCheckpoint(sn.dir, "n-"+sn.id) }

func (sn *Snapshot) pausedState() *pausedState {
	return &pausedState{dir: sn.dir, info: sn.info, shared: true}
}

// Snapshot checkpoints the session into a snapshot, the session left as
// it was (frozen between calls; a paused one is restored first). table is
// the caller's record, kept with it for RecoverPaused. Its errors are
// Pause's.
func (ss *Session) Snapshot(table []byte) (*Snapshot, error) {
	if !ss.tryCall() {
		return nil, errdefs.New(errdefs.ErrConflict, "the session is running a call; take its snapshot once the call ended")
	}
	defer ss.callMu.Unlock()
	if ss.isEnded() {
		return nil, ss.endedError()
	}
	if err := ss.commandsBlock("take a snapshot"); err != nil {
		return nil, err
	}
	if why := ss.s.CheckpointsUnavailable(); why != "" {
		return nil, errdefs.New(errdefs.ErrUnavailable, "sessions cannot take snapshots on this host: %s", why)
	}
	if _, err := ss.resume(); err != nil {
		return nil, err
	}
	ss.mu.Lock()
	st := ss.st
	rec := sessionRecord{V: 1, Env: ss.env, Calls: ss.calls, Fresh: ss.fresh, Losses: ss.losses, Table: table, Snapshot: true}
	switch {
	case ss.egress:
		ss.mu.Unlock()
		return nil, errdefs.New(errdefs.ErrConflict, "a session with network egress cannot take a snapshot: its network is not checkpointed")
	case !st.j.Manifest().RunnerCan(runner.FeatureRecords):
		ss.mu.Unlock()
		return nil, errdefs.New(errdefs.ErrConflict, "the session's image %q predates pausing (its runner cannot take new pipes): rebuild it", ss.image)
	case ss.recordsIno != 0 && !ss.reexeced:
		ss.mu.Unlock()
		return nil, errdefs.New(errdefs.ErrConflict, "a session resumed from a pause by an image whose init cannot execute itself afresh cannot take a snapshot")
	}
	ss.mu.Unlock()
	record, err := json.Marshal(rec)
	if err != nil || len(record) > jail.MaxCheckpointRecord {
		return nil, errdefs.New(errdefs.ErrConflict, "the session's record is more than %d bytes (its environment?): it cannot take a snapshot", jail.MaxCheckpointRecord)
	}
	id := jail.NewID()
	dir := filepath.Join(ss.s.cpDir, "n-"+id)
	info, err := st.j.Snapshot(dir, []*os.File{st.p.jobW, st.p.recR, st.p.ctlW, st.p.statR}, record)
	if ferr := freeze(st.j); ferr != nil {
		ss.s.log.Error("freeze a session after its snapshot; ending it", "id", ss.ID(), "err", ferr)
		ss.end(spec.EndFreezeFailed)
		if err == nil {
			ss.s.removeCheckpoint(dir, "n-"+id)
		}
		return nil, ss.endedError()
	}
	if err != nil {
		if errors.Is(err, jail.ErrCheckpointRefused) {
			return nil, errdefs.New(errdefs.ErrConflict, "the session's state cannot be checkpointed (it keeps running): %s", refusedReason(err))
		}
		ss.s.log.Error("session snapshot", "id", ss.ID(), "err", err)
		return nil, errdefs.New(errdefs.ErrUnavailable, "the session's snapshot could not be taken (it keeps running); the daemon's log says why")
	}
	return &Snapshot{s: ss.s, id: id, dir: dir, info: info, rec: rec}, nil
}

// Rollback makes the session what it was at sn, a snapshot of it: a new
// jail restored from sn replaces the session's (a paused session's
// checkpoint is removed), frozen as between calls; its count of calls is
// the snapshot's. When the restore fails the session is left as it was.
// It says how long the restore took.
func (ss *Session) Rollback(sn *Snapshot) (time.Duration, error) {
	if !ss.tryCall() {
		return 0, errdefs.New(errdefs.ErrConflict, "the session is running a call; roll it back once the call ended")
	}
	defer ss.callMu.Unlock()
	if ss.isEnded() {
		return 0, ss.endedError()
	}
	if err := ss.commandsBlock("roll back"); err != nil {
		return 0, err
	}
	if sn.info.Image != ss.image {
		return 0, errdefs.Field("snapshot_id", "the snapshot is of a session in image %q, this one runs %q", sn.info.Image, ss.image)
	}
	start := time.Now()
	r, err := ss.s.restoreJail(sn.pausedState(), ss.limits)
	if err != nil {
		if errors.Is(err, jail.ErrCheckpointTampered) {
			ss.s.log.Error("snapshot does not verify", "id", ss.ID(), "snapshot", sn.id, "err", err)
			return 0, errdefs.New(errdefs.ErrConflict, "the snapshot does not verify (changed on disk); the session is left as it was")
		}
		ss.s.log.Error("roll back session", "id", ss.ID(), "snapshot", sn.id, "err", err)
		return 0, errdefs.New(errdefs.ErrUnavailable, "the snapshot could not be restored now (the session is left as it was); the daemon's log says why")
	}
	ss.mu.Lock()
	old, ps := ss.st, ss.paused
	ss.env, ss.calls, ss.fresh, ss.losses = sn.rec.Env, sn.rec.Calls, sn.rec.Fresh, sn.rec.Losses
	ss.mu.Unlock()
	ss.install(r, nil) // the old jail's end is no longer the session's
	if old != nil {
		ss.s.teardowns.Go(old.Destroy)
	}
	if ps != nil && !ps.shared {
		ss.s.removeCheckpoint(ps.dir, ss.ID())
	}
	if err := freeze(ss.st.j); err != nil {
		ss.s.log.Error("freeze a rolled back session; ending it", "id", ss.ID(), "err", err)
		ss.end(spec.EndFreezeFailed)
		return 0, ss.endedError()
	}
	return max(time.Since(start), time.Nanosecond), nil
}

// FromSnapshot makes a new session from sn: a restore of it into a jail
// of its own, its random generators reseeded (as a fork's child), frozen
// as between calls; its count of calls is the snapshot's.
func (s *Service) FromSnapshot(sn *Snapshot) (*Session, error) {
	if why := s.CheckpointsUnavailable(); why != "" {
		return nil, errdefs.New(errdefs.ErrUnavailable, "sessions cannot start from snapshots on this host: %s", why)
	}
	ss, err := s.pausedSession(jail.NewID(), sn.dir, sn.info, sn.rec, true)
	if err != nil {
		return nil, err
	}
	if err := ss.reseed(); err != nil {
		tampered := ss.EndReason() == spec.EndResumeFailed
		ss.Close()
		if tampered {
			return nil, errdefs.New(errdefs.ErrConflict, "the snapshot does not verify (changed on disk)")
		}
		s.log.Error("session from a snapshot", "snapshot", sn.id, "err", err)
		return nil, errdefs.New(errdefs.ErrUnavailable, "the snapshot could not be restored now; the daemon's log says why")
	}
	return ss, nil
}
