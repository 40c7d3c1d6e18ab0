//go:build !unit

package egress

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// inNewNetns runs fn on a thread in a network namespace of its own; the
// thread ends with it (never unlocked, it is not reused).
func inNewNetns(t *testing.T, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Errorf("unshare a network namespace: %v (the test needs root)", err)
			return
		}
		fn()
	}()
	<-done
}

func setForward(t *testing.T, v string) {
	t.Helper()
	if err := os.WriteFile(hostForwarding.sysctl, []byte(v), 0); err != nil {
		t.Errorf("set ip_forward in the test's namespace: %v", err)
	}
}

// TestForwardingRealNamespaces: in two fresh network namespaces sharing
// one marker directory (as a test daemon, or a pod with the host's /run,
// shares the host's), the marker of the namespace where the daemon turned
// forwarding on is not taken by the other, which forwarded already. The
// single marker of before made the second drop what its host forwarded.
func TestForwardingRealNamespaces(t *testing.T) {
	f := forwarding{sysctl: hostForwarding.sysctl, dir: t.TempDir()}
	var a, b netnsID
	inNewNetns(t, func() {
		var err error
		if a, err = currentNetns(); err != nil {
			t.Error(err)
			return
		}
		setForward(t, "0")
		if drop, err := f.enable(); err != nil || !drop {
			t.Errorf("a, forwarding off: drop %v, %v; want true", drop, err)
		}
		if drop, err := f.enable(); err != nil || !drop {
			t.Errorf("a, restarted: drop %v, %v; want true", drop, err)
		}
	})
	inNewNetns(t, func() {
		var err error
		if b, err = currentNetns(); err != nil {
			t.Error(err)
			return
		}
		setForward(t, "1")
		if drop, err := f.enable(); err != nil || drop {
			t.Errorf("b, forwarding on by its host: drop %v, %v; want false", drop, err)
		}
	})
	if t.Failed() {
		return
	}
	if a == b || a.cookie == 0 || a.cookie == b.cookie {
		t.Fatalf("namespaces not told apart: a %v, b %v", a, b)
	}
	if got := markers(t, f.dir); len(got) != 1 || got[0] != a.markName() {
		t.Fatalf("markers %v, want only a's %s", got, a.markName())
	}
	host, err := func() (netnsID, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		return currentNetns()
	}()
	if err != nil || host == a || host == b {
		t.Fatalf("the test's own namespace %v (%v) is one of the fresh ones", host, err)
	}
}
