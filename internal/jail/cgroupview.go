package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// viewEnv carries, across EnterCgroupView's re-execution, the cgroup that
// is now mounted at /sys/fs/cgroup.
const viewEnv = "_JAILD_CGROUP_VIEW"

// cgroupView is the process's own cgroup (as /proc/self/cgroup names it)
// that EnterCgroupView mounted at /sys/fs/cgroup; "" when it did not.
var cgroupView string

// EnterCgroupView confines what the daemon can see of a pure cgroup v2
// hierarchy to its own cgroup: it re-executes the process (same pid, same
// inherited fds and environment, so socket activation and sd_notify are
// unaffected) in a mount namespace of its own where that cgroup is bind
// mounted at /sys/fs/cgroup. libcontainer enables every controller the
// hierarchy's root offers in cgroup.subtree_control of every ancestor of a
// jail's cgroup, from the root down; seen from the host, under systemd,
// that wrote to / and /system.slice, outside the subtree Delegate=yes hands
// jaild, and enabled hugetlb, rdma and misc there. In the view, the root is
// jaild's own cgroup and only the controllers delegated to it exist.
//
// Call it right after Init, on the main thread, before any file descriptor
// is opened or consumed. It returns nil at once on cgroup v1 and hybrid
// hosts, in a process at the hierarchy's root, and in the re-executed
// process; otherwise it does not return unless it fails.
func EnterCgroupView() error {
	if v := os.Getenv(viewEnv); v != "" {
		cgroupView = v
		return os.Unsetenv(viewEnv)
	}
	if os.Geteuid() != 0 || !cgroups.IsCgroup2UnifiedMode() {
		return nil // not root: the daemon says so itself
	}
	own, err := cgroups.ParseCgroupFile("/proc/self/cgroup")
	if err != nil {
		return fmt.Errorf("cgroup view: %w", err)
	}
	base := own[""]
	if base == "" || base == "/" {
		return nil
	}
	if filepath.Base(base) == "supervisor" {
		// A daemon started from within another's leaf: the one above is
		// the subtree.
		base = filepath.Dir(base)
	}
	// Only the main thread leaves the host's mount namespace; the exec
	// below takes the whole process with it.
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("cgroup view: a mount namespace of its own: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("cgroup view: %w", &os.PathError{Op: "make rslave", Path: "/", Err: err})
	}
	src := filepath.Join("/sys/fs/cgroup", base)
	if err := unix.Mount(src, "/sys/fs/cgroup", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("cgroup view: %w", &os.PathError{Op: "bind mount", Path: src, Err: err})
	}
	env := append(os.Environ(), viewEnv+"="+base)
	return fmt.Errorf("cgroup view: re-execute: %w", unix.Exec("/proc/self/exe", os.Args, env))
}

// viewPath turns a cgroup as /proc/self/cgroup names it into its path
// beneath /sys/fs/cgroup as this process sees it.
func viewPath(cg string) (string, error) {
	if cgroupView == "" {
		return cg, nil
	}
	rel, ok := strings.CutPrefix(cg, cgroupView)
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		return "", errors.New("cgroup view: the process left the cgroup its view shows: " + cg)
	}
	return "/" + strings.TrimPrefix(rel, "/"), nil
}
