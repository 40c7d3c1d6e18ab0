package tests

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
	"github.com/jaild/jaild/internal/metrics/metricstest"
)

// imagesSection is the [images] configuration serving each named image
// (name → dir) with one plain warm jail.
func imagesSection(images map[string]string) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(images)) {
		fmt.Fprintf(&b, "[images.%s]\ndir = %q\n", name, images[name])
	}
	return b.String()
}

// servingDaemon is a daemon whose default image is python, with the
// other images of images served beside it.
func servingDaemon(t *testing.T, images map[string]string, env ...string) *daemon {
	t.Helper()
	return startDaemon(t, daemontest.Options{Env: env, Tune: func(c string) string {
		c = setKeys(c, map[string]string{"image": fmt.Sprintf("%q", builtImage(t, "python"))})
		return c + imagesSection(images)
	}})
}

func (d *daemon) images(t *testing.T) map[string]api.ImageInfo {
	t.Helper()
	var info api.Info
	if status, _ := d.call(t, "GET", "/v1/info", nil, &info); status != 200 {
		t.Fatalf("info: HTTP %d", status)
	}
	out := map[string]api.ImageInfo{}
	for _, im := range info.Images {
		out[im.Name] = im
	}
	return out
}

// execImage runs code in image and returns the response (HTTP 200) or
// the error body.
func execImage(t *testing.T, d *daemon, image, code string) (*api.ExecuteResponse, int, api.ErrorBody) {
	t.Helper()
	body := api.ExecuteRequest{Code: code, Image: image}
	var raw json.RawMessage
	status, _ := d.call(t, "POST", "/v1/execute", body, &raw)
	if status != 200 {
		var e api.ErrorBody
		_ = json.Unmarshal(raw, &e)
		return nil, status, e
	}
	var r api.ExecuteResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return &r, status, api.ErrorBody{}
}

// imageMounts are the image mounts of d (its run/images/<n>), sorted.
func imageMounts(d *daemon) []string {
	var out []string
	for _, m := range mountinfo() {
		if strings.HasPrefix(m.point, filepath.Join(d.Dir, "run", "images")+"/") {
			out = append(out, m.point)
		}
	}
	slices.Sort(out)
	return out
}

// TestImagesServed: one daemon serves every shipped image at once; each
// request runs in the image it names, the default when it names none;
// /v1/info lists each with its verified digest, Python and packages; an
// unknown image, or lint in an image without ruff, is a 400 naming the
// field and the images there are; a session keeps its image.
func TestImagesServed(t *testing.T) {
	minimal, ml := builtImage(t, "python-minimal"), builtImage(t, "python-ml")
	d := servingDaemon(t, map[string]string{"python-minimal": minimal, "python-ml": ml})

	imgs := d.images(t)
	if len(imgs) != 3 {
		t.Fatalf("images: %v", imgs)
	}
	for name, dir := range map[string]string{"python": builtImage(t, "python"), "python-minimal": minimal, "python-ml": ml} {
		m, im := readManifest(t, dir), imgs[name]
		if im.ImageDigest != m.ImageDigest || im.PythonVersion != m.PythonVersion || len(im.PythonPackages) != len(m.PythonPackages) || im.SizeBytes != m.ImageSize || im.Default != (name == "python") {
			t.Errorf("%s in /v1/info: %+v; manifest %+v", name, im, m)
		}
		if im.Wheels == nil || im.PythonPackages == nil {
			t.Errorf("%s: wheels %v, python_packages %v: want lists, not null", name, im.Wheels, im.PythonPackages)
		}
	}
	if !imgs["python"].Ruff || imgs["python-minimal"].Ruff || imgs["python-ml"].PythonPackages["torch"] == "" {
		t.Errorf("ruff in python %v, in minimal %v; torch in ml %q", imgs["python"].Ruff, imgs["python-minimal"].Ruff, imgs["python-ml"].PythonPackages["torch"])
	}

	probe := `import importlib.util, sys
print(sys.version_info[:2] >= (3, 9), [m for m in ('numpy', 'torch') if importlib.util.find_spec(m)])`
	for image, want := range map[string]string{"": "True ['numpy']\n", "python": "True ['numpy']\n", "python-minimal": "True []\n", "python-ml": "True ['numpy', 'torch']\n"} {
		r, status, e := execImage(t, d, image, probe)
		wantImage := image
		if image == "" {
			wantImage = "python"
		}
		if status != 200 || r.Status != "ok" || r.Stdout != want || r.Image != wantImage {
			t.Errorf("image %q: HTTP %d %+v %+v, want %q from %s", image, status, r, e, want, wantImage)
		}
	}
	r, _, _ := execImage(t, d, "python-minimal", "import numpy")
	if r == nil || r.Error == nil || r.Error.Type != "ModuleNotFoundError" || r.Error.Message != "No module named 'numpy'" {
		t.Errorf("import numpy in python-minimal: %+v", r)
	}

	_, status, e := execImage(t, d, "python-gpu", "print(1)")
	if status != 400 || e.Error.Type != "invalid_argument" || e.Error.Field != "image" || !strings.Contains(e.Error.Message, "python, python-minimal, python-ml") {
		t.Errorf("an unknown image: HTTP %d %+v", status, e)
	}
	var le api.ErrorBody
	if status, _ := d.call(t, "POST", "/v1/lint", api.LintRequest{Code: "import os\n", Image: "python-minimal"}, &le); status != 400 || le.Error.Field != "image" || !strings.Contains(le.Error.Message, "no ruff") {
		t.Errorf("lint in python-minimal: HTTP %d %+v", status, le)
	}
	var lint api.LintResponse
	if status, _ := d.call(t, "POST", "/v1/lint", api.LintRequest{Code: "import os\n", Image: "python-ml"}, &lint); status != 200 || len(lint.Diagnostics) != 1 || lint.Diagnostics[0].Code != "F401" {
		t.Errorf("lint in python-ml: HTTP %d %+v", status, lint)
	}

	// A session keeps its image across calls.
	var s api.Session
	if status, _ := d.call(t, "POST", "/v1/sessions", api.SessionCreateRequest{Image: "python-minimal"}, &s); status != 201 || s.Image != "python-minimal" {
		t.Fatalf("session in python-minimal: HTTP %d %+v", status, s)
	}
	defer d.call(t, "DELETE", "/v1/sessions/"+s.SessionID, nil, nil)
	for i, code := range []string{"import importlib.util; x = importlib.util.find_spec('numpy') is None", "print(x)"} {
		var sr api.SessionExecuteResponse
		if status, _ := d.call(t, "POST", "/v1/sessions/"+s.SessionID+"/execute", api.SessionExecuteRequest{Code: code}, &sr); status != 200 || sr.Status != "ok" || sr.Image != "python-minimal" || (i == 1 && sr.Stdout != "True\n") {
			t.Errorf("session call %d: HTTP %d %+v", i, status, sr)
		}
	}
}

// reloadDaemon rewrites d's configuration with images in place of its
// [images] tables, signals SIGHUP and waits for the reload's outcome in
// the log: "reloaded" or "reload refused". It returns that log line.
func reloadDaemon(t *testing.T, d *daemon, images map[string]string) string {
	t.Helper()
	p := filepath.Join(d.Dir, "jaild.toml")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, _ := strings.Cut(string(b), "[images.")
	if err := os.WriteFile(p, []byte(cfg+imagesSection(images)), 0o644); err != nil {
		t.Fatal(err)
	}
	before := strings.Count(d.Log.String(), `"msg":"reload`)
	if err := d.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var line string
	waitFor(t, 60*time.Second, "the reload", func() bool {
		lines := strings.Split(d.Log.String(), "\n")
		n := 0
		for _, l := range lines {
			if strings.Contains(l, `"msg":"reload`) {
				if n++; n > before {
					line = l
					return true
				}
			}
		}
		return false
	})
	return line
}

// copyImage copies the image in dir to a new directory; flip, if
// positive, flips that byte of its squashfs (a tampered image).
func copyImage(t *testing.T, dir string, flip int) string {
	t.Helper()
	out := t.TempDir()
	for _, f := range []string{"manifest.json", "rootfs.squashfs"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "rootfs.squashfs" && flip > 0 {
			b[flip%len(b)] ^= 1
		}
		if err := os.WriteFile(filepath.Join(out, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestImagesReload: a reload (SIGHUP) adds, replaces and removes images
// while runs are in flight, which finish in the image they started in;
// a removed or replaced image is unmounted when its last run ends; a
// tampered or misnamed image fails the reload and changes nothing, and a
// tampered one stops the daemon's start; at the end nothing is left.
func TestImagesReload(t *testing.T) {
	minimal, ml := builtImage(t, "python-minimal"), builtImage(t, "python-ml")
	tampered := copyImage(t, minimal, 1<<20)
	t.Run("tampered at start", func(t *testing.T) {
		_, err := newDaemon(daemontest.Options{Tune: func(c string) string {
			return c + imagesSection(map[string]string{"python-minimal": tampered})
		}})
		if err == nil || !strings.Contains(err.Error(), "images.python-minimal") || !strings.Contains(err.Error(), "does not match") {
			t.Fatalf("a daemon with a tampered image started, or said: %v", err)
		}
	})

	d := servingDaemon(t, map[string]string{"python-minimal": minimal})
	if got := imageMounts(d); len(got) != 1 {
		t.Fatalf("image mounts at start: %v", got)
	}
	first := imageMounts(d)[0]

	// A run in flight, and a session, in python-minimal while the reload
	// removes it and adds python-ml: the run finishes and the session
	// goes on in their image, which stays mounted until the session ends.
	inflight := func(image string) <-chan *api.ExecuteResponse {
		ch := make(chan *api.ExecuteResponse, 1)
		go func() {
			var r api.ExecuteResponse
			d.call(t, "POST", "/v1/execute", api.ExecuteRequest{Image: image, Code: "import time, sys\ntime.sleep(3)\nprint(sys.version_info[0])"}, &r)
			ch <- &r
		}()
		return ch
	}
	session := func(image string) string {
		var s api.Session
		if status, _ := d.call(t, "POST", "/v1/sessions", api.SessionCreateRequest{Image: image}, &s); status != 201 || s.Image != image {
			t.Fatalf("session in %s: HTTP %d %+v", image, status, s)
		}
		return s.SessionID
	}
	call := func(id, code string) string {
		var r api.SessionExecuteResponse
		if status, _ := d.call(t, "POST", "/v1/sessions/"+id+"/execute", api.SessionExecuteRequest{Code: code}, &r); status != 200 || r.Status != "ok" {
			t.Errorf("session call: HTTP %d %+v", status, r)
		}
		return r.Stdout
	}
	end := func(id string) {
		if status, _ := d.call(t, "DELETE", "/v1/sessions/"+id, nil, nil); status != 200 {
			t.Errorf("delete session: HTTP %d", status)
		}
	}
	sess := session("python-minimal")
	call(sess, "import importlib.util\nx = importlib.util.find_spec('numpy')")
	running := inflight("python-minimal")
	time.Sleep(time.Second) // the run has started
	if line := reloadDaemon(t, d, map[string]string{"python-ml": ml}); !strings.Contains(line, `"msg":"reloaded"`) {
		t.Fatalf("reload: %s", line)
	}
	if _, status, e := execImage(t, d, "python-minimal", "print(1)"); status != 400 || e.Error.Field != "image" || !strings.Contains(e.Error.Message, "python, python-ml") {
		t.Errorf("a removed image: HTTP %d %+v", status, e)
	}
	if r, status, _ := execImage(t, d, "python-ml", "import torch; print(torch.ones(3).sum().item())"); status != 200 || r.Stdout != "3.0\n" {
		t.Errorf("the added image: HTTP %d %+v", status, r)
	}
	if r := <-running; r.Status != "ok" || r.Stdout != "3\n" || r.Image != "python-minimal" {
		t.Errorf("the run in flight through the reload: %+v", r)
	}
	if out := call(sess, "print(x is None)"); out != "True\n" {
		t.Errorf("the session in the removed image: %q", out)
	}
	if got := imageMounts(d); !slices.Contains(got, first) || len(got) != 2 {
		t.Errorf("while its session lives, the removed image is unmounted: %v", got)
	}
	end(sess)
	// The unmount, then its mountpoint's removal: wait for both.
	waitFor(t, 10*time.Second, "the removed image's unmount and mountpoint", func() bool {
		got := imageMounts(d)
		_, err := os.Stat(first)
		return len(got) == 1 && !slices.Contains(got, first) && os.IsNotExist(err)
	})

	// Replaced by another build (here a copy elsewhere) while a session
	// uses it.
	before := imageMounts(d)
	sess = session("python-ml")
	if line := reloadDaemon(t, d, map[string]string{"python-ml": copyImage(t, ml, 0)}); !strings.Contains(line, `"msg":"reloaded"`) {
		t.Fatalf("reload: %s", line)
	}
	if got := imageMounts(d); len(got) != 2 || !slices.Contains(got, before[0]) {
		t.Errorf("during the replacement: mounts %v, want the old %s and the new", got, before[0])
	}
	if out := call(sess, "print(2)"); out != "2\n" {
		t.Errorf("the session in the replaced image: %q", out)
	}
	if r, status, _ := execImage(t, d, "python-ml", "print(3)"); status != 200 || r.Stdout != "3\n" {
		t.Errorf("a run in the replacement: HTTP %d %+v", status, r)
	}
	end(sess)
	waitFor(t, 10*time.Second, "the replaced image's unmount", func() bool {
		got := imageMounts(d)
		return len(got) == 1 && got[0] != before[0]
	})

	// Refused: a tampered image, one misnamed, one missing, and one that
	// does not mount; nothing changes.
	served := d.images(t)
	for what, images := range map[string]map[string]string{
		"tampered": {"python-ml": ml, "python-minimal": tampered},
		"misnamed": {"python-ml": ml, "python-small": minimal},
		"missing":  {"python-ml": ml, "python-minimal": filepath.Join(t.TempDir(), "none")},
		// A good image beside one whose digest holds but whose tree does
		// not validate (a symlink for /dev/null): neither is served.
		"broken tree": {"python-ml": ml, "python-minimal": minimal, "tiny": tinyImage(t, t.TempDir(), "H09a")},
	} {
		line := reloadDaemon(t, d, images)
		if !strings.Contains(line, "reload refused") {
			t.Errorf("%s: %s", what, line)
		}
		if got := d.images(t); len(got) != len(served) || got["python-ml"].ImageDigest != served["python-ml"].ImageDigest {
			t.Errorf("%s: images after the refused reload: %v", what, got)
		}
	}
	if got := imageMounts(d); len(got) != 1 {
		t.Errorf("after the refused reloads: mounts %v", got)
	}
	m := scrapeURL(t, d.Client, "http://jaild/metrics")
	k := metricstest.Key
	infos := 0
	for key := range m {
		if strings.HasPrefix(key, "jaild_image_info{") {
			infos++
		}
	}
	if m[k("jaild_config_last_reload_successful")] != 0 || m[k("jaild_image_info", "image", "python-ml", "digest", served["python-ml"].ImageDigest, "default", "false")] != 1 ||
		m[k("jaild_image_info", "image", "python", "digest", served["python"].ImageDigest, "default", "true")] != 1 || infos != 2 {
		t.Errorf("metrics after a refused reload: successful %v, %d image_info series", m[k("jaild_config_last_reload_successful")], infos)
	}
	// No jail is left but the warm pools' (full again), and no cgroup but
	// theirs.
	var pooled int
	waitFor(t, time.Minute, "the warm pools to refill", func() bool {
		var info api.Info
		d.call(t, "GET", "/v1/info", nil, &info)
		ready, size := 0, 0
		for _, im := range info.Images {
			ready += im.Pool.Ready + im.Pool.PlainReady
			size += im.Pool.Size + im.Pool.PlainSize
		}
		pooled = size
		return ready == size
	})
	if alive := scrapeURL(t, d.Client, "http://jaild/metrics")[k("jaild_jails_alive")]; int(alive) != pooled {
		t.Errorf("%v jails alive after the reloads, want the pools' %d", alive, pooled)
	}
	cg, err := cgroupsOf(d)
	if err != nil {
		t.Fatal(err)
	}
	if live := cg.live(); len(live) != pooled {
		t.Errorf("%d jail cgroups after the reloads, want the pools' %d", len(live), pooled)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := imageMounts(d); len(got) != 0 {
		t.Errorf("mounts left after the daemon stopped: %v", got)
	}
}
