package jail

import (
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	// Device cgroup rules are applied only when this package is linked in.
	_ "github.com/opencontainers/cgroups/devices"
	"github.com/opencontainers/runc/libcontainer"

	// nsenter's C constructor joins the namespaces of `init` before the Go
	// runtime starts.
	_ "github.com/opencontainers/runc/libcontainer/nsenter"
)

// Init hands the process over to libcontainer when it was started as a
// jail's init (`/proc/self/exe init`); it never returns in that case.
// Otherwise it returns at once. Call it first in main and TestMain.
func Init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		defaultIgnored()
		libcontainer.Init()
	}
	if len(os.Args) > 1 && os.Args[1] == filterExportArg {
		exportFilter()
	}
}

// The main goroutine keeps the process's main thread to itself.
// libcontainer joins a starting jail's mount namespace on a locked thread
// and lets Go end that thread afterwards, but Go cannot end the main
// thread (the thread group leader): it parks it instead. Had that
// goroutine run on the main thread, the main thread would stay in the
// jail's mount namespace for good, pinning the jail's mounts (its overlay
// root, its workspace tmpfs) and making /proc/self, which shows the
// leader's view, show the jail's mounts to the rest of the process.
func init() { runtime.LockOSThread() }

// kernelSigaction is the kernel's struct sigaction (rt_sigaction(2)).
type kernelSigaction struct {
	handler, flags, restorer uintptr
	mask                     uint64
}

// defaultIgnored sets every signal this process ignores back to its
// default before libcontainer execs the jail's first process: an execve
// keeps ignored signals ignored, so a jail would otherwise inherit what
// the daemon's parent ignored (nohup's SIGHUP, signal 32 in some CI
// shells), which Go also keeps. The image's init resets every disposition
// itself; this covers a command started without it (lint, format in a
// jail of their own). Handlers Go installed are reset by the execve.
func defaultIgnored() {
	const sigIgn = 1
	for sig := 1; sig <= 64; sig++ {
		if sig == int(unix.SIGKILL) || sig == int(unix.SIGSTOP) {
			continue
		}
		var old kernelSigaction
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 || old.handler != sigIgn {
			continue
		}
		dfl := kernelSigaction{}
		_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	}
}
