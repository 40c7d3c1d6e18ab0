package server

import (
	"math"
	"net/http"
	"runtime/debug"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/version"
)

func wireLimits(l config.Limits) api.LimitValues {
	return api.LimitValues{TimeoutMs: l.TimeoutMs, MemoryMB: l.MemoryMB, Pids: l.Pids, FileSizeMB: l.FileSizeMB, OutputBytes: l.OutputBytes}
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) error {
	who := callerOf(r)
	m := s.engine.Manifest()
	prof := s.engine.Seccomp()
	running, queued := s.adm.Usage()
	info := api.Info{
		Version: version.Version,
		API:     "v1",
		Rootfs: api.RootfsInfo{
			Name: m.Name, ImageDigest: m.ImageDigest, PythonVersion: m.PythonVersion, DebianSuite: m.DebianSuite,
			PythonPackages: m.PythonPackages, Packages: len(m.Packages), BuiltAt: m.BuiltAt,
		},
		Defaults:    wireLimits(s.cfg.Defaults),
		Maxima:      wireLimits(s.cfg.Maxima),
		AdminMaxima: wireLimits(s.cfg.AdminMaxima),
		CgroupMode:  s.engine.CgroupMode(),
		Seccomp:     api.SeccompInfo{Profile: s.cfg.SeccompProfile, DefaultAction: string(prof.DefaultAction), Rules: len(prof.Syscalls)},
		Capacity:    api.Capacity{MaxConcurrent: s.cfg.MaxConcurrent(), Running: running, QueueSize: s.cfg.Admission.QueueSize, Queued: queued},
		Caller:      api.CallerInfo{UID: who.UID, Client: who.Client, Admin: who.Admin, Network: who.Network},
	}
	n := s.cfg.Network
	info.Network = api.NetworkInfo{Available: n.Enabled, Allowed: who.Network, DefaultAllowHosts: n.AllowHosts}
	if info.Network.DefaultAllowHosts == nil {
		info.Network.DefaultAllowHosts = []string{}
	}
	if n.Enabled {
		info.Network.MaxConnections, info.Network.MaxBytesPerSecond = n.MaxConnections, n.MaxBytesPerSecond
	}
	info.Images = s.imagesInfo()
	for _, im := range info.Images {
		if im.Default {
			info.Pool = im.Pool
		}
	}
	if info.Pool.Preimport == nil {
		info.Pool.Preimport = []string{}
	}
	if info.Rootfs.PythonPackages == nil {
		info.Rootfs.PythonPackages = map[string]string{}
	}
	if n := s.adm.QuotaRemaining(who); n >= 0 {
		info.Caller.QuotaRemaining = &n
	}
	sc := s.cfg.Sessions
	live, busy := s.sessions.Counts()
	maxTTL := sc.MaxTTL.Duration
	if who.Admin {
		maxTTL = sc.AdminMaxTTL.Duration
	}
	info.Sessions = api.SessionInfo{
		Enabled: sc.Enabled, Live: live, Running: busy, MaxPerUID: sc.MaxPerUID, MaxTotal: sc.MaxTotal,
		IdleTimeoutS: int64(sc.IdleTimeout.Seconds()), MaxIdleTimeoutS: int64(sc.MaxIdleTimeout.Seconds()),
		TTLS: int64(sc.TTL.Seconds()), MaxTTLS: int64(maxTTL.Seconds()), InterruptGraceMs: spec.InterruptGrace.Milliseconds(),
	}
	info.Sessions.Paused = s.sessions.PausedCount()
	why := s.engine.CheckpointsUnavailable()
	onIdle := "end"
	if why == "" && sc.OnIdle != "end" {
		onIdle = "pause"
	}
	onStop := "end"
	if why == "" && sc.OnShutdown != "end" {
		onStop = "pause"
	}
	info.Sessions.Pause = api.PauseInfo{Available: why == "", Reason: why, OnIdle: onIdle, OnShutdown: onStop, PausedTTLS: int64(sc.PausedTTL.Seconds())}
	var perUID int64
	info.Sessions.MemoryReservedBytes, perUID, info.Sessions.MaxMemoryTotalBytes = s.sessions.Memory()
	if !who.Admin {
		info.Sessions.MaxMemoryPerUIDBytes = perUID
	}
	info.Files = s.filesInfo(who.UID)
	info.Memory = api.MemoryInfo{BudgetBytes: s.budget.max, InUseBytes: s.budget.inUse()}
	p := s.pace()
	info.Memory.WriteTimeoutMs, info.Memory.WriteMinBytesPerSecond = p.timeout.Milliseconds(), p.rate
	info.Memory.CgroupHighBytes, info.Memory.TmpfsBytes = s.engine.DaemonMemoryHigh()
	if l := debug.SetMemoryLimit(-1); l < math.MaxInt64 {
		info.Memory.LimitBytes = l
	}
	writeJSON(w, http.StatusOK, info)
	return nil
}
