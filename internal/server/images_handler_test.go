package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/rootfs"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/server/servertest"
)

// body returns the 200 body of a request (a GET when payload is "").
func body(t *testing.T, h *servertest.Harness, path, payload string) []byte {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.Socket)
	}}}
	var resp *http.Response
	var err error
	if payload == "" {
		resp, err = hc.Get("http://jaild" + path)
	} else {
		resp, err = hc.Post("http://jaild"+path, "application/json", strings.NewReader(payload))
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: HTTP %d %v: %s", path, resp.StatusCode, err, data)
	}
	return data
}

// TestInfoImages: /v1/info lists the images served, by name, each with
// its manifest's facts (lists and maps never null), its default limits
// and whether it is the default.
func TestInfoImages(t *testing.T) {
	h := harness(t, func(c *config.Config) {
		c.Images = map[string]config.Image{"test-small": {Dir: "/srv/test-small", Defaults: config.Limits{MemoryMB: 256}}}
	})
	info, err := h.Client.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Images) != 2 || info.Images[0].Name != "test" || info.Images[1].Name != "test-small" {
		t.Fatalf("images %+v, want test and test-small", info.Images)
	}
	def, small := info.Images[0], info.Images[1]
	if !def.Default || small.Default || !def.Ruff || small.Ruff || def.Packages != 2 || small.Packages != 1 ||
		def.PythonVersion != "3.13.0" || !strings.HasPrefix(small.ImageDigest, "sha256:1111") {
		t.Errorf("images %+v", info.Images)
	}
	if len(small.Wheels) != 1 || small.Wheels[0].Name != "acme" || small.Wheels[0].Version != "1.0" ||
		!slices.Equal(small.Wheels[0].SHA256, []string{"sha256:" + strings.Repeat("a", 64)}) {
		t.Errorf("test-small's wheels %+v, want acme 1.0", small.Wheels)
	}
	if def.Defaults.MemoryMB != 512 || small.Defaults.MemoryMB != 256 || small.Defaults.TimeoutMs != config.Default().Defaults.TimeoutMs {
		t.Errorf("default limits: test %+v, test-small %+v; want 512 and 256 MiB", def.Defaults, small.Defaults)
	}
	if info.Rootfs.Name != "test" {
		t.Errorf("rootfs %+v, want the default image", info.Rootfs)
	}

	// On the wire: empty lists and maps are [] and {}, not null.
	var wire struct {
		Images []map[string]json.RawMessage `json:"images"`
	}
	if err := json.Unmarshal(body(t, h, "/v1/info", ""), &wire); err != nil {
		t.Fatal(err)
	}
	for _, im := range wire.Images {
		if string(im["python_packages"]) != "{}" || string(im["pool"]) == "null" {
			t.Errorf("image %s: python_packages %s pool %s, want {} and an object", im["name"], im["python_packages"], im["pool"])
		}
		var pool map[string]json.RawMessage
		if err := json.Unmarshal(im["pool"], &pool); err != nil || string(pool["preimport"]) != "[]" {
			t.Errorf("image %s: pool %s, want preimport []", im["name"], im["pool"])
		}
	}
	if len(wire.Images) != 2 || string(wire.Images[0]["wheels"]) != "[]" || string(wire.Images[0]["default"]) != "true" || string(wire.Images[1]["default"]) != "false" {
		t.Errorf("images on the wire %s", wire.Images)
	}
}

// TestInfoPoolIsTheDefaultImages: /v1/info's pool is the default image's,
// and each image lists its own.
func TestInfoPoolIsTheDefaultImages(t *testing.T) {
	h := harness(t, nil)
	m := h.Engine.Manifest()
	h.Engine.ImagesValue = []spec.ImageStats{
		{Name: "a", Manifest: &rootfs.Manifest{Name: "a"}},
		{Name: "test", Default: true, Manifest: m},
	}
	h.Engine.PoolsValue = map[string]spec.PoolStats{
		"a":    {PlainSize: 1, PlainReady: 1},
		"test": {Size: 2, Ready: 1, Preimport: []string{"numpy"}, PlainSize: 3},
	}
	info, err := h.Client.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Pool.Size != 2 || info.Pool.Ready != 1 || info.Pool.PlainSize != 3 || !slices.Equal(info.Pool.Preimport, []string{"numpy"}) {
		t.Errorf("pool %+v, want the default image's", info.Pool)
	}
	if len(info.Images) != 2 || info.Images[0].Pool.PlainSize != 1 || info.Images[0].Pool.PlainReady != 1 || info.Images[0].Pool.Preimport == nil {
		t.Errorf("images %+v, want a's own pool", info.Images)
	}
}

// TestImageOverHTTP: execute, sessions, lint and format take an image
// and say which one ran; an unknown image, or one without ruff for lint
// and format, is a 400 in the field image.
func TestImageOverHTTP(t *testing.T) {
	h := harness(t, nil)
	ctx := t.Context()
	for image, want := range map[string]string{"": "test", "test": "test", "test-small": "test-small"} {
		res, err := h.Client.Execute(ctx, &api.ExecuteRequest{Code: "1", Image: image})
		if err != nil || res.Image != want {
			t.Errorf("execute in %q: %+v %v, want image %q", image, res, err, want)
		}
	}
	var images []string
	for _, r := range h.Engine.Requests() {
		images = append(images, r.Image)
	}
	slices.Sort(images)
	if !slices.Equal(images, []string{"test", "test", "test-small"}) {
		t.Errorf("the engine ran in %v", images)
	}
	// The raw wire: the response names its image.
	var wire map[string]json.RawMessage
	if err := json.Unmarshal(body(t, h, "/v1/execute", `{"code":"1"}`), &wire); err != nil || string(wire["image"]) != `"test"` {
		t.Errorf("execute's body: image %s %v, want \"test\"", wire["image"], err)
	}

	for _, tc := range []struct{ path, body, inMsg string }{
		{"/v1/execute", `{"code":"1","image":"nope"}`, `no image "nope" on this daemon; it serves test, test-small`},
		{"/v1/sessions", `{"image":"nope"}`, `no image "nope"`},
		{"/v1/lint", `{"code":"1","image":"nope"}`, `no image "nope"`},
		{"/v1/format", `{"code":"1","image":"nope"}`, `no image "nope"`},
		{"/v1/lint", `{"code":"1","image":"test-small"}`, `image "test-small" has no ruff; lint and format run in test`},
		{"/v1/format", `{"code":"1","image":"test-small"}`, `image "test-small" has no ruff; lint and format run in test`},
	} {
		status, _, e := raw(t, h, "POST", tc.path, "application/json", tc.body)
		if status != 400 || e.Type != "invalid_argument" || e.Field != "image" || !strings.Contains(e.Message, tc.inMsg) {
			t.Errorf("%s %s: HTTP %d %+v; want 400 in field image with %q", tc.path, tc.body, status, e, tc.inMsg)
		}
	}
	if n := len(h.Engine.Requests()); n != 4 {
		t.Errorf("%d requests reached the engine, want the 4 valid ones", n)
	}
	if n := len(h.Engine.Sessions()); n != 0 {
		t.Errorf("%d sessions made for an unknown image", n)
	}

	// Lint and format without an image run in the default, which has ruff.
	h.Engine.RunFunc = func(_ context.Context, req *spec.Request) (*spec.Result, error) {
		if req.Command[1] == "check" {
			return &spec.Result{Status: spec.StatusOK, Stdout: []byte("[]")}, nil
		}
		return &spec.Result{Status: spec.StatusOK, Stdout: req.Stdin}, nil
	}
	if _, err := h.Client.Lint(ctx, &api.LintRequest{Code: "1\n"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Client.Format(ctx, &api.FormatRequest{Code: "1\n", Image: "test"}); err != nil {
		t.Fatal(err)
	}
	reqs := h.Engine.Requests()
	if len(reqs) != 6 || reqs[4].Image != "test" || reqs[5].Image != "test" {
		t.Errorf("lint and format ran in %+v, want test", reqs[4:])
	}

	// A session runs in its image and says so, as do its calls.
	s, err := h.Client.CreateSession(ctx, &api.SessionCreateRequest{Image: "test-small"})
	if err != nil || s.Image != "test-small" {
		t.Fatalf("session: %+v %v", s, err)
	}
	if ss := h.Engine.Sessions(); len(ss) != 1 || ss[0].Spec.Image != "test-small" {
		t.Errorf("the engine's session spec %+v, want image test-small", ss)
	}
	r, err := h.Client.SessionExecute(ctx, s.SessionID, &api.SessionExecuteRequest{Code: "1"})
	if err != nil || r.Image != "test-small" {
		t.Errorf("session execute: %+v %v, want image test-small", r, err)
	}
	d, err := h.Client.CreateSession(ctx, nil)
	if err != nil || d.Image != "test" {
		t.Errorf("session in the default image: %+v %v, want test", d, err)
	}
	_, err = h.Client.CreateSession(ctx, &api.SessionCreateRequest{Image: "nope"})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Field != "image" {
		t.Errorf("session in an unknown image: %v, want a field error of image", err)
	}
}
