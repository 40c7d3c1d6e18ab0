package jail

import "github.com/jaild/jaild/internal/run/spec"

// Limits bound one jail and the program it runs (see spec.Limits: the
// run service's callers name them without importing this package).
type Limits = spec.Limits

// DefaultLimits are the limits of a run that asks for nothing special.
func DefaultLimits() Limits { return spec.DefaultLimits() }

// Network is a jail's egress.
type Network = spec.Network
