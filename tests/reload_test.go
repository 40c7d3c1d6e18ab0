package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/daemontest"
)

// jaildReload runs `jaild reload --pid` against d as systemd's ExecReload
// does, with args (--run-dir, or --config): its exit code, stdout and
// stderr.
func jaildReload(t *testing.T, d *daemon, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "jaild"), append([]string{"reload", "--pid", strconv.Itoa(d.Pid())}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("jaild reload: %v", err)
		}
		code = ee.ExitCode()
	}
	return code, stdout.String(), stderr.String()
}

// TestJaildReload: `jaild reload` (systemd's ExecReload) returns once the
// daemon's reload is done, 0 when applied, 1 with the daemon's reason when
// refused, so `systemctl reload` is synchronous and honest on systemd 252
// (no Type=notify-reload) as on later ones.
func TestJaildReload(t *testing.T) {
	minimal := builtImage(t, "python-minimal")
	d := startDaemon(t, daemontest.Options{Tune: func(c string) string {
		return c + imagesSection(map[string]string{"python-minimal": minimal})
	}})
	if _, ok := d.images(t)["python-minimal"]; !ok {
		t.Fatalf("python-minimal not served at start: %v", d.images(t))
	}
	setImages := func(images map[string]string) {
		t.Helper()
		if err := d.EditConfig(func(c string) string {
			c, _, _ = strings.Cut(c, "[images.")
			return c + imagesSection(images)
		}); err != nil {
			t.Fatal(err)
		}
	}

	runDir := []string{"--run-dir", filepath.Join(d.Dir, "run")} // as the unit gives it

	// Applied: the image is gone from /v1/info the moment reload returns
	// (the run directory found from the configuration file).
	setImages(nil)
	code, stdout, stderr := jaildReload(t, d, "--config", d.Config)
	if code != 0 || !strings.Contains(stdout, "jaild reloaded") {
		t.Fatalf("good reload: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if got := d.images(t); len(got) != 1 {
		t.Fatalf("images right after jaild reload returned 0: %v, want the default alone", got)
	}
	st, err := os.Stat(filepath.Join(d.Dir, "run", "reload.json"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the reload status: %v, %v; want a file of mode 0600", st, err)
	}

	// Applied again: the image is back at once.
	setImages(map[string]string{"python-minimal": minimal})
	if code, stdout, stderr := jaildReload(t, d, runDir...); code != 0 {
		t.Fatalf("second good reload: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, ok := d.images(t)["python-minimal"]; !ok {
		t.Fatalf("python-minimal not served right after the reload: %v", d.images(t))
	}

	// Refused, twice in a row (the outcome is told by the reload, not by a
	// change of state): an image that is missing, a file that does not
	// parse. Exit 1 with the reason; nothing changed.
	for what, tc := range map[string]struct {
		edit func(string) string
		want string
	}{
		"missing image": {func(c string) string {
			c, _, _ = strings.Cut(c, "[images.")
			return c + imagesSection(map[string]string{"python-minimal": filepath.Join(t.TempDir(), "none")})
		}, "images.python-minimal"},
		"unparsable file": {func(c string) string { return c + "\n[[[ not toml\n" }, "the configuration does not load"},
	} {
		if err := d.EditConfig(tc.edit); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := jaildReload(t, d, runDir...)
		if code != 1 || !strings.Contains(stderr, "reload refused") || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "nothing changed") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 1 with the reason (%q)", what, code, stdout, stderr, tc.want)
		}
		if _, ok := d.images(t)["python-minimal"]; !ok || len(d.images(t)) != 2 {
			t.Errorf("%s: images after the refused reload: %v", what, d.images(t))
		}
		setImages(map[string]string{"python-minimal": minimal})
	}

	// A pid that is gone: no wait for an outcome that never comes.
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := jaildReload(t, d, append(runDir, "--pid", strconv.Itoa(gone.Process.Pid))...); code != 1 || !strings.Contains(stderr, "no such process") {
		t.Errorf("a pid that is gone: exit %d, %q; want 1 naming it", code, stderr)
	}
}
