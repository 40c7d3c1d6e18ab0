//go:build !(cgo && seccomp)

package seccomp

import (
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Validate always fails in this build: checking a profile needs
// libseccomp. The error wraps [ErrNoSeccompSupport].
func Validate(*specs.LinuxSeccomp) error {
	return fmt.Errorf("validating seccomp profile: %w", ErrNoSeccompSupport)
}

// Denied always fails in this build; the error wraps
// [ErrNoSeccompSupport].
func Denied(*specs.LinuxSeccomp) ([]Probe, error) {
	return nil, fmt.Errorf("listing denied syscalls: %w", ErrNoSeccompSupport)
}
