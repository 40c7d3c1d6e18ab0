package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// jailctl runs the built jailctl against the shared daemon.
func jailctl(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return jailctlAt(t, shared.Socket, stdin, args...)
}

// jailctlAt runs the built jailctl against the daemon on socket.
func jailctlAt(t *testing.T, socket, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "jailctl"), append([]string{"--socket", socket}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("jailctl: %v", err)
	}
	return o.String(), e.String(), code
}

func TestJailctlEndToEnd(t *testing.T) {
	if out, errOut, code := jailctl(t, "", "exec", "-c", "import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(3)"); out != "out\n" || !strings.Contains(errOut, "err\n") || code != 3 {
		t.Errorf("exec: stdout %q stderr %q exit %d, want the run's streams and exit code 3", out, errOut, code)
	}
	if _, errOut, code := jailctl(t, "", "exec", "--timeout", "500ms", "-c", "while True: pass"); code != 124 || !strings.Contains(errOut, "Execution terminated") {
		t.Errorf("timeout: exit %d stderr %q, want 124", code, errOut)
	}
	if out, _, code := jailctl(t, "print(6 * 7)\n", "exec"); out != "42\n" || code != 0 {
		t.Errorf("code on stdin: %q exit %d", out, code)
	}

	dir := t.TempDir()
	in := filepath.Join(dir, "data.csv")
	if err := os.WriteFile(in, []byte("a\n1\n2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := filepath.Join(dir, "out")
	_, errOut, code := jailctl(t, "", "exec", "--file", in, "--get", "sum.txt", "--out-dir", outDir, "-c",
		"import pandas as pd, matplotlib.pyplot as plt\ns = pd.read_csv('data.csv').a.sum()\nopen('sum.txt', 'w').write(str(s))\nplt.plot([1, 2])")
	if code != 0 {
		t.Fatalf("exec with files: exit %d: %s", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(outDir, "sum.txt")); err != nil || string(b) != "3" {
		t.Errorf("returned file: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(outDir, "figure-1.png")); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("figure: %v", err)
	}

	// Rich outputs: display()'s text/plain after the run's output, its
	// images saved as output-N.png; a figure's under its own name only.
	richDir := filepath.Join(dir, "rich")
	out, errOut, code := jailctl(t, "", "exec", "--out-dir", richDir, "-c",
		"import base64, matplotlib.pyplot as plt\nprint('first')\n"+
			"class P:\n    def _repr_png_(self): return base64.b64decode('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABSK+kcQAAAABJRU5ErkJggg==')\n    def __repr__(self): return 'P()'\n"+
			"display(P(), {'text/html': '<b>h</b>', 'text/plain': 'plain'}, raw=False)\nplt.plot([1, 2])\n")
	if code != 0 || out != "first\nP()\n{'text/html': '<b>h</b>', 'text/plain': 'plain'}\n" {
		t.Errorf("display: exit %d stdout %q stderr %q", code, out, errOut)
	}
	entries, _ := os.ReadDir(richDir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "figure-1.png output-1.png" {
		t.Errorf("out-dir holds %v", names)
	}

	script := filepath.Join(dir, "s.py")
	os.WriteFile(script, []byte("import os\n"), 0o644)
	if out, _, code := jailctl(t, "", "lint", script); code != 1 || !strings.Contains(out, script+":1:8: F401") {
		t.Errorf("lint: exit %d output %q", code, out)
	}
	if out, _, code := jailctl(t, "x = {  'a':1 }\n", "format", "-"); code != 0 || out != "x = {\"a\": 1}\n" {
		t.Errorf("format: exit %d output %q", code, out)
	}
	if out, _, code := jailctl(t, "", "info"); code != 0 || !strings.Contains(out, "3.13") {
		t.Errorf("info: exit %d output %q", code, out)
	}
	_, errOut, code = jailctl(t, "", "--socket", "/nonexistent/jaild.sock", "health")
	if code != 2 || !strings.Contains(errOut, "/nonexistent/jaild.sock") {
		t.Errorf("cannot connect: exit %d stderr %q", code, errOut)
	}
}
