package spec

import (
	"path"
	"strings"

	"github.com/jaild/jaild/internal/errdefs"
)

// Bounds on callers' paths and patterns.
const (
	MaxPathBytes = 1024
	MaxNameBytes = 255
	MaxPathDepth = 32
)

// Bounds on what is read back from a run's workspace.
const (
	MaxReturnFiles      = 256
	MaxReturnFileBytes  = 16 << 20
	MaxReturnTotalBytes = 64 << 20
	MaxFigures          = 16
	MaxFigureBytes      = 8 << 20
	// MaxFiguresTotalBytes bounds a run's figures together; figures past
	// it are left out, as those past MaxFigures are.
	MaxFiguresTotalBytes = 32 << 20
	// MaxOutputs bounds a run's rich outputs (figures included),
	// MaxOutputBytes one output's file; the outputs' bytes and the
	// figures' share MaxFiguresTotalBytes.
	MaxOutputs     = 64
	MaxOutputBytes = 8 << 20
)

// ValidatePath checks a workspace-relative path from a caller: non-empty,
// clean, relative, no "..", no NUL, bounded in length and depth. The error
// is of class errdefs.ErrInvalidArgument and says which rule failed.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return errdefs.New(errdefs.ErrInvalidArgument, "path is empty")
	case len(p) > MaxPathBytes:
		return errdefs.New(errdefs.ErrInvalidArgument, "path is longer than %d bytes", MaxPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return errdefs.New(errdefs.ErrInvalidArgument, "path %q contains NUL", p)
	case strings.HasPrefix(p, "/"):
		return errdefs.New(errdefs.ErrInvalidArgument, "path %q must be relative to the workspace", p)
	}
	parts := strings.Split(p, "/")
	if len(parts) > MaxPathDepth {
		return errdefs.New(errdefs.ErrInvalidArgument, "path %q is deeper than %d", p, MaxPathDepth)
	}
	for _, c := range parts {
		switch {
		case c == "" || c == ".":
			return errdefs.New(errdefs.ErrInvalidArgument, "path %q is not clean (empty or . component)", p)
		case c == "..":
			return errdefs.New(errdefs.ErrInvalidArgument, "path %q contains ..", p)
		case len(c) > MaxNameBytes:
			return errdefs.New(errdefs.ErrInvalidArgument, "path %q has a component longer than %d bytes", p, MaxNameBytes)
		}
	}
	return nil
}

// ValidatePattern checks a return_files pattern: the rules of ValidatePath,
// plus well-formed glob syntax in every component.
func ValidatePattern(p string) error {
	if err := ValidatePath(p); err != nil {
		return err
	}
	for _, c := range strings.Split(p, "/") {
		if c == "**" {
			continue
		}
		if _, err := path.Match(c, ""); err != nil {
			return errdefs.New(errdefs.ErrInvalidArgument, "pattern %q: bad glob component %q", p, c)
		}
	}
	return nil
}
