package spec

import (
	"encoding/json"
	"time"

	"github.com/jaild/jaild/internal/pool"
	"github.com/jaild/jaild/internal/rootfs"
)

// Status is the outcome of a run.
type Status string

// Statuses, most specific first in the order Run decides them.
const (
	StatusOK          Status = "ok"           // exited 0
	StatusError       Status = "error"        // exited non-zero
	StatusTimeout     Status = "timeout"      // wall-clock limit reached
	StatusMemoryLimit Status = "memory_limit" // the cgroup OOM killer fired
	StatusCPULimit    Status = "cpu_limit"    // RLIMIT_CPU reached
	StatusOutputLimit Status = "output_limit" // an output stream passed its cap
	StatusKilled      Status = "killed"       // killed by a signal, or cancelled
)

// Exception is the runner's record of an uncaught exception, validated.
type Exception struct {
	Type    string
	Message string
	Line    int // 0 when unknown
}

// ReturnedFile is a file read back from a run's workspace: its content
// (Data), or the reason it was not returned (Error), or its copy in the
// file store (FileID, SHA256; Data is empty then).
type ReturnedFile struct {
	Path  string
	Size  int64
	Data  []byte
	Error string
	// FileID and SHA256 name the file's copy in the file store, for a
	// file a Taker stored instead of reading it (Data is empty then).
	FileID, SHA256 string
}

// Figure is a PNG the runner saved from a matplotlib figure.
type Figure struct {
	Name string
	Data []byte
}

// Output types of rich outputs (Output.Type), as Jupyter names them.
const (
	OutputDisplay = "display_data"   // display(), or a figure
	OutputResult  = "execute_result" // the last expression's value
)

// OutputRef is the runner's word on one rich output, in the order the
// records give: a "display" or "result" record naming its output-N.json
// (Name; none for a result with only text/plain), or a "figure" record
// naming its figure-N.png with the figure's text. Records come from the
// jail: a ref only says where to look, and what is found is validated.
type OutputRef struct {
	Type   string // OutputDisplay or OutputResult
	Name   string // output-N.json, or empty
	Figure string // figure-N.png, for a figure
	Text   string // a figure's text/plain
}

// Output is one rich output of a run: a MIME bundle, as a notebook's
// display_data or execute_result. Data is in the order of the runner's
// file, at most one value per type.
type Output struct {
	Type     string
	Data     []MimeValue
	Metadata json.RawMessage // a compact JSON object, or nil for {}
}

// MimeValue is one type's value of a bundle: text (Text, UTF-8), bytes
// (image/png, image/jpeg and application/pdf; base64 on the wire), or
// JSON (application/json and the +json types).
type MimeValue struct {
	Type  string
	Text  []byte
	Bytes []byte
	JSON  json.RawMessage
}

// Size is the bytes v holds.
func (v MimeValue) Size() int64 { return int64(len(v.Text) + len(v.Bytes) + len(v.JSON)) }

// Result is everything a run produced. Every byte in it came from the jail
// and has been bounded; text fields may hold invalid UTF-8.
type Result struct {
	ID              string
	Image           string // the name of the image it ran in
	Status          Status
	ExitCode        int // -1 when killed by a signal
	Signal          int // 0 when exited normally
	Stdout, Stderr  []byte
	StdoutTruncated bool
	StderrTruncated bool
	TimedOut        bool
	OOMKilled       bool
	Cancelled       bool
	Duration        time.Duration
	CPUTime         time.Duration
	PeakMemoryBytes uint64
	Exception       *Exception
	ResultRepr      *string
	Figures         []Figure // PNGs saved by the runner from matplotlib figures
	// Outputs are the rich outputs in the order produced: display(),
	// figures (sharing the Figures' bytes) and the last expression's
	// value.
	Outputs []Output
	Files   []ReturnedFile
	Warm    bool // served by a jail from the warm pool
	// Start is the time it took to have a jail ready for the run: taking
	// one from the warm pool, or creating and starting a cold one (0 for
	// a session's call).
	Start   time.Duration
	Network *NetworkUsage // the run's traffic, when it had egress
}

// CallResult is what one call produced, and what became of the session.
type CallResult struct {
	Result
	// Count is the call's number in the session (execution_count).
	Count int
	// StateLost: the interpreter ended during the call (it would not stop
	// at the interrupt, the OOM killer took it, it crashed or exited) and
	// the next call gets a fresh one in the same jail, workspace and /tmp
	// kept. LostReason says why.
	StateLost  bool
	LostReason string
	// Ended: the session ended during the call (EndReason).
	Ended     bool
	EndReason string
	// Resumed: the session was paused, and the call restored it first,
	// which took Restore.
	Resumed bool
	Restore time.Duration
}

// PauseInfo describes a paused session's checkpoint.
type PauseInfo struct {
	At    time.Time
	Bytes int64
	// Took is how long the pause took (zero when it was paused already).
	Took time.Duration
}

// Reasons a session's interpreter was lost or the session ended.
const (
	LostTimeout     = "timeout"      // would not stop at the interrupt
	LostMemory      = "memory_limit" // the OOM killer
	LostCPU         = "cpu_limit"    // RLIMIT_CPU
	LostOutput      = "output_limit" // would not stop writing at the interrupt
	LostCancelled   = "cancelled"    // the client went away and it would not stop
	LostCrashed     = "crashed"      // died by a signal of its own
	LostExited      = "exited"       // the process exited (os._exit, ...)
	EndLosses       = "repeated_losses"
	EndJailEnded    = "jail_ended" // the jail's init ended
	EndClosed       = "deleted"
	EndShutdown     = "daemon_shutdown"
	EndFreezeFailed = "freeze_failed" // the host could not freeze it between calls
	EndRestartError = "restart_failed"
	EndResumeFailed = "resume_failed" // its checkpoint could not be restored
)

// InterruptGrace is how long a session's code has to get back to the
// prompt after SIGINT before its interpreter is killed.
const InterruptGrace = 2 * time.Second

// ImageStats describes one image the service serves.
type ImageStats struct {
	Name     string
	Default  bool
	Manifest *rootfs.Manifest
}

// PoolStats describes the warm pool for /v1/info.
type PoolStats struct {
	Size, Ready           int // preloaded jails
	PlainSize, PlainReady int
	Preimport             []string
	Paused                bool // under memory pressure
	// Refill and PlainRefill time the creations of each kind.
	Refill, PlainRefill pool.Refills
}
