package jail

import (
	"os"
	"runtime"

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
