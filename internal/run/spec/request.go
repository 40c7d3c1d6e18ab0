package spec

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/lazyre"
)

// File is a file written into the workspace before the run starts: Data,
// or Size bytes of Src from its start (a file of the store, copied by the
// kernel: it never passes through the daemon's memory). The caller owns
// Src and closes it after the run.
type File struct {
	Path string // relative to the workspace; see ValidatePath
	Data []byte
	Src  *os.File
	Size int64
}

// Len is the file's length.
func (f *File) Len() int64 {
	if f.Src != nil {
		return f.Size
	}
	return int64(len(f.Data))
}

// Reader reads the file's content from its start (a file written twice,
// into a warm jail that could not serve and then a cold one, is read whole
// each time). A Src is an *os.File behind an io.LimitedReader, which
// io.Copy into the workspace turns into copy_file_range or sendfile.
func (f *File) Reader() io.Reader {
	if f.Src != nil {
		if _, err := f.Src.Seek(0, io.SeekStart); err != nil {
			return errReader{err}
		}
		return io.LimitReader(f.Src, f.Size)
	}
	return bytes.NewReader(f.Data)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// OutputFunc receives a run's output as it is captured: stream 1 is
// stdout, 2 stderr; p holds the bytes kept within the output cap (a
// consumer sees at most the cap of each stream). It must not block or
// keep p.
type OutputFunc func(stream int, p []byte)

// FileSink takes returned files into the file store: Put streams r (size
// bytes) in and returns the stored copy's id and sha256. An error of an
// errdefs class is the caller's (a quota); its message is reported on the
// file.
type FileSink interface {
	Put(name string, r io.Reader, size int64) (id, sha256 string, err error)
}

// Hooks are a request's optional live consumers; the zero value has none.
type Hooks struct {
	// Output receives the run's output as it arrives; the Result's
	// Stdout and Stderr are then empty (only the truncation flags are
	// set): the consumer had every byte.
	Output OutputFunc
	// OnStart is called once the jail is ready and the code is about to
	// run, with the run's id and whether it is warm.
	OnStart func(id string, warm bool)
	// Store, when set, takes the returned files instead of reading them
	// into memory (return_files_as "store").
	Store FileSink
}

// Request describes one run.
type Request struct {
	// Code is the Python source the runner executes as __main__.
	Code string
	// Command, when set, runs this argv instead of the Python runner (used
	// for ruff); Code, LastLineInteractive and figures do not apply then.
	Command []string
	// Stdin is the program's standard input; nil means empty.
	Stdin []byte
	// Files are written into the workspace before the program starts.
	Files []File
	// ReturnFiles are patterns (relative to the workspace; *, ? and [..]
	// within a name, ** across directories) of files to read back.
	ReturnFiles []string
	// LastLineInteractive asks the runner to report the value of a final
	// expression statement, as a REPL would.
	LastLineInteractive bool
	// Env adds variables to the jail's environment; see ValidateEnv.
	Env    map[string]string
	Limits Limits
	// Network, when set, gives the run egress (the jail engine needs a
	// Config.Network); nil means loopback only.
	Network *Network
	// Image names the image to run in (Service.Images); "" is the
	// default.
	Image string
	Hooks
}

// Bounds on the request's own shape.
const (
	MaxFiles        = 1000
	MaxPatterns     = 64
	MaxEnvVars      = 64
	MaxEnvNameBytes = 128
	MaxEnvValBytes  = 4096
)

var envName = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnv are set by the engine and cannot be overridden.
var reservedEnv = map[string]bool{
	"PATH": true, "HOME": true, "MPLBACKEND": true, "MPLCONFIGDIR": true,
	"OPENBLAS_NUM_THREADS": true, "OMP_NUM_THREADS": true, "MKL_NUM_THREADS": true,
	"NUMEXPR_NUM_THREADS": true, "VECLIB_MAXIMUM_THREADS": true,
}

// allowedPython are the PYTHON* variables a caller may set; the others
// (PYTHONHOME, PYTHONSTARTUP, ...) would change how the runner starts.
var allowedPython = map[string]bool{
	"PYTHONPATH": true, "PYTHONHASHSEED": true, "PYTHONIOENCODING": true,
	"PYTHONUTF8": true, "PYTHONWARNINGS": true, "PYTHONFAULTHANDLER": true,
	"PYTHONUNBUFFERED": true,
}

// ValidateEnv checks caller-supplied variables: names are identifiers, not
// reserved by the engine, not LD_*, GLIBC_TUNABLES or MALLOC_*, and PYTHON* only from a small set;
// values have no NUL; count and sizes are bounded.
func ValidateEnv(env map[string]string) error {
	if len(env) > MaxEnvVars {
		return errdefs.Field("env", "at most %d variables", MaxEnvVars)
	}
	for k, v := range env {
		switch {
		case len(k) > MaxEnvNameBytes || !envName.MatchString(k):
			return errdefs.Field("env", "name %q must match [A-Za-z_][A-Za-z0-9_]* and be at most %d bytes", k, MaxEnvNameBytes)
		case reservedEnv[k]:
			return errdefs.Field("env", "%s is set by jaild and cannot be overridden", k)
		case strings.HasPrefix(k, "LD_") || strings.HasPrefix(k, "_LIBCONTAINER") || strings.HasPrefix(k, "JAILD_"):
			return errdefs.Field("env", "%s is not allowed", k)
		case k == "GLIBC_TUNABLES" || strings.HasPrefix(k, "MALLOC_"):
			// glibc parses them as a process starts, before main: the
			// jail's init then has not loaded the jail's filter yet.
			return errdefs.Field("env", "%s is not allowed (glibc start-up settings)", k)
		case strings.HasPrefix(k, "PYTHON") && !allowedPython[k]:
			return errdefs.Field("env", "%s is not allowed (PYTHON* variables allowed: PYTHONPATH, PYTHONHASHSEED, PYTHONIOENCODING, PYTHONUTF8, PYTHONWARNINGS, PYTHONFAULTHANDLER, PYTHONUNBUFFERED)", k)
		case len(v) > MaxEnvValBytes || strings.IndexByte(v, 0) >= 0:
			return errdefs.Field("env", "%s: the value must be at most %d bytes without NUL", k, MaxEnvValBytes)
		}
	}
	return nil
}

// Validate checks the whole request; the error is of class errdefs.ErrInvalidArgument.
func (r *Request) Validate() error {
	if err := r.Limits.Validate(); err != nil {
		return err
	}
	if len(r.Command) == 0 && r.Code == "" && len(r.Files) == 0 {
		return errdefs.New(errdefs.ErrInvalidArgument, "code is empty")
	}
	if strings.IndexByte(r.Code, 0) >= 0 {
		return errdefs.New(errdefs.ErrInvalidArgument, "code contains NUL")
	}
	if len(r.Files) > MaxFiles {
		return errdefs.New(errdefs.ErrInvalidArgument, "at most %d files", MaxFiles)
	}
	seen := make(map[string]bool, len(r.Files))
	var total int64
	for _, f := range r.Files {
		if err := ValidatePath(f.Path); err != nil {
			return fmt.Errorf("files: %w", err)
		}
		if seen[f.Path] {
			return errdefs.New(errdefs.ErrInvalidArgument, "files: duplicate path %q", f.Path)
		}
		seen[f.Path] = true
		total += f.Len()
	}
	if total > r.Limits.WorkspaceBytes {
		return errdefs.New(errdefs.ErrInvalidArgument, "files total %d bytes, more than the workspace size %d", total, r.Limits.WorkspaceBytes)
	}
	if len(r.ReturnFiles) > MaxPatterns {
		return errdefs.New(errdefs.ErrInvalidArgument, "at most %d return_files patterns", MaxPatterns)
	}
	for _, p := range r.ReturnFiles {
		if err := ValidatePattern(p); err != nil {
			return fmt.Errorf("return_files: %w", err)
		}
	}
	return ValidateEnv(r.Env)
}

// SessionSpec is what a session's jail is created with.
type SessionSpec struct {
	// Limits hold for the jail's whole life; Timeout bounds the CPU time
	// of one interpreter (RLIMIT_CPU's hard limit): make it the session's
	// lifetime. Each call has its own timeout and output bound.
	Limits  Limits
	Network *Network
	// Image names the session's image; "" is the default.
	Image string
	Files []File
	Env   map[string]string
}

// Call is one call of a session.
type Call struct {
	Code                string
	Stdin               []byte
	Files               []File
	ReturnFiles         []string
	LastLineInteractive bool
	Timeout             time.Duration
	OutputBytes         int64
	Hooks
}

// Validate checks the call; the error is of class
// errdefs.ErrInvalidArgument.
func (c *Call) Validate() error {
	r := Request{Code: c.Code, Files: c.Files, ReturnFiles: c.ReturnFiles, Limits: DefaultLimits()}
	r.Limits.Timeout, r.Limits.OutputBytes = c.Timeout, c.OutputBytes
	r.Limits.WorkspaceBytes = 64 << 30 // the session's tmpfs bounds the files
	if c.Code == "" {
		return errdefs.New(errdefs.ErrInvalidArgument, "code is empty")
	}
	return r.Validate()
}
