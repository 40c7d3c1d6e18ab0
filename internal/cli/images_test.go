package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/rootfs"
	"github.com/jaild/jaild/internal/run"
	"github.com/jaild/jaild/internal/server/servertest"
)

// threeImages makes h serve three images, python the default.
func threeImages(h *servertest.Harness) {
	digest := func(c string) string { return "sha256:" + strings.Repeat(c, 64) }
	h.Engine.ImagesValue = []run.ImageStats{
		{Name: "python", Default: true, Manifest: &rootfs.Manifest{Schema: 1, Name: "python", ImageDigest: "sha256:c208d4ccc08a" + strings.Repeat("5", 52),
			ImageSizeBytes: 412 << 20, PythonVersion: "3.13.5", DebianSuite: "trixie", PythonPackages: map[string]string{"numpy": "2.3.1", "pandas": "2.3.0"},
			Packages: []rootfs.Package{{Name: "ruff", Version: "0.16"}}}},
		{Name: "python-minimal", Manifest: &rootfs.Manifest{Schema: 1, Name: "python-minimal", ImageDigest: digest("0"), ImageSizeBytes: 39624704, PythonVersion: "3.13.5"}},
		{Name: "python-ml", Manifest: &rootfs.Manifest{Schema: 1, Name: "python-ml", ImageDigest: digest("f"), ImageSizeBytes: 3 << 30, PythonVersion: "3.13.5",
			PythonPackages: map[string]string{"torch": "2.8.0"},
			Wheels:         []rootfs.Wheel{{Name: "acme", Version: "1.0", SHA256: []string{digest("a")}}, {Name: "beta", Version: "2.0"}}}},
	}
	h.Engine.PoolsValue = map[string]run.PoolStats{
		"python":         {Size: 2, Ready: 1, Preimport: []string{"numpy"}, PlainSize: 1, PlainReady: 1},
		"python-minimal": {PlainSize: 1},
		"python-ml":      {Paused: true},
	}
}

// TestImages: "jailctl images" prints a line per image from /v1/info, and
// with --json the daemon's list as it came; "jailctl info" a line each.
func TestImages(t *testing.T) {
	h := newDaemon(t)
	threeImages(h)
	r := jailctl(t, h.Socket, "", "images")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("images: %d %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	want := [][]string{
		{"NAME", "DEFAULT", "DIGEST", "PYTHON", "PACKAGES", "SIZE", "POOL"},
		{"python", "*", "c208d4ccc08a", "3.13.5", "2", "412.0", "MiB", "1/1", "plain,", "1/2", "preloaded"},
		{"python-minimal", "000000000000", "3.13.5", "0", "37.8", "MiB", "0/1", "plain,", "0/0", "preloaded"},
		{"python-ml", "ffffffffffff", "3.13.5", "1", "+", "2", "wheels", "3.0", "GiB", "0/0", "plain,", "0/0", "preloaded", "(paused)"},
	}
	if len(lines) != len(want) {
		t.Fatalf("images printed %d lines; want %d:\n%s", len(lines), len(want), r.stdout)
	}
	for i, w := range want {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("line %d: %q; want %q", i, got, w)
		}
	}
	// The DEFAULT column holds the star under its header.
	if h, l := strings.Index(lines[0], "DEFAULT"), strings.Index(lines[1], "*"); h != l {
		t.Errorf("the default's * at column %d, DEFAULT at %d:\n%s", l, h, r.stdout)
	}

	r = jailctl(t, h.Socket, "", "images", "--json")
	var got []api.ImageInfo
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 || len(got) != 3 || got[2].Wheels[0].Name != "acme" || !got[0].Default {
		t.Errorf("images --json: %d %v %q", r.code, err, r.stdout)
	}
	info, err := h.Client.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := json.Marshal(info.Images); r.stdout != string(raw)+"\n" {
		t.Errorf("images --json is not the daemon's list as it came:\n%s\n%s", r.stdout, raw)
	}

	r = jailctl(t, h.Socket, "", "info")
	for _, want := range []string{
		"images:", "python (default): python 3.13.5, 2 packages, 412.0 MiB, pool 1/1 plain, 1/2 preloaded\n",
		"python-minimal: python 3.13.5, 0 packages, 37.8 MiB",
		"python-ml: python 3.13.5, 1 package + 2 wheels, 3.0 GiB, pool 0/0 plain, 0/0 preloaded (paused)\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("info lacks %q:\n%s", want, r.stdout)
		}
	}

	// A daemon that lists no images (an older one) is said to.
	old := misbehaving(t, canned(http.StatusOK, "", `{"version":"0.3.0","api":"v1"}`))
	if r := jailctl(t, old, "", "images"); r.code != 2 || !strings.Contains(r.stderr, "lists no images") {
		t.Errorf("images from an older daemon: %+v", r)
	}
	if r := jailctl(t, "", "", "help", "images"); r.code != 0 || !strings.Contains(r.stdout, "--json") || !strings.Contains(r.stdout, "--image NAME") {
		t.Errorf("help images: %+v", r)
	}
}

// TestImageFlag: --image reaches the run of exec (streamed and --json),
// session new, repl, lint and format; without it they run in the
// default image.
func TestImageFlag(t *testing.T) {
	h := newDaemon(t)
	h.Engine.RunFunc = ruffAnswer("[]", "x = 1\n")
	for _, tt := range []struct {
		args, without []string // with --image, and the same without
		image         string
	}{
		{[]string{"exec", "--image", "test-small", "-c", "x"}, []string{"exec", "-c", "x"}, "test-small"},
		{[]string{"exec", "--json", "--image=test-small", "-c", "x"}, []string{"exec", "--json", "-c", "x"}, "test-small"},
		{[]string{"lint", "-", "--image", "test"}, []string{"lint", "-"}, "test"},
		{[]string{"format", "--image", "test"}, []string{"format"}, "test"},
	} {
		r := jailctl(t, h.Socket, "x = 1\n", tt.args...)
		if got := lastRun(t, h).Image; r.code != 0 || got != tt.image {
			t.Errorf("%q: exit %d %q; ran in %q", tt.args, r.code, r.stderr, got)
		}
		r = jailctl(t, h.Socket, "x = 1\n", tt.without...)
		if got := lastRun(t, h).Image; r.code != 0 || got != "" && got != "test" {
			t.Errorf("%q: exit %d %q; ran in %q, not the default", tt.without, r.code, r.stderr, got)
		}
	}
	// session new and repl create their sessions in the image.
	if r := jailctl(t, h.Socket, "", "session", "new", "--image", "test-small"); r.code != 0 {
		t.Errorf("session new --image: %+v", r)
	}
	if r := jailctl(t, h.Socket, "", "repl", "--image", "test-small"); r.code != 0 {
		t.Errorf("repl --image: %+v", r)
	}
	for i, s := range h.Engine.Sessions() {
		if s.Spec.Image != "test-small" {
			t.Errorf("session %d in %q", i, s.Spec.Image)
		}
	}
	if r := jailctl(t, h.Socket, "", "help", "exec"); !strings.Contains(r.stdout, "--image NAME") {
		t.Errorf("help exec lacks --image NAME:\n%s", r.stdout)
	}
}

// TestUnknownImage: the daemon's 400 for an image it does not serve is
// printed as its message, which names the images there are.
func TestUnknownImage(t *testing.T) {
	h := newDaemon(t)
	for _, args := range [][]string{
		{"exec", "--image", "python-gpu", "-c", "x"},
		{"exec", "--json", "--image", "python-gpu", "-c", "x"},
		{"session", "new", "--image", "python-gpu"},
		{"lint", "--image", "test-small", "-"},
	} {
		r := jailctl(t, h.Socket, "x = 1\n", args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "jailctl: ") || !strings.Contains(r.stderr, "test-small") || r.stdout != "" {
			t.Errorf("%q: got %d %q %q; want 2 and the daemon's message naming its images", args, r.code, r.stdout, r.stderr)
		}
	}
}
