package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// copyTree copies the regular files beneath src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			if fi.Name() == "__pycache__" || strings.HasSuffix(fi.Name(), ".egg-info") || fi.Name() == "build" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestPythonClient installs clients/python as its README says (pip
// install, here into a virtual environment of Debian's python3, offline:
// setuptools is Debian's) and runs its tests against a real daemon.
func TestPythonClient(t *testing.T) {
	d := startSessionDaemon(t, 0)
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	copyTree(t, "../clients/python", src) // pip's build leaves files beside the sources
	venv := filepath.Join(tmp, "venv")
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run("/usr/bin/python3", "-m", "venv", "--system-site-packages", venv)
	run(filepath.Join(venv, "bin", "pip"), "install", "-q", "--no-index", "--no-build-isolation", "--no-deps", src)

	// The tests import the installed package: they run from elsewhere.
	cmd := exec.Command(filepath.Join(venv, "bin", "python"), "-B", "-m", "unittest", "discover", "-v", "-s", filepath.Join(src, "tests"), "-t", filepath.Join(src, "tests"))
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "JAILD_SOCKET="+d.Socket, "PYTHONPATH=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the client's tests: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "OK") || strings.Contains(string(out), "skipped") {
		t.Fatalf("the client's tests did not all run:\n%s", out)
	}
	where, err := exec.Command(filepath.Join(venv, "bin", "python"), "-c", "import jaild; print(jaild.__file__)").Output()
	if err != nil || !strings.HasPrefix(string(where), venv) {
		t.Errorf("jaild imported from %q (%v), want the virtual environment", where, err)
	}
	t.Logf("%s", out)
}
