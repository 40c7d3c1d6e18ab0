//go:build !unit

package jail

import (
	"testing"

	"github.com/moby/sys/mountinfo"
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
	if err := restoreDynmods(); err != nil {
		t.Fatal(err)
	}
	if cleared := dynmodsMount(t); cleared != nil {
		t.Fatal("favordynmods still set after restoreDynmods")
	}
	if m2, err := cgroup2Mount(); err != nil || m2.VFSOptions != withoutOption(before.VFSOptions, "favordynmods") {
		t.Fatalf("after restoreDynmods the options are %q, want %q", m2.VFSOptions, withoutOption(before.VFSOptions, "favordynmods"))
	}
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
