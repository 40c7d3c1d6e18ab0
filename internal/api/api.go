// Package api is jaild's wire contract: the JSON request and response
// bodies of the HTTP API on the Unix socket, and the error body that
// carries an errdefs class (FromWire rebuilds it on the client's side).
//
// Field names are the public contract (see docs/API.md); change them only
// with a new API version.
package api

import "encoding/json"

// ExecuteRequest is the body of POST /v1/execute.
type ExecuteRequest struct {
	Code                string            `json:"code"`
	Stdin               *string           `json:"stdin,omitempty"`
	Files               []FileIn          `json:"files,omitempty"`
	ReturnFiles         []string          `json:"return_files,omitempty"`
	Limits              *Limits           `json:"limits,omitempty"`
	LastLineInteractive bool              `json:"last_line_interactive,omitempty"`
	Env                 map[string]string `json:"env,omitempty"`
	// Network is "none" (the default: loopback only) or "internet".
	Network string `json:"network,omitempty"`
	// AllowHosts, with "internet", are the only destinations the run may
	// reach: "example.com", "*.example.com", "198.51.100.7",
	// "198.51.100.0/24", each with an optional ":port".
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// ReturnFilesAs is "inline" (the default: content_b64 in the
	// response) or "store": each returned file goes into the file store
	// and comes back as its file_id and sha256.
	ReturnFilesAs string `json:"return_files_as,omitempty"`
	// Image names the image to run in (GET /v1/info lists them); empty:
	// the daemon's default image.
	Image string `json:"image,omitempty"`
}

// Where returned files go: ExecuteRequest.ReturnFilesAs.
const (
	ReturnInline = "inline"
	ReturnStore  = "store"
)

// Network modes of an execute request.
const (
	NetworkNone     = "none"
	NetworkInternet = "internet"
)

// FileIn is a file written into the workspace before the code runs: its
// content is either content_b64 or a file of the store (file_id), never
// both.
type FileIn struct {
	Path       string `json:"path"`
	ContentB64 string `json:"content_b64,omitempty"`
	FileID     string `json:"file_id,omitempty"`
}

// Limits are a request's limits; a nil field takes the server default.
type Limits struct {
	TimeoutMs   *int64 `json:"timeout_ms,omitempty"`
	MemoryMB    *int64 `json:"memory_mb,omitempty"`
	Pids        *int64 `json:"pids,omitempty"`
	FileSizeMB  *int64 `json:"file_size_mb,omitempty"`
	OutputBytes *int64 `json:"output_bytes,omitempty"`
}

// ExecuteResponse is the 200 body of POST /v1/execute, for every run that
// started, whatever its outcome.
type ExecuteResponse struct {
	RunID           string     `json:"run_id"`
	Image           string     `json:"image"` // the name of the image it ran in
	Status          string     `json:"status"`
	ExitCode        *int       `json:"exit_code"` // null when killed by a signal
	Signal          *int       `json:"signal"`    // null when it exited
	Stdout          string     `json:"stdout"`
	Stderr          string     `json:"stderr"`
	StdoutTruncated bool       `json:"stdout_truncated"`
	StderrTruncated bool       `json:"stderr_truncated"`
	TimedOut        bool       `json:"timed_out"`
	OOMKilled       bool       `json:"oom_killed"`
	Message         string     `json:"message"`
	Error           *ExecError `json:"error"`
	Result          *string    `json:"result"`
	Files           []FileOut  `json:"files"`
	Figures         []Figure   `json:"figures"`
	// Outputs are the rich outputs in the order produced: display(),
	// matplotlib figures (as image/png) and the last expression's value
	// (execute_result; Result is its text/plain).
	Outputs []Output `json:"outputs"`
	Usage   Usage    `json:"usage"`
	// Network is the run's traffic; null when the run had no egress.
	Network *NetworkUsage `json:"network"`
}

// NetworkUsage is a run's traffic through its network interface.
type NetworkUsage struct {
	BytesSent     uint64 `json:"bytes_sent"`
	BytesReceived uint64 `json:"bytes_received"`
}

// ExecError describes an uncaught exception in the user's code.
type ExecError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	Line    *int   `json:"line"`
}

// FileOut is a returned file, or (Error set, no content) a file that
// matched but was not returned and why.
type FileOut struct {
	Path       string `json:"path"`
	SizeBytes  int64  `json:"size_bytes"`
	ContentB64 string `json:"content_b64,omitempty"`
	// FileID and SHA256 are set instead of ContentB64 for a file returned
	// into the store (return_files_as "store").
	FileID string `json:"file_id,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Figure is a PNG of a matplotlib figure.
type Figure struct {
	Name       string `json:"name"`
	ContentB64 string `json:"content_b64"`
}

// Output is one rich output, as a Jupyter notebook's: OutputType is
// "display_data" or "execute_result"; Data maps MIME types to values:
// text as a string, image/png, image/jpeg and application/pdf as base64,
// application/json (and the +json types) as JSON; Metadata is an object,
// per type. ExecutionCount is set on a session call's execute_result.
type Output struct {
	OutputType     string                     `json:"output_type"`
	Data           map[string]json.RawMessage `json:"data"`
	Metadata       map[string]json.RawMessage `json:"metadata"`
	ExecutionCount *int                       `json:"execution_count,omitempty"`
}

// Output types.
const (
	OutputDisplayData   = "display_data"
	OutputExecuteResult = "execute_result"
)

// Usage is the run's resource usage.
type Usage struct {
	DurationMs      int64  `json:"duration_ms"`
	CPUMs           int64  `json:"cpu_ms"`
	PeakMemoryBytes uint64 `json:"peak_memory_bytes"`
	// Warm: a jail of the warm pool, started before the request, ran it.
	Warm bool `json:"warm"`
}

// LintRequest is the body of POST /v1/lint.
type LintRequest struct {
	Code   string   `json:"code"`
	Select []string `json:"select,omitempty"`
	Ignore []string `json:"ignore,omitempty"`
	// Image names the image whose ruff lints (an image with ruff:
	// ImageInfo.Ruff); empty: the default image, or when it has no ruff
	// the first image by name that has.
	Image string `json:"image,omitempty"`
}

// LintResponse is the 200 body of POST /v1/lint.
type LintResponse struct {
	Diagnostics []Diagnostic `json:"diagnostics"`
}

// Diagnostic is one ruff finding, mapped from ruff's JSON output.
type Diagnostic struct {
	Code        string   `json:"code"` // "invalid-syntax" for a syntax error
	Message     string   `json:"message"`
	Location    Location `json:"location"`
	EndLocation Location `json:"end_location"`
	Fixable     bool     `json:"fixable"`
	URL         string   `json:"url,omitempty"`
}

// Location is a 1-based line and column.
type Location struct {
	Line   int `json:"line"`
	Column int `json:"column"`
}

// FormatRequest is the body of POST /v1/format.
type FormatRequest struct {
	Code string `json:"code"`
	// Image: as LintRequest.Image.
	Image string `json:"image,omitempty"`
}

// FormatResponse is the 200 body of POST /v1/format.
type FormatResponse struct {
	Code    string `json:"code"`
	Changed bool   `json:"changed"`
}

// Info is the body of GET /v1/info.
type Info struct {
	Version     string      `json:"version"`
	API         string      `json:"api"`
	Rootfs      RootfsInfo  `json:"rootfs"` // the default image
	Images      []ImageInfo `json:"images"`
	Defaults    LimitValues `json:"default_limits"`
	Maxima      LimitValues `json:"max_limits"`
	AdminMaxima LimitValues `json:"admin_max_limits"`
	CgroupMode  string      `json:"cgroup_mode"`
	Seccomp     SeccompInfo `json:"seccomp"`
	Capacity    Capacity    `json:"capacity"`
	Caller      CallerInfo  `json:"caller"`
	Pool        PoolInfo    `json:"pool"`
	Network     NetworkInfo `json:"network"`
	Sessions    SessionInfo `json:"sessions"`
	Files       FilesInfo   `json:"files"`
	Memory      MemoryInfo  `json:"memory"`
}

// MemoryInfo describes the daemon's own memory bounds.
type MemoryInfo struct {
	// LimitBytes is the Go runtime's soft memory limit (GOMEMLIMIT); 0:
	// none.
	LimitBytes int64 `json:"limit_bytes"`
	// BudgetBytes bounds the bytes held for the output, figures and files
	// of all runs in flight; a run whose worst case does not fit waits for
	// room (within the queue wait). InUseBytes is reserved now.
	BudgetBytes int64 `json:"budget_bytes"`
	InUseBytes  int64 `json:"in_use_bytes"`
	// CgroupHighBytes is memory.high of the daemon's own cgroup (cgroup
	// v2): a quarter above LimitBytes plus TmpfsBytes, the tmpfs size of
	// every live jail (the files the daemon writes into workspaces are
	// charged to it). 0: not set (cgroup v1, or no limit).
	CgroupHighBytes int64 `json:"cgroup_high_bytes"`
	TmpfsBytes      int64 `json:"tmpfs_bytes"`
	// WriteTimeoutMs and WriteMinBytesPerSecond bound how long a response
	// (and the part of the budget it holds) waits for a slow client: at
	// most WriteTimeoutMs at a time, and in all WriteTimeoutMs plus its
	// bytes at WriteMinBytesPerSecond; a slower client is dropped.
	WriteTimeoutMs         int64 `json:"write_timeout_ms"`
	WriteMinBytesPerSecond int64 `json:"write_min_bytes_per_second"`
}

// SessionInfo describes sessions on this daemon: the policy, and how many
// live now.
type SessionInfo struct {
	Enabled   bool `json:"enabled"`
	Live      int  `json:"live"`
	Running   int  `json:"running"` // live sessions with a call in progress
	MaxPerUID int  `json:"max_per_uid"`
	MaxTotal  int  `json:"max_total"`
	// MemoryReservedBytes is the memory limits (memory_mb) of the sessions
	// live and being made, all callers'; a creation that would take it
	// past MaxMemoryTotalBytes is 503, one taking the caller's own past
	// MaxMemoryPerUIDBytes 429 (admins: no per-caller bound, 0).
	MemoryReservedBytes  int64 `json:"memory_reserved_bytes"`
	MaxMemoryPerUIDBytes int64 `json:"max_memory_per_uid_bytes"`
	MaxMemoryTotalBytes  int64 `json:"max_memory_total_bytes"`
	IdleTimeoutS         int64 `json:"idle_timeout_s"`
	MaxIdleTimeoutS      int64 `json:"max_idle_timeout_s"`
	TTLS                 int64 `json:"ttl_s"`
	MaxTTLS              int64 `json:"max_ttl_s"` // for this caller
	InterruptGraceMs     int64 `json:"interrupt_grace_ms"`
	// Paused counts the paused sessions (on disk), which Live does not.
	Paused int `json:"paused"`
	// Pause says whether sessions can pause here (POST .../pause; on_idle
	// "pause"), and why not.
	Pause PauseInfo `json:"pause"`
}

// PauseInfo says whether this host can pause sessions to disk.
type PauseInfo struct {
	Available bool `json:"available"`
	// Reason says why not ("" when available).
	Reason string `json:"reason,omitempty"`
	// OnIdle is what an idle timeout does: "pause" or "end".
	OnIdle string `json:"on_idle"`
	// OnShutdown is what the daemon's stop does to idle sessions: "pause"
	// (the next daemon adopts every paused session) or "end".
	OnShutdown string `json:"on_shutdown"`
	// PausedTTLS bounds how long a session stays paused (0: its ttl only).
	PausedTTLS int64 `json:"paused_ttl_s"`
}

// NetworkInfo says whether runs may have egress, and on what terms.
type NetworkInfo struct {
	// Available: the daemon has egress enabled.
	Available bool `json:"available"`
	// Allowed: the caller may ask for "internet".
	Allowed bool `json:"allowed"`
	// DefaultAllowHosts apply when a request names none; when non-empty,
	// a non-admin request's allow_hosts must be among them.
	DefaultAllowHosts []string `json:"default_allow_hosts"`
	MaxConnections    int      `json:"max_connections"`      // per run; 0: no bound
	MaxBytesPerSecond int64    `json:"max_bytes_per_second"` // per run and direction; 0: no bound
}

// PoolInfo describes the warm pool: jails started ahead of requests (each
// still single-use). Preloaded ones (Size, Ready) have imported Preimport
// and serve code that imports one of those packages; plain ones serve the
// rest.
type PoolInfo struct {
	Size       int      `json:"size"`
	Ready      int      `json:"ready"`
	Preimport  []string `json:"preimport"`
	PlainSize  int      `json:"plain_size"`
	PlainReady int      `json:"plain_ready"`
	Paused     bool     `json:"paused"` // host memory pressure
}

// RootfsInfo summarises the rootfs manifest.
type RootfsInfo struct {
	Name           string            `json:"name"`
	ImageDigest    string            `json:"image_digest"`
	PythonVersion  string            `json:"python_version"`
	DebianSuite    string            `json:"debian_suite"`
	PythonPackages map[string]string `json:"python_packages"`
	Packages       int               `json:"debian_packages"`
	BuiltAt        string            `json:"built_at"`
}

// ImageInfo describes one image the daemon serves (GET /v1/info):
// requests name it in their image field.
type ImageInfo struct {
	Name    string `json:"name"`
	Default bool   `json:"default"` // a request without an image runs here
	// ImageDigest is the sha256 of the image file, verified when the
	// daemon mounted it.
	ImageDigest    string            `json:"image_digest"`
	SizeBytes      int64             `json:"size_bytes"`
	PythonVersion  string            `json:"python_version"`
	DebianSuite    string            `json:"debian_suite"`
	PythonPackages map[string]string `json:"python_packages"`
	// Wheels are the packages installed from the recipe's wheelhouse.
	Wheels   []WheelInfo `json:"wheels"`
	Packages int         `json:"debian_packages"`
	BuiltAt  string      `json:"built_at"`
	// Ruff: the image has ruff, so lint and format can run in it.
	Ruff bool `json:"ruff"`
	// Defaults are the limits of a run in this image that names none.
	Defaults LimitValues `json:"default_limits"`
	Pool     PoolInfo    `json:"pool"`
}

// WheelInfo is a package installed from an image recipe's wheelhouse.
type WheelInfo struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	SHA256  []string `json:"sha256"`
}

// LimitValues are resolved limits.
type LimitValues struct {
	TimeoutMs   int64 `json:"timeout_ms"`
	MemoryMB    int64 `json:"memory_mb"`
	Pids        int64 `json:"pids"`
	FileSizeMB  int64 `json:"file_size_mb"`
	OutputBytes int64 `json:"output_bytes"`
}

// SeccompInfo describes the seccomp profile in force.
type SeccompInfo struct {
	Profile       string `json:"profile"`
	DefaultAction string `json:"default_action"`
	Rules         int    `json:"rules"`
}

// Capacity describes admission control.
type Capacity struct {
	MaxConcurrent int `json:"max_concurrent"`
	Running       int `json:"running"`
	QueueSize     int `json:"queue_size"`
	Queued        int `json:"queued"`
}

// CallerInfo tells the caller how the daemon sees it.
type CallerInfo struct {
	UID uint32 `json:"uid"`
	// Client names the TLS client the caller is (its certificate's), on
	// the TCP listener; absent on the socket.
	Client         string `json:"client,omitempty"`
	Admin          bool   `json:"admin"`
	Network        bool   `json:"network"`         // may ask for "internet"
	QuotaRemaining *int64 `json:"quota_remaining"` // null when unlimited
}

// Health is the body of GET /v1/health.
type Health struct {
	Status string `json:"status"`
}

// Ready is the body of GET /v1/ready: 200 with ready true when a run sent
// now could be admitted, else 503 with ready false and the reason.
type Ready struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
}

// ErrorBody is the one shape of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the content of ErrorBody.
type ErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
	// Field names the request field that is wrong ("files[2].path"), for
	// invalid_argument errors that concern one field.
	Field string `json:"field,omitempty"`
}

// Run statuses, the values of ExecuteResponse.Status.
const (
	StatusOK          = "ok"
	StatusError       = "error"
	StatusTimeout     = "timeout"
	StatusMemoryLimit = "memory_limit"
	StatusCPULimit    = "cpu_limit"
	StatusOutputLimit = "output_limit"
	StatusKilled      = "killed"
)

// QuotaHeader carries the caller's remaining daily quota on every response
// to a caller that has one.
const QuotaHeader = "X-Jaild-Quota-Remaining"
