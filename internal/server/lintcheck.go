//go:build lintcheck

package server

// Deliberate violations of .golangci.yml's layering rules, compiled only
// with the lintcheck tag: tests/lint/layering.sh has golangci-lint load
// them and fails unless depguard refuses every one (a rule that no longer
// matches would pass silently otherwise).
import (
	_ "github.com/google/nftables"

	_ "github.com/jaild/jaild/internal/jail"
	_ "github.com/jaild/jaild/internal/run"
	_ "github.com/jaild/jaild/internal/runner"
	_ "github.com/jaild/jaild/internal/workspace"
)
