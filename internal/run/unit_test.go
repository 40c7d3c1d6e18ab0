package run

import (
	"errors"
	"testing"

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
