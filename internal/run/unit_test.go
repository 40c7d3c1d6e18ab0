package run

import (
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
)

func TestValidateEnv(t *testing.T) {
	good := map[string]string{"FOO": "bar", "PYTHONPATH": "/workspace/lib", "TZ": "Europe/Paris"}
	if err := ValidateEnv(good); err != nil {
		t.Errorf("ValidateEnv(good) = %v", err)
	}
	for _, env := range []map[string]string{
		{"LD_PRELOAD": "/x.so"}, {"PATH": "/x"}, {"PYTHONHOME": "/x"}, {"PYTHONSTARTUP": "x"},
		{"1BAD": "x"}, {"A-B": "x"}, {"A": "x\x00y"}, {"_LIBCONTAINER_INITPIPE": "3"},
		{"GLIBC_TUNABLES": "glibc.malloc.check=3"}, {"MALLOC_ARENA_MAX": "2"},
	} {
		if err := ValidateEnv(env); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ValidateEnv(%v) = %v, want ErrInvalid", env, err)
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
		{Result{ExitCode: 0}, false, StatusOK},
		{Result{ExitCode: 1}, false, StatusError},
		{Result{ExitCode: -1, Signal: xcpu}, false, StatusCPULimit},
		{Result{ExitCode: -1, Signal: kill, CPUTime: soft}, false, StatusCPULimit},
		{Result{ExitCode: -1, Signal: kill, CPUTime: soft - time.Millisecond}, false, StatusKilled},
		{Result{ExitCode: -1, Signal: int(unix.SIGSEGV), CPUTime: 2 * soft}, false, StatusKilled},
		{Result{ExitCode: -1, Signal: kill, CPUTime: 2 * soft, TimedOut: true}, false, StatusTimeout},
		{Result{ExitCode: -1, Signal: kill, CPUTime: 2 * soft, OOMKilled: true}, false, StatusMemoryLimit},
		{Result{ExitCode: -1, Signal: kill, CPUTime: 2 * soft}, true, StatusOutputLimit},
		{Result{ExitCode: -1, Signal: kill, CPUTime: 2 * soft, Cancelled: true}, false, StatusKilled},
	} {
		if got := status(&c.r, c.output, soft); got != c.want {
			t.Errorf("status(%+v, output limit %v) = %s, want %s", c.r, c.output, got, c.want)
		}
	}
}
