package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/jail"
)

// fetchedCRIU is where `make deps` puts a CRIU new enough for this
// kernel (deploy/criu/fetch.sh).
const fetchedCRIU = "/var/cache/jaild/criu/current/bin/criu"

// probeTimeout bounds the start-up probe of checkpoints.
const probeTimeout = time.Minute

// findCRIU is the criu program of cfg: the configured one, else what
// `make deps` fetched, else criu on PATH; "" when there is none.
func findCRIU(cfg config.Sessions) string {
	if cfg.CRIU != "" {
		return cfg.CRIU
	}
	if fi, err := os.Stat(fetchedCRIU); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return fetchedCRIU
	}
	if p, err := exec.LookPath("criu"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	return ""
}

// checkpointKey makes the checkpoint directory (0700) and returns the key
// that signs checkpoints, made once and kept in it (key, 0600). A
// predecessor's paused sessions stay: recoverSessions adopts them (and
// removes what is not one).
func checkpointKey(dir string) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, err
	}
	return jail.CheckpointKey(filepath.Join(dir, "key"))
}

// recoverSessions adopts the paused sessions an earlier daemon left in
// the checkpoint directory (run.Service.RecoverPaused), before the daemon
// serves: each keeps its id, owner and state, and its next call restores
// it. One the table cannot take is ended (its checkpoint removed), and
// logged.
func (d *Daemon) recoverSessions() {
	if d.cfg.Sessions.CheckpointDir == "" || !d.cfg.Sessions.Enabled {
		return
	}
	adopted, snapshots := 0, 0
	for _, rec := range d.engine.RecoverPaused() {
		if rec.Snapshot != nil {
			if _, err := d.srv.AdoptSnapshot(rec.Snapshot, rec.Table); err != nil {
				d.log.Error("a snapshot of an earlier daemon could not be adopted; removed", "err", err)
				rec.Snapshot.Remove()
				continue
			}
			snapshots++
			continue
		}
		if _, err := d.srv.AdoptSession(rec.Session, rec.Table); err != nil {
			d.log.Error("a paused session of an earlier daemon could not be adopted; ended", "err", err)
			rec.Session.Close()
			continue
		}
		adopted++
	}
	if adopted+snapshots > 0 {
		d.log.Info("paused sessions and snapshots of an earlier daemon adopted", "sessions", adopted, "snapshots", snapshots)
	}
}

// probeCheckpoints finds out whether sessions can pause here, before the
// daemon serves (so that /v1/info says it from the first request), and
// logs it: a checkpoint and a restore of a tiny jail, ~0.4 s.
func (d *Daemon) probeCheckpoints() {
	if d.cfg.Sessions.CheckpointDir == "" || !d.cfg.Sessions.Enabled {
		return
	}
	start := time.Now()
	if why := d.engine.ProbeCheckpoints(probeTimeout); why != "" {
		d.log.Warn("sessions cannot pause on this host; idle sessions end", "reason", why)
		return
	}
	d.log.Info("sessions can pause to disk", "probe_ms", time.Since(start).Milliseconds(), "criu", d.criu)
}
