package jail

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/opencontainers/runc/libcontainer/exeseal"
	"golang.org/x/sys/unix"
)

// SealExe re-executes the daemon from a sealed copy of its own binary, once,
// at start, so that jails start from it as they are.
//
// A jail's first process is the daemon's binary (`/proc/self/exe init`),
// and a jail must never reach the host's binary through it (CVE-2019-5736:
// a process that can open /proc/<pid>/exe of one of ours for writing could
// replace jaild). libcontainer therefore executes each jail's init from a
// sealed copy: a memfd with its write, grow and shrink seals, or, where it
// can, a private read-only overlayfs mount of the binary's directory made
// for that one start, unless the running binary already is such a memfd.
// Copying once here makes every start skip its own (a new overlayfs
// superblock per jail, created and torn down). The copy (the binary's size,
// in memory the daemon's cgroup is charged for) lives as long as the
// daemon; the same pid, fds and environment carry on, so socket activation
// and sd_notify are unaffected.
//
// Call it right after Init, on the main thread, before any file descriptor
// is opened or consumed. It returns at once in the re-executed process
// (and where the binary is already sealed); otherwise it does not return
// unless the copy cannot be made or executed (then it warns on stderr and
// returns: libcontainer seals a copy per jail).
func SealExe() {
	if os.Geteuid() != 0 {
		return // the daemon refuses to start and says why
	}
	if exeseal.IsSelfExeCloned() {
		// The kernel named the process after the path it was executed
		// by, "/proc/self/fd/N": give it, and each thread the Go runtime
		// has made so far, its own name back (ps, top, pkill jaild);
		// threads made from then on inherit it.
		renameThreads(comm(os.Args[0]))
		return
	}
	// Only a sealed memfd will do (libcontainer takes nothing else as
	// sealed); where none can be made or executed, the daemon runs as it
	// is and libcontainer seals a copy per jail, as it did before.
	if err := execSealed(); err != nil {
		fmt.Fprintf(os.Stderr, "jaild: warning: cannot run from a sealed copy of the binary (%v); each jail's start will copy it\n", err)
	}
}

// execSealed copies the binary into a sealed memfd and executes it; it
// returns only if that fails.
func execSealed() error {
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer self.Close()
	sealed, seal, err := exeseal.Memfd("jaild")
	if err != nil {
		return err
	}
	defer func() { sealed.Close() }() // seal may replace it
	if _, err := io.Copy(sealed, self); err != nil {
		return err
	}
	if err := seal(&sealed); err != nil {
		return err
	}
	if !exeseal.IsCloned(sealed) {
		return errors.New("the memfd lacks its seals")
	}
	// The descriptor is close-on-exec: the kernel has the file open by the
	// time it closes it, and the new image maps it.
	path := "/proc/self/fd/" + strconv.Itoa(int(sealed.Fd()))
	return unix.Exec(path, os.Args, os.Environ())
}

// comm is the process name for argv0: its base name, cut to the kernel's
// 15 bytes.
func comm(argv0 string) string {
	name := filepath.Base(argv0)
	if len(name) > 15 {
		name = name[:15]
	}
	return name
}

// renameThreads sets the name of every thread of the process, again
// until a pass finds none to rename (a thread made meanwhile by one not yet
// renamed inherits the old name). It is best effort: a name is cosmetic.
func renameThreads(name string) {
	for range 5 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return
		}
		renamed := 0
		for _, t := range tasks {
			p := "/proc/self/task/" + t.Name() + "/comm"
			if b, err := os.ReadFile(p); err == nil && string(b) != name+"\n" {
				if os.WriteFile(p, []byte(name), 0) == nil {
					renamed++
				}
			}
		}
		if renamed == 0 {
			return
		}
	}
}
