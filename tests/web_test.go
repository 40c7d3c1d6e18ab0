package tests

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

const chromium = "/usr/bin/chromium"

// webTestCache holds tests/web's npm dependencies, one directory per
// lockfile, so that reruns need no network.
const webTestCache = "/var/cache/jaild/web-test"

// nodeDir is a directory with node (>= 20) and npm: PATH's, or those
// internal/web/ui/build.sh fetches from the npm registry.
func nodeDir(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("bash", "../internal/web/ui/build.sh", "--node").Output()
	if err != nil {
		t.Fatalf("find node: %v %s", err, stderrOf(err))
	}
	return strings.TrimSpace(string(out))
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}

// npmCI runs npm ci in dir with node's directory first on PATH.
func npmCI(t *testing.T, node, dir string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(node, "npm"), "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+node+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
}

// webTestModules returns tests/web's node_modules, installed from its
// lockfile into webTestCache on first use.
func webTestModules(t *testing.T, node string) string {
	t.Helper()
	lock, err := os.ReadFile("web/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	dir := filepath.Join(webTestCache, hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "playwright-core", "package.json")); err == nil {
		return filepath.Join(dir, "node_modules")
	}
	if err := os.MkdirAll(webTestCache, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(webTestCache, ".install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"package.json", "package-lock.json"} {
		copyFile(t, filepath.Join("web", f), filepath.Join(tmp, f))
	}
	npmCI(t, node, tmp)
	os.RemoveAll(dir) // a partial one
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "node_modules")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// startWeb starts `jailctl web` on a free loopback port for d and returns
// the URL it printed.
func startWeb(t *testing.T, d *daemon) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "jailctl"), "--socket", d.Socket, "web", "--http", "127.0.0.1:0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		if err := cmd.Wait(); err != nil {
			t.Errorf("jailctl web after SIGINT: %v, want exit 0; stderr:\n%s", err, stderr.String())
		}
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			urls <- sc.Text()
		}
	}()
	select {
	case url := <-urls:
		if !regexp.MustCompile(`^http://127\.0\.0\.1:[0-9]+/\?token=[0-9a-f]{64}$`).MatchString(url) {
			t.Fatalf("jailctl web printed %q, want http://127.0.0.1:PORT/?token=HEX", url)
		}
		return url
	case <-time.After(30 * time.Second):
		t.Fatalf("jailctl web printed no URL; stderr:\n%s", stderr.String())
	}
	return ""
}

// TestWebPlayground drives `jailctl web` in Debian's Chromium through
// playwright-core (tests/web/playground.mjs) against a real daemon:
// output and an inline figure, an exception's line marked in the editor,
// a timeout from the limits inputs, a returned file downloaded, a lint
// finding marked on its line and a syntax error marked as an error,
// Format, the API reference, no cookie in the browser and a reload that
// keeps working (the token stays in the URL), and the refusal of the page
// and the API without the token, with a wrong one, with a foreign Host or
// from another origin; a shell in the terminal tab (typed into, Ctrl-C,
// its exit status shown, its session ended), and the terminal's
// WebSocket refused without the token or from another origin. With
// JAILD_WEB_SCREENSHOT=FILE.png it saves the page after the figure's run
// (docs/playground.png).
func TestWebPlayground(t *testing.T) {
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("no Chromium (apt-get install chromium; make test-host installs it): %v", err)
	}
	node := nodeDir(t)
	modules := webTestModules(t, node)
	d := startDaemon(t, daemontest.Options{})
	url := startWeb(t, d)

	work := t.TempDir()
	copyFile(t, "web/playground.mjs", filepath.Join(work, "playground.mjs"))
	if err := os.Symlink(modules, filepath.Join(work, "node_modules")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(node, "node"), "playground.mjs")
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "JAILD_WEB_URL="+url, "CHROMIUM="+chromium, "JAILD_WEB_PROFILE="+filepath.Join(work, "profile"))
	if shot := os.Getenv("JAILD_WEB_SCREENSHOT"); shot != "" {
		abs, err := filepath.Abs(shot)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "JAILD_WEB_SCREENSHOT="+abs)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("playground.mjs: %v\nstdout: %s\nstderr: %s\njaild log:\n%s", err, out, stderr.String(), d.Log.String())
	}
	// The script checked each step; this reads back the main facts, so a
	// script that stopped checking would not pass.
	var seen struct {
		Landed string
		Stdout string
		Figure struct {
			Width, Height int
			PNG           bool
		}
		Exception   string
		MarkedLines []int
		TimeoutRun  string
		File        struct{ Name, Text string }
		LintMarks   struct {
			Ranges []struct {
				Line int
				Text string
			}
			Gutter int
		}
		SyntaxMarks struct {
			Errors int
			List   string
		}
		Formatted string
		Reference struct {
			Ops     []string
			Schemas int
		}
		Cookies []json.RawMessage
		Reload  struct {
			Status int
			URL    string
		}
		ReloadStdout string
		Rich         struct {
			Sandboxes  []string
			Rows       int
			ScriptText string
			Title      string
			SVG        int
		}
		Terminal struct{ Text, Status string }
		Refusals map[string]struct {
			Status int
			Type   string
		}
	}
	if err := json.Unmarshal(out, &seen); err != nil {
		t.Fatalf("playground.mjs printed %q: %v", out, err)
	}
	t.Logf("saw: %s", out)
	if seen.Landed != url || !strings.Contains(seen.Stdout, "lowest of the damped cosine:") ||
		!seen.Figure.PNG || seen.Figure.Width == 0 || seen.Figure.Height == 0 {
		t.Errorf("the run with a figure: landed on %s, stdout %q, figure %+v", seen.Landed, seen.Stdout, seen.Figure)
	}
	if len(seen.Rich.Sandboxes) != 2 || seen.Rich.Sandboxes[0] != "" || seen.Rich.Rows != 3 || seen.Rich.ScriptText != "static" || seen.Rich.Title == "pwned" || seen.Rich.SVG != 10 {
		t.Errorf("rich outputs %+v: want two iframes sandboxed without permissions, a 3-row table, the script not run, a 10 px SVG", seen.Rich)
	}
	if !strings.Contains(seen.Exception, "ZeroDivisionError") || len(seen.MarkedLines) != 1 || seen.MarkedLines[0] != 3 {
		t.Errorf("the exception %q, marked lines %v: want ZeroDivisionError on line 3", seen.Exception, seen.MarkedLines)
	}
	if !strings.HasPrefix(seen.TimeoutRun, "timeout") {
		t.Errorf("a loop with timeout 1000 ms: %q", seen.TimeoutRun)
	}
	if seen.File.Name != "table.csv" || seen.File.Text != "n,square\n3,9\n" {
		t.Errorf("the returned file downloaded: %+v", seen.File)
	}
	if len(seen.LintMarks.Ranges) != 1 || seen.LintMarks.Ranges[0].Line != 1 || seen.LintMarks.Gutter != 1 {
		t.Errorf("lint marks %+v: want one, on line 1", seen.LintMarks)
	}
	if seen.SyntaxMarks.Errors == 0 || !strings.Contains(seen.SyntaxMarks.List, "invalid-syntax") {
		t.Errorf("a syntax error's marks %+v: want invalid-syntax marked as an error", seen.SyntaxMarks)
	}
	if seen.Formatted != "x = [1, 2, 3]\nprint(x)\n" {
		t.Errorf("formatted %q", seen.Formatted)
	}
	if len(seen.Reference.Ops) == 0 || seen.Reference.Schemas == 0 {
		t.Errorf("the API reference: %+v", seen.Reference)
	}
	if seen.Cookies == nil || len(seen.Cookies) != 0 {
		t.Errorf("the browser's cookies %s: want none (a cookie reaches every port of the host)", seen.Cookies)
	}
	if seen.Reload.Status != 200 || seen.Reload.URL != url || seen.ReloadStdout != "42\n" {
		t.Errorf("the reload: %+v, then stdout %q: want the page at the printed URL and a run printing 42", seen.Reload, seen.ReloadStdout)
	}
	if !strings.Contains(seen.Terminal.Text, "m42 xterm-256color") || !strings.Contains(seen.Terminal.Text, "m6") || strings.Contains(seen.Terminal.Text, "n4") ||
		!strings.Contains(seen.Terminal.Status, "exited with status 3") {
		t.Errorf("the terminal tab: %+v", seen.Terminal)
	}
	// The terminal's session ended with its shell.
	var sessions api.SessionList
	code, _ := d.call(t, "GET", "/v1/sessions", nil, &sessions)
	if code != 200 || len(sessions.Sessions) != 1 || sessions.Sessions[0].State != "ended" {
		t.Errorf("sessions after the terminal tab: HTTP %d %+v; want the terminal's, ended", code, sessions)
	}
	for _, k := range []string{"noToken", "wrongToken", "pageNoToken", "pageWrongToken", "foreignHost", "crossOrigin", "terminalNoToken", "terminalWrongToken", "terminalCrossOrigin"} {
		if r := seen.Refusals[k]; r.Status != 403 || r.Type != "forbidden" {
			t.Errorf("%s: %+v, want 403 forbidden", k, r)
		}
	}
}

// TestWebAssetsReproducible rebuilds the playground's front end in a
// temporary directory from the committed source and lockfile
// (internal/web/ui/build.sh: npm ci, esbuild) and checks that the result
// is internal/web/dist byte for byte: the assets embedded in jailctl are
// built from the source in the tree. Needs the npm registry (or npm's
// cache).
func TestWebAssetsReproducible(t *testing.T) {
	const ui = "../internal/web/ui"
	src := filepath.Join(t.TempDir(), "ui")
	copyTree(t, ui, src) // node_modules left out
	out := filepath.Join(t.TempDir(), "dist")
	build := exec.Command("bash", filepath.Join(src, "build.sh"), out)
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, b)
	}
	want := treeOf(t, "../internal/web/dist")
	got := treeOf(t, out)
	if len(want) == 0 {
		t.Fatal("internal/web/dist is empty")
	}
	for name, b := range want {
		if g, ok := got[name]; !ok {
			t.Errorf("the rebuild has no %s", name)
		} else if !bytes.Equal(g, b) {
			t.Errorf("%s differs: committed %d bytes (sha256 %x), rebuilt %d bytes (sha256 %x); run make web",
				name, len(b), sha256.Sum256(b), len(g), sha256.Sum256(g))
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("the rebuild has %s, which internal/web/dist has not; run make web", name)
		}
	}
}

// treeOf is the files under dir by their path relative to it.
func treeOf(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		files[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
