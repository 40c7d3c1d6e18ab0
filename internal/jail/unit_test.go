package jail

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
)

// The daemon's configuration checks host_id_base against the span the
// engine uses; the two must agree.
func TestHostIDSpan(t *testing.T) {
	if config.HostIDSpan != MaxJails*IDsPerJail {
		t.Fatalf("config.HostIDSpan = %d, engine uses MaxJails*IDsPerJail = %d", config.HostIDSpan, MaxJails*IDsPerJail)
	}
}

func TestSlots(t *testing.T) {
	var s slots
	for want := range 3 {
		if got, err := s.get(); err != nil || got != want {
			t.Fatalf("get = %d, %v; want %d", got, err, want)
		}
	}
	s.put(1)
	if got, _ := s.get(); got != 1 {
		t.Fatalf("after put(1), get = %d, want the lowest free slot 1", got)
	}
	for range MaxJails - 3 {
		if _, err := s.get(); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.get(); !errors.Is(err, errNoSlot) {
		t.Fatalf("get with every slot used = %d, %v; want errNoSlot", got, err)
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("default limits invalid: %v", err)
	}
	l := DefaultLimits()
	l.MemoryBytes = -1
	if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "memory_bytes") {
		t.Errorf("negative memory: %v, want an error naming memory_bytes", err)
	}
	l = DefaultLimits()
	l.Timeout = 48 * time.Hour
	if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "timeout_ms") {
		t.Errorf("huge timeout: %v, want an error naming timeout_ms", err)
	}
}

func TestValidateEnv(t *testing.T) {
	good := map[string]string{"FOO": "bar", "PYTHONPATH": "/workspace/lib", "TZ": "Europe/Paris"}
	if err := ValidateEnv(good); err != nil {
		t.Errorf("ValidateEnv(good) = %v", err)
	}
	for _, env := range []map[string]string{
		{"LD_PRELOAD": "/x.so"}, {"PATH": "/x"}, {"PYTHONHOME": "/x"}, {"PYTHONSTARTUP": "x"},
		{"1BAD": "x"}, {"A-B": "x"}, {"A": "x\x00y"}, {"_LIBCONTAINER_INITPIPE": "3"},
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
