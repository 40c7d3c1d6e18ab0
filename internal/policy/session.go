package policy

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/run/spec"
)

// Session is a validated session creation: what the run service makes
// the session's jail with, and what its calls are bounded by.
type Session struct {
	Spec   spec.SessionSpec
	Limits spec.Limits // the jail's, with the calls' default timeout and output bound
	Bounds CallBounds
	Idle   time.Duration
	TTL    time.Duration
}

// CallBounds are what a session's calls are resolved against: the
// session's limits as their defaults, the owner's maxima as their bounds.
type CallBounds struct {
	Limits                  spec.Limits
	MaxTimeoutMs, MaxOutput int64
}

// Sessions refuses every session operation when sessions are disabled.
func (p *Policy) Sessions() error {
	if !p.cfg.Sessions.Enabled {
		return errdefs.New(errdefs.ErrForbidden, "sessions are disabled on this daemon (sessions.enabled in its configuration)")
	}
	return nil
}

// Session validates a session creation (its image resolved). On success
// the caller closes Spec.Files once the session is made (CloseFiles).
func (p *Policy) Session(req *api.SessionCreateRequest, image string, who peer.Caller, rs Resolvers) (*Session, error) {
	limits, err := p.Limits(req.Limits, rs.Defaults, who)
	if err != nil {
		return nil, err
	}
	sc := p.cfg.Sessions
	out := &Session{Limits: limits}
	if out.Idle, err = Seconds("idle_timeout_s", req.IdleTimeoutS, sc.IdleTimeout.Duration, sc.MaxIdleTimeout.Duration); err != nil {
		return nil, err
	}
	maxTTL := sc.MaxTTL.Duration
	if who.Admin {
		maxTTL = sc.AdminMaxTTL.Duration
	}
	if out.TTL, err = Seconds("ttl_s", req.TTLS, sc.TTL.Duration, maxTTL); err != nil {
		return nil, err
	}
	if err := spec.ValidateEnv(req.Env); err != nil {
		return nil, err
	}
	files, err := Files(req.Files, limits.WorkspaceBytes, rs.Open)
	if err != nil {
		return nil, err
	}
	netw, err := p.Network(req.Network, req.AllowHosts, who)
	if err == nil {
		err = MemoryFits(limits.MemoryBytes)
	}
	if err != nil {
		CloseFiles(files)
		return nil, err
	}
	maxCPU := sc.MaxCPUCores
	if who.Admin {
		maxCPU = config.MaxCPUCoresCeiling
	}
	limits.CPUCores = sc.CPUCores
	if v := req.CPUCores; v != nil {
		if !(*v >= 0.01 && *v <= maxCPU) {
			CloseFiles(files)
			return nil, errdefs.Field("cpu_cores", "must be in 0.01..%g for this caller, got %g", maxCPU, *v)
		}
		limits.CPUCores = *v
	}
	life := limits
	life.Timeout = out.TTL // RLIMIT_CPU's hard limit: one interpreter's CPU over the session's life
	out.Spec = spec.SessionSpec{Limits: life, Network: netw, Files: files, Env: req.Env, Image: image}
	m := p.Maxima(who)
	out.Bounds = CallBounds{Limits: limits, MaxTimeoutMs: m.TimeoutMs, MaxOutput: m.OutputBytes}
	return out, nil
}

// Seconds resolves an optional duration field in seconds.
func Seconds(field string, v *int64, def, most time.Duration) (time.Duration, error) {
	if v == nil {
		return def, nil
	}
	maxS := int64(most / time.Second)
	if *v < 1 || *v > maxS {
		return 0, errdefs.Field(field, "must be in 1..%d for this caller, got %d", maxS, *v)
	}
	return time.Duration(*v) * time.Second, nil
}

// MemoryFits refuses a session whose memory limit the host's available
// memory could not hold (503): a session holds its memory between calls.
func MemoryFits(limit int64) error {
	avail, ok := memAvailable()
	if !ok || avail >= uint64(limit) {
		return nil
	}
	return errdefs.New(errdefs.ErrUnavailable, "the host has %d MiB of memory available, less than the session's memory_mb of %d; try later or ask for less", avail>>20, limit>>20)
}

func memAvailable() (uint64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// Call validates a session call into the run service's: the session's
// defaults for what it leaves out, the owner's maxima as the bounds; the
// fields that are the session's are refused. On success the caller
// closes the call's files after it (CloseFiles).
//
// CallFields is not part of it: the server refuses those before it looks
// the session up.
func Call(req *api.SessionExecuteRequest, b CallBounds, rs Resolvers) (*spec.Call, error) {
	if err := RunCode(req.Code); err != nil {
		return nil, err
	}
	c := &spec.Call{Code: req.Code, Timeout: b.Limits.Timeout, OutputBytes: b.Limits.OutputBytes, LastLineInteractive: true}
	if req.LastLineInteractive != nil {
		c.LastLineInteractive = *req.LastLineInteractive
	}
	if l := req.Limits; l != nil {
		if v := l.TimeoutMs; v != nil {
			if *v < 1 || *v > b.MaxTimeoutMs {
				return nil, errdefs.Field("limits.timeout_ms", "must be in 1..%d for this caller, got %d", b.MaxTimeoutMs, *v)
			}
			c.Timeout = time.Duration(*v) * time.Millisecond
		}
		if v := l.OutputBytes; v != nil {
			if *v < 1 || *v > b.MaxOutput {
				return nil, errdefs.Field("limits.output_bytes", "must be in 1..%d for this caller, got %d", b.MaxOutput, *v)
			}
			c.OutputBytes = *v
		}
	}
	var err error
	// A call's stdin travels in its job, escaped: a smaller bound than a
	// run's.
	if c.Stdin, err = Stdin(req.Stdin, MaxSessionStdinBytes, "the maximum in a session call is"); err != nil {
		return nil, err
	}
	if err := Patterns(req.ReturnFiles); err != nil {
		return nil, err
	}
	c.ReturnFiles = req.ReturnFiles
	if c.Store, err = rs.Sink(req.ReturnFilesAs); err != nil {
		return nil, err
	}
	if c.Files, err = Files(req.Files, b.Limits.WorkspaceBytes, rs.Open); err != nil {
		return nil, err
	}
	return c, nil
}

// CallFields refuses the fields of a call that are the session's.
func CallFields(req *api.SessionExecuteRequest) error {
	const why = "is the session's, set when it was created; a call cannot change it"
	switch {
	case len(req.Env) > 0:
		return errdefs.Field("env", why)
	case req.Network != "":
		return errdefs.Field("network", why)
	case len(req.AllowHosts) > 0:
		return errdefs.Field("allow_hosts", why)
	}
	if l := req.Limits; l != nil {
		switch {
		case l.MemoryMB != nil:
			return errdefs.Field("limits.memory_mb", why)
		case l.Pids != nil:
			return errdefs.Field("limits.pids", why)
		case l.FileSizeMB != nil:
			return errdefs.Field("limits.file_size_mb", why)
		}
	}
	return nil
}

// Command validates a session command into the run service's: cmd (by
// /bin/sh -c) or argv, the call's defaults and bounds for a foreground
// one's timeout and output.
func Command(req *api.CommandRequest, b CallBounds) (*spec.Command, error) {
	c := &spec.Command{Cwd: req.Cwd, Env: req.Env, Background: req.Background, Timeout: b.Limits.Timeout, OutputBytes: b.Limits.OutputBytes}
	switch {
	case req.Cmd != "" && len(req.Argv) > 0:
		return nil, errdefs.Field("argv", "cannot be given with cmd: one of them")
	case req.Cmd != "":
		c.Argv = []string{"/bin/sh", "-c", req.Cmd}
	case len(req.Argv) > 0:
		c.Argv = req.Argv
	default:
		return nil, errdefs.Field("cmd", "is required (or argv)")
	}
	if v := req.TimeoutMs; v != nil {
		if req.Background {
			return nil, errdefs.Field("timeout_ms", "is a foreground command's; a background one runs until it ends or is deleted")
		}
		if *v < 1 || *v > b.MaxTimeoutMs {
			return nil, errdefs.Field("timeout_ms", "must be in 1..%d for this caller, got %d", b.MaxTimeoutMs, *v)
		}
		c.Timeout = time.Duration(*v) * time.Millisecond
	}
	if v := req.OutputBytes; v != nil {
		if req.Background {
			return nil, errdefs.Field("output_bytes", "is a foreground command's; a background one keeps the last %d bytes of each stream", spec.CommandRing)
		}
		if *v < 1 || *v > b.MaxOutput {
			return nil, errdefs.Field("output_bytes", "must be in 1..%d for this caller, got %d", b.MaxOutput, *v)
		}
		c.OutputBytes = *v
	}
	var err error
	if c.Stdin, err = Stdin(req.Stdin, spec.MaxCommandStdin, "the maximum for a command is"); err != nil {
		return nil, err
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}
