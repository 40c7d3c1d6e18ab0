package daemon

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"

	"github.com/jaild/jaild/internal/config"
)

// listenSocket returns the socket systemd passed (socket activation) or creates
// cfg.Socket: owned by root and the socket group, with the configured mode,
// never briefly more open than that.
func listenSocket(cfg config.Config) (net.Listener, bool, error) {
	lns, err := activation.Listeners()
	if err != nil {
		return nil, false, fmt.Errorf("socket activation: %w", err)
	}
	if len(lns) > 0 {
		if len(lns) != 1 || lns[0] == nil {
			return nil, false, fmt.Errorf("socket activation: expected one stream socket, got %d", len(lns))
		}
		return lns[0], true, nil
	}
	gid := -1
	if cfg.SocketGroup != "" {
		g, err := user.LookupGroup(cfg.SocketGroup)
		if err != nil {
			return nil, false, fmt.Errorf("socket_group: %w (create it with `groupadd --system %s`, or set socket_group = \"\" for root only)", err, cfg.SocketGroup)
		}
		if gid, err = strconv.Atoi(g.Gid); err != nil {
			return nil, false, fmt.Errorf("socket_group: bad gid %q", g.Gid)
		}
	}
	if err := os.MkdirAll(filepath.Dir(cfg.Socket), 0o755); err != nil {
		return nil, false, fmt.Errorf("socket directory: %w", err)
	}
	if err := removeStaleSocket(cfg.Socket); err != nil {
		return nil, false, err
	}
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", cfg.Socket)
	syscall.Umask(old)
	if err != nil {
		return nil, false, fmt.Errorf("listen: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chown(cfg.Socket, 0, gid); err != nil {
		ln.Close()
		return nil, false, fmt.Errorf("socket: %w", err)
	}
	if err := os.Chmod(cfg.Socket, cfg.Mode()); err != nil {
		ln.Close()
		return nil, false, fmt.Errorf("socket: %w", err)
	}
	return ln, false, nil
}

// removeStaleSocket removes a socket file left by a predecessor, but
// refuses to remove anything else or a socket someone still serves.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("socket: %s exists and is not a socket; refusing to replace it", path)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("socket: %s is in use by a running daemon", path)
	}
	return os.Remove(path)
}
