//go:build lintcheck

package metrics

// A deliberate violation of .golangci.yml's layering rules, compiled only
// with the lintcheck tag (see tests/lint/layering.sh).
import _ "github.com/jaild/jaild/internal/pool"
