package run

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/runner"

	"golang.org/x/sys/unix"
)

// A paused session is on disk: its jail checkpointed (processes, memory,
// workspace, /tmp; jail.Checkpoint) into the service's CheckpointDir and
// destroyed, its memory and host id range free. Its next call, or
// Resume, restores it into a new jail of its own (jail.Engine.Restore),
// with new pipes in place of the old: the same interpreter, globals,
// imports, open files, working directory and environment.

// PauseInfo describes a paused session.
type PauseInfo = spec.PauseInfo

// pausedState is a paused session's checkpoint.
type pausedState struct {
	dir  string
	info jail.CheckpointInfo
	// shared: the checkpoint is a fork's, restored by each of its
	// children: a restore leaves it in place.
	shared bool
	// events is the jail's reports channel: a report init wrote before the
	// dump (an interpreter's exit) is passed on after the restore.
	events chan runner.Report
}

// Pause checkpoints the session to disk and destroys its jail. A session
// paused already answers as it is. It fails, the session running on as
// before, when no call may run (another call: ErrConflict), the service
// has no checkpoints (ErrUnavailable), the session has a network of its
// own, or CRIU cannot dump what the session holds (ErrConflict naming
// it).
//
// table is the caller's record of the session (its table's: owner, id,
// lifetime), kept with the checkpoint, signed with it, and given back by
// RecoverPaused to the next daemon; nil: the session does not outlive
// this daemon.
func (ss *Session) Pause(table []byte) (PauseInfo, error) {
	if !ss.tryCall() {
		return PauseInfo{}, errdefs.New(errdefs.ErrConflict, "the session is running a call; pause it once the call ended")
	}
	defer ss.callMu.Unlock()
	if ss.isEnded() {
		return PauseInfo{}, ss.endedError()
	}
	if err := ss.commandsBlock("pause"); err != nil {
		return PauseInfo{}, err
	}
	if why := ss.s.CheckpointsUnavailable(); why != "" {
		return PauseInfo{}, errdefs.New(errdefs.ErrUnavailable, "sessions cannot pause on this host: %s", why)
	}
	ss.mu.Lock()
	if p := ss.paused; p != nil {
		ss.mu.Unlock()
		return PauseInfo{At: p.info.Created, Bytes: p.info.Bytes}, nil
	}
	if !ss.st.j.Manifest().RunnerCan(runner.FeatureRecords) {
		ss.mu.Unlock()
		return PauseInfo{}, errdefs.New(errdefs.ErrConflict, "the session's image %q predates pausing (its runner cannot take new pipes): rebuild it", ss.image)
	}
	if ss.egress {
		ss.mu.Unlock()
		return PauseInfo{}, errdefs.New(errdefs.ErrConflict, "a session with network egress cannot pause: its network is not checkpointed")
	}
	var record []byte
	if table != nil {
		var err error
		record, err = json.Marshal(sessionRecord{V: 1, Env: ss.env, Calls: ss.calls, Fresh: ss.fresh, Losses: ss.losses, Table: table})
		if err != nil || len(record) > jail.MaxCheckpointRecord {
			ss.mu.Unlock()
			return PauseInfo{}, errdefs.New(errdefs.ErrConflict, "the session's record is more than %d bytes (its environment?): it cannot pause", jail.MaxCheckpointRecord)
		}
	}
	ss.pausing = true
	st := ss.st
	ss.mu.Unlock()
	start := time.Now()
	dir := filepath.Join(ss.s.cpDir, "s-"+jail.NewID())
	info, err := st.j.Checkpoint(dir, []*os.File{st.p.jobW, st.p.recR, st.p.ctlW, st.p.statR}, record)
	if err != nil {
		ss.mu.Lock()
		ss.pausing = false
		ss.mu.Unlock()
		select {
		case <-st.j.Done():
			// The dump failed after the jail's end: nothing is left.
			ss.end(spec.EndJailEnded)
			return PauseInfo{}, ss.endedError()
		default:
		}
		if errors.Is(err, jail.ErrCheckpointRefused) {
			ss.mu.Lock()
			restored := ss.recordsIno != 0 && !ss.reexeced
			ss.mu.Unlock()
			if restored {
				// Measured with CRIU 4.2.1 on Linux 6.18: CRIU cannot open
				// the namespaces of the restored init (non-dumpable, its
				// memory made outside the jail's user namespace).
				return PauseInfo{}, errdefs.New(errdefs.ErrConflict, "a session resumed from a pause cannot pause again on this host (it keeps running): %s", refusedReason(err))
			}
			return PauseInfo{}, errdefs.New(errdefs.ErrConflict, "the session cannot be paused (it keeps running): %s", refusedReason(err))
		}
		ss.s.log.Error("session checkpoint", "id", ss.ID(), "err", err)
		return PauseInfo{}, errdefs.New(errdefs.ErrUnavailable, "the session could not be paused (it keeps running); the daemon's log says why")
	}
	cpu := st.j.Stats().CPU
	ss.mu.Lock()
	ended := ss.ended // ended meanwhile (DELETE): end saw no checkpoint
	if !ended {
		ss.paused = &pausedState{dir: dir, info: info, events: ss.events}
		ss.st = nil
		ss.cpuPast += cpu
		ss.cpuSeen = max(ss.cpuSeen, ss.cpuPast)
	}
	ss.pausing = false
	ss.mu.Unlock()
	if ended {
		ss.s.removeCheckpoint(dir, ss.ID())
		return PauseInfo{}, ss.endedError()
	}
	ss.s.teardowns.Go(st.Destroy)
	return PauseInfo{At: info.Created, Bytes: info.Bytes, Took: time.Since(start)}, nil
}

// refusedReason is CRIU's reason without the wrapping.
func refusedReason(err error) string {
	msg := err.Error()
	if i := len(jail.ErrCheckpointRefused.Error()); len(msg) > i+2 && msg[:i] == jail.ErrCheckpointRefused.Error() {
		return msg[i+2:]
	}
	return msg
}

// Paused says whether the session is on disk, and its checkpoint.
func (ss *Session) Paused() (PauseInfo, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.paused == nil {
		return PauseInfo{}, false
	}
	return PauseInfo{At: ss.paused.info.Created, Bytes: ss.paused.info.Bytes}, true
}

// Resume restores a paused session (frozen, as between calls) and says
// how long the restore took; a live session is left as it is (0).
func (ss *Session) Resume() (time.Duration, error) {
	if !ss.tryCall() {
		return 0, errdefs.New(errdefs.ErrConflict, "the session is running a call")
	}
	defer ss.callMu.Unlock()
	if ss.isEnded() {
		return 0, ss.endedError()
	}
	took, err := ss.resume()
	if err != nil || took == 0 {
		return took, err
	}
	if err := freeze(ss.st.j); err != nil {
		ss.s.log.Error("freeze resumed session; ending it", "id", ss.ID(), "err", err)
		ss.end(spec.EndFreezeFailed)
		return 0, ss.endedError()
	}
	return took, nil
}

// resume restores the session's checkpoint, callMu held; 0 when it was
// not paused. A checkpoint that does not verify ends the session.
func (ss *Session) resume() (time.Duration, error) {
	ss.mu.Lock()
	ps := ss.paused
	ss.mu.Unlock()
	if ps == nil {
		return 0, nil
	}
	start := time.Now()
	r, err := ss.s.restoreJail(ps, ss.limits)
	if err != nil {
		if errors.Is(err, jail.ErrCheckpointTampered) {
			ss.s.log.Error("paused session's checkpoint does not verify; ending the session", "id", ss.ID(), "err", err)
			ss.end(spec.EndResumeFailed)
			return 0, ss.endedError()
		}
		ss.s.log.Error("resume session", "id", ss.ID(), "err", err)
		if why := ss.s.CheckpointsUnavailable(); why != "" {
			// A daemon that adopted it cannot restore at all (no CRIU, or
			// its probe failed): kept on disk for one that can.
			return 0, errdefs.New(errdefs.ErrUnavailable, "the paused session cannot be restored on this host now (%s); it stays paused, kept on disk", why)
		}
		return 0, errdefs.New(errdefs.ErrUnavailable, "the paused session could not be restored now (it stays paused); the daemon's log says why")
	}
	ss.install(r, ps.events)
	// Gone before any call runs in the restored jail: a daemon killed
	// from now on leaves no checkpoint of it, and one killed before left
	// the state this jail still has.
	if !ps.shared {
		ss.s.removeCheckpoint(ps.dir, ss.ID())
	}
	return max(time.Since(start), time.Nanosecond), nil
}

// restored is a jail restored from a checkpoint, with the daemon's ends
// of its new pipes.
type restored struct {
	st      *started
	ctl     *runner.Control
	records *recordsPipe
	ino     uint64 // the records pipe's inode, for runner.Job.Records
}

// restoreJail restores the checkpoint of ps into a new jail with limits.
func (s *Service) restoreJail(ps *pausedState, limits jail.Limits) (*restored, error) {
	p, err := newPipes(true, true)
	if err != nil {
		return nil, err
	}
	j, err := s.e.Restore(jail.Spec{Image: ps.info.Image, Limits: limits}, ps.dir, jail.Process{
		Stdin: p.stdinR, Stdout: p.stdoutW, Stderr: p.stderrW,
		ExtraFiles: []*os.File{p.jobR, p.recW, p.ctlR, p.statW},
	})
	if err != nil {
		p.closeAll()
		return nil, err
	}
	p.closeChildEnds()
	st := &started{j: j, p: p}
	records, err := newRecordsPipe(p.recR)
	if err != nil {
		st.Destroy()
		return nil, err
	}
	var fi unix.Stat_t
	rc, err := p.recR.SyscallConn() // not Fd(): that would make it blocking
	if err == nil {
		if cerr := rc.Control(func(fd uintptr) { err = unix.Fstat(int(fd), &fi) }); err == nil {
			err = cerr
		}
	}
	if err != nil {
		st.Destroy()
		return nil, err
	}
	return &restored{st: st, ctl: runner.NewControl(p.ctlW, p.statR), records: records, ino: fi.Ino}, nil
}

// install makes the restored jail r the session's, callMu held, with the
// reports of pending (a paused session's, from before its pause) passed
// on; its init executes afresh (reexecInit).
func (ss *Session) install(r *restored, pending chan runner.Report) {
	ss.wire(r.st, r.ctl, r.records)
	for more := pending != nil; more; {
		select {
		case rep := <-pending:
			ss.events <- rep
		default:
			more = false
		}
	}
	ss.mu.Lock()
	ss.paused = nil
	ss.recordsIno = r.ino
	ss.reexeced = false
	ss.mu.Unlock()
	ss.reexecInit(r.ctl)
}

// removeCheckpoint takes a checkpoint out of the directory at once (a
// rename, synced: a daemon killed afterwards finds nothing of it) and
// removes its files in the background.
func (s *Service) removeCheckpoint(dir, id string) {
	gone := dir + ".tmp-gone"
	if err := os.Rename(dir, gone); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("remove a session's checkpoint", "id", id, "err", err)
		}
		return
	}
	if d, err := os.Open(filepath.Dir(dir)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	s.teardowns.Go(func() {
		if err := os.RemoveAll(gone); err != nil {
			s.log.Warn("remove a session's checkpoint", "id", id, "err", err)
		}
	})
}

// sessionRecord is what a paused session keeps with its checkpoint for a
// later daemon: its own state beside the checkpoint's, and its table's
// record.
type sessionRecord struct {
	V      int               `json:"v"`
	Env    map[string]string `json:"env,omitempty"`
	Calls  int               `json:"calls"`
	Fresh  bool              `json:"fresh"`
	Losses int               `json:"losses"`
	Table  json.RawMessage   `json:"table"`
	// Snapshot: the checkpoint is a snapshot's (Session.Snapshot), not a
	// paused session's.
	Snapshot bool `json:"snapshot,omitempty"`
}

// Detach forgets a paused session in this process, its checkpoint left
// on disk for the next daemon (RecoverPaused): a daemon stopping. A live
// session is ended (Close).
func (ss *Session) Detach() {
	ss.mu.Lock()
	paused := ss.paused != nil && !ss.pausing
	ss.mu.Unlock()
	ss.finish(spec.EndShutdown, paused)
}

// Recovered is a paused session of an earlier daemon, adopted, or one of
// its snapshots.
type Recovered struct {
	Session  *Session  // nil for a snapshot
	Snapshot *Snapshot // nil for a session
	// Table is what the session's table gave Pause (or Snapshot).
	Table []byte
	// Paused is its checkpoint.
	Paused PauseInfo
}

// RecoverPaused adopts the paused sessions an earlier daemon left in the
// checkpoint directory: each a Session paused as it was, restored at its
// next call; and its snapshots. It removes what is not a whole checkpoint of this daemon's
// key: a pause, an end or a probe cut short (temporary names), a
// checkpoint without a record of its session or whose record does not
// verify, and scratch directories of restores cut short. A daemon
// without CRIU (or whose probe failed) adopts them too: they stay paused,
// kept on disk, and a call answers 503 saying why. With no key it leaves
// the directory as it is and adopts nothing. Call it once, before any
// session pauses.
func (s *Service) RecoverPaused() []Recovered {
	if s.cpDir == "" {
		return nil
	}
	ents, err := os.ReadDir(s.cpDir)
	if err != nil {
		s.log.Error("paused sessions: read the checkpoint directory", "err", err)
		return nil
	}
	var out []Recovered
	for _, ent := range ents {
		name := ent.Name()
		if name == "key" || name == ".criu" {
			continue
		}
		dir := filepath.Join(s.cpDir, name)
		snapshot := strings.HasPrefix(name, "n-")
		if (!strings.HasPrefix(name, "s-") && !snapshot) || strings.Contains(name, ".tmp-") || !ent.IsDir() {
			if err := os.RemoveAll(dir); err != nil {
				s.log.Warn("paused sessions: remove a leftover", "name", name, "err", err)
			}
			continue
		}
		info, err := s.e.ReadCheckpointInfo(dir)
		if errors.Is(err, jail.ErrCheckpointsOff) {
			return nil // not this daemon's to judge: kept as they are
		}
		var rec sessionRecord
		if err == nil {
			if err = json.Unmarshal(info.Record, &rec); err == nil && (rec.V != 1 || len(rec.Table) == 0 || rec.Snapshot != snapshot) {
				err = errors.New("no record of its session")
			}
		}
		if err != nil {
			s.log.Warn("paused sessions: a checkpoint not adopted; removed", "name", name, "err", err)
			s.removeCheckpoint(dir, name)
			continue
		}
		if scratch, _ := filepath.Glob(filepath.Join(dir, ".restore-*")); len(scratch) > 0 {
			for _, d := range scratch {
				_ = os.RemoveAll(d)
			}
		}
		if snapshot {
			sn := &Snapshot{s: s, id: strings.TrimPrefix(name, "n-"), dir: dir, info: info, rec: rec}
			out = append(out, Recovered{Snapshot: sn, Table: rec.Table, Paused: PauseInfo{At: info.Created, Bytes: info.Bytes}})
			continue
		}
		ss, err := s.pausedSession(strings.TrimPrefix(name, "s-"), dir, info, rec, false)
		if err != nil {
			return out // closed meanwhile
		}
		out = append(out, Recovered{Session: ss, Table: rec.Table, Paused: PauseInfo{At: info.Created, Bytes: info.Bytes}})
	}
	return out
}

// pausedSession makes a session paused in the checkpoint in dir, with
// the state rec: its next call (or resume) restores it. A shared
// checkpoint (a fork's) is left in place by the restore.
func (s *Service) pausedSession(id, dir string, info jail.CheckpointInfo, rec sessionRecord, shared bool) (*Session, error) {
	ss := &Session{
		s: s, id: id, limits: info.Limits, env: rec.Env, image: info.Image,
		calls: rec.Calls, fresh: rec.Fresh, losses: rec.Losses,
		interrupt: make(chan struct{}, 1),
		done:      make(chan struct{}),
		paused:    &pausedState{dir: dir, info: info, events: make(chan runner.Report, 8), shared: shared},
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, jail.ErrClosed
	}
	if s.sessions == nil {
		s.sessions = map[*Session]struct{}{}
	}
	s.sessions[ss] = struct{}{}
	return ss, nil
}

// MaxForks bounds a fork's count.
const MaxForks = 16

// Fork makes n sessions of ss, each a restore of one checkpoint of it
// into a jail of its own (host ids, cgroup, workspace copy), with the
// random generators of its interpreter reseeded (reseedCode), frozen as
// between calls; ss runs on as it was (a paused ss stays paused: its
// checkpoint is the one restored). Its errors are Pause's; a failure
// after some children were made ends them.
func (ss *Session) Fork(n int) (_ []*Session, retErr error) {
	if n < 1 || n > MaxForks {
		return nil, errdefs.Field("count", "must be in 1..%d, got %d", MaxForks, n)
	}
	if !ss.tryCall() {
		return nil, errdefs.New(errdefs.ErrConflict, "the session is running a call; fork it once the call ended")
	}
	defer ss.callMu.Unlock()
	if ss.isEnded() {
		return nil, ss.endedError()
	}
	if err := ss.commandsBlock("fork"); err != nil {
		return nil, err
	}
	if why := ss.s.CheckpointsUnavailable(); why != "" {
		return nil, errdefs.New(errdefs.ErrUnavailable, "sessions cannot fork on this host: %s", why)
	}
	ss.mu.Lock()
	ps, st := ss.paused, ss.st
	rec := sessionRecord{V: 1, Env: ss.env, Calls: ss.calls, Fresh: ss.fresh, Losses: ss.losses}
	switch {
	case ss.egress:
		ss.mu.Unlock()
		return nil, errdefs.New(errdefs.ErrConflict, "a session with network egress cannot fork: its network is not checkpointed")
	case ps == nil && !st.j.Manifest().RunnerCan(runner.FeatureRecords):
		ss.mu.Unlock()
		return nil, errdefs.New(errdefs.ErrConflict, "the session's image %q predates pausing (its runner cannot take new pipes): rebuild it", ss.image)
	case ps == nil && ss.recordsIno != 0 && !ss.reexeced:
		ss.mu.Unlock()
		return nil, errdefs.New(errdefs.ErrConflict, "a session resumed from a pause by an image whose init cannot execute itself afresh cannot fork")
	}
	ss.mu.Unlock()
	dir, info := "", jail.CheckpointInfo{}
	if ps != nil {
		dir, info = ps.dir, ps.info
	} else {
		dir = filepath.Join(ss.s.cpDir, "f-"+jail.NewID()+".tmp-fork")
		var err error
		info, err = st.j.Snapshot(dir, []*os.File{st.p.jobW, st.p.recR, st.p.ctlW, st.p.statR}, nil)
		if ferr := freeze(st.j); ferr != nil {
			ss.s.log.Error("freeze a session after its fork's checkpoint; ending it", "id", ss.ID(), "err", ferr)
			ss.end(spec.EndFreezeFailed)
		}
		if err != nil {
			if errors.Is(err, jail.ErrCheckpointRefused) {
				return nil, errdefs.New(errdefs.ErrConflict, "the session cannot be forked (it keeps running): %s", refusedReason(err))
			}
			ss.s.log.Error("session fork checkpoint", "id", ss.ID(), "err", err)
			return nil, errdefs.New(errdefs.ErrUnavailable, "the session could not be forked (it keeps running); the daemon's log says why")
		}
		defer ss.s.removeCheckpoint(dir, ss.ID())
	}
	kids := make([]*Session, 0, n)
	defer func() {
		if retErr != nil {
			for _, k := range kids {
				k.Close()
			}
		}
	}()
	for range n {
		kid, err := ss.s.pausedSession(jail.NewID(), dir, info, rec, true)
		if err != nil {
			return nil, err
		}
		kids = append(kids, kid)
		if err := kid.reseed(); err != nil {
			ss.s.log.Error("session fork: restore a child", "id", ss.ID(), "err", err)
			return nil, errdefs.New(errdefs.ErrUnavailable, "a fork of the session could not be restored (the session runs on); the daemon's log says why")
		}
	}
	return kids, nil
}

// reseedCode gives the random generators a restored copy of an
// interpreter shares with its original new seeds from the kernel: every
// random.Random of the interpreter (the random module's own among them)
// and numpy.random's RandomState and Generator objects, when numpy.random
// is imported. secrets, os.urandom and uuid4 draw from the kernel each
// time already. It prints how many it reseeded.
const reseedCode = `def _jaild_reseed():
    import gc, random, sys
    nr = sys.modules.get("numpy.random")
    n = 0
    for o in gc.get_objects():
        if isinstance(o, random.Random):
            o.seed()
            n += 1
        elif nr is not None and isinstance(o, nr.RandomState):
            o.seed()
            n += 1
        elif nr is not None and isinstance(o, nr.Generator):
            bg = o.bit_generator
            bg.state = type(bg)().state
            n += 1
    return n
print(_jaild_reseed())
del _jaild_reseed
`

// reseed restores a fork's child and runs reseedCode in it, a call that
// is not counted: the child's next call has the number the parent's
// would have.
func (ss *Session) reseed() error {
	ss.mu.Lock()
	calls := ss.calls
	ss.mu.Unlock()
	r, err := ss.Exec(context.Background(), &Call{Code: reseedCode, Timeout: 30 * time.Second, OutputBytes: 4096})
	if err != nil {
		return err
	}
	ss.mu.Lock()
	ss.calls = calls
	ss.mu.Unlock()
	if r.Status != spec.StatusOK {
		return fmt.Errorf("reseed: %s %q", r.Status, r.Stderr)
	}
	return nil
}

// ProbeCheckpoints finds out whether this host can pause sessions: the
// engine checkpoints and restores a jail of its own
// (jail.Engine.ProbeCheckpoint). Until it has, and where it could not,
// Pause answers ErrUnavailable with CheckpointsUnavailable's reason. It
// returns that reason ("" when sessions can pause).
func (s *Service) ProbeCheckpoints(timeout time.Duration) string {
	if s.cpDir == "" {
		return *s.cpWhy.Load()
	}
	why := ""
	if err := os.MkdirAll(s.cpDir, 0o700); err != nil {
		s.log.Error("checkpoint directory", "err", err)
		why = "the checkpoint directory cannot be made (see the daemon's log)"
	} else if err := s.e.ProbeCheckpoint(s.cpDir, timeout); err != nil {
		s.log.Warn("checkpoint probe failed: sessions cannot pause", "err", err)
		why = "checkpoint and restore of a test jail failed: " + probeReason(err)
	}
	s.cpWhy.Store(&why)
	return why
}

// probeReason says why in a few words, naming no host path.
func probeReason(err error) string {
	switch {
	case errors.Is(err, jail.ErrCheckpointsOff) && err != jail.ErrCheckpointsOff: //nolint:errorlint // the bare sentinel is "none configured"
		return "CRIU cannot be used here (see the daemon's log)"
	case errors.Is(err, jail.ErrCheckpointsOff):
		return "no CRIU is configured (sessions.criu)"
	case errors.Is(err, jail.ErrCheckpointRefused), errors.Is(err, jail.ErrRestoreFailed):
		return err.Error() // CRIU's first error, host paths taken out
	case strings.Contains(err.Error(), "criu said: "):
		// CRIU ended before its log: what it said (no path of the jail's).
		return "criu could not start: " + err.Error()[strings.Index(err.Error(), "criu said: ")+len("criu said: "):]
	}
	return "see the daemon's log"
}

// CheckpointsUnavailable is why sessions cannot pause on this host; ""
// when they can.
func (s *Service) CheckpointsUnavailable() string { return *s.cpWhy.Load() }

// reexecTimeout bounds init's answer to Reexec.
const reexecTimeout = 5 * time.Second

// reexecInit has a restored session's init execute itself afresh
// (runner.Control.Reexec): CRIU made the restored init's memory outside
// the jail's user namespace, and cannot dump it again while it is
// non-dumpable (measured: CRIU 4.2.1, Linux 6.18); after an execve it is
// the jail's again, and the session can pause again. callMu is held. An
// image without the feature, or no answer, leaves the session running but
// unable to pause again (Pause says so).
func (ss *Session) reexecInit(ctl *runner.Control) {
	if !ss.st.j.Manifest().RunnerCan(runner.FeatureReexec) {
		return
	}
	if err := ctl.Reexec(); err != nil {
		return
	}
	timer := time.NewTimer(reexecTimeout)
	defer timer.Stop()
	for {
		select {
		case rep := <-ss.events:
			if rep.Kind == runner.ReportStarted {
				ss.mu.Lock()
				ss.reexeced = true
				ss.mu.Unlock()
				return
			}
			// An exit report of the interpreter, from before the pause:
			// the next call finds the loss as it would have.
			defer func() { ss.events <- rep }()
		case <-ss.done:
			return
		case <-timer.C:
			ss.s.log.Warn("restored session's init did not execute afresh; it cannot pause again", "id", ss.ID())
			return
		}
	}
}
