package jail

import (
	"os"

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
}
