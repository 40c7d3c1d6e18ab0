package jail

import (
	"errors"
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
	var s slots
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
