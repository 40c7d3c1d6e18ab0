package run

import (
	"errors"
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
func (ss *Session) Pause() (PauseInfo, error) {
	if !ss.callMu.TryLock() {
		return PauseInfo{}, errdefs.New(errdefs.ErrConflict, "the session is running a call; pause it once the call ended")
	}
	defer ss.callMu.Unlock()
	if ss.isEnded() {
		return PauseInfo{}, ss.endedError()
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
	ss.pausing = true
	st := ss.st
	ss.mu.Unlock()
	start := time.Now()
	dir := filepath.Join(ss.s.cpDir, "s-"+jail.NewID())
	info, err := st.j.Checkpoint(dir, []*os.File{st.p.jobW, st.p.recR, st.p.ctlW, st.p.statR})
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
	ss.mu.Lock()
	ended := ss.ended // ended meanwhile (DELETE): end saw no checkpoint
	if !ended {
		ss.paused = &pausedState{dir: dir, info: info, events: ss.events}
		ss.st = nil
	}
	ss.pausing = false
	ss.mu.Unlock()
	if ended {
		_ = os.RemoveAll(dir)
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
	if !ss.callMu.TryLock() {
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
	p, err := newPipes(true, true)
	if err != nil {
		return 0, err
	}
	j, err := ss.s.e.Restore(jail.Spec{Image: ps.info.Image, Limits: ss.limits}, ps.dir, jail.Process{
		Stdin: p.stdinR, Stdout: p.stdoutW, Stderr: p.stderrW,
		ExtraFiles: []*os.File{p.jobR, p.recW, p.ctlR, p.statW},
	})
	if err != nil {
		p.closeAll()
		if errors.Is(err, jail.ErrCheckpointTampered) {
			ss.s.log.Error("paused session's checkpoint does not verify; ending the session", "id", ss.ID(), "err", err)
			ss.end(spec.EndResumeFailed)
			return 0, ss.endedError()
		}
		ss.s.log.Error("resume session", "id", ss.ID(), "err", err)
		return 0, errdefs.New(errdefs.ErrUnavailable, "the paused session could not be restored now (it stays paused); the daemon's log says why")
	}
	p.closeChildEnds()
	st := &started{j: j, p: p}
	records, err := newRecordsPipe(p.recR)
	if err != nil {
		st.Destroy()
		return 0, err
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
		return 0, err
	}
	ctl := runner.NewControl(p.ctlW, p.statR)
	ss.wire(st, ctl, records)
	for pending := true; pending; {
		select {
		case rep := <-ps.events:
			ss.events <- rep
		default:
			pending = false
		}
	}
	ss.mu.Lock()
	ss.paused = nil
	ss.recordsIno = fi.Ino
	ss.reexeced = false
	ss.mu.Unlock()
	ss.reexecInit(ctl)
	if err := os.RemoveAll(ps.dir); err != nil {
		ss.s.log.Warn("remove a resumed session's checkpoint", "id", ss.ID(), "err", err)
	}
	return max(time.Since(start), time.Nanosecond), nil
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
