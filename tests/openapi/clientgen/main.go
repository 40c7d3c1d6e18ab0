//go:build clientgen

// Command clientgen drives a jaild daemon with the client oapi-codegen
// generated from the daemon's OpenAPI document (client.gen.go, made at test
// time in the same package: this file builds only beside it, with the
// clientgen tag). It prints what it saw as one JSON object; the test
// (tests/openapi_test.go) judges it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// report is what the driver saw.
type report struct {
	API, Version    string
	Status          string
	Stdout          string
	Result          string
	FigurePNG       bool
	FileContent     string
	ErrStatus       string
	ErrType         string
	ErrLine         int
	RefusedHTTP     int
	RefusedType     string
	RefusedField    string
	StreamEvents    []string
	StreamDone      string
	StreamStdout    string
	LintCodes       []string
	LintLines       []int
	Formatted       string
	FormatChanged   bool
	FormatBadHTTP   int
	FormatBadType   string
	HealthStatus    string
	OpenAPIVersion  string
	SessionOutput   string
	SessionCount    int
	SessionEndState string
}

func main() {
	socket := flag.String("socket", "", "the daemon's socket")
	flag.Parse()
	if err := run(*socket); err != nil {
		fmt.Fprintln(os.Stderr, "clientgen:", err)
		os.Exit(1)
	}
}

func run(socket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	c, err := NewClientWithResponses("http://jaild", WithHTTPClient(hc))
	if err != nil {
		return err
	}
	var rep report

	info, err := c.InfoWithResponse(ctx)
	if err != nil || info.JSON200 == nil {
		return fmt.Errorf("info: %v %s", err, reply(info))
	}
	rep.API, rep.Version = string(info.JSON200.Api), info.JSON200.Version
	health, err := c.HealthWithResponse(ctx)
	if err != nil || health.JSON200 == nil {
		return fmt.Errorf("health: %v", err)
	}
	rep.HealthStatus = string(health.JSON200.Status)
	doc, err := c.OpenapiWithResponse(ctx)
	if err != nil || doc.JSON200 == nil {
		return fmt.Errorf("openapi: %v", err)
	}
	rep.OpenAPIVersion, _ = (*doc.JSON200)["openapi"].(string)

	// A run: output, a figure, a returned file, stdin, the last line's value.
	stdin := "from stdin"
	files := []string{"out.txt"}
	interactive := true
	ex, err := c.ExecuteWithResponse(ctx, ExecuteRequest{
		Code: "import sys\nimport matplotlib.pyplot as plt\n" +
			"print('hello from the generated client')\n" +
			"open('out.txt', 'w').write(sys.stdin.read())\n" +
			"plt.plot([1, 2, 3])\nplt.show()\n6 * 7\n",
		Stdin: &stdin, ReturnFiles: &files, LastLineInteractive: &interactive,
	})
	if err != nil || ex.JSON200 == nil {
		return fmt.Errorf("execute: %v %s", err, reply(ex))
	}
	r := ex.JSON200
	rep.Status, rep.Stdout = string(r.Status), r.Stdout
	if r.Result != nil {
		rep.Result = *r.Result
	}
	if len(r.Figures) > 0 {
		png, err := r.Figures[0].ContentB64.Bytes()
		rep.FigurePNG = err == nil && bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n"))
	}
	if len(r.Files) > 0 && r.Files[0].ContentB64 != nil {
		rep.FileContent = string(*r.Files[0].ContentB64)
	}

	// An exception, with its line.
	ex, err = c.ExecuteWithResponse(ctx, ExecuteRequest{Code: "x = 1\nx / 0\n"})
	if err != nil || ex.JSON200 == nil {
		return fmt.Errorf("execute: %v %s", err, reply(ex))
	}
	rep.ErrStatus = string(ex.JSON200.Status)
	if e := ex.JSON200.Error; e != nil {
		rep.ErrType = e.Type
		if e.Line != nil {
			rep.ErrLine = *e.Line
		}
	}

	// A refusal: the typed error body names the field.
	huge := int64(1 << 20)
	ex, err = c.ExecuteWithResponse(ctx, ExecuteRequest{Code: "1", Limits: &Limits{MemoryMb: &huge}})
	if err != nil {
		return fmt.Errorf("execute: %v", err)
	}
	rep.RefusedHTTP = ex.StatusCode()
	if ex.JSON400 != nil {
		rep.RefusedType = string(ex.JSON400.Error.Type)
		if ex.JSON400.Error.Field != nil {
			rep.RefusedField = *ex.JSON400.Error.Field
		}
	}

	// The same run streamed, read as it comes (the plain client's
	// response; the parsing one reads JSON): one Event per line.
	accept := func(_ context.Context, req *http.Request) error {
		req.Header.Set("Accept", "application/x-ndjson")
		return nil
	}
	stream, err := c.Execute(ctx, ExecuteRequest{Code: "print('streamed')\n"}, accept)
	if err != nil {
		return fmt.Errorf("streamed execute: %v", err)
	}
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK || stream.Header.Get("Content-Type") != "application/x-ndjson" {
		return fmt.Errorf("streamed execute: HTTP %d %q", stream.StatusCode, stream.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(stream.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("event %q: %v", sc.Text(), err)
		}
		rep.StreamEvents = append(rep.StreamEvents, string(e.Event))
		switch e.Event {
		case "stdout":
			t, err := e.Data.AsEventText()
			if err != nil {
				return err
			}
			rep.StreamStdout += t.Text
		case "done":
			d, err := e.Data.AsExecuteResponse()
			if err != nil {
				return err
			}
			rep.StreamDone = string(d.Status)
		}
	}

	// Lint and format.
	lint, err := c.LintWithResponse(ctx, LintRequest{Code: "import os\n"})
	if err != nil || lint.JSON200 == nil {
		return fmt.Errorf("lint: %v %s", err, reply(lint))
	}
	for _, d := range lint.JSON200.Diagnostics {
		rep.LintCodes = append(rep.LintCodes, d.Code)
		rep.LintLines = append(rep.LintLines, d.Location.Line)
	}
	f, err := c.FormatWithResponse(ctx, FormatRequest{Code: "x=1\nif x :\n  y=[1,2 ,3]\n"})
	if err != nil || f.JSON200 == nil {
		return fmt.Errorf("format: %v %s", err, reply(f))
	}
	rep.Formatted, rep.FormatChanged = f.JSON200.Code, f.JSON200.Changed
	f, err = c.FormatWithResponse(ctx, FormatRequest{Code: "def (:\n"})
	if err != nil {
		return fmt.Errorf("format: %v", err)
	}
	rep.FormatBadHTTP = f.StatusCode()
	if f.JSON400 != nil {
		rep.FormatBadType = string(f.JSON400.Error.Type)
	}

	// A session: state kept across calls, then ended.
	s, err := c.CreateSessionWithResponse(ctx, SessionCreateRequest{})
	if err != nil || s.JSON201 == nil {
		return fmt.Errorf("create session: %v %s", err, reply(s))
	}
	id := s.JSON201.SessionId
	if _, err := c.SessionExecuteWithResponse(ctx, id, SessionExecuteRequest{Code: "n = 20"}); err != nil {
		return err
	}
	call, err := c.SessionExecuteWithResponse(ctx, id, SessionExecuteRequest{Code: "n + 22"})
	if err != nil || call.JSON200 == nil {
		return fmt.Errorf("session call: %v %s", err, reply(call))
	}
	rep.SessionOutput, rep.SessionCount = call.JSON200.Stdout, call.JSON200.ExecutionCount
	del, err := c.DeleteSessionWithResponse(ctx, id)
	if err != nil || del.JSON200 == nil {
		return fmt.Errorf("delete session: %v %s", err, reply(del))
	}
	rep.SessionEndState = string(del.JSON200.State)

	return json.NewEncoder(os.Stdout).Encode(rep)
}

// reply describes a reply for error messages.
func reply[T any, P interface {
	*T
	StatusCode() int
}](r P) string {
	if r == nil {
		return "(no reply)"
	}
	return fmt.Sprintf("HTTP %d", r.StatusCode())
}
