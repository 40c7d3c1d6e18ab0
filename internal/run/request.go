package run

import "github.com/jaild/jaild/internal/run/spec"

// The run service's vocabulary lives in spec, so that its callers need
// not import this package's dependencies (the jail, the runner, the
// workspace); these names are this package's own for it.
type (
	File       = spec.File
	OutputFunc = spec.OutputFunc
	FileSink   = spec.FileSink
	Hooks      = spec.Hooks
	Request    = spec.Request
	Status     = spec.Status
	Result     = spec.Result
)

// Bounds on the request's own shape.
const (
	MaxFiles        = spec.MaxFiles
	MaxPatterns     = spec.MaxPatterns
	MaxEnvVars      = spec.MaxEnvVars
	MaxEnvNameBytes = spec.MaxEnvNameBytes
	MaxEnvValBytes  = spec.MaxEnvValBytes
)

// Statuses, most specific first in the order Run decides them.
const (
	StatusOK          = spec.StatusOK
	StatusError       = spec.StatusError
	StatusTimeout     = spec.StatusTimeout
	StatusMemoryLimit = spec.StatusMemoryLimit
	StatusCPULimit    = spec.StatusCPULimit
	StatusOutputLimit = spec.StatusOutputLimit
	StatusKilled      = spec.StatusKilled
)

// ValidateEnv checks caller-supplied variables (see spec.ValidateEnv).
func ValidateEnv(env map[string]string) error { return spec.ValidateEnv(env) }
