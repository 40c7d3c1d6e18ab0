//go:build !unit

package run

import (
	"bytes"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
)

func TestJailPackagesImport(t *testing.T) {
	code := `
import importlib
mods = ['numpy', 'pandas', 'scipy', 'matplotlib', 'seaborn', 'requests', 'aiohttp', 'httpx', 'bs4', 'lxml',
        'PIL', 'reportlab', 'fpdf', 'sympy', 'sklearn', 'statsmodels', 'openpyxl', 'xlsxwriter', 'pypdf',
        'networkx', 'yaml', 'tabulate']
for m in mods:
    importlib.import_module(m)
print(len(mods), 'imported')
import numpy as np, pandas as pd
df = pd.DataFrame({'a': range(1000)})
print(int(df.a.sum()), round(float(np.linalg.det(np.array([[2.0, 1.0], [1.0, 3.0]]))), 9))
from sklearn.linear_model import LinearRegression
print(round(float(LinearRegression().fit([[0], [1], [2]], [1, 3, 5]).coef_[0]), 6))
import scipy.optimize
print(round(float(scipy.optimize.brentq(lambda x: x * x - 2, 0, 2)), 6))
import subprocess
print(subprocess.run(['ruff', '--version'], capture_output=True, text=True).stdout.split()[0])
`
	res := run(t, code, withLimits(func(l *jail.Limits) { l.Timeout = 5 * time.Minute }))
	want := "22 imported\n499500 5.0\n2.0\n1.414214\nruff\n"
	if res.Status != spec.StatusOK || string(res.Stdout) != want {
		t.Errorf("status %s\nstdout %q\nwant   %q\nstderr %s", res.Status, res.Stdout, want, res.Stderr)
	}
}

func TestJailFigure(t *testing.T) {
	code := `
import matplotlib.pyplot as plt
plt.plot([1, 2, 3], [1, 4, 9])
plt.show()
fig = plt.figure()
plt.bar(['a', 'b'], [3, 5])
`
	res := run(t, code, withLimits(func(l *jail.Limits) { l.Timeout = 3 * time.Minute }))
	if res.Status != spec.StatusOK {
		t.Fatalf("status %s\nstderr %s", res.Status, res.Stderr)
	}
	if len(res.Figures) != 2 {
		t.Fatalf("%d figures, want 2 (one shown, one left open)", len(res.Figures))
	}
	for _, f := range res.Figures {
		img, err := png.Decode(bytes.NewReader(f.Data))
		if err != nil {
			t.Errorf("figure %s is not a valid PNG: %v", f.Name, err)
			continue
		}
		if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 100 {
			t.Errorf("figure %s is %v", f.Name, b)
		}
	}
}

func TestJailException(t *testing.T) {
	res := run(t, "x = 1\ny = 0\nprint(x / y)\n")
	if res.Status != spec.StatusError || res.ExitCode != 1 {
		t.Errorf("status %s exit %d, want error/1", res.Status, res.ExitCode)
	}
	if res.Exception == nil || res.Exception.Type != "ZeroDivisionError" || res.Exception.Line != 3 {
		t.Errorf("exception %+v, want ZeroDivisionError at line 3", res.Exception)
	}
	if !strings.Contains(string(res.Stderr), `File "main.py", line 3`) || strings.Contains(string(res.Stderr), "runner.py") {
		t.Errorf("traceback should point at main.py:3 and hide the runner:\n%s", res.Stderr)
	}

	res = run(t, "print('ok')\nif True\n    pass\n")
	if res.Exception == nil || res.Exception.Type != "SyntaxError" || res.Exception.Line != 2 {
		t.Errorf("exception %+v, want SyntaxError at line 2", res.Exception)
	}

	res = run(t, "import sys\nsys.exit(3)\n")
	if res.Status != spec.StatusError || res.ExitCode != 3 || res.Exception != nil {
		t.Errorf("sys.exit(3): status %s exit %d exception %+v", res.Status, res.ExitCode, res.Exception)
	}

	res = run(t, "import nosuchmodule\n")
	if res.Exception == nil || res.Exception.Type != "ModuleNotFoundError" || !strings.Contains(res.Exception.Message, "nosuchmodule") {
		t.Errorf("exception %+v, want ModuleNotFoundError naming the module", res.Exception)
	}
}

func TestJailLastLineInteractive(t *testing.T) {
	interactive := func(r *Request) { r.LastLineInteractive = true }
	res := run(t, "a = 20\na * 2 + 2\n", interactive)
	if res.ResultRepr == nil || *res.ResultRepr != "42" || string(res.Stdout) != "42\n" {
		t.Errorf("result %v stdout %q, want 42", res.ResultRepr, res.Stdout)
	}
	res = run(t, "x = {'k': [1, 2]}\nx\n", interactive)
	if res.ResultRepr == nil || *res.ResultRepr != "{'k': [1, 2]}" {
		t.Errorf("result %v", res.ResultRepr)
	}
	res = run(t, "print('hi')\n", interactive)
	if res.ResultRepr != nil {
		t.Errorf("print() returns None: result should be absent, got %q", *res.ResultRepr)
	}
	res = run(t, "a = 1\na\n")
	if res.ResultRepr != nil || len(res.Stdout) != 0 {
		t.Errorf("not interactive: result %v stdout %q", res.ResultRepr, res.Stdout)
	}
}

func TestJailMainModule(t *testing.T) {
	res := run(t, "import helper\nprint(__name__, helper.VALUE)\n", func(r *Request) {
		r.Files = []File{{Path: "helper.py", Data: []byte("VALUE = 7\n")}}
	})
	if string(res.Stdout) != "__main__ 7\n" {
		t.Errorf("stdout %q stderr %s", res.Stdout, res.Stderr)
	}
}
