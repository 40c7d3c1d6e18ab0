package jail

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// favorDynmods sets the cgroup option favordynmods (Linux 6.0+) on a
// cgroup hierarchy the daemon sees: the cgroup2 mount if there is one,
// else a v1 hierarchy. Starting a jail moves its first process into the
// jail's cgroups, and each such move waits for an RCU grace period (7-13
// ms measured here, a third of a jail's start) unless the hierarchy favors
// dynamic modifications; the lock behind it is one for the whole host, so
// one hierarchy with the option is enough. It changes no limit or
// isolation, only what cgroup moves and forks cost. The hierarchy's other
// options are set again as they are (a reconfiguration resets what it is
// not given); its mount flags are not touched (fspick reconfigures the
// superblock only). It returns the hierarchy it changed, "" when one had
// the option already.
func favorDynmods() (string, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2", "cgroup"))
	if err != nil {
		return "", err
	}
	var m *mountinfo.Info
	for _, c := range mounts {
		if hasOption(c.VFSOptions, "favordynmods") {
			return "", nil
		}
		if m == nil || (c.FSType == "cgroup2" && m.FSType != "cgroup2") {
			m = c
		}
	}
	if m == nil {
		return "", errors.New("no cgroup hierarchy is mounted")
	}
	fd, err := unix.Fspick(unix.AT_FDCWD, m.Mountpoint, unix.FSPICK_CLOEXEC|unix.FSPICK_NO_AUTOMOUNT|unix.FSPICK_SYMLINK_NOFOLLOW)
	if err != nil {
		return m.Mountpoint, &os.PathError{Op: "fspick", Path: m.Mountpoint, Err: err}
	}
	defer unix.Close(fd)
	for _, opt := range strings.Split(m.VFSOptions+",favordynmods", ",") {
		var err error
		switch k, v, ok := strings.Cut(opt, "="); {
		case opt == "" || opt == "rw" || opt == "ro":
			continue
		case ok:
			err = unix.FsconfigSetString(fd, k, v)
		default:
			err = unix.FsconfigSetFlag(fd, opt)
		}
		if err != nil {
			return m.Mountpoint, fmt.Errorf("%s: option %q: %w", m.Mountpoint, opt, err)
		}
	}
	if err := unix.FsconfigReconfigure(fd); err != nil {
		return m.Mountpoint, fmt.Errorf("%s: reconfigure: %w", m.Mountpoint, err)
	}
	return m.Mountpoint, nil
}

func hasOption(opts, name string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == name {
			return true
		}
	}
	return false
}
