package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// copyTree copies the regular files beneath src to dst, leaving out
// what builds leave behind (node_modules, __pycache__, build, *.egg-info).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			if fi.Name() == "__pycache__" || fi.Name() == "node_modules" || strings.HasSuffix(fi.Name(), ".egg-info") || fi.Name() == "build" {
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

// TestTypeScriptClient checks clients/typescript: its wire.d.ts is what
// gen.mjs makes of the daemon's OpenAPI document (no drift), npm pack
// packs exactly its files, and the packed package, installed with npm,
// passes its tests against a real daemon under node.
func TestTypeScriptClient(t *testing.T) {
	node := nodeDir(t)
	env := append(os.Environ(), "PATH="+node+":"+os.Getenv("PATH"))
	run := func(dir, name string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command(filepath.Join(node, name), args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, out, stderrOf(err))
		}
		return out
	}
	src := "../clients/typescript"
	gen := run(src, "node", "gen.mjs", "../../internal/api/openapi.json")
	if committed, err := os.ReadFile(filepath.Join(src, "wire.d.ts")); err != nil || string(committed) != string(gen) {
		t.Fatalf("clients/typescript/wire.d.ts is not what gen.mjs makes of internal/api/openapi.json (%v): regenerate it with\n\tcd clients/typescript && node gen.mjs > wire.d.ts", err)
	}

	tmp := t.TempDir()
	var packed []struct {
		Filename string
		Files    []struct{ Path string }
	}
	if err := json.Unmarshal(run(src, "npm", "pack", "--json", "--pack-destination", tmp), &packed); err != nil || len(packed) != 1 {
		t.Fatalf("npm pack --json: %v %+v", err, packed)
	}
	var files []string
	for _, f := range packed[0].Files {
		files = append(files, f.Path)
	}
	slices.Sort(files)
	if want := []string{"README.md", "ai.d.ts", "ai.js", "index.d.ts", "index.js", "openai-agents.d.ts", "openai-agents.js", "output.js", "package.json", "wire.d.ts"}; !slices.Equal(files, want) {
		t.Errorf("npm pack packs %v, want %v", files, want)
	}

	proj := filepath.Join(tmp, "proj")
	copyTree(t, filepath.Join(src, "test"), filepath.Join(proj, "test"))
	if err := os.WriteFile(filepath.Join(proj, "package.json"), []byte(`{"name": "jaild-client-test", "private": true, "type": "module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run(proj, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error", filepath.Join(tmp, packed[0].Filename))

	d := startSessionDaemon(t, 0)
	cmd := exec.Command(filepath.Join(node, "node"), "--test", "test/")
	cmd.Dir = proj
	cmd.Env = append(env, "JAILD_SOCKET="+d.Socket)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the client's tests: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "# fail 0") || !strings.Contains(string(out), "# skipped 0") || strings.Contains(string(out), "# pass 0\n") {
		t.Fatalf("the client's tests did not all run and pass:\n%s", out)
	}
	t.Logf("%s", out)

	// The adapters, with the SDKs from the npm registry (pinned) and their
	// own test models.
	run(proj, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "ai@7.0.173", "zod@4.6.7", "@openai/agents@0.20.0")
	copyTree(t, filepath.Join(src, "test-adapters"), filepath.Join(proj, "test-adapters"))
	cmd = exec.Command(filepath.Join(node, "node"), "--test", "test-adapters/")
	cmd.Dir = proj
	cmd.Env = append(env, "JAILD_SOCKET="+d.Socket)
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the adapters' tests: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "# pass 2") || !strings.Contains(string(out), "# fail 0") {
		t.Fatalf("the adapters' tests did not all run and pass:\n%s", out)
	}
	t.Logf("%s", out)
}
