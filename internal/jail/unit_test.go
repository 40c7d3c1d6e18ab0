package jail

// The tests of this file need neither root nor an image: `make test-unit`
// runs them, built with the unit tag, which leaves out the files of tests
// that need real jails (see main_test.go).

import (
	"errors"
	"os"
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
