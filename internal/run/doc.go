// Package run is jaild's orchestration: a run is a short composition of a
// jail (package jail, fresh or warm from package pool), the Python runner
// started in it and spoken to (package runner), and the workspace files
// written in and read back (package workspace). Everything that knows
// Python lives here or in runner: the runner's command line and
// environment, the warm pool's choice of jail by the code's imports,
// figures. A stateful session is the same pieces held open.
package run
