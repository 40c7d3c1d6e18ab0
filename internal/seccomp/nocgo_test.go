//go:build !(cgo && seccomp)

package seccomp

import (
	"errors"
	"testing"
)

// TestNoSeccompSupport checks that a build without libseccomp refuses every
// profile, so that a daemon built that way cannot start unfiltered jails.
func TestNoSeccompSupport(t *testing.T) {
	if _, err := Load("../../seccomp-profiles/default.json"); !errors.Is(err, ErrNoSeccompSupport) {
		t.Errorf("Load = %v, want ErrNoSeccompSupport", err)
	}
	if err := Validate(nil); !errors.Is(err, ErrNoSeccompSupport) {
		t.Errorf("Validate = %v, want ErrNoSeccompSupport", err)
	}
	if _, err := Denied(nil); !errors.Is(err, ErrNoSeccompSupport) {
		t.Errorf("Denied = %v, want ErrNoSeccompSupport", err)
	}
	if len(ConditionalProbes()) == 0 {
		t.Error("ConditionalProbes is empty")
	}
}
