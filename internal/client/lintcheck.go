//go:build lintcheck

package client

// Deliberate violations of .golangci.yml's layering rules, compiled only
// with the lintcheck tag (see tests/lint/layering.sh).
import (
	_ "github.com/seccomp/libseccomp-golang"
	_ "github.com/vishvananda/netlink"

	_ "github.com/jaild/jaild/internal/egress"
	_ "github.com/jaild/jaild/internal/jail"
	_ "github.com/jaild/jaild/internal/run"
	_ "github.com/jaild/jaild/internal/seccomp"
	_ "github.com/jaild/jaild/internal/server"
)
