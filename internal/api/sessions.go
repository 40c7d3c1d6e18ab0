package api

import "time"

// SessionCreateRequest is the body of POST /v1/sessions. Limits are the
// session's jail's for its whole life (memory_mb, pids, file_size_mb) and
// its calls' defaults (timeout_ms, output_bytes).
type SessionCreateRequest struct {
	Limits       *Limits           `json:"limits,omitempty"`
	IdleTimeoutS *int64            `json:"idle_timeout_s,omitempty"`
	TTLS         *int64            `json:"ttl_s,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Network      string            `json:"network,omitempty"`
	AllowHosts   []string          `json:"allow_hosts,omitempty"`
	Files        []FileIn          `json:"files,omitempty"`
	// Image names the session's image (GET /v1/info lists them); empty:
	// the default image.
	Image string `json:"image,omitempty"`
	// FromSnapshot starts the session from a snapshot of the caller's
	// (POST /v1/sessions/{id}/snapshots): its state, image, limits and
	// environment are the snapshot's; only idle_timeout_s and ttl_s may
	// be given with it.
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// CPUCores is the session's CPU quota in cores (e.g. 0.5, 2): its
	// processes together, calls and background commands, use at most that
	// much CPU time per second. The daemon's sessions.cpu_cores by default.
	CPUCores *float64 `json:"cpu_cores,omitempty"`
}

// Session describes a session: the 201 body of POST /v1/sessions, and the
// body of GET and DELETE /v1/sessions/{id}.
type Session struct {
	SessionID    string      `json:"session_id"`
	CreatedAt    time.Time   `json:"created_at"`
	ExpiresAt    time.Time   `json:"expires_at"`
	IdleTimeoutS int64       `json:"idle_timeout_s"`
	Limits       LimitValues `json:"limits"`
	// CPUCores is the session's CPU quota in cores.
	CPUCores float64 `json:"cpu_cores"`
	// CPUMs is the CPU time the session's processes have used so far,
	// its interpreter's, commands' and terminals' together (0 where the
	// daemon cannot tell).
	CPUMs int64 `json:"cpu_ms"`
	// State is "idle", "running" (a call is in progress), "paused" (on
	// disk: its next call restores it) or "ended".
	State string `json:"state"`
	// PausedAt and PausedBytes describe a paused session's checkpoint
	// (null and 0 otherwise).
	PausedAt    *time.Time `json:"paused_at"`
	PausedBytes int64      `json:"paused_bytes"`
	// EndReason says why an ended session ended: "deleted",
	// "idle_timeout", "expired", "repeated_losses", "daemon_shutdown",
	// "jail_ended", "restart_failed", "freeze_failed"; null while it
	// lives.
	EndReason      *string   `json:"end_reason"`
	ExecutionCount int       `json:"execution_count"`
	LastUsedAt     time.Time `json:"last_used_at"`
	// Network is "none" or "internet".
	Network string `json:"network"`
	// Warm: the session's jail came from the warm pool.
	Warm bool `json:"warm"`
	// UID is the owner's uid (admins list everyone's).
	UID uint32 `json:"uid"`
	// Image is the name of the session's image.
	Image string `json:"image"`
}

// Session states.
const (
	SessionIdle    = "idle"
	SessionRunning = "running"
	SessionEnded   = "ended"
	SessionPaused  = "paused"
)

// SessionPauseResponse is the 200 body of POST /v1/sessions/{id}/pause
// and /resume: the session, and how long the pause or the restore took
// (0 when it was paused already, or not paused).
type SessionPauseResponse struct {
	Session Session `json:"session"`
	TookMs  float64 `json:"took_ms"`
}

// SessionForkRequest is the body of POST /v1/sessions/{id}/fork.
type SessionForkRequest struct {
	// Count is how many children: 1 to MaxForks.
	Count int `json:"count"`
}

// MaxForks bounds SessionForkRequest.Count.
const MaxForks = 16

// SessionForkResponse is the 200 body of POST /v1/sessions/{id}/fork:
// the children, new sessions of the caller's.
type SessionForkResponse struct {
	Sessions []Session `json:"sessions"`
	TookMs   float64   `json:"took_ms"`
}

// Snapshot describes a session's snapshot: the 201 body of POST
// /v1/sessions/{id}/snapshots, and the body of GET and DELETE
// /v1/snapshots/{snapshot_id}.
type Snapshot struct {
	SnapshotID string `json:"snapshot_id"`
	// SessionID is the session it was taken of (which may have ended).
	SessionID string    `json:"session_id"`
	UID       uint32    `json:"uid"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the daemon removes it (sessions.paused_ttl).
	ExpiresAt *time.Time `json:"expires_at"`
	// Bytes is its size on the daemon's disk, counted in the checkpoint
	// quotas.
	Bytes int64  `json:"bytes"`
	Image string `json:"image"`
}

// SnapshotList is the body of GET /v1/snapshots and GET
// /v1/sessions/{id}/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// SessionRestoreRequest is the body of POST /v1/sessions/{id}/restore.
type SessionRestoreRequest struct {
	SnapshotID string `json:"snapshot_id"`
}

// SessionList is the body of GET /v1/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// SessionExecuteRequest is the body of POST /v1/sessions/{id}/execute:
// the body of /v1/execute without the jail's fields (env, network and
// allow_hosts, limits other than timeout_ms and output_bytes are the
// session's). LastLineInteractive defaults to true.
type SessionExecuteRequest struct {
	Code                string   `json:"code"`
	Stdin               *string  `json:"stdin,omitempty"`
	Files               []FileIn `json:"files,omitempty"`
	ReturnFiles         []string `json:"return_files,omitempty"`
	Limits              *Limits  `json:"limits,omitempty"`
	LastLineInteractive *bool    `json:"last_line_interactive,omitempty"`
	ReturnFilesAs       string   `json:"return_files_as,omitempty"`
	// Refused with a clear message: they are the session's.
	Env        map[string]string `json:"env,omitempty"`
	Network    string            `json:"network,omitempty"`
	AllowHosts []string          `json:"allow_hosts,omitempty"`
}

// SessionExecuteResponse is the 200 body of POST /v1/sessions/{id}/execute.
type SessionExecuteResponse struct {
	ExecuteResponse
	// ExecutionCount is the call's number in the session, from 1.
	ExecutionCount int           `json:"execution_count"`
	Session        SessionStatus `json:"session"`
}

// SessionStatus is what became of the session during a call.
type SessionStatus struct {
	SessionID string  `json:"session_id"`
	State     string  `json:"state"`
	EndReason *string `json:"end_reason"`
	// StateLost: the interpreter ended during the call and the next call
	// gets a fresh one (workspace and /tmp kept); LostReason says why:
	// "timeout", "memory_limit", "cpu_limit", "output_limit",
	// "cancelled", "crashed", "exited".
	StateLost  bool    `json:"state_lost"`
	LostReason *string `json:"lost_reason"`
	// Resumed: the session was paused and the call restored it first,
	// which took RestoreMs.
	Resumed   bool    `json:"resumed"`
	RestoreMs float64 `json:"restore_ms,omitempty"`
}

// SessionInterruptResponse is the 200 body of POST
// /v1/sessions/{id}/interrupt.
type SessionInterruptResponse struct {
	// Interrupted: a call was running and got SIGINT.
	Interrupted bool    `json:"interrupted"`
	Session     Session `json:"session"`
}

// FSEntry is one file of a session's /workspace or /tmp (issue 29): an
// entry of GET /v1/sessions/{id}/fs/{path}'s listing, and the answer of
// its PUT and POST.
type FSEntry struct {
	Name string `json:"name"`
	// Path is its path in the session: /workspace/... or /tmp/...
	Path string `json:"path"`
	// Type is file, dir, symlink (not followed) or other (a FIFO, a
	// socket, a device node).
	Type string `json:"type"`
	// Size is a file's or a link's size in bytes; 0 for the others.
	Size int64 `json:"size"`
	// Mode is its permission bits in octal, e.g. "0644".
	Mode  string    `json:"mode"`
	MTime time.Time `json:"mtime"`
}

// FSListing is the answer of GET /v1/sessions/{id}/fs/{path} for a
// directory: its entries sorted by name, at most 10,000 (Truncated: more).
type FSListing struct {
	Path      string    `json:"path"`
	Entries   []FSEntry `json:"entries"`
	Truncated bool      `json:"truncated"`
}

// CommandRequest is the body of POST /v1/sessions/{id}/commands (issue
// 29): a command run in the session's jail beside its interpreter. One of
// Cmd (run by /bin/sh -c) and Argv.
type CommandRequest struct {
	Cmd  string   `json:"cmd,omitempty"`
	Argv []string `json:"argv,omitempty"`
	// Cwd is its working directory: /workspace (the default), /tmp or
	// beneath them.
	Cwd string `json:"cwd,omitempty"`
	// Env is added to the session's environment for this command.
	Env   map[string]string `json:"env,omitempty"`
	Stdin *string           `json:"stdin,omitempty"`
	// TimeoutMs and OutputBytes bound a foreground command (per stream);
	// the session's call limits are the defaults and the caller's maxima
	// the bounds.
	TimeoutMs   *int64 `json:"timeout_ms,omitempty"`
	OutputBytes *int64 `json:"output_bytes,omitempty"`
	// Background: answer at once with the command's id; it runs on.
	Background bool `json:"background,omitempty"`
}

// CommandResult is the 200 body of a foreground command.
type CommandResult struct {
	CommandID       string       `json:"command_id"`
	Status          string       `json:"status"`
	ExitCode        *int         `json:"exit_code"` // null when killed by a signal
	Signal          *int         `json:"signal"`    // null when it exited
	Stdout          string       `json:"stdout"`
	Stderr          string       `json:"stderr"`
	StdoutTruncated bool         `json:"stdout_truncated"`
	StderrTruncated bool         `json:"stderr_truncated"`
	OOMKilled       bool         `json:"oom_killed"`
	Usage           CommandUsage `json:"usage"`
}

// CommandUsage is a command's wall and CPU time (its processes').
type CommandUsage struct {
	DurationMs int64 `json:"duration_ms"`
	CPUMs      int64 `json:"cpu_ms"`
}

// CommandInfo is a background command: the 202 body of its start (no
// output yet), an entry of GET .../commands, and with its output kept so
// far (the last 1 MiB of each stream), GET .../commands/{cid}.
type CommandInfo struct {
	CommandID string   `json:"command_id"`
	Argv      []string `json:"argv"`
	// Pid is its program's pid inside the session (0: unknown).
	Pid   int    `json:"pid"`
	State string `json:"state"` // running or exited
	// Status, ExitCode and Signal are null while it runs.
	Status    *string    `json:"status"`
	ExitCode  *int       `json:"exit_code"`
	Signal    *int       `json:"signal"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
	// CPUMs is the CPU time of its processes, once it ended.
	CPUMs  int64   `json:"cpu_ms"`
	Stdout *string `json:"stdout,omitempty"`
	Stderr *string `json:"stderr,omitempty"`
	// StdoutDroppedBytes and StderrDroppedBytes count the older output
	// not kept.
	StdoutDroppedBytes int64 `json:"stdout_dropped_bytes"`
	StderrDroppedBytes int64 `json:"stderr_dropped_bytes"`
	// Terminal says it is a terminal's shell (GET .../pty): its output
	// went to the terminal, none is kept.
	Terminal bool `json:"terminal,omitempty"`
}

// CommandList is the answer of GET /v1/sessions/{id}/commands: the
// session's last 64 background commands, oldest first.
type CommandList struct {
	Commands []CommandInfo `json:"commands"`
}

// TerminalControl is a client's text message on a session's terminal
// (GET /v1/sessions/{id}/pty): {"type":"resize","cols":N,"rows":N}.
// Input goes in binary messages.
type TerminalControl struct {
	Type string `json:"type"`
	Cols int    `json:"cols,omitempty"`
	Rows int    `json:"rows,omitempty"`
}

// TerminalMessage is the daemon's text message on a session's terminal:
// {"type":"exit"} with how the shell ended, its last message before a
// normal close; or {"type":"error"} naming what was wrong with a control.
// The terminal's output goes in binary messages.
type TerminalMessage struct {
	Type string `json:"type"` // exit or error
	// Status, ExitCode and Signal are the exit's (ExitCode null after a
	// signal, Signal null after an exit).
	Status   string `json:"status,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   *int   `json:"signal,omitempty"`
	Message  string `json:"message,omitempty"`
}

// CommandStdinRequest is the body of POST .../commands/{cid}/stdin.
type CommandStdinRequest struct {
	Data string `json:"data"`
	// EOF closes the command's stdin after Data.
	EOF bool `json:"eof,omitempty"`
}

// CommandSignalRequest is the body of POST .../commands/{cid}/signal.
type CommandSignalRequest struct {
	Signal string `json:"signal"`
}
