// Package version holds the build's version, stamped in by the Makefile
// with -ldflags "-X github.com/jaild/jaild/internal/version.Version=...".
package version

// Version is the build's version ("dev" when not stamped).
var Version = "dev"
