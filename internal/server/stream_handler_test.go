package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/server/servertest"
)

// streamed posts body to path with Accept: accept and returns the response
// and a reader of its body.
func streamed(t *testing.T, h *servertest.Harness, path, accept, body string) (*http.Response, *bufio.Reader) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.Socket)
	}}}
	req, err := http.NewRequest(http.MethodPost, "http://jaild"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, bufio.NewReader(resp.Body)
}

// nextEvent reads one NDJSON event.
// eventNames reads a stream's events up to done and names them, commas
// between.
func eventNames(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	var names []string
	for {
		e := nextEvent(t, r)
		names = append(names, e.Event)
		if e.Event == api.EventDone {
			return strings.Join(names, ",")
		}
	}
}

func nextEvent(t *testing.T, r *bufio.Reader) api.Event {
	t.Helper()
	line, err := r.ReadBytes('\n')
	if err != nil {
		t.Fatalf("read event: %v (got %q)", err, line)
	}
	var e api.Event
	if err := json.Unmarshal(line, &e); err != nil {
		t.Fatalf("event %q: %v", line, err)
	}
	return e
}

func TestStreamedExecuteEvents(t *testing.T) {
	h := harness(t, nil)
	release := make(chan struct{})
	h.Engine.RunFunc = func(ctx context.Context, req *spec.Request) (*spec.Result, error) {
		req.OnStart("run-1", true)
		req.Output(1, []byte("first line\n"))
		<-release // the event must be out before the run goes on
		req.Output(2, []byte("err \xe2\x9c"))
		req.Output(2, []byte("\x93 \xff\xfe\n"))
		req.Output(1, []byte("no newline"))
		repr := "42"
		return &spec.Result{
			ID: "run-1", Status: spec.StatusError, ExitCode: 1, StdoutTruncated: true,
			Exception:  &spec.Exception{Type: "ValueError", Message: "bad", Line: 1},
			ResultRepr: &repr,
			Figures:    []spec.Figure{{Name: "figure-1.png", Data: []byte("\x89PNG\r\n\x1a\nxx")}},
			Outputs: []spec.Output{
				{Type: spec.OutputDisplay, Data: []spec.MimeValue{{Type: "text/html", Text: []byte("<b>\xff</b>")}, {Type: "application/json", JSON: []byte(`{"a":1}`)}}, Metadata: []byte(`{"text/html":{"isolated":true}}`)},
				{Type: spec.OutputDisplay, Data: []spec.MimeValue{{Type: "image/png", Bytes: []byte("\x89PNG\r\n\x1a\nxx")}, {Type: "text/plain", Text: []byte("<Figure>")}}},
				{Type: spec.OutputResult, Data: []spec.MimeValue{{Type: "text/markdown", Text: []byte("# 42")}, {Type: "text/plain", Text: []byte("42")}}},
			},
		}, nil
	}
	resp, r := streamed(t, h, "/v1/execute", api.MediaNDJSON, `{"code":"x"}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != api.MediaNDJSON {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if e := nextEvent(t, r); e.ID != 1 || e.Event != api.EventStart || string(e.Data) != `{"run_id":"run-1","warm":true}` {
		t.Fatalf("first event %+v %s", e, e.Data)
	}
	if e := nextEvent(t, r); e.ID != 2 || e.Event != api.EventStdout || string(e.Data) != `{"text":"first line\n"}` {
		t.Fatalf("second event %+v %s", e, e.Data)
	}
	close(release)
	var stdout, stderr string
	var names, displays []string
	var done api.ExecuteResponse
	for id := int64(3); ; id++ {
		e := nextEvent(t, r)
		if e.ID != id {
			t.Fatalf("event %d has id %d", id, e.ID)
		}
		names = append(names, e.Event)
		switch e.Event {
		case api.EventStdout, api.EventStderr:
			var text api.EventText
			if err := json.Unmarshal(e.Data, &text); err != nil {
				t.Fatal(err)
			}
			if e.Event == api.EventStdout {
				stdout += text.Text
			} else {
				stderr += text.Text
			}
		case api.EventDone:
			if err := json.Unmarshal(e.Data, &done); err != nil {
				t.Fatal(err)
			}
		case api.EventDisplay, api.EventResult:
			displays = append(displays, string(e.Data))
		}
		if e.Event == api.EventDone {
			break
		}
	}
	if stdout != "no newline" || stderr != "err ✓ \uFFFD\n" {
		t.Errorf("stdout %q stderr %q", stdout, stderr)
	}
	tail := strings.Join(names[len(names)-6:], ",")
	if tail != "figure,exception,display,display,result,done" {
		t.Errorf("last events %s", tail)
	}
	want := []string{
		`{"output_type":"display_data","data":{"application/json":{"a":1},"text/html":"<b>�</b>"},"metadata":{"text/html":{"isolated":true}}}`,
		`{"output_type":"display_data","data":{"image/png":"iVBORw0KGgp4eA==","text/plain":"<Figure>"},"metadata":{}}`,
		`{"repr":"42","data":{"text/markdown":"# 42","text/plain":"42"}}`,
	}
	if strings.Join(displays, "\n") != strings.Join(want, "\n") {
		t.Errorf("display and result events\n%s\nwant\n%s", strings.Join(displays, "\n"), strings.Join(want, "\n"))
	}
	if done.RunID != "run-1" || done.Status != "error" || done.Stdout != "" || !done.StdoutTruncated || len(done.Figures) != 0 || len(done.Outputs) != 0 || done.Error == nil || *done.Result != "42" {
		t.Errorf("done %+v", done)
	}
	if _, err := r.ReadByte(); err == nil {
		t.Error("data after done")
	}
}

func TestStreamedExecuteSSEAndErrors(t *testing.T) {
	h := harness(t, nil)
	h.Engine.RunFunc = func(ctx context.Context, req *spec.Request) (*spec.Result, error) {
		if strings.Contains(req.Code, "before") {
			return nil, errdefs.New(errdefs.ErrUnavailable, "no jail capacity")
		}
		req.OnStart("run-2", false)
		req.Output(1, []byte("hi\n"))
		return nil, errdefs.New(errdefs.ErrUnavailable, "lost the jail")
	}
	// Failed before it began: an ordinary error response.
	resp, r := streamed(t, h, "/v1/execute", api.MediaSSE, `{"code":"before"}`)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// A bad field too.
	resp, _ = streamed(t, h, "/v1/execute", api.MediaSSE, `{"code":"x","return_files_as":"disk"}`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad return_files_as: %d", resp.StatusCode)
	}
	// Failed after: the stream ends with an error event.
	resp, r = streamed(t, h, "/v1/execute", api.MediaSSE, `{"code":"after"}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != api.MediaSSE {
		t.Fatalf("%d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	body, _ := readAll(r)
	want := "id: 1\nevent: start\ndata: {\"run_id\":\"run-2\",\"warm\":false}\n\n" +
		"id: 2\nevent: stdout\ndata: {\"text\":\"hi\\n\"}\n\n" +
		"id: 3\nevent: error\ndata: {\"error\":{\"type\":\"unavailable\",\"message\":\"run failed: lost the jail\"}}\n\n"
	if body != want {
		t.Errorf("SSE body\n%s\nwant\n%s", body, want)
	}
}

func readAll(r *bufio.Reader) (string, error) {
	var b strings.Builder
	_, err := r.WriteTo(&b)
	return b.String(), err
}

func TestStreamedExecuteKeepalive(t *testing.T) {
	h := harness(t, nil)
	h.Engine.RunFunc = func(ctx context.Context, req *spec.Request) (*spec.Result, error) {
		req.OnStart("run-3", false)
		select {
		case <-time.After(5500 * time.Millisecond):
		case <-ctx.Done():
		}
		return &spec.Result{ID: "run-3", Status: spec.StatusOK}, nil
	}
	_, r := streamed(t, h, "/v1/execute", api.MediaNDJSON, `{"code":"x"}`)
	if names := eventNames(t, r); names != "start,keepalive,done" {
		t.Errorf("events %v", names)
	}
}

// An engine that never says the run began still gets a whole stream.
func TestStreamedExecuteWithoutOnStart(t *testing.T) {
	h := harness(t, nil) // the fake engine's default answer: ok, no OnStart
	_, r := streamed(t, h, "/v1/execute", api.MediaNDJSON, `{"code":"x"}`)
	if names := eventNames(t, r); names != "start,done" {
		t.Errorf("events %v", names)
	}
}
