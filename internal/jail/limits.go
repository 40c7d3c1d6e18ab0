package jail

import (
	"errors"
	"time"

	"github.com/jaild/jaild/internal/allowlist"
	"github.com/jaild/jaild/internal/errdefs"
)

// Limits bound one jail and the program it runs. Every field must be positive; Validate checks them
// against the engine's absolute ceilings (callers' maxima are the daemon's
// business and are lower).
type Limits struct {
	Timeout           time.Duration // wall clock; RLIMIT_CPU is derived from it
	MemoryBytes       int64         // cgroup memory limit, swap included (no swap)
	Pids              int64         // cgroup pids limit and RLIMIT_NPROC
	FileSizeBytes     int64         // RLIMIT_FSIZE
	OutputBytes       int64         // cap per output stream (stdout, stderr)
	WorkspaceBytes    int64         // size of the run's tmpfs (workspace, /tmp, /jaild)
	WorkspaceInodes   int64         // inodes of that tmpfs
	OpenFiles         int64         // RLIMIT_NOFILE
	AddressSpaceBytes int64         // RLIMIT_AS
	StackBytes        int64         // RLIMIT_STACK
}

// DefaultLimits are the limits of a run that asks for nothing special.
func DefaultLimits() Limits {
	return Limits{
		Timeout:           10 * time.Second,
		MemoryBytes:       512 << 20,
		Pids:              64,
		FileSizeBytes:     64 << 20,
		OutputBytes:       1 << 20,
		WorkspaceBytes:    128 << 20,
		WorkspaceInodes:   16384,
		OpenFiles:         1024,
		AddressSpaceBytes: 16 << 30,
		StackBytes:        8 << 20,
	}
}

// ceilings are absolute bounds no configuration can exceed.
var ceilings = Limits{
	Timeout:           24 * time.Hour,
	MemoryBytes:       64 << 30,
	Pids:              4096,
	FileSizeBytes:     16 << 30,
	OutputBytes:       256 << 20,
	WorkspaceBytes:    64 << 30,
	WorkspaceInodes:   1 << 22,
	OpenFiles:         65536,
	AddressSpaceBytes: 1 << 40,
	StackBytes:        1 << 30,
}

// Validate returns an error of class errdefs.ErrInvalidArgument that names the first field
// that is not positive or is above the engine's ceiling.
func (l Limits) Validate() error {
	check := func(name string, v, ceil int64) error {
		if v <= 0 || v > ceil {
			return errdefs.New(errdefs.ErrInvalidArgument, "limit %s=%d must be in 1..%d", name, v, ceil)
		}
		return nil
	}
	return errors.Join(
		check("timeout_ms", l.Timeout.Milliseconds(), ceilings.Timeout.Milliseconds()),
		check("memory_bytes", l.MemoryBytes, ceilings.MemoryBytes),
		check("pids", l.Pids, ceilings.Pids),
		check("file_size_bytes", l.FileSizeBytes, ceilings.FileSizeBytes),
		check("output_bytes", l.OutputBytes, ceilings.OutputBytes),
		check("workspace_bytes", l.WorkspaceBytes, ceilings.WorkspaceBytes),
		check("workspace_inodes", l.WorkspaceInodes, ceilings.WorkspaceInodes),
		check("open_files", l.OpenFiles, ceilings.OpenFiles),
		check("address_space_bytes", l.AddressSpaceBytes, ceilings.AddressSpaceBytes),
		check("stack_bytes", l.StackBytes, ceilings.StackBytes),
	)
}

// Network is a jail's egress.
type Network struct {
	// Allow lists the only destinations the jail may reach (names through
	// its resolver); empty means every destination that is not always
	// denied.
	Allow []allowlist.Allow
}
