package spec

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"

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
	// CPUCores is the jail's CPU quota (cgroup cpu controller), in cores;
	// 0: none. Sessions have one: their background commands run between
	// calls.
	CPUCores float64
}

// MaxCPUCores is the largest CPU quota a jail can have.
const MaxCPUCores = 256

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
		checkCPU(l.CPUCores),
	)
}

func checkCPU(c float64) error {
	if !(c >= 0 && c <= MaxCPUCores) || c > 0 && c < 0.01 {
		return errdefs.New(errdefs.ErrInvalidArgument, "limit cpu_cores=%g must be 0 (none) or in 0.01..%d", c, MaxCPUCores)
	}
	return nil
}

// Network is a jail's egress.
type Network struct {
	// Allow lists the only destinations the jail may reach (names through
	// its resolver); empty means every destination that is not always
	// denied.
	Allow []allowlist.Allow
}

// NetworkUsage is a run's egress traffic.
type NetworkUsage struct {
	BytesSent     uint64 // from the jail
	BytesReceived uint64 // to the jail
}

// JailCounts are the jail engine's counts, for the metrics.
type JailCounts struct {
	Alive            int64  // jails created and not destroyed yet (warm ones and sessions included)
	TeardownFailures uint64 // teardowns that failed or overran their deadline (their host id range stays out of use)
	Swept            uint64 // jails of a predecessor removed by the start-up sweep
	// EgressRefused counts runs' refused packets (0 without
	// egress; see egress.Manager.Refused).
	EgressRefused uint64
}

// Rlimit is one process rlimit of a jail, by its Linux name (RLIMIT_AS)
// and number.
type Rlimit struct {
	Name       string
	Type       int
	Soft, Hard uint64
}

// Rlimits derives the process rlimits from the limits. RLIMIT_CPU is a
// backstop for the wall-clock timer (a multi-threaded run can burn CPU
// faster than wall time): SIGXCPU one second past the timeout, SIGKILL
// one second later.
func (l Limits) Rlimits() []Rlimit {
	cpu := uint64((l.Timeout.Milliseconds()+999)/1000) + 1
	same := func(name string, t int, v int64) Rlimit { return Rlimit{name, t, uint64(v), uint64(v)} }
	return []Rlimit{
		same("RLIMIT_AS", unix.RLIMIT_AS, l.AddressSpaceBytes),
		{"RLIMIT_CPU", unix.RLIMIT_CPU, cpu, cpu + 1},
		same("RLIMIT_NPROC", unix.RLIMIT_NPROC, l.Pids),
		same("RLIMIT_FSIZE", unix.RLIMIT_FSIZE, l.FileSizeBytes),
		same("RLIMIT_NOFILE", unix.RLIMIT_NOFILE, l.OpenFiles),
		same("RLIMIT_STACK", unix.RLIMIT_STACK, l.StackBytes),
		same("RLIMIT_CORE", unix.RLIMIT_CORE, 0),
		same("RLIMIT_MEMLOCK", unix.RLIMIT_MEMLOCK, 64<<10),
		same("RLIMIT_MSGQUEUE", unix.RLIMIT_MSGQUEUE, 0),
	}
}

// RlimitsByName are the rlimits of a jail with limits l, soft and hard, by
// their Linux names (RLIMIT_AS, ...): for a program in a jail created with
// higher limits to lower its own (setrlimit needs no privilege for that).
func (l Limits) RlimitsByName() map[string][2]uint64 {
	out := map[string][2]uint64{}
	for _, r := range l.Rlimits() {
		out[r.Name] = [2]uint64{r.Soft, r.Hard}
	}
	return out
}

// FitsUnder reports whether every rlimit of l is at most the one of
// created, so that a jail created with created can serve l by lowering.
func (l Limits) FitsUnder(created Limits) bool {
	want, have := l.Rlimits(), created.Rlimits()
	for i := range want {
		if want[i].Soft > have[i].Soft || want[i].Hard > have[i].Hard {
			return false
		}
	}
	return true
}
