package tests

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/daemontest"
)

// TestOpenAPIGeneratedClient generates a Go client from the OpenAPI
// document a real daemon serves, with a real generator (oapi-codegen,
// pinned by tests/openapi/clientgen's go.mod and go.sum, out of jaild's
// own), builds it with a small driver, and drives the daemon with it:
// info, health, execute (output, a figure, a returned file, stdin, the
// last line's value, an exception's line, a refusal naming its field, the
// NDJSON stream), lint, format and a session. Nothing generated is kept.
// The first run fetches the generator through the Go module proxy.
func TestOpenAPIGeneratedClient(t *testing.T) {
	d := startDaemon(t, daemontest.Options{})

	// The document as served.
	resp, err := d.Client.Get("http://jaild/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /v1/openapi.json: HTTP %d %q: %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}

	dir := t.TempDir()
	for _, f := range []string{"go.mod", "go.sum", "main.go", "oapi-codegen.yaml"} {
		b, err := os.ReadFile(filepath.Join("openapi", "clientgen", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "openapi.json"), doc, 0o644); err != nil {
		t.Fatal(err)
	}
	gocmd := func(args ...string) {
		t.Helper()
		start := time.Now()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		// The module's go.sum pins every module: nothing may change it.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("go %s: %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	}
	gocmd("tool", "oapi-codegen", "-config", "oapi-codegen.yaml", "openapi.json")
	gen, err := os.ReadFile(filepath.Join(dir, "client.gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"func (c *ClientWithResponses) ExecuteWithResponse(", "func (c *ClientWithResponses) LintWithResponse(",
		"func (c *ClientWithResponses) FormatWithResponse(", "type ExecuteRequest struct", "oapi-codegen/v2 version v2.8.2"} {
		if !strings.Contains(string(gen), want) {
			t.Errorf("the generated client has no %q", want)
		}
	}
	t.Logf("generated client: %d lines", strings.Count(string(gen), "\n"))
	gocmd("build", "-tags", "clientgen", "-o", "driver", ".")

	run := exec.Command(filepath.Join(dir, "driver"), "-socket", d.Socket)
	out, err := run.Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("the driver: %v\n%s\ndaemon log:\n%s", err, stderr, d.Log.String())
	}
	var rep struct {
		API, Version, Status, Stdout, Result, FileContent, ErrStatus, ErrType string
		FigurePNG                                                             bool
		ErrLine, RefusedHTTP                                                  int
		RefusedType, RefusedField                                             string
		StreamEvents                                                          []string
		StreamDone, StreamStdout                                              string
		LintCodes                                                             []string
		LintLines                                                             []int
		Formatted                                                             string
		FormatChanged                                                         bool
		FormatBadHTTP                                                         int
		FormatBadType, HealthStatus, OpenAPIVersion, SessionOutput            string
		SessionCount                                                          int
		SessionEndState                                                       string
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("the driver's report %q: %v", out, err)
	}
	t.Logf("report: %+v", rep)
	check := func(what string, ok bool) {
		t.Helper()
		if !ok {
			t.Errorf("%s: report %+v", what, rep)
		}
	}
	check("info", rep.API == "v1" && rep.Version != "" && rep.HealthStatus == "ok" && rep.OpenAPIVersion == "3.1.0")
	check("execute: status and output", rep.Status == "ok" && rep.Stdout == "hello from the generated client\n42\n" && rep.Result == "42")
	check("execute: the figure is a PNG", rep.FigurePNG)
	check("execute: stdin into a returned file", rep.FileContent == "from stdin")
	check("execute: the exception and its line", rep.ErrStatus == "error" && rep.ErrType == "ZeroDivisionError" && rep.ErrLine == 2)
	check("execute: a refusal names its field", rep.RefusedHTTP == 400 && rep.RefusedType == "invalid_argument" && rep.RefusedField == "limits.memory_mb")
	check("execute: the NDJSON stream", len(rep.StreamEvents) >= 3 && rep.StreamEvents[0] == "start" && rep.StreamEvents[len(rep.StreamEvents)-1] == "done" &&
		rep.StreamDone == "ok" && rep.StreamStdout == "streamed\n")
	check("lint: F401 on line 1", slices.Contains(rep.LintCodes, "F401") && rep.LintLines[slices.Index(rep.LintCodes, "F401")] == 1)
	check("format", rep.Formatted == "x = 1\nif x:\n    y = [1, 2, 3]\n" && rep.FormatChanged)
	check("format: code that does not parse", rep.FormatBadHTTP == 400 && rep.FormatBadType == "invalid_argument")
	check("session: state across calls", rep.SessionOutput == "42\n" && rep.SessionCount == 2 && rep.SessionEndState == "ended")
}
