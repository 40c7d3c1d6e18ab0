package jail

import (
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// TestFavorDynmods clears favordynmods on the hierarchy the engine set it
// on, sets it again the engine's way, and checks that the hierarchy's other
// superblock options and its mount flags are what they were.
func TestFavorDynmods(t *testing.T) {
	m := dynmodsMount(t)
	if m == nil {
		t.Fatal("the engine (created with FavorDynmods) left no cgroup hierarchy with favordynmods")
	}
	before := *m
	want := withoutOption(before.VFSOptions, "favordynmods")
	fd, err := unix.Fspick(unix.AT_FDCWD, m.Mountpoint, unix.FSPICK_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	for _, opt := range strings.Split(want, ",") {
		if k, v, ok := strings.Cut(opt, "="); ok {
			err = unix.FsconfigSetString(fd, k, v)
		} else if opt != "rw" && opt != "ro" {
			err = unix.FsconfigSetFlag(fd, opt)
		}
		if err != nil {
			t.Fatal(opt, err)
		}
	}
	if err := unix.FsconfigReconfigure(fd); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if dynmodsMount(t) != nil {
		t.Fatal("favordynmods still set after clearing it")
	}

	where, err := favorDynmods()
	if err != nil || where == "" {
		t.Fatalf("favorDynmods: %q, %v", where, err)
	}
	after := dynmodsMount(t)
	if after == nil || after.Mountpoint != before.Mountpoint {
		t.Fatalf("favordynmods set on %+v, want %s", after, before.Mountpoint)
	}
	if after.VFSOptions != before.VFSOptions || after.Options != before.Options {
		t.Errorf("options changed: superblock %q -> %q, mount %q -> %q", before.VFSOptions, after.VFSOptions, before.Options, after.Options)
	}
	if where, err := favorDynmods(); where != "" || err != nil {
		t.Errorf("second call changed %q (%v); want nothing to do", where, err)
	}
}

func dynmodsMount(t *testing.T) *mountinfo.Info {
	t.Helper()
	mounts, err := mountinfo.GetMounts(mountinfo.FSTypeFilter("cgroup2"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mounts {
		if hasOption(m.VFSOptions, "favordynmods") {
			return m
		}
	}
	return nil
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
