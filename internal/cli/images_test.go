package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/api"
)

// imagesInfo is a /v1/info body with three images, python the default.
func imagesInfo(t *testing.T) (string, []api.ImageInfo) {
	t.Helper()
	images := []api.ImageInfo{
		{
			Name: "python", Default: true, ImageDigest: "sha256:c208d4ccc08a55761c1965b3dd0e8106c39fb30e3ee9b0cee29b37d88f718cf5",
			SizeBytes: 412 << 20, PythonVersion: "3.13.5", DebianSuite: "trixie",
			PythonPackages: map[string]string{"numpy": "2.3.1", "pandas": "2.3.0"}, Wheels: []api.WheelInfo{}, Packages: 300, Ruff: true,
			Pool: api.PoolInfo{Size: 2, Ready: 1, Preimport: []string{"numpy"}, PlainSize: 1, PlainReady: 1},
		},
		{
			Name: "python-minimal", ImageDigest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			SizeBytes: 39624704, PythonVersion: "3.13.5", PythonPackages: map[string]string{}, Wheels: []api.WheelInfo{},
			Pool: api.PoolInfo{Preimport: []string{}, PlainSize: 1},
		},
		{
			Name: "python-ml", ImageDigest: "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
			SizeBytes: 3 << 30, PythonVersion: "3.13.5", PythonPackages: map[string]string{"torch": "2.8.0"},
			Wheels: []api.WheelInfo{{Name: "acme", Version: "1.0", SHA256: []string{"sha256:" + strings.Repeat("a", 64)}}, {Name: "beta", Version: "2.0", SHA256: []string{}}},
			Pool:   api.PoolInfo{Preimport: []string{}, Paused: true},
		},
	}
	info := api.Info{Version: "0.4.0", API: "v1", Rootfs: api.RootfsInfo{Name: "python", PythonVersion: "3.13.5"}, Images: images}
	b, err := json.Marshal(info)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), images
}

// TestImages: "jailctl images" prints a line per image from /v1/info, and
// with --json the daemon's list as it came; "jailctl info" a line each.
func TestImages(t *testing.T) {
	body, images := imagesInfo(t)
	d := newFakeDaemon(t, map[string]reply{"GET /v1/info": {body: body}})

	r := jailctl(t, d.sock, "", "images")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("images: %d %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	want := [][]string{
		{"NAME", "DEFAULT", "DIGEST", "PYTHON", "PACKAGES", "SIZE", "POOL"},
		{"python", "*", "c208d4ccc08a", "3.13.5", "2", "412.0", "MiB", "1/1", "plain,", "1/2", "preloaded"},
		{"python-minimal", "0123456789ab", "3.13.5", "0", "37.8", "MiB", "0/1", "plain,", "0/0", "preloaded"},
		{"python-ml", "fedcba987654", "3.13.5", "1", "+", "2", "wheels", "3.0", "GiB", "0/0", "plain,", "0/0", "preloaded", "(paused)"},
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

	r = jailctl(t, d.sock, "", "images", "--json")
	var got []api.ImageInfo
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || r.code != 0 || len(got) != 3 || got[2].Wheels[0].Name != "acme" || !got[0].Default {
		t.Errorf("images --json: %d %v %q", r.code, err, r.stdout)
	}
	raw, _ := json.Marshal(images)
	if r.stdout != string(raw)+"\n" {
		t.Errorf("images --json is not the daemon's list as it came:\n%s\n%s", r.stdout, raw)
	}

	r = jailctl(t, d.sock, "", "info")
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
	old := newFakeDaemon(t, map[string]reply{"GET /v1/info": {body: `{"version":"0.3.0","api":"v1"}`}})
	if r := jailctl(t, old.sock, "", "images"); r.code != 2 || !strings.Contains(r.stderr, "lists no images") {
		t.Errorf("images from an older daemon: %+v", r)
	}
	if r := jailctl(t, "", "", "help", "images"); r.code != 0 || !strings.Contains(r.stdout, "--json") || !strings.Contains(r.stdout, "--image NAME") {
		t.Errorf("help images: %+v", r)
	}
}

// TestImageFlag: --image reaches the request body of exec (streamed and
// --json), session new, repl, lint and format; without it the body has
// no image (the daemon's default).
func TestImageFlag(t *testing.T) {
	d := newFakeDaemon(t, map[string]reply{
		"POST /v1/execute":  executeReply(api.ExecuteResponse{Status: "ok", ExitCode: intp(0), Image: "python-ml"}),
		"POST /v1/sessions": {status: 201, body: sessionJSON(api.Session{SessionID: "s-1", State: "idle", Image: "python-ml"})},
		"POST /v1/lint":     {body: `{"diagnostics":[]}`},
		"POST /v1/format":   {body: `{"code":"x = 1\n","changed":false}`},
	})
	for _, tt := range []struct {
		args, without []string // with --image, and the same without
		route         string
	}{
		{[]string{"exec", "--image", "python-ml", "-c", "x"}, []string{"exec", "-c", "x"}, "POST /v1/execute"},
		{[]string{"exec", "--json", "--image=python-ml", "-c", "x"}, []string{"exec", "--json", "-c", "x"}, "POST /v1/execute"},
		{[]string{"session", "new", "--image", "python-ml"}, []string{"session", "new"}, "POST /v1/sessions"},
		{[]string{"lint", "-", "--image", "python-ml"}, []string{"lint", "-"}, "POST /v1/lint"},
		{[]string{"format", "--image", "python-ml"}, []string{"format"}, "POST /v1/format"},
	} {
		r := jailctl(t, d.sock, "x = 1\n", tt.args...)
		var body map[string]any
		d.request(t, tt.route, &body)
		if r.code != 0 || body["image"] != "python-ml" {
			t.Errorf("%q: exit %d %q; the request body's image is %v: %v", tt.args, r.code, r.stderr, body["image"], body)
		}
		r = jailctl(t, d.sock, "x = 1\n", tt.without...)
		body = nil
		d.request(t, tt.route, &body)
		if _, ok := body["image"]; ok || r.code != 0 {
			t.Errorf("%q: exit %d %q; the body has an image: %v", tt.without, r.code, r.stderr, body)
		}
	}

	// repl creates its session in the image.
	r := jailctl(t, d.sock, "", "repl", "--image", "python-ml")
	var req api.SessionCreateRequest
	d.request(t, "POST /v1/sessions", &req)
	if req.Image != "python-ml" {
		t.Errorf("repl --image: %+v, the request's image %q", r, req.Image)
	}
	if r := jailctl(t, d.sock, "", "help", "exec"); !strings.Contains(r.stdout, "--image NAME") {
		t.Errorf("help exec lacks --image NAME:\n%s", r.stdout)
	}
}

// TestUnknownImage: the daemon's 400 for an image it does not serve is
// printed as its message, which names the images there are.
func TestUnknownImage(t *testing.T) {
	const msg = `no image \"python-gpu\" on this daemon; it serves python, python-minimal, python-ml`
	refusal := reply{400, nil, `{"error":{"type":"invalid_argument","field":"image","message":"` + msg + `"}}`}
	d := newFakeDaemon(t, map[string]reply{
		"POST /v1/execute":  refusal,
		"POST /v1/sessions": refusal,
		"POST /v1/lint":     {400, nil, `{"error":{"type":"invalid_argument","field":"image","message":"image \"python-minimal\" has no ruff; lint and format run in python, python-ml"}}`},
	})
	want := "jailctl: " + strings.ReplaceAll(msg, `\"`, `"`) + "\n"
	for _, tt := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"exec", "--image", "python-gpu", "-c", "x"}, want},
		{[]string{"exec", "--json", "--image", "python-gpu", "-c", "x"}, want},
		{[]string{"session", "new", "--image", "python-gpu"}, want},
		{[]string{"lint", "--image", "python-minimal", "-"}, "jailctl: image \"python-minimal\" has no ruff; lint and format run in python, python-ml\n"},
	} {
		r := jailctl(t, d.sock, "x = 1\n", tt.args...)
		if r.code != 2 || r.stderr != tt.stderr || r.stdout != "" {
			t.Errorf("%q: got %d %q %q; want 2 %q", tt.args, r.code, r.stdout, r.stderr, tt.stderr)
		}
	}
}
