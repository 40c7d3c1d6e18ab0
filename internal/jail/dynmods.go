package jail

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// favorDynmods sets the cgroup option favordynmods (Linux 6.0+) on the
// cgroup2 hierarchy, the unified one of a v2 or hybrid host. Starting a
// jail moves its first process into the jail's cgroups, and each such move
// waits for an RCU grace period (7-13 ms measured here, a third of a jail's
// start) unless the host favors dynamic cgroup modifications; the lock
// behind it is one for the whole host, so the option on one hierarchy is
// enough. It changes no limit or isolation, only what cgroup moves and
// forks cost. The hierarchy's other options are set again as they are (a
// reconfiguration resets what it is not given); its mount flags are not
// touched (fspick reconfigures the superblock only). v1 hierarchies cannot
// change flags on remount, so a pure v1 host keeps paying. It returns the
// hierarchy it changed, "" when it had the option already.
func favorDynmods() (string, error) { return setDynmods(true) }

// restoreDynmods clears favordynmods again on the hierarchy favorDynmods
// set it on, so that a stopped daemon (or one whose start failed) leaves
// the host's cgroup options as it found them.
func restoreDynmods() error {
	_, err := setDynmods(false)
	return err
}

// setDynmods sets or clears favordynmods; it returns the hierarchy it
// changed, "" when the option was as asked already.
func setDynmods(on bool) (string, error) {
	m, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	if hasOption(m.VFSOptions, "favordynmods") == on {
		return "", nil
	}
	fd, err := unix.Fspick(unix.AT_FDCWD, m.Mountpoint, unix.FSPICK_CLOEXEC|unix.FSPICK_NO_AUTOMOUNT|unix.FSPICK_SYMLINK_NOFOLLOW)
	if err != nil {
		return m.Mountpoint, &os.PathError{Op: "fspick", Path: m.Mountpoint, Err: err}
	}
	defer unix.Close(fd)
	opts := withoutOption(m.VFSOptions, "favordynmods")
	if on {
		opts += ",favordynmods"
	}
	for _, opt := range strings.Split(opts, ",") {
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
	// The kernel ignores the flags outside the initial cgroup namespace.
	after, err := cgroup2Mount()
	if err != nil {
		return m.Mountpoint, err
	}
	if hasOption(after.VFSOptions, "favordynmods") != on {
		return m.Mountpoint, fmt.Errorf("%s: favordynmods=%v did not take effect (not in the host's cgroup namespace?)", m.Mountpoint, on)
	}
	return m.Mountpoint, nil
}

// cgroup2Mount finds the cgroup2 hierarchy this process sees.
func cgroup2Mount() (*mountinfo.Info, error) {
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil {
		return nil, err
	}
	if len(mounts) == 0 {
		return nil, errors.New("no cgroup2 hierarchy is mounted (cgroup v1 only)")
	}
	return mounts[0], nil
}

func hasOption(opts, name string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == name {
			return true
		}
	}
	return false
}

func withoutOption(opts, name string) string {
	var keep []string
	for _, o := range strings.Split(opts, ",") {
		if o != name {
			keep = append(keep, o)
		}
	}
	return strings.Join(keep, ",")
}
