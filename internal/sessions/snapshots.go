package sessions

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
)

// A snapshot is a checkpoint of a session kept for later: the session
// rolls back to it, new sessions start from it. The table keeps who owns
// each, counts their bytes with paused sessions' against the checkpoint
// quotas, and removes them after Config.SnapshotTTL. The checkpoints
// themselves are behind SnapshotHandle.

// SnapshotHandle is a snapshot of the engine (*run.Snapshot).
type SnapshotHandle interface {
	Bytes() int64
	Created() time.Time
	Image() string
	// Remove deletes the snapshot's checkpoint.
	Remove()
}

// SnapshotInfo is a snapshot's record, as a snapshot.
type SnapshotInfo struct {
	ID        string
	Owner     uint32
	SessionID string // the session it was taken of
	Created   time.Time
	Expires   time.Time
	Bytes     int64
	Image     string
	Meta      any // the session's Meta when it was taken
}

type snapEntry struct {
	SnapshotInfo
	h SnapshotHandle
	// uses counts the restores from it in progress (rollbacks, sessions
	// made from it); removed: deleted or expired meanwhile, out of the
	// table, its files removed when the last restore ends.
	uses    int
	removed bool
}

// holdLocked, under m.mu, counts a restore from s in progress, until the
// release it returns: a delete or an expiry meanwhile takes s out of the
// table at once and leaves its files to the restore, which removes them
// when it ends.
func (m *Manager) holdLocked(s *snapEntry) (release func()) {
	s.uses++
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			s.uses--
			gone := s.removed && s.uses == 0
			m.mu.Unlock()
			if gone {
				s.h.Remove()
			}
		})
	}
}

// dropLocked, under m.mu, takes snapshot id out of the table; it reports
// whether its files may be removed now (no restore from it in progress).
func (m *Manager) dropLocked(id string, s *snapEntry) bool {
	delete(m.snaps, id)
	s.removed = true
	return s.uses == 0
}

// snapshotRecord is what a snapshot keeps of its entry, for
// AdoptSnapshot.
type snapshotRecord struct {
	V         int             `json:"v"`
	ID        string          `json:"id"`
	Owner     uint32          `json:"owner"`
	SessionID string          `json:"session_id"`
	Meta      json.RawMessage `json:"meta,omitempty"`
}

// newSnapshotID is "snap-" and 24 hex digits.
func newSnapshotID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "snap-" + hex.EncodeToString(b[:])
}

// validSnapshotID reports whether id has newSnapshotID's form.
func validSnapshotID(id string) bool {
	h, ok := strings.CutPrefix(id, "snap-")
	if !ok || len(h) != 24 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// checkpointUsage is, under m.mu, the bytes of owner's checkpoints
// (paused sessions and snapshots) and everyone's.
func (m *Manager) checkpointUsage(owner uint32) (mine, total int64) {
	for _, e := range m.byID {
		if e.State == StatePaused {
			total += e.PausedBytes
			if e.Owner == owner {
				mine += e.PausedBytes
			}
		}
	}
	for _, s := range m.snaps {
		total += s.Bytes
		if s.Owner == owner {
			mine += s.Bytes
		}
	}
	return mine, total
}

// checkpointRoom refuses, under m.mu, another checkpoint of owner's of
// extra bytes when its checkpoints, or everyone's, would pass their
// bounds: ErrTooLarge (413) for the owner's, ErrInsufficientStorage (507)
// for the daemon's. extra 0: refused only once a bound is reached.
func (m *Manager) checkpointRoom(owner uint32, extra int64, what string) error {
	mine, total := m.checkpointUsage(owner)
	perUID, most := m.cfg.MaxCheckpointBytesPerUID, m.cfg.MaxCheckpointBytesTotal
	switch {
	case perUID > 0 && (mine+extra > perUID || (extra == 0 && mine >= perUID)):
		return errdefs.New(errdefs.ErrTooLarge, "uid %d's paused sessions and snapshots hold %d MiB on disk; %s would pass the most one caller's may (sessions.max_checkpoint_mb_per_uid, %d MiB): delete snapshots or sessions", owner, mib(mine), what, mib(perUID))
	case most > 0 && (total+extra > most || (extra == 0 && total >= most)):
		return errdefs.New(errdefs.ErrInsufficientStorage, "the daemon's paused sessions and snapshots hold %d MiB on disk; %s would pass their most (sessions.max_checkpoint_mb_total, %d MiB); try again later", mib(total), what, mib(most))
	}
	return nil
}

// TakeSnapshot takes a snapshot of id for who (id's owner, or an admin:
// the snapshot is the session's owner's), the session busy meanwhile.
// Refused while a call runs, after the session ended, and past the
// checkpoint quotas (413, 507: then the snapshot taken is removed).
//
// take takes it of the session's handle with the table's record, kept
// with it for AdoptSnapshot.
func (m *Manager) TakeSnapshot(id string, who Caller, take func(h Handle, record []byte) (SnapshotHandle, error)) (SnapshotInfo, error) {
	var out SnapshotInfo
	_, _, err := m.busy(id, who, true, func(p Pauser, _ []byte) (time.Duration, error) {
		m.mu.Lock()
		e := m.byID[id]
		owner := e.Owner
		if err := m.checkpointRoom(owner, 0, "a snapshot"); err != nil {
			m.mu.Unlock()
			return 0, err
		}
		snap := newSnapshotID()
		var meta json.RawMessage
		if m.cfg.EncodeMeta != nil {
			if b, err := m.cfg.EncodeMeta(e.Meta); err == nil {
				meta = b
			}
		}
		sessMeta := e.Meta
		m.mu.Unlock()
		rec, err := json.Marshal(snapshotRecord{V: 1, ID: snap, Owner: owner, SessionID: id, Meta: meta})
		if err != nil {
			return 0, err
		}
		h, err := take(p.(Handle), rec)
		if err != nil {
			return 0, err
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if err := m.checkpointRoom(owner, h.Bytes(), fmt.Sprintf("its snapshot of %d MiB", mib(h.Bytes()))); err != nil {
			h.Remove()
			return 0, err
		}
		out = SnapshotInfo{ID: snap, Owner: owner, SessionID: id, Created: h.Created(), Bytes: h.Bytes(), Image: h.Image(), Meta: sessMeta}
		if m.cfg.SnapshotTTL > 0 {
			out.Expires = out.Created.Add(m.cfg.SnapshotTTL)
		}
		if m.snaps == nil {
			m.snaps = map[string]*snapEntry{}
		}
		m.snaps[snap] = &snapEntry{SnapshotInfo: out, h: h}
		return 1, nil
	})
	return out, err
}

// lookupSnapshot finds sid for who under m.mu: another caller's is not
// found, as one that never existed.
func (m *Manager) lookupSnapshot(sid string, who Caller) (*snapEntry, error) {
	s, ok := m.snaps[sid]
	if !ok || (s.Owner != who.UID && !who.Admin) {
		return nil, errdefs.New(errdefs.ErrNotFound, "no snapshot %s (snapshots are visible to the uid whose session they were taken of)", clip(sid))
	}
	return s, nil
}

// Snapshot returns sid's record as who may see it.
func (m *Manager) Snapshot(sid string, who Caller) (SnapshotInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.lookupSnapshot(sid, who)
	if err != nil {
		return SnapshotInfo{}, err
	}
	return s.SnapshotInfo, nil
}

// Snapshots lists who's snapshots (an admin's: everyone's), of the
// session sessionID only when it is not "", oldest first.
func (m *Manager) Snapshots(who Caller, sessionID string) []SnapshotInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []SnapshotInfo
	for _, s := range m.snaps {
		if (s.Owner == who.UID || who.Admin) && (sessionID == "" || s.SessionID == sessionID) {
			out = append(out, s.SnapshotInfo)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Created.Before(out[j].Created) || out[i].Created.Equal(out[j].Created) && out[i].ID < out[j].ID
	})
	return out
}

// DeleteSnapshot removes sid (its checkpoint with it) and returns its
// last record.
func (m *Manager) DeleteSnapshot(sid string, who Caller) (SnapshotInfo, error) {
	m.mu.Lock()
	s, err := m.lookupSnapshot(sid, who)
	now := err == nil && m.dropLocked(sid, s)
	m.mu.Unlock()
	if err != nil {
		return SnapshotInfo{}, err
	}
	if now {
		s.h.Remove()
	}
	return s.SnapshotInfo, nil
}

// SnapshotHandleOf returns sid's handle for who, to start a session from
// it (the caller must own it), held until release: a delete meanwhile
// does not pull its files from under the restore.
func (m *Manager) SnapshotHandleOf(sid string, who Caller) (_ SnapshotHandle, _ SnapshotInfo, release func(), _ error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.lookupSnapshot(sid, who)
	if err != nil {
		return nil, SnapshotInfo{}, nil, err
	}
	return s.h, s.SnapshotInfo, m.holdLocked(s), nil
}

// Rollback makes session id what it was at its snapshot sid (one of
// this session's) with roll, the session busy meanwhile; calls is then
// the session's count of calls. It returns the session's record and how
// long the restore took.
func (m *Manager) Rollback(id, sid string, who Caller, roll func(h Handle, sn SnapshotHandle) (took time.Duration, calls int, err error)) (Info, time.Duration, error) {
	return m.busy(id, who, true, func(p Pauser, _ []byte) (time.Duration, error) {
		m.mu.Lock()
		s, ok := m.snaps[sid]
		e := m.byID[id]
		if !ok || s.SessionID != id || s.Owner != e.Owner {
			m.mu.Unlock()
			return 0, errdefs.FieldOfClass(errdefs.ErrNotFound, "snapshot_id", "session %s has no snapshot %s (GET /v1/sessions/%s/snapshots lists them)", id, clip(sid), id)
		}
		release := m.holdLocked(s)
		m.mu.Unlock()
		took, calls, err := roll(p.(Handle), s.h)
		release()
		if err != nil {
			return 0, err
		}
		m.mu.Lock()
		e.Calls = calls
		e.LastUsed = m.cfg.Now()
		m.mu.Unlock()
		return took, nil
	})
}

// AdoptSnapshot adds a snapshot of an earlier daemon with the record it
// was taken with; decode turns its Meta back into an Info.Meta.
func (m *Manager) AdoptSnapshot(h SnapshotHandle, rec []byte, decode func(meta json.RawMessage) (any, error)) (SnapshotInfo, error) {
	var r snapshotRecord
	if err := json.Unmarshal(rec, &r); err != nil {
		return SnapshotInfo{}, fmt.Errorf("adopt snapshot: the record: %w", err)
	}
	if r.V != 1 || !validSnapshotID(r.ID) {
		return SnapshotInfo{}, fmt.Errorf("adopt snapshot: a record of version %d, id %s", r.V, clip(r.ID))
	}
	meta, err := decode(r.Meta)
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("adopt snapshot: the record's meta: %w", err)
	}
	s := &snapEntry{h: h, SnapshotInfo: SnapshotInfo{ID: r.ID, Owner: r.Owner, SessionID: r.SessionID, Created: h.Created(), Bytes: h.Bytes(), Image: h.Image(), Meta: meta}}
	if m.cfg.SnapshotTTL > 0 {
		s.Expires = s.Created.Add(m.cfg.SnapshotTTL)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.snaps == nil {
		m.snaps = map[string]*snapEntry{}
	}
	if m.snaps[r.ID] != nil {
		return SnapshotInfo{}, errors.New("adopt snapshot: in the table already")
	}
	m.snaps[r.ID] = s
	return s.SnapshotInfo, nil
}

// reapSnapshots removes, under m.mu, the snapshots past their TTL; it
// returns their handles to Remove outside the lock.
func (m *Manager) reapSnapshots(now time.Time) []SnapshotHandle {
	var gone []SnapshotHandle
	for id, s := range m.snaps {
		if !s.Expires.IsZero() && !now.Before(s.Expires) && m.dropLocked(id, s) {
			gone = append(gone, s.h)
		}
	}
	return gone
}
