package egress

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// forwarding is where the daemon turns IPv4 forwarding on and records that
// it did: the sysctl and the directory of its markers.
//
// net.ipv4.ip_forward belongs to a network namespace, so the marker says
// which one: its name holds the namespace's device and inode, its content
// those and the namespace's cookie, which the kernel never gives twice in
// a boot (an inode is reused once its namespace is gone). A daemon reads
// as its own only the marker of the namespace it runs in: not another
// namespace's (a test daemon's, or a pod's sharing the host's /run), whose
// setting says nothing of its own.
type forwarding struct {
	sysctl string // the ip_forward sysctl
	dir    string // where markers are kept for as long as the host runs
}

var hostForwarding = forwarding{sysctl: "/proc/sys/net/ipv4/ip_forward", dir: "/run"}

// legacyMark is the one marker of daemons before markers named their
// namespace. A daemon in the namespace of its pid namespace's init (the
// host's, or a pod's own) takes it as its namespace's, as those daemons
// did, and replaces it with a marker that names the namespace; a daemon
// in any other namespace leaves it.
const legacyMark = "jaild-enabled-ip-forward"

// netnsID identifies a network namespace.
type netnsID struct {
	dev, ino uint64
	cookie   uint64 // SO_NETNS_COOKIE; 0 where the kernel has none (before 5.14)
}

func (n netnsID) markName() string { return fmt.Sprintf("%s.%d-%d", legacyMark, n.dev, n.ino) }

func (n netnsID) String() string {
	return fmt.Sprintf("netns %d:%d cookie %d\n", n.dev, n.ino, n.cookie)
}

// currentNetns identifies the calling thread's network namespace; the
// caller has locked its goroutine to the thread.
func currentNetns() (netnsID, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return netnsID{}, &os.PathError{Op: "stat", Path: "/proc/thread-self/ns/net", Err: err}
	}
	n := netnsID{dev: st.Dev, ino: st.Ino}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return netnsID{}, os.NewSyscallError("socket", err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	switch {
	case err == nil:
		n.cookie = c
	case !errors.Is(err, unix.ENOPROTOOPT):
		return netnsID{}, os.NewSyscallError("getsockopt SO_NETNS_COOKIE", err)
	}
	return n, nil
}

// enable turns on IPv4 forwarding (NAT needs it) in the calling thread's
// network namespace and reports whether it was off before a daemon in that
// namespace turned it on: then the daemon's forward chain drops whatever
// else would now be forwarded, so the namespace routes nothing it did not
// route before. The marker is written only once forwarding is on; when it
// cannot be, forwarding is turned off again and the daemon does not start.
//
// The marker stays when the daemon stops, as forwarding does (turning it
// off could break what started forwarding after the daemon, finding it
// on): the next daemon must still know the namespace did not forward.
func (f forwarding) enable() (dropOther bool, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ns, err := currentNetns()
	if err != nil {
		return false, fmt.Errorf("egress: identify the network namespace: %w", err)
	}
	var st unix.Stat_t
	initNetns := unix.Stat("/proc/1/ns/net", &st) == nil && st.Dev == ns.dev && st.Ino == ns.ino
	return f.enableIn(ns, initNetns)
}

// enableIn is enable in ns; adoptLegacy: a legacy marker is ns's.
func (f forwarding) enableIn(ns netnsID, adoptLegacy bool) (bool, error) {
	b, err := os.ReadFile(f.sysctl)
	if err != nil {
		return false, fmt.Errorf("egress: %w", err)
	}
	mark := filepath.Join(f.dir, ns.markName())
	if strings.TrimSpace(string(b)) == "1" {
		if mine, err := f.marked(mark, ns); mine || err != nil {
			return mine, err
		}
		legacy := filepath.Join(f.dir, legacyMark)
		if _, err := os.Lstat(legacy); !adoptLegacy || err != nil {
			return false, nil // on before any daemon here: the host's own
		}
		if err := f.writeMark(mark, ns); err != nil {
			return false, err
		}
		if err := os.Remove(legacy); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("egress: %w", err)
		}
		return true, nil
	}
	if err := os.WriteFile(f.sysctl, []byte("1"), 0); err != nil {
		return false, fmt.Errorf("egress: enable IPv4 forwarding: %w", err)
	}
	if err := f.writeMark(mark, ns); err != nil {
		if rerr := os.WriteFile(f.sysctl, []byte("0"), 0); rerr != nil {
			err = errors.Join(err, fmt.Errorf("egress: turn IPv4 forwarding off again: %w", rerr))
		}
		return false, err
	}
	return true, nil
}

// marked reports whether mark records ns (not a namespace gone since,
// whose inode ns now has).
func (f forwarding) marked(mark string, ns netnsID) (bool, error) {
	b, err := os.ReadFile(mark)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("egress: %w", err)
	}
	return string(b) == ns.String(), nil
}

// writeMark records ns in mark: a whole file or none (temporary file,
// fsync, rename).
func (f forwarding) writeMark(mark string, ns netnsID) (retErr error) {
	t, err := os.CreateTemp(f.dir, "."+legacyMark+".*")
	if err != nil {
		return fmt.Errorf("egress: record that forwarding was turned on: %w", err)
	}
	defer func() {
		if retErr != nil {
			_ = os.Remove(t.Name())
		}
	}()
	_, err = t.WriteString(ns.String())
	if err == nil {
		err = t.Sync()
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(t.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(t.Name(), mark)
	}
	if err != nil {
		return fmt.Errorf("egress: record that forwarding was turned on: %w", err)
	}
	return nil
}
