// Package spec is the vocabulary of the run service, with no
// implementation: what its callers send (a Request, a session's
// SessionSpec and Call, Limits, Network, File) and what they get back
// (Result, CallResult, ImageStats, PoolStats), with the checks of their
// shape. The server and the daemon's wiring speak it; internal/run
// implements it over the jail, the runner and the workspace, which
// alias the types they produce (jail.Limits, runner.Exception,
// workspace.File, ...) so that no caller of run needs to import them.
//
// It imports no package that starts, enters or reads a jail.
package spec
