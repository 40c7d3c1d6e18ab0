// Package policy turns a wire request (internal/api) and its caller into
// what the run service takes (internal/run/spec): the one validator of
// requests and the one routine that resolves limits against the image's
// defaults and the caller's maxima. Every refusal is an errdefs error
// that names the field and the bound. It does no I/O of its own: what
// needs the daemon's state (stored files, the file store's sink, the
// image's defaults) comes in a Request's resolvers.
package policy

import (
	"encoding/base64"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/jaild/jaild/internal/allowlist"
	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/run/spec"
)

// Bounds on request fields (the body cap bounds them all as well).
const (
	MaxCodeBytes  = 1 << 20
	MaxStdinBytes = 16 << 20
	// MaxSessionStdinBytes bounds a session call's stdin: escaped as JSON
	// in the call's job (at most 6 bytes each), with the code, it stays
	// within runner.MaxJobBytes.
	MaxSessionStdinBytes = 8 << 20
	// MaxFileIDs bounds the stored files one request opens: each holds a
	// descriptor until the run ends.
	MaxFileIDs = 100
)

// Policy is the daemon's configuration as requests meet it: the callers'
// maxima, the network policy, the sessions' bounds.
type Policy struct {
	cfg config.Config
}

// New returns the policy of cfg.
func New(cfg config.Config) *Policy { return &Policy{cfg: cfg} }

// Resolvers are what a request's validation needs of the daemon's state.
type Resolvers struct {
	// Defaults are the limits of the request's image.
	Defaults config.Limits
	// Sink resolves return_files_as: nil for inline.
	Sink func(as string) (spec.FileSink, error)
	// Open opens the caller's stored file id (the caller of Files closes
	// it: CloseFiles). Its errors name no field.
	Open func(id string) (spec.File, error)
}

// Maxima are the limits a caller may ask for.
func (p *Policy) Maxima(who peer.Caller) config.Limits {
	if who.Admin {
		return p.cfg.AdminMaxima
	}
	return p.cfg.Maxima
}

// Execute validates an execute request (its image resolved) into the run
// service's. On error nothing is left open; on success the caller closes
// the request's files after the run (CloseFiles).
func (p *Policy) Execute(req *api.ExecuteRequest, image string, who peer.Caller, rs Resolvers) (*spec.Request, error) {
	limits, err := p.Limits(req.Limits, rs.Defaults, who)
	if err != nil {
		return nil, err
	}
	jr := &spec.Request{Code: req.Code, LastLineInteractive: req.LastLineInteractive, Env: req.Env, Limits: limits, Image: image}
	if jr.Stdin, err = Stdin(req.Stdin, MaxStdinBytes, "the maximum is"); err != nil {
		return nil, err
	}
	if err := Patterns(req.ReturnFiles); err != nil {
		return nil, err
	}
	jr.ReturnFiles = req.ReturnFiles
	if jr.Store, err = rs.Sink(req.ReturnFilesAs); err != nil {
		return nil, err
	}
	if err := spec.ValidateEnv(req.Env); err != nil {
		return nil, err // a field error of env already
	}
	if jr.Network, err = p.Network(req.Network, req.AllowHosts, who); err != nil {
		return nil, err
	}
	// Last: stored files are opened here, and nothing after may fail.
	if jr.Files, err = Files(req.Files, limits.WorkspaceBytes, rs.Open); err != nil {
		return nil, err
	}
	return jr, nil
}

// Code checks the code of a lint or format request: bounded, no NUL.
func Code(code string) error {
	if len(code) > MaxCodeBytes {
		return errdefs.Field("code", "is %d bytes; the maximum is %d", len(code), MaxCodeBytes)
	}
	if strings.IndexByte(code, 0) >= 0 {
		return errdefs.Field("code", "contains a NUL byte")
	}
	return nil
}

// RunCode checks code to run: Code, and not empty.
func RunCode(code string) error {
	if code == "" {
		return errdefs.Field("code", "is required and must not be empty")
	}
	return Code(code)
}

// Stdin bounds a request's stdin; nil is none. bound says what the
// maximum is in the message ("the maximum is", "the maximum in a session
// call is").
func Stdin(in *string, most int, bound string) ([]byte, error) {
	if in == nil {
		return nil, nil
	}
	if len(*in) > most {
		return nil, errdefs.Field("stdin", "is %d bytes; %s %d", len(*in), bound, most)
	}
	return []byte(*in), nil
}

// Patterns checks return_files.
func Patterns(patterns []string) error {
	if len(patterns) > spec.MaxPatterns {
		return errdefs.Field("return_files", "has %d entries; the maximum is %d", len(patterns), spec.MaxPatterns)
	}
	for i, p := range patterns {
		if err := spec.ValidatePattern(p); err != nil {
			return errdefs.InField(fmt.Sprintf("return_files[%d]", i), err)
		}
	}
	return nil
}

// CloseFiles closes the stored files a request opened (each once; several
// entries may share one).
func CloseFiles(files []spec.File) {
	done := map[any]bool{}
	for _, f := range files {
		if f.Src != nil && !done[f.Src] {
			done[f.Src] = true
			f.Src.Close()
		}
	}
}

// Files validates files and decodes their contents, at most
// workspaceBytes in total; a file_id is opened with open (the caller
// closes it: CloseFiles; on error Files has closed what it opened).
func Files(files []api.FileIn, workspaceBytes int64, open func(id string) (spec.File, error)) (_ []spec.File, err error) {
	if len(files) > spec.MaxFiles {
		return nil, errdefs.Field("files", "has %d entries; the maximum is %d", len(files), spec.MaxFiles)
	}
	var out []spec.File
	defer func() {
		if err != nil {
			CloseFiles(out)
		}
	}()
	seen := map[string]bool{}
	opened := map[string]spec.File{}
	var total int64
	for i, f := range files {
		if err := spec.ValidatePath(f.Path); err != nil {
			return nil, errdefs.InField(fmt.Sprintf("files[%d].path", i), err)
		}
		if seen[f.Path] {
			return nil, errdefs.Field(fmt.Sprintf("files[%d].path", i), "duplicate path %q", f.Path)
		}
		seen[f.Path] = true
		rf, err := file(i, f, opened, open)
		if err != nil {
			return out, err
		}
		rf.Path = f.Path
		out = append(out, rf)
		total += rf.Len()
		if total > workspaceBytes {
			return out, errdefs.Field("files", "%d bytes in total, more than the workspace size of %d bytes", total, workspaceBytes)
		}
	}
	// A file cannot also be a directory of another.
	for i, f := range files {
		for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
			if seen[dir] {
				return out, errdefs.Field(fmt.Sprintf("files[%d].path", i), "%q is inside %q, which is a file of this request", f.Path, dir)
			}
		}
	}
	return out, nil
}

// file is files[i]'s content: decoded, or its stored file (opened once per
// id: written one at a time, entries share the descriptor).
func file(i int, f api.FileIn, opened map[string]spec.File, open func(id string) (spec.File, error)) (spec.File, error) {
	switch {
	case f.FileID != "" && f.ContentB64 != "":
		return spec.File{}, errdefs.Field(fmt.Sprintf("files[%d]", i), "has both content_b64 and file_id; give one")
	case f.FileID == "":
		data, err := base64.StdEncoding.DecodeString(f.ContentB64)
		if err != nil {
			return spec.File{}, errdefs.Field(fmt.Sprintf("files[%d].content_b64", i), "not valid standard base64: %v", err)
		}
		return spec.File{Data: data}, nil
	}
	if prev, ok := opened[f.FileID]; ok {
		return prev, nil
	}
	if len(opened) == MaxFileIDs {
		return spec.File{}, errdefs.Field("files", "names more than %d different file_id", MaxFileIDs)
	}
	rf, err := open(f.FileID)
	if err != nil {
		if _, class := errdefs.Classify(err); class == errdefs.ErrInternal.Error() {
			return spec.File{}, err // the daemon's, not the caller's
		}
		return spec.File{}, errdefs.InField(fmt.Sprintf("files[%d].file_id", i), err)
	}
	opened[f.FileID] = rf
	return rf, nil
}

// Network resolves a request's network and allow_hosts against the
// daemon's policy.
func (p *Policy) Network(network string, allowHosts []string, who peer.Caller) (*spec.Network, error) {
	switch network {
	case "", api.NetworkNone:
		if len(allowHosts) > 0 {
			return nil, errdefs.New(errdefs.ErrInvalidArgument, `allow_hosts needs "network": "internet"`)
		}
		return nil, nil
	case api.NetworkInternet:
	default:
		return nil, errdefs.Field("network", `must be "none" or "internet", got %q`, network)
	}
	pol := p.cfg.Network
	if !pol.Enabled {
		return nil, errdefs.New(errdefs.ErrForbidden, `"network": "internet" refused: this daemon has network egress disabled (network.enabled in its configuration)`)
	}
	if !who.Network {
		return nil, errdefs.New(errdefs.ErrForbidden, `"network": "internet" refused: %s is not allowed network egress (%s)`, who.Who(), networkHint(who, pol.AllowGroup))
	}
	list := allowHosts
	if len(list) == 0 {
		list = pol.AllowHosts
	}
	allow, err := allowlist.ParseList(list)
	if err != nil {
		return nil, errdefs.Field("allow_hosts", "%v", err)
	}
	if len(pol.AllowHosts) > 0 && !who.Admin {
		ceiling, _ := allowlist.ParseList(pol.AllowHosts) // validated with the config
		for _, a := range allow {
			if !slices.Contains(ceiling, a) {
				return nil, errdefs.New(errdefs.ErrForbidden, "allow_hosts: %q is not among the destinations this daemon allows (%s)", a, strings.Join(pol.AllowHosts, ", "))
			}
		}
	}
	return &spec.Network{Allow: allow}, nil
}

// networkHint says how a caller gets egress.
func networkHint(who peer.Caller, group string) string {
	if who.Client != "" {
		return "its [[tls.clients]] entry needs network = true"
	}
	return fmt.Sprintf("it needs to be in group %q, or an admin", group)
}

// Limits resolves a request's limits: the image's defaults for what it
// leaves out, and a clear refusal, naming the field and the bound, for a
// value below 1 or above the caller's maxima. A caller can never raise a
// limit.
func (p *Policy) Limits(in *api.Limits, defaults config.Limits, who peer.Caller) (spec.Limits, error) {
	v, m := defaults, p.Maxima(who)
	if in != nil {
		fields := []struct {
			name     string
			req      *int64
			dst, max *int64
		}{
			{"timeout_ms", in.TimeoutMs, &v.TimeoutMs, &m.TimeoutMs},
			{"memory_mb", in.MemoryMB, &v.MemoryMB, &m.MemoryMB},
			{"pids", in.Pids, &v.Pids, &m.Pids},
			{"file_size_mb", in.FileSizeMB, &v.FileSizeMB, &m.FileSizeMB},
			{"output_bytes", in.OutputBytes, &v.OutputBytes, &m.OutputBytes},
		}
		for _, f := range fields {
			if f.req == nil {
				continue
			}
			if err := Within("limits."+f.name, *f.req, *f.max); err != nil {
				return spec.Limits{}, err
			}
			*f.dst = *f.req
		}
	}
	return EngineLimits(v), nil
}

// Within refuses v below 1 or above most, naming field and the bound.
func Within(field string, v, most int64) error {
	switch {
	case v < 1:
		return errdefs.Field(field, "must be at least 1, got %d", v)
	case v > most:
		return errdefs.Field(field, "%d is above the maximum of %d for this caller", v, most)
	}
	return nil
}

// EngineLimits turns wire limits into the engine's, deriving the limits a
// caller does not set (workspace, address space, ...) from the defaults.
func EngineLimits(v config.Limits) spec.Limits {
	l := spec.DefaultLimits()
	l.Timeout = time.Duration(v.TimeoutMs) * time.Millisecond
	l.MemoryBytes = v.MemoryMB << 20
	l.Pids = v.Pids
	l.FileSizeBytes = v.FileSizeMB << 20
	l.OutputBytes = v.OutputBytes
	// The workspace must hold at least one file of the largest size allowed.
	l.WorkspaceBytes = max(l.WorkspaceBytes, l.FileSizeBytes)
	// RLIMIT_AS is no memory limit (the cgroup is); it stops absurd mappings
	// and must stay well above memory_mb.
	l.AddressSpaceBytes = max(l.AddressSpaceBytes, 4*l.MemoryBytes)
	return l
}

// WireLimits are limits as the API shows them.
func WireLimits(l spec.Limits) api.LimitValues {
	return api.LimitValues{
		TimeoutMs: l.Timeout.Milliseconds(), MemoryMB: l.MemoryBytes >> 20, Pids: l.Pids,
		FileSizeMB: l.FileSizeBytes >> 20, OutputBytes: l.OutputBytes,
	}
}

// RuffLimits are the limits of a lint or format jail: ruff is fast, and
// its output is bounded by the diagnostics of at most MaxCodeBytes of
// code.
func (p *Policy) RuffLimits() spec.Limits {
	l := EngineLimits(p.cfg.Defaults)
	l.Timeout = 20 * time.Second
	l.OutputBytes = 32 << 20
	l.Pids = max(l.Pids, 32) // ruff's threads (RuffEnv), and init's
	return l
}

// RuffEnv bounds ruff's threads: its thread pool would start one per CPU
// of the host, and a host with as many CPUs as the run's pids limit would
// fail every lint (one piece of code needs few anyway).
func RuffEnv() map[string]string { return map[string]string{"RAYON_NUM_THREADS": "4"} }
