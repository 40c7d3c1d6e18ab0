//go:build !unit

package jail

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
)

// secondImage is an image other than the default, built by make
// rootfs-images (JAILD_IMAGES_DIR/python-minimal/current).
func secondImage(t *testing.T) string {
	t.Helper()
	root := os.Getenv("JAILD_IMAGES_DIR")
	if root == "" {
		root = "/var/cache/jaild/rootfs"
	}
	dir := filepath.Join(root, "python-minimal", "current")
	if _, err := os.Stat(filepath.Join(dir, "rootfs.squashfs")); err != nil {
		t.Fatalf("no second image (make rootfs-images builds it): %v", err)
	}
	return dir
}

// shIn runs script in a new jail of image and returns its stdout; the
// jail is still to be destroyed by the caller.
func shIn(t *testing.T, image, script string) (*Jail, string) {
	t.Helper()
	j, err := testEngine.Create(Spec{Limits: DefaultLimits(), Image: image})
	if err != nil {
		t.Fatalf("create a jail of %q: %v", image, err)
	}
	r, w, _ := os.Pipe()
	defer r.Close()
	if err := j.Start(Process{Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: w, Stderr: w}); err != nil {
		j.Destroy()
		t.Fatal(err)
	}
	w.Close()
	var out bytes.Buffer
	_, _ = io.Copy(&out, io.LimitReader(r, 1<<20))
	select {
	case <-j.Done():
	case <-time.After(30 * time.Second):
		j.Destroy()
		t.Fatal("jail still running after 30 s")
	}
	return j, out.String()
}

// mounted reports whether the host has a mount at path.
func mounted(t *testing.T, path string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

// An engine serves images added beside its default; a jail keeps its
// image while it lives, even when the image is removed, and the image is
// unmounted when its last jail is destroyed; a replaced image likewise.
func TestEngineImages(t *testing.T) {
	def := testEngine.DefaultImage()
	if def == "" || !slices.Contains(testEngine.ImageNames(), def) || testEngine.ImageManifest(def) != testEngine.Manifest() {
		t.Fatalf("default image %q, names %v", def, testEngine.ImageNames())
	}
	if _, err := testEngine.Create(Spec{Limits: DefaultLimits(), Image: "nonesuch"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("a jail of an unknown image: %v, want invalid argument", err)
	}
	if _, err := testEngine.AddImage("Bad/Name", secondImage(t)); err == nil {
		t.Error("an image name with '/' was taken")
	}
	if _, err := testEngine.AddImage(def, secondImage(t)); err == nil {
		t.Error("the default image was replaced by an image of another name")
	}
	// A tampered image (the manifest's digest no longer matches) is refused.
	bad := t.TempDir()
	for _, f := range []string{"manifest.json", "rootfs.squashfs"} {
		b, err := os.ReadFile(filepath.Join(secondImage(t), f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "rootfs.squashfs" {
			b[len(b)/2] ^= 1
		}
		if err := os.WriteFile(filepath.Join(bad, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := testEngine.AddImage("tampered", bad); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("a tampered image: %v, want a digest mismatch", err)
	}
	if slices.Contains(testEngine.ImageNames(), "tampered") {
		t.Error("the tampered image is listed")
	}

	m, err := testEngine.AddImage("small", secondImage(t))
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != "python-minimal" || !slices.Contains(testEngine.ImageNames(), "small") {
		t.Fatalf("added %q; names %v", m.Name, testEngine.ImageNames())
	}
	testEngine.mu.Lock()
	root := testEngine.images["small"].img.Root
	testEngine.mu.Unlock()

	// What the jail sees is its own image: numpy only in the default.
	probe := "ls /usr/lib/python3/dist-packages | grep -cx numpy || true"
	jd, out := shIn(t, "", probe)
	jd.Destroy()
	if strings.TrimSpace(out) != "1" {
		t.Errorf("default image: numpy listed %q times, want 1", out)
	}
	js, out := shIn(t, "small", probe)
	if strings.TrimSpace(out) != "0" {
		t.Errorf("image small: numpy listed %q times, want 0", out)
	}

	// Removed while js lives: new jails cannot have it, js keeps it.
	if err := testEngine.RemoveImage("small"); err != nil {
		t.Fatal(err)
	}
	if _, err := testEngine.Create(Spec{Limits: DefaultLimits(), Image: "small"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a jail of a removed image: %v", err)
	}
	if !mounted(t, root) {
		t.Error("the removed image was unmounted while a jail used it")
	}
	js.Destroy()
	if mounted(t, root) {
		t.Error("the removed image is still mounted after its last jail")
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its mountpoint %s: %v, want gone", root, err)
	}

	// Replaced while a jail lives: the old one goes with that jail.
	if _, err := testEngine.AddImage("small", secondImage(t)); err != nil {
		t.Fatal(err)
	}
	testEngine.mu.Lock()
	first := testEngine.images["small"].img.Root
	testEngine.mu.Unlock()
	j1, _ := shIn(t, "small", "true")
	if _, err := testEngine.AddImage("small", secondImage(t)); err != nil {
		t.Fatal(err)
	}
	testEngine.mu.Lock()
	second := testEngine.images["small"].img.Root
	testEngine.mu.Unlock()
	if first == second || !mounted(t, first) || !mounted(t, second) {
		t.Fatalf("replaced %s by %s: mounted %v %v", first, second, mounted(t, first), mounted(t, second))
	}
	j2, out := shIn(t, "small", "echo ok")
	j2.Destroy()
	if out != "ok\n" {
		t.Errorf("a jail of the replacement: %q", out)
	}
	j1.Destroy()
	if mounted(t, first) || !mounted(t, second) {
		t.Errorf("after the old image's last jail: old mounted %v, new mounted %v", mounted(t, first), mounted(t, second))
	}
	if err := testEngine.RemoveImage("small"); err != nil {
		t.Fatal(err)
	}
	if mounted(t, second) {
		t.Error("an image without jails is still mounted after its removal")
	}
	if err := testEngine.RemoveImage(def); err == nil {
		t.Error("the default image was removed")
	}

	// The default replaced by a new build of itself (here: the same
	// image again) while a jail lives: the old mount goes with that jail.
	testEngine.mu.Lock()
	oldDef := testEngine.images[def].img.Root
	testEngine.mu.Unlock()
	jo, _ := shIn(t, "", "true")
	m, err = testEngine.AddImage(def, testEngine.cfg.ImageDir)
	if err != nil {
		t.Fatal(err)
	}
	testEngine.mu.Lock()
	newDef := testEngine.images[def].img.Root
	testEngine.mu.Unlock()
	if testEngine.Manifest() != m || testEngine.DefaultImage() != def || newDef == oldDef || !mounted(t, oldDef) || !mounted(t, newDef) {
		t.Fatalf("default replaced: %s by %s, mounted %v %v", oldDef, newDef, mounted(t, oldDef), mounted(t, newDef))
	}
	jn, out := shIn(t, "", "ls /usr/lib/python3/dist-packages | grep -cx numpy || true")
	jn.Destroy()
	if strings.TrimSpace(out) != "1" || jn.Manifest() != m {
		t.Errorf("a jail of the new default: numpy listed %q times", out)
	}
	jo.Destroy()
	if mounted(t, oldDef) || !mounted(t, newDef) {
		t.Errorf("after the old default's last jail: old mounted %v, new mounted %v", mounted(t, oldDef), mounted(t, newDef))
	}
}
