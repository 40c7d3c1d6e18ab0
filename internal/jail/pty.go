package jail

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Terminals for a session's shell (issue 29): a pseudo-terminal of the
// host's devpts, its terminal end (the peer) given to a process Exec
// starts as fds 0-2, its controlling end kept by the daemon. The peer is
// opened from the controlling end (TIOCGPTPEER), never by a path, so the
// jail, which has no view of the host's /dev/pts, gets an open terminal
// and nothing else: the filter refuses TIOCSTI and TIOCLINUX on it as on
// any fd, and what it injects as input reaches only its own shell.

// MaxTerminalSize bounds a terminal's columns and rows.
const MaxTerminalSize = 1000

// OpenPTY opens a pseudo-terminal of cols×rows: master is the
// controlling end (non-blocking, for the runtime's poller), peer the
// terminal end for the process.
func OpenPTY(cols, rows int) (master, peer *os.File, err error) {
	if cols < 1 || rows < 1 || cols > MaxTerminalSize || rows > MaxTerminalSize {
		return nil, nil, fmt.Errorf("terminal size %dx%d out of 1..%d", cols, rows, MaxTerminalSize)
	}
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(m)
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	p, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), uintptr(unix.TIOCGPTPEER), uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		unix.Close(m)
		return nil, nil, fmt.Errorf("open pty peer: %w", errno)
	}
	master, peer = os.NewFile(uintptr(m), "pty"), os.NewFile(p, "pty-peer")
	if err := ResizePTY(master, cols, rows); err != nil {
		master.Close()
		peer.Close()
		return nil, nil, err
	}
	return master, peer, nil
}

// ResizePTY sets the terminal's size; the kernel signals SIGWINCH to its
// foreground process group.
func ResizePTY(master *os.File, cols, rows int) error {
	if cols < 1 || rows < 1 || cols > MaxTerminalSize || rows > MaxTerminalSize {
		return fmt.Errorf("terminal size %dx%d out of 1..%d", cols, rows, MaxTerminalSize)
	}
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
	}); err != nil {
		return err
	}
	if ierr != nil {
		return fmt.Errorf("resize pty: %w", ierr)
	}
	return nil
}
