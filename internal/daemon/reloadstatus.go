package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ReloadStatusName is the file in the daemon's run_dir where it records the
// outcome of its last reload for `jaild reload`: root's only (0600), since
// the reason names host paths.
const ReloadStatusName = "reload.json"

// ReloadStatus is the outcome of a daemon's reload.
type ReloadStatus struct {
	// PID is the daemon's.
	PID int `json:"pid"`
	// StartedUsec is CLOCK_MONOTONIC, in microseconds, when the reload
	// began: before the configuration was read.
	StartedUsec int64 `json:"started_usec"`
	// OK: the configuration was applied.
	OK bool `json:"ok"`
	// Error says why not: refused (nothing changed) or applied in part.
	Error string `json:"error,omitempty"`
	// Images are the images served after the reload.
	Images string `json:"images"`
}

// noteReload records a reload's outcome in the run directory: a whole file
// or none (temporary file, rename). A status that cannot be written is
// logged; `jaild reload` then waits in vain and says so. A status left by
// a daemon gone is never taken for a later one's: each names its pid and
// when it began.
func (d *Daemon) noteReload(started int64, rerr error) {
	st := ReloadStatus{PID: os.Getpid(), StartedUsec: started, OK: rerr == nil, Images: d.imgs.names()}
	if rerr != nil {
		st.Error = rerr.Error()
	}
	if err := writeReloadStatus(d.cfg.RunDir, st); err != nil {
		d.log.Error("reload: its outcome could not be recorded for jaild reload", "err", err)
	}
}

func writeReloadStatus(dir string, st ReloadStatus) (retErr error) {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	t, err := os.CreateTemp(dir, "."+ReloadStatusName+".*")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			_ = os.Remove(t.Name())
		}
	}()
	_, err = t.Write(b)
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(t.Name(), filepath.Join(dir, ReloadStatusName))
}

// ErrReloadRefused is the class of a reload the daemon refused or applied
// only in part.
var ErrReloadRefused = errors.New("reload refused")

// Reload asks the daemon pid, whose run directory is runDir, to reload
// (SIGHUP) and waits for the outcome of a reload that began after the
// signal: what `systemctl reload` runs, so that it returns once the reload
// is done and fails when it was refused. The error wraps ErrReloadRefused
// with the daemon's reason when refused; other errors say the outcome is
// unknown (the daemon gone, ctx done first).
func Reload(ctx context.Context, pid int, runDir string) (ReloadStatus, error) {
	if pid <= 1 {
		return ReloadStatus{}, fmt.Errorf("pid %d is not a daemon's", pid)
	}
	p := filepath.Join(runDir, ReloadStatusName)
	sent := monotonicUsec()
	if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
		return ReloadStatus{}, fmt.Errorf("signal jaild (pid %d): %w", pid, err)
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if st, ok := readReloadStatus(p); ok && st.PID == pid && st.StartedUsec >= sent {
			if !st.OK {
				return st, fmt.Errorf("%w: %s", ErrReloadRefused, st.Error)
			}
			return st, nil
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return ReloadStatus{}, fmt.Errorf("jaild (pid %d) exited before its reload's outcome", pid)
		}
		select {
		case <-ctx.Done():
			return ReloadStatus{}, fmt.Errorf("no outcome of the reload in %s yet (the daemon may still apply it): %w", p, ctx.Err())
		case <-tick.C:
		}
	}
}

// readReloadStatus reads a status file; a missing or torn one is not one.
func readReloadStatus(p string) (ReloadStatus, bool) {
	var st ReloadStatus
	b, err := os.ReadFile(p)
	if err != nil || json.Unmarshal(b, &st) != nil {
		return st, false
	}
	return st, true
}
