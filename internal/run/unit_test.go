package run

// The tests of this file need neither root nor an image: `make test-unit`
// runs them, built with the unit tag, which leaves out the files of tests
// that need real jails (see main_test.go).

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
)

func TestValidateEnv(t *testing.T) {
	good := map[string]string{"FOO": "bar", "PYTHONPATH": "/workspace/lib", "TZ": "Europe/Paris"}
	if err := spec.ValidateEnv(good); err != nil {
		t.Errorf("spec.ValidateEnv(good) = %v", err)
	}
	for _, env := range []map[string]string{
		{"LD_PRELOAD": "/x.so"}, {"PATH": "/x"}, {"PYTHONHOME": "/x"}, {"PYTHONSTARTUP": "x"},
		{"1BAD": "x"}, {"A-B": "x"}, {"A": "x\x00y"}, {"_LIBCONTAINER_INITPIPE": "3"},
		{"GLIBC_TUNABLES": "glibc.malloc.check=3"}, {"MALLOC_ARENA_MAX": "2"},
	} {
		if err := spec.ValidateEnv(env); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("spec.ValidateEnv(%v) = %v, want ErrInvalid", env, err)
		}
	}
}

func TestImportsAny(t *testing.T) {
	tops := map[string]bool{"pandas": true, "matplotlib": true}
	for code, want := range map[string]bool{
		"import pandas":                          true,
		"import pandas as pd; print(1)":          true,
		"import os, pandas":                      true,
		"import os as o, pandas as p":            true,
		"from pandas import DataFrame":           true,
		"import matplotlib.pyplot as plt":        true,
		"from matplotlib.pyplot import plot":     true,
		"def f():\n    import pandas\n":          true,
		"x = 1; import pandas":                   true,
		"if True: import pandas":                 true,
		"import\tpandas":                         true,
		"print(1)":                               false,
		"import os":                              false,
		"import pandasx":                         false,
		"import mypandas":                        false,
		"from os import pandas_like":             false,
		"x = 'import'\npandas = 1":               false,
		"__import__('pandas')":                   false, // missed: costs time only
		"print('see pandas')\nimport numpy as n": false,
	} {
		if got := importsAny(code, tops); got != want {
			t.Errorf("importsAny(%q) = %v, want %v", code, got, want)
		}
	}
}

// A run's status, most specific first; a SIGKILL after using the CPU
// limit is the hard RLIMIT_CPU's (the jail's pid 1, a command in a jail
// of its own, is spared the SIGXCPU of the soft one).
func TestStatus(t *testing.T) {
	const soft = 3 * time.Second
	kill, xcpu := int(unix.SIGKILL), int(unix.SIGXCPU)
	for _, c := range []struct {
		r      Result
		output bool
		want   Status
	}{
		{Result{ExitCode: 0}, false, spec.StatusOK},
		{Result{ExitCode: 1}, false, spec.StatusError},
		{Result{ExitCode: -1, Signal: xcpu}, false, spec.StatusCPULimit},
		{Result{ExitCode: -1, Signal: kill, CPUTime: soft}, false, spec.StatusCPULimit},
		{Result{ExitCode: -1, Signal: kill, CPUTime: soft - time.Millisecond}, false, spec.StatusKilled},
		{Result{ExitCode: -1, Signal: int(unix.SIGSEGV), CPUTime: 2 * soft}, false, spec.StatusKilled},
		{Result{ExitCode: -1, Signal: kill, CPUTime: 2 * soft, TimedOut: true}, false, spec.StatusTimeout},
		{Result{ExitCode: -1, Signal: kill, CPUTime: 2 * soft, OOMKilled: true}, false, spec.StatusMemoryLimit},
		{Result{ExitCode: -1, Signal: kill, CPUTime: 2 * soft}, true, spec.StatusOutputLimit},
		{Result{ExitCode: -1, Signal: kill, CPUTime: 2 * soft, Cancelled: true}, false, spec.StatusKilled},
	} {
		if got := status(&c.r, c.output, soft); got != c.want {
			t.Errorf("status(%+v, output limit %v) = %s, want %s", c.r, c.output, got, c.want)
		}
	}
}

// A call's status: the daemon's reason to interrupt comes first, whether
// or not the code stopped at the interrupt; a session that ended under a
// call killed it.
func TestCallStatus(t *testing.T) {
	kill, segv := int(unix.SIGKILL), int(unix.SIGSEGV)
	for _, c := range []struct {
		r     CallResult
		cause string
		want  Status
	}{
		{CallResult{}, "", spec.StatusOK},
		{CallResult{Result: Result{ExitCode: 3}}, "", spec.StatusError},
		{CallResult{Result: Result{ExitCode: 0, TimedOut: true}}, spec.LostTimeout, spec.StatusTimeout},
		{CallResult{Result: Result{ExitCode: -1, Signal: kill, TimedOut: true, OOMKilled: true}}, spec.LostTimeout, spec.StatusTimeout},
		{CallResult{Result: Result{ExitCode: -1, Signal: kill, OOMKilled: true}, StateLost: true, LostReason: spec.LostMemory}, "", spec.StatusMemoryLimit},
		{CallResult{Result: Result{ExitCode: 1}}, spec.LostOutput, spec.StatusOutputLimit},
		{CallResult{Result: Result{ExitCode: 1, Cancelled: true}}, spec.LostCancelled, spec.StatusKilled},
		{CallResult{Result: Result{ExitCode: -1, Signal: kill}, Ended: true, EndReason: spec.EndClosed}, "", spec.StatusKilled},
		{CallResult{Result: Result{ExitCode: 0}, Ended: true, EndReason: spec.EndFreezeFailed}, "", spec.StatusOK},
		{CallResult{Result: Result{ExitCode: -1, Signal: kill}, StateLost: true, LostReason: spec.LostCPU}, "", spec.StatusCPULimit},
		{CallResult{Result: Result{ExitCode: -1, Signal: segv}, StateLost: true, LostReason: spec.LostCrashed}, "", spec.StatusKilled},
		{CallResult{Result: Result{ExitCode: 0}, StateLost: true, LostReason: spec.LostExited}, "", spec.StatusOK},
	} {
		if got := callStatus(&c.r, c.cause); got != c.want {
			t.Errorf("callStatus(%+v, %q) = %s, want %s", c.r, c.cause, got, c.want)
		}
	}
}

// Writing a call's files fails on what the session made of its workspace
// as the caller's conflict; anything else is the host's.
func TestWorkspaceStateError(t *testing.T) {
	for _, e := range []error{unix.EEXIST, unix.ENOTDIR, unix.EISDIR, unix.ELOOP, unix.EXDEV, unix.EMLINK} {
		if err := fmt.Errorf("write: %w", &os.PathError{Op: "openat2", Path: "/x", Err: e}); !workspaceStateError(err) {
			t.Errorf("%v is not the session's state", err)
		}
	}
	for _, err := range []error{unix.EIO, unix.ENOSPC, unix.EACCES, errors.New("other")} {
		if workspaceStateError(err) {
			t.Errorf("%v taken for the session's state", err)
		}
	}
}
