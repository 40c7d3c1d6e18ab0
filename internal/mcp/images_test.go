package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
)

// imagesInfoReply is infoReply with the images python (the default, 22
// packages, ruff), python-minimal (nothing, no ruff) and python-ml (25
// packages, a wheel, more memory by default). Their packages sort
// (case aside) numpy, pkg02, pkg03, ..., PyYAML.
func imagesInfoReply(t *testing.T) reply {
	t.Helper()
	var info api.Info
	if err := json.Unmarshal([]byte(infoReply(false).body), &info); err != nil {
		t.Fatal(err)
	}
	pkgs := func(n int) map[string]string {
		m := map[string]string{"PyYAML": "6.0.2", "numpy": "2.2.4"}
		for i := len(m); i < n; i++ {
			m[fmt.Sprintf("pkg%02d", i)] = "1.0"
		}
		return m
	}
	ml := info.Defaults
	ml.MemoryMB = 2048
	info.Images = []api.ImageInfo{
		{Name: "python", Default: true, PythonVersion: "3.13.5", PythonPackages: pkgs(22), Wheels: []api.WheelInfo{}, Ruff: true, Defaults: info.Defaults},
		{Name: "python-minimal", PythonVersion: "3.13.5", PythonPackages: map[string]string{}, Wheels: []api.WheelInfo{}, Defaults: info.Defaults},
		{Name: "python-ml", PythonVersion: "3.13.5", PythonPackages: pkgs(25), Ruff: true, Defaults: ml,
			Wheels: []api.WheelInfo{{Name: "acme", Version: "1.0", SHA256: []string{"sha256:" + strings.Repeat("a", 64)}}}},
	}
	return jsonReply(info)
}

// imageProperty is a tool's image argument, nil when it has none.
func imageProperty(t *testing.T, tool *sdk.Tool) *struct {
	Type        any    `json:"type"`
	Enum        []any  `json:"enum"`
	Examples    []any  `json:"examples"`
	Description string `json:"description"`
} {
	t.Helper()
	var s struct {
		Properties map[string]*struct {
			Type        any    `json:"type"`
			Enum        []any  `json:"enum"`
			Examples    []any  `json:"examples"`
			Description string `json:"description"`
		} `json:"properties"`
	}
	raw, _ := json.Marshal(tool.InputSchema)
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s.Properties["image"]
}

// A daemon with several images: the descriptions list them, each with its
// Python, its first packages (and how many more) and its wheels; the
// tools take an image among them (lint and format: among those with
// ruff).
func TestImagesDescribed(t *testing.T) {
	f := newFakeDaemon(t, map[string]reply{"GET /v1/info": imagesInfoReply(t)})
	_, cs := session(t, f)
	run := toolByName(t, cs, RunTool)
	for _, want := range []string{
		"one of these images, chosen with `image`; nothing else can be installed in any:\n",
		"  - python (the default): Python 3.13.5. Packages: numpy, pkg02, pkg03, pkg04, pkg05, pkg06, pkg07, pkg08, pkg09, pkg10, pkg11, pkg12 and 10 more.\n",
		"  - python-minimal: Python 3.13.5 with the standard library only.\n",
		"  - python-ml: Python 3.13.5. Packages: numpy, pkg02, pkg03, pkg04, pkg05, pkg06, pkg07, pkg08, pkg09, pkg10, pkg11, pkg12 and 13 more. Installed from wheels: acme. Its default limits: 2048 MB of memory.\n",
		"Limits of each call in the default image (another image's are noted above if they differ): 10 s of wall-clock time",
	} {
		if !strings.Contains(run.Description, want) {
			t.Errorf("%s's description lacks %q:\n%s", RunTool, want, run.Description)
		}
	}
	if strings.Contains(run.Description, "pkg13") || strings.Contains(run.Description, "PyYAML") || strings.Contains(run.Description, "2.2.4") {
		t.Errorf("%s's description lists more than the first packages, or versions:\n%s", RunTool, run.Description)
	}
	for tool, want := range map[string][]any{
		RunTool: {"python", "python-minimal", "python-ml"}, OpenSessionTool: {"python", "python-minimal", "python-ml"},
		LintTool: {"python", "python-ml"}, FormatTool: {"python", "python-ml"},
	} {
		p := imageProperty(t, toolByName(t, cs, tool))
		// Examples, not an enum: the daemon's images change at a reload.
		if p == nil || p.Type != "string" || p.Enum != nil || !slices.Equal(p.Examples, want) || !strings.Contains(p.Description, "(default: python)") {
			t.Errorf("%s's image argument: %+v; want a string with the examples %v and no enum, python the default", tool, p, want)
		}
	}
	open := toolByName(t, cs, OpenSessionTool)
	if want := "image picks the image the session runs in, for all its calls: python, python-minimal, python-ml (default: python)"; !strings.Contains(open.Description, want) {
		t.Errorf("%s's description lacks %q:\n%s", OpenSessionTool, want, open.Description)
	}
}

// A daemon with one image reads as before: its packages with their
// versions and no image argument.
func TestOneImageDescribed(t *testing.T) {
	var info api.Info
	_ = json.Unmarshal([]byte(infoReply(false).body), &info)
	info.Images = []api.ImageInfo{{Name: "python", Default: true, PythonVersion: "3.13.5", PythonPackages: info.Rootfs.PythonPackages, Ruff: true,
		Wheels: []api.WheelInfo{{Name: "acme", Version: "1.0", SHA256: []string{}}}}}
	f := newFakeDaemon(t, map[string]reply{"GET /v1/info": jsonReply(info)})
	_, cs := session(t, f)
	run := toolByName(t, cs, RunTool)
	want := "- Python 3.13.5 with the standard library and these packages (nothing else can be installed): numpy 2.2.4, pandas 2.2.3, acme 1.0 (installed from wheels).\n"
	if !strings.Contains(run.Description, want) || strings.Contains(run.Description, "image ") || strings.Contains(run.Description, "`image`") {
		t.Errorf("%s's description lacks %q or speaks of images:\n%s", RunTool, want, run.Description)
	}
	for _, tool := range []string{RunTool, OpenSessionTool, LintTool, FormatTool} {
		if p := imageProperty(t, toolByName(t, cs, tool)); p != nil {
			t.Errorf("%s has an image argument with one image: %+v", tool, p)
		}
	}

	info.Images[0].PythonPackages, info.Images[0].Wheels = map[string]string{}, nil
	f = newFakeDaemon(t, map[string]reply{"GET /v1/info": jsonReply(info)})
	_, cs = session(t, f)
	if run := toolByName(t, cs, RunTool); !strings.Contains(run.Description, "- Python 3.13.5 with the standard library only (nothing else can be installed).\n") {
		t.Errorf("an image without packages:\n%s", run.Description)
	}
}

// image reaches the daemon's requests: a run, a session, lint and
// format; with session_id it is refused (the session's image holds).
func TestImageReachesTheDaemon(t *testing.T) {
	f := newFakeDaemon(t, map[string]reply{
		"GET /v1/info":            imagesInfoReply(t),
		"POST /v1/execute":        jsonReply(api.ExecuteResponse{RunID: "r1", Image: "python-ml", Status: api.StatusOK, ExitCode: new(0)}),
		"POST /v1/sessions":       {status: 201, body: `{"session_id":"s-1","state":"idle","image":"python-ml","limits":{"timeout_ms":10000,"memory_mb":2048}}`},
		"DELETE /v1/sessions/s-1": {body: `{"session_id":"s-1","state":"ended","end_reason":"deleted"}`},
		"POST /v1/lint":           jsonReply(api.LintResponse{}),
		"POST /v1/format":         jsonReply(api.FormatResponse{Code: "x = 1\n"}),
	})
	_, cs := session(t, f)
	ctx := context.Background()
	call := func(tool string, args map[string]any) *sdk.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return res
	}

	res := call(RunTool, map[string]any{"code": "x", "image": "python-ml"})
	var ereq api.ExecuteRequest
	f.request(t, "POST /v1/execute", &ereq)
	raw, _ := json.Marshal(res.StructuredContent)
	if ereq.Image != "python-ml" || res.IsError || !strings.Contains(string(raw), `"image":"python-ml"`) {
		t.Errorf("run_python: request image %q; isError %v, %s", ereq.Image, res.IsError, raw)
	}
	call(RunTool, map[string]any{"code": "x"})
	ereq = api.ExecuteRequest{}
	f.request(t, "POST /v1/execute", &ereq)
	if ereq.Image != "" {
		t.Errorf("run_python without image: request image %q", ereq.Image)
	}

	res = call(OpenSessionTool, map[string]any{"image": "python-ml"})
	var sreq api.SessionCreateRequest
	f.request(t, "POST /v1/sessions", &sreq)
	if sreq.Image != "python-ml" || res.IsError || !strings.Contains(resultText(res), "It runs in the image python-ml.") {
		t.Errorf("open_session: request image %q; isError %v, %q", sreq.Image, res.IsError, resultText(res))
	}

	res = call(RunTool, map[string]any{"code": "x", "session_id": "s-1", "image": "python"})
	if !res.IsError || !strings.Contains(resultText(res), "leave image out with session_id") || f.count("POST /v1/sessions/s-1/execute") != 0 {
		t.Errorf("run_python with session_id and image: isError %v, %q", res.IsError, resultText(res))
	}

	call(LintTool, map[string]any{"code": "x", "image": "python-ml"})
	var lreq api.LintRequest
	f.request(t, "POST /v1/lint", &lreq)
	call(FormatTool, map[string]any{"code": "x", "image": "python-ml"})
	var freq api.FormatRequest
	f.request(t, "POST /v1/format", &freq)
	if lreq.Image != "python-ml" || freq.Image != "python-ml" {
		t.Errorf("lint image %q, format image %q", lreq.Image, freq.Image)
	}

	// An image the daemon did not serve at start-up (a reload added it)
	// reaches the daemon, which decides; so does a session's.
	res = call(RunTool, map[string]any{"code": "x", "image": "python-gpu"})
	ereq = api.ExecuteRequest{}
	f.request(t, "POST /v1/execute", &ereq)
	if res.IsError || ereq.Image != "python-gpu" || f.count("POST /v1/execute") != 3 {
		t.Errorf("run_python in an image added since start-up: request image %q, isError %v, %q", ereq.Image, res.IsError, resultText(res))
	}
	call(OpenSessionTool, map[string]any{"image": "python-gpu"})
	f.request(t, "POST /v1/sessions", &sreq)
	if sreq.Image != "python-gpu" {
		t.Errorf("open_session in an image added since start-up: request image %q", sreq.Image)
	}
	// An empty name is refused by the schema, before any request.
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: RunTool, Arguments: map[string]any{"code": "x", "image": ""}})
	if (err == nil && !res.IsError) || f.count("POST /v1/execute") != 3 {
		t.Errorf("run_python with image \"\": %v, %+v", err, res)
	}
}

// An image the daemon no longer serves (a reload removed it) is the
// daemon's refusal, which names the images it serves now.
func TestImageRemovedByAReload(t *testing.T) {
	f := newFakeDaemon(t, map[string]reply{
		"GET /v1/info":     imagesInfoReply(t),
		"POST /v1/execute": {http.StatusBadRequest, `{"error":{"type":"invalid_argument","field":"image","message":"image: no image \"python-ml\" on this daemon; it serves python, python-minimal"}}`},
	})
	_, cs := session(t, f)
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: RunTool, Arguments: map[string]any{"code": "x", "image": "python-ml"}})
	if err != nil || !res.IsError || !strings.Contains(resultText(res), "it serves python, python-minimal") {
		t.Errorf("run_python in a removed image: %v, %q", err, resultText(res))
	}
}
