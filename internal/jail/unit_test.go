package jail

// The tests of this file need neither root nor an image: `make test-unit`
// runs them, built with the unit tag, which leaves out the files of tests
// that need real jails (see main_test.go).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/config"
)

// The daemon's configuration checks host_id_base against the span the
// engine uses; the two must agree.
func TestHostIDSpan(t *testing.T) {
	if config.HostIDSpan != MaxJails*IDsPerJail {
		t.Fatalf("config.HostIDSpan = %d, engine uses MaxJails*IDsPerJail = %d", config.HostIDSpan, MaxJails*IDsPerJail)
	}
}

func TestSlots(t *testing.T) {
	s := slots{dir: t.TempDir(), base: 1}
	for want := range 3 {
		if got, err := s.get(); err != nil || got != want {
			t.Fatalf("get = %d, %v; want %d", got, err, want)
		}
	}
	s.put(1)
	if got, _ := s.get(); got != 1 {
		t.Fatalf("after put(1), get = %d, want the lowest free slot 1", got)
	}
	for range MaxJails - 3 {
		if _, err := s.get(); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.get(); !errors.Is(err, errNoSlot) {
		t.Fatalf("get with every slot used = %d, %v; want errNoSlot", got, err)
	}
}

// Two engines whose host id ranges overlap (the same host_id_base, or one
// shifted by a few slots) never hold the same host ids at once: a slot
// another holds is skipped, and free again once it is put back.
func TestSlotsAcrossEngines(t *testing.T) {
	dir := t.TempDir()
	a := slots{dir: dir, base: 1000}
	b := slots{dir: dir, base: 1000}
	c := slots{dir: dir, base: 1000 + 2*idMapSize} // its slot 0 is a's slot 2
	got := func(s *slots) int {
		t.Helper()
		i, err := s.get()
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	if a0, b0 := got(&a), got(&b); a0 != 0 || b0 != 1 {
		t.Fatalf("a took %d, b %d; want 0 and 1", a0, b0)
	}
	if a1 := got(&a); a1 != 2 {
		t.Fatalf("a's second slot %d, want 2 (b holds 1)", a1)
	}
	if c0 := got(&c); c0 != 1 { // ids of a's slot 3: c's slot 0 is a's 2, held
		t.Fatalf("c took %d, want 1 (its 0 is a's 2)", c0)
	}
	a.put(2)
	if c1 := got(&c); c1 != 0 {
		t.Fatalf("after a put its slot 2 back, c took %d, want 0", c1)
	}
	b.put(1)
	if a2 := got(&a); a2 != 1 {
		t.Fatalf("after b put its slot 1 back, a took %d, want 1", a2)
	}
	// Lock files are named by their first host id and stay.
	if _, err := os.Stat(filepath.Join(dir, strconv.Itoa(1000+2*idMapSize))); err != nil {
		t.Error(err)
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("default limits invalid: %v", err)
	}
	l := DefaultLimits()
	l.MemoryBytes = -1
	if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "memory_bytes") {
		t.Errorf("negative memory: %v, want an error naming memory_bytes", err)
	}
	l = DefaultLimits()
	l.Timeout = 48 * time.Hour
	if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "timeout_ms") {
		t.Errorf("huge timeout: %v, want an error naming timeout_ms", err)
	}
}

// favordynmods is set and cleared in a mount's comma-separated superblock
// options, leaving the others as they were.
func TestMountOptions(t *testing.T) {
	for _, c := range []struct{ opts, without string }{
		{"rw,nsdelegate,favordynmods,memory_recursiveprot", "rw,nsdelegate,memory_recursiveprot"},
		{"favordynmods", ""},
		{"rw,favordynmods", "rw"},
		{"rw,nsdelegate", "rw,nsdelegate"},
		{"rw,favordynmodsx,xfavordynmods", "rw,favordynmodsx,xfavordynmods"},
	} {
		if got := withoutOption(c.opts, "favordynmods"); got != c.without {
			t.Errorf("withoutOption(%q) = %q, want %q", c.opts, got, c.without)
		}
		if got, want := hasOption(c.opts, "favordynmods"), c.opts != c.without; got != want {
			t.Errorf("hasOption(%q) = %v, want %v", c.opts, got, want)
		}
	}
}

// The checkpoint key is made once and read back; a short one is refused.
func TestCheckpointKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key")
	k1, err := CheckpointKey(path)
	if err != nil || len(k1) != 32 {
		t.Fatalf("new key: %d bytes, %v", len(k1), err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v %v", fi, err)
	}
	k2, err := CheckpointKey(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Errorf("key read back: %x, %v; made %x", k2, err, k1)
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckpointKey(path); err == nil {
		t.Error("a 5-byte key was taken")
	}
}

// usernsImage is a CRIU userns image of one uid and one gid extent.
func usernsImage(first, lower, count uint64) []byte {
	ext := func() []byte {
		var e []byte
		for i, v := range []uint64{first, lower, count} {
			e = binary.AppendUvarint(e, uint64(i+1)<<3)
			e = binary.AppendUvarint(e, v)
		}
		return e
	}
	var entry []byte
	for _, field := range []uint64{1, 2} {
		e := ext()
		entry = binary.AppendUvarint(entry, field<<3|2)
		entry = binary.AppendUvarint(entry, uint64(len(e)))
		entry = append(entry, e...)
	}
	b := binary.LittleEndian.AppendUint32(nil, criuImgCommon)
	b = binary.LittleEndian.AppendUint32(b, criuUsernsImg)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(entry)))
	return append(b, entry...)
}

// The user namespace image's map moves to the new range; any other shape,
// or an extent outside the old jail's range, is refused.
func TestRemapUserns(t *testing.T) {
	got, err := remapUserns(usernsImage(0, 1_500_000_000, idMapSize), 1_500_000_000, 1_500_065_536)
	if err != nil {
		t.Fatal(err)
	}
	if want := usernsImage(0, 1_500_065_536, idMapSize); !bytes.Equal(got, want) {
		t.Errorf("remapped image %x, want %x", got, want)
	}
	for name, b := range map[string][]byte{
		"outside the range": usernsImage(0, 1_000, idMapSize),
		"beyond the range":  usernsImage(0, 1_500_000_001, idMapSize),
		"truncated":         usernsImage(0, 1_500_000_000, idMapSize)[:20],
		"no magic":          append([]byte{1, 2, 3, 4}, usernsImage(0, 1_500_000_000, idMapSize)[4:]...),
		"empty":             nil,
	} {
		if _, err := remapUserns(b, 1_500_000_000, 1_500_065_536); !errors.Is(err, ErrCheckpointTampered) {
			t.Errorf("%s: %v, want ErrCheckpointTampered", name, err)
		}
	}
}

// remapUserns reads a file of the checkpoint, signed but parsed as
// hostile: it never panics, and what it accepts maps into the new range.
func FuzzRemapUserns(f *testing.F) {
	f.Add(usernsImage(0, 1_500_000_000, idMapSize))
	f.Add(usernsImage(10, 1_500_000_010, 5))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		out, err := remapUserns(b, 1_500_000_000, 1_600_000_000)
		if err != nil {
			return
		}
		if _, err := remapUserns(out, 1_600_000_000, 1_500_000_000); err != nil {
			t.Errorf("an accepted image's remap is refused back: %v", err)
		}
	})
}

// The criu wrapper opens a restore's extra files on fds 6.. only for
// libcontainer's "criu swrk 3": go-criu's version check, run during the
// same restore, passes its socket at the number it has in the daemon,
// which may be one of those (found in the test guest, where its socket
// was replaced by a pipe and criu exited before reading its request).
func TestCRIUWrapperKeepsTheSocket(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "fake-criu")
	// The fake prints its arguments and what its fd 6 is.
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"$*\"; echo \"stderr of $1\" >&2; readlink /proc/$$/fd/6 || true\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "criu"), []byte(criuWrapper(dir, fake)), 0o700); err != nil {
		t.Fatal(err)
	}
	pipeR, pipeW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pipeR.Close()
	defer pipeW.Close()
	pipeIno := fdTarget(t, pipeR)
	inherit := "# a restore\nexec 6</proc/" + strconv.Itoa(os.Getpid()) + "/fd/" + strconv.Itoa(int(pipeR.Fd())) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "inherit"), []byte(inherit), 0o600); err != nil {
		t.Fatal(err)
	}
	sock, peer, err := os.Pipe() // stands for the socket: any file the test can name
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	defer peer.Close()
	sockIno := fdTarget(t, sock)

	run := func(args ...string) string {
		t.Helper()
		// ExtraFiles put sock at 3 and, with padding, at 6 as well.
		cmd := exec.Command(filepath.Join(dir, "criu"), args...)
		cmd.ExtraFiles = []*os.File{sock, sock, sock, sock}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v %s", args, err, out)
		}
		return string(out)
	}
	// The version check's socket at 6: it stays.
	if out := run("swrk", "6"); !strings.Contains(out, "swrk 6\n"+sockIno+"\n") {
		t.Errorf("criu swrk 6 during a restore: fd 6 is not its socket:\n%s", out)
	}
	// The restore's criu: fd 6 is the inherited pipe.
	if out := run("swrk", "3"); !strings.Contains(out, "swrk 3\n"+pipeIno+"\n") {
		t.Errorf("criu swrk 3 during a restore: fd 6 is not the inherited pipe:\n%s", out)
	}
	// Out of a restore, criu's stderr goes to the file beside the wrapper.
	os.Remove(filepath.Join(dir, "inherit"))
	cmd := exec.Command(filepath.Join(dir, "criu"), "check")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "stderr")); err != nil || string(b) != "stderr of check\n" {
		t.Errorf("criu's stderr out of a restore: %q, %v", b, err)
	}
}

func fdTarget(t *testing.T, f *os.File) string {
	t.Helper()
	s, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The cgroup v2 yard CRIU is given: without a cgroup view, "unified" is a
// link to /sys/fs/cgroup; in a view of /system.slice/jaild.service (the
// daemon under systemd, EnterCgroupView), CRIU's names from the
// hierarchy's root lead through "unified" to /sys/fs/cgroup, the view's
// root (a guest's probe failed on "failed walking .../jaild.service/jails/ID"
// before). A yard of the other layout is replaced, never followed.
func TestCgroupYardLayout(t *testing.T) {
	dir := t.TempDir()
	if err := makeYard(dir, ""); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(filepath.Join(dir, "unified")); err != nil || got != "/sys/fs/cgroup" {
		t.Fatalf("no view: unified -> %q, %v", got, err)
	}
	if err := makeYard(dir, "/system.slice/jaild.service"); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "unified", "system.slice")); err != nil || !fi.IsDir() {
		t.Fatalf("view: unified/system.slice: %v %v", fi, err)
	}
	if got, err := os.Readlink(filepath.Join(dir, "unified", "system.slice", "jaild.service")); err != nil || got != "/sys/fs/cgroup" {
		t.Fatalf("view: unified/system.slice/jaild.service -> %q, %v", got, err)
	}
	// Again: left as it is; then back to no view.
	if err := makeYard(dir, "/system.slice/jaild.service"); err != nil {
		t.Fatal(err)
	}
	if err := makeYard(dir, ""); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(filepath.Join(dir, "unified")); err != nil || got != "/sys/fs/cgroup" {
		t.Fatalf("no view again: unified -> %q, %v", got, err)
	}
}
