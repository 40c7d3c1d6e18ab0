package server

// DefaultIgnoreForTest exposes the ruff rules lint ignores by default.
func DefaultIgnoreForTest() []string { return defaultIgnore }
