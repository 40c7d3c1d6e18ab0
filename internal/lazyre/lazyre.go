// Package lazyre is a regular expression compiled on first use. The
// daemon's binary is also each jail's first process (libcontainer's init),
// which runs every package's initialisation and uses none of the daemon's
// patterns: compiled at package level, they cost every jail's start
// (those with counted repetitions, like {0,62}, most).
package lazyre

import (
	"regexp"
	"sync"
)

// Regexp is a regexp.Regexp compiled on first use; it panics then if the
// expression does not compile (as regexp.MustCompile would at start).
type Regexp struct {
	expr string
	re   func() *regexp.Regexp
}

// New returns the expression, not yet compiled.
func New(expr string) *Regexp {
	return &Regexp{expr: expr, re: sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })}
}

// MatchString is regexp.Regexp.MatchString.
func (r *Regexp) MatchString(s string) bool { return r.re().MatchString(s) }

// FindAllStringSubmatch is regexp.Regexp.FindAllStringSubmatch.
func (r *Regexp) FindAllStringSubmatch(s string, n int) [][]string {
	return r.re().FindAllStringSubmatch(s, n)
}

// String is the expression.
func (r *Regexp) String() string { return r.expr }
