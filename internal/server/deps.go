package server

import (
	"log/slog"

	"github.com/jaild/jaild/internal/admission"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/filestore"
	"github.com/jaild/jaild/internal/sessions"
)

// DepsFor builds the services cfg asks a Server to run with, over engine:
// admission, the session table and the file store (nil when disabled).
// The daemon's composition root and test harnesses both build them here,
// so that a harness serves what the daemon serves; the caller owns them
// until it hands them to New.
func DepsFor(cfg config.Config, engine Engine, log *slog.Logger) (Deps, error) {
	a := cfg.Admission
	memPerUID, memTotal := cfg.SessionMemory()
	d := Deps{
		Engine: engine,
		Log:    log,
		Admission: admission.New(admission.Config{
			MaxConcurrent: cfg.MaxConcurrent(), QueueSize: a.QueueSize, QueueWait: a.QueueWait.Duration,
			RatePerMinute: a.RatePerMinute, Burst: a.Burst, DailyQuota: a.DailyQuota,
		}),
		Sessions: sessions.New(sessions.Config{
			MaxPerUID: cfg.Sessions.MaxPerUID, MaxTotal: cfg.Sessions.MaxTotal, KeepEnded: cfg.Sessions.KeepEnded.Duration,
			MaxMemoryPerUID: memPerUID, MaxMemoryTotal: memTotal,
			PauseOnIdle: cfg.Sessions.OnIdle != "end", PausedTTL: cfg.Sessions.PausedTTL.Duration,
			PauseOnShutdown: cfg.Sessions.OnShutdown != "end", ShutdownPause: cfg.Sessions.ShutdownPause.Duration,
			EncodeMeta:               encodeSessionMeta,
			MaxCheckpointBytesPerUID: cfg.Sessions.MaxCheckpointMBPerUID << 20,
			MaxCheckpointBytesTotal:  cfg.Sessions.MaxCheckpointMBTotal << 20,
			SnapshotTTL:              cfg.Sessions.PausedTTL.Duration,
		}),
	}
	if f := cfg.Files; f.Enabled {
		var err error
		d.Files, err = filestore.Open(filestore.Config{
			Dir: f.Dir, MaxFileBytes: f.MaxFileMB << 20, MaxBytesPerUID: f.MaxMBPerUID << 20, MaxFilesPerUID: f.MaxFilesPerUID,
			MaxTotalBytes: f.MaxTotalMB << 20, MinFreeBytes: f.MinFreeMB << 20, TTL: f.TTL.Duration,
		}, log)
		if err != nil {
			d.Sessions.Close()
			return Deps{}, err
		}
	}
	return d, nil
}
