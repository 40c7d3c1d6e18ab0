package egress

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// forwardingIn is a forwarding whose sysctl is a file in a temporary
// directory holding value, with its markers in dir.
func forwardingIn(t *testing.T, dir, value string) forwarding {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ip_forward")
	if err := os.WriteFile(p, []byte(value+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return forwarding{sysctl: p, dir: dir}
}

func sysctlValue(t *testing.T, f forwarding) string {
	t.Helper()
	b, err := os.ReadFile(f.sysctl)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// markers lists the files in dir.
func markers(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func TestForwardingMarkPerNamespace(t *testing.T) {
	dir := t.TempDir()
	a, b := netnsID{dev: 4, ino: 4026531840, cookie: 1}, netnsID{dev: 4, ino: 4026532999, cookie: 7}

	// a did not forward: the daemon turns it on, and drops the rest.
	fa := forwardingIn(t, dir, "0")
	if drop, err := fa.enableIn(a, false); err != nil || !drop {
		t.Fatalf("a, forwarding off: drop %v, %v; want true", drop, err)
	}
	if got := sysctlValue(t, fa); got != "1" {
		t.Fatalf("a's ip_forward is %q after enable", got)
	}
	// A restarted daemon in a finds forwarding on and its marker.
	if drop, err := fa.enableIn(a, false); err != nil || !drop {
		t.Fatalf("a, restarted: drop %v, %v; want true", drop, err)
	}
	// b forwarded before any daemon: a's marker is not b's.
	fb := forwardingIn(t, dir, "1")
	if drop, err := fb.enableIn(b, false); err != nil || drop {
		t.Fatalf("b, forwarding on by its host: drop %v, %v; want false", drop, err)
	}
	if got := markers(t, dir); len(got) != 1 || got[0] != a.markName() {
		t.Fatalf("markers %v, want only a's %s", got, a.markName())
	}
	// A namespace that took a's inode once a was gone is not a.
	reused := netnsID{dev: a.dev, ino: a.ino, cookie: 99}
	if drop, err := forwardingIn(t, dir, "1").enableIn(reused, false); err != nil || drop {
		t.Fatalf("a's inode reused: drop %v, %v; want false", drop, err)
	}
	// b's daemon turns forwarding on after its host turned it off: b's
	// marker beside a's.
	fb = forwardingIn(t, dir, "0")
	if drop, err := fb.enableIn(b, false); err != nil || !drop {
		t.Fatalf("b, forwarding off: drop %v, %v; want true", drop, err)
	}
	if got := markers(t, dir); len(got) != 2 {
		t.Fatalf("markers %v, want a's and b's", got)
	}
	mark, err := os.ReadFile(filepath.Join(dir, b.markName()))
	if err != nil || string(mark) != b.String() {
		t.Fatalf("b's marker: %q, %v; want %q", mark, err, b.String())
	}
}

func TestForwardingLegacyMark(t *testing.T) {
	ns := netnsID{dev: 4, ino: 4026531840, cookie: 1}
	legacy := func(t *testing.T) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, legacyMark), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// Outside the init process's namespace it is not taken.
	dir := legacy(t)
	if drop, err := forwardingIn(t, dir, "1").enableIn(ns, false); err != nil || drop {
		t.Fatalf("legacy marker, another namespace: drop %v, %v; want false", drop, err)
	}
	if got := markers(t, dir); len(got) != 1 || got[0] != legacyMark {
		t.Fatalf("markers %v, want the legacy one left", got)
	}
	// In it, it is taken and replaced by a marker naming the namespace.
	dir = legacy(t)
	if drop, err := forwardingIn(t, dir, "1").enableIn(ns, true); err != nil || !drop {
		t.Fatalf("legacy marker, init's namespace: drop %v, %v; want true", drop, err)
	}
	if got := markers(t, dir); len(got) != 1 || got[0] != ns.markName() {
		t.Fatalf("markers %v, want only %s", got, ns.markName())
	}
}

func TestForwardingFailures(t *testing.T) {
	ns := netnsID{dev: 4, ino: 4026531840, cookie: 1}
	// A sysctl nobody may write, root included (mode 0444): no marker.
	dir := t.TempDir()
	f := forwarding{sysctl: "/proc/sys/kernel/osrelease", dir: dir}
	if _, err := f.enableIn(ns, false); err == nil || !strings.Contains(err.Error(), "enable IPv4 forwarding") {
		t.Fatalf("unwritable sysctl: %v", err)
	}
	if got := markers(t, dir); len(got) != 0 {
		t.Fatalf("a failed enable left markers %v", got)
	}
	// A marker that cannot be written: forwarding is turned off again.
	f = forwardingIn(t, filepath.Join(dir, "missing"), "0")
	if _, err := f.enableIn(ns, false); err == nil || !strings.Contains(err.Error(), "record") {
		t.Fatalf("unwritable marker directory: %v", err)
	}
	if got := sysctlValue(t, f); got != "0" {
		t.Fatalf("ip_forward %q after the marker failed, want 0", got)
	}
}
