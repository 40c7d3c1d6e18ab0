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
