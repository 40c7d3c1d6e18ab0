package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/metrics"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/run/spec"
)

// auditor writes one structured line per request through slog and, when
// configured, keeps the submitted code (bounded, with a retention period)
// for security review.
//
// It also feeds the metrics: every request that runs code, or is refused,
// ends here, so each outcome is counted once.
type auditor struct {
	cfg     config.Audit
	log     *slog.Logger
	metrics *metrics.Metrics
}

func newAuditor(cfg config.Audit, log *slog.Logger) (*auditor, error) {
	a := &auditor{cfg: cfg, log: log}
	if cfg.KeepCode {
		if err := os.MkdirAll(cfg.CodeDir, 0o700); err != nil {
			return nil, fmt.Errorf("audit.code_dir: %w", err)
		}
		go a.expire()
	}
	return a, nil
}

func (a *auditor) refused(who peer.Caller, op string, err error) {
	status, typ := errdefs.Classify(err)
	a.log.Info("audit", "op", op, "uid", who.UID, "client", who.Client, "pid", who.PID, "admin", who.Admin,
		"http_status", status, "error", typ, "reason", err.Error())
	a.metrics.Refused(op, typ)
}

// measure is what the metrics take of a run.
func measure(res *spec.Result, queued, total time.Duration) metrics.Run {
	m := metrics.Run{
		Status: string(res.Status), Warm: res.Warm, JailStart: res.Start,
		QueueWait: queued, Duration: res.Duration, Total: total,
	}
	if n := res.Network; n != nil {
		m.EgressSent, m.EgressReceived = n.BytesSent, n.BytesReceived
	}
	return m
}

func (a *auditor) ran(who peer.Caller, op, code string, l spec.Limits, res *spec.Result, queued, total time.Duration) {
	sum := sha256.Sum256([]byte(code))
	digest := hex.EncodeToString(sum[:])
	a.log.Info("audit", "op", op, "uid", who.UID, "client", who.Client, "pid", who.PID, "admin", who.Admin,
		"run_id", res.ID, "code_sha256", digest, "code_bytes", len(code),
		"timeout_ms", l.Timeout.Milliseconds(), "memory_mb", l.MemoryBytes>>20, "pids", l.Pids,
		"status", res.Status, "exit_code", res.ExitCode, "signal", res.Signal,
		"queue_ms", queued.Milliseconds(), "run_ms", res.Duration.Milliseconds(), "total_ms", total.Milliseconds(),
		"cpu_ms", res.CPUTime.Milliseconds(), "peak_memory_bytes", res.PeakMemoryBytes)
	m := measure(res, queued, total)
	m.Pooled = true // a one-shot run: a warm jail could have served it
	a.metrics.Ran(op, m)
	if a.cfg.KeepCode {
		a.keep(res.ID, code)
	}
}

func (a *auditor) ranSession(who peer.Caller, id string, call int, code string, l spec.Limits, res *spec.CallResult, queued, total time.Duration) {
	sum := sha256.Sum256([]byte(code))
	a.log.Info("audit", "op", "session_execute", "uid", who.UID, "client", who.Client, "pid", who.PID, "admin", who.Admin,
		"session_id", id, "call", call, "run_id", res.ID, "code_sha256", hex.EncodeToString(sum[:]), "code_bytes", len(code),
		"timeout_ms", l.Timeout.Milliseconds(), "status", res.Status, "exit_code", res.ExitCode, "signal", res.Signal,
		"state_lost", res.StateLost, "lost_reason", res.LostReason,
		"queue_ms", queued.Milliseconds(), "run_ms", res.Duration.Milliseconds(), "total_ms", total.Milliseconds(),
		"cpu_ms", res.CPUTime.Milliseconds(), "peak_memory_bytes", res.PeakMemoryBytes)
	a.metrics.Ran(metrics.OpSessionExecute, measure(&res.Result, queued, total))
	if a.cfg.KeepCode {
		a.keep(fmt.Sprintf("%s-%d", id, call), code)
	}
}

// keep stores the code as <code_dir>/<run id>.py, cut at max_code_bytes.
func (a *auditor) keep(id, code string) {
	if int64(len(code)) > a.cfg.MaxCodeBytes {
		code = code[:a.cfg.MaxCodeBytes]
	}
	p := filepath.Join(a.cfg.CodeDir, id+".py")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		a.log.Warn("audit: keep code", "err", err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(code); err != nil {
		a.log.Warn("audit: keep code", "err", err)
	}
}

// expire removes kept code older than the retention period, hourly.
func (a *auditor) expire() {
	for {
		ents, _ := os.ReadDir(a.cfg.CodeDir)
		for _, e := range ents {
			if info, err := e.Info(); err == nil && info.Mode().IsRegular() && time.Since(info.ModTime()) > a.cfg.Retention.Duration {
				_ = os.Remove(filepath.Join(a.cfg.CodeDir, e.Name()))
			}
		}
		time.Sleep(time.Hour)
	}
}
