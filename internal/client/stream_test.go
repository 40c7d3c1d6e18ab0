package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/server/servertest/raw"
)

// ndjson writes events as a streamed execute does: numbered from 1, one
// line each, flushed.
func ndjson(w http.ResponseWriter, events ...any) {
	w.Header().Set("Content-Type", api.MediaNDJSON)
	for i := 0; i+1 < len(events); i += 2 {
		data, err := json.Marshal(events[i+1])
		if err != nil {
			panic(err)
		}
		line, _ := json.Marshal(api.Event{ID: int64(i/2 + 1), Event: events[i].(string), Data: data})
		w.Write(append(line, '\n'))
		w.(http.Flusher).Flush()
	}
}

// stripped is r as a done event carries it: without the output that the
// events carried.
func stripped(r api.ExecuteResponse) api.ExecuteResponse {
	r.Stdout, r.Stderr, r.Figures, r.Outputs = "", "", []api.Figure{}, []api.Output{}
	return r
}

func sampleResponse(figures []api.Figure) api.ExecuteResponse {
	res := "42"
	line := 3
	return api.ExecuteResponse{
		RunID: "r1", Status: "error", ExitCode: intp(1),
		Stdout: "hello\nworld\n", Stderr: "Traceback\nValueError: x\n", StdoutTruncated: true,
		Message: "ValueError: x", Error: &api.ExecError{Type: "ValueError", Message: "x", Line: &line},
		Result:  &res,
		Files:   []api.FileOut{{Path: "out.txt", SizeBytes: 2, ContentB64: "aGk="}, {Path: "big.bin", SizeBytes: 9, FileID: "f-1", SHA256: "ab"}},
		Figures: figures,
		Outputs: []api.Output{
			{OutputType: api.OutputDisplayData, Data: map[string]json.RawMessage{"text/markdown": json.RawMessage(`"**x**"`), "application/json": json.RawMessage(`{"a":[1]}`)}, Metadata: map[string]json.RawMessage{"text/html": json.RawMessage(`{"isolated":true}`)}},
			{OutputType: api.OutputExecuteResult, Data: map[string]json.RawMessage{"text/plain": json.RawMessage(`"42"`)}, Metadata: map[string]json.RawMessage{}},
		},
		Usage: api.Usage{DurationMs: 12, Warm: true},
	}
}

func intp(n int) *int { return &n }

// streamServer answers POST /v1/execute with the JSON response full, or,
// when asked for NDJSON, with the events of the same run.
func streamServer(t *testing.T, full api.ExecuteResponse) *Client {
	return serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != api.MediaNDJSON {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(full)
			return
		}
		events := []any{
			api.EventStart, api.EventStartData{RunID: full.RunID, Warm: full.Usage.Warm},
			api.EventStdout, api.EventText{Text: full.Stdout[:3]},
			api.EventKeepalive, struct{}{},
			api.EventStdout, api.EventText{Text: full.Stdout[3:]},
			api.EventStderr, api.EventText{Text: full.Stderr},
		}
		for _, f := range full.Figures {
			events = append(events, api.EventFigure, f)
		}
		events = append(events, api.EventException, full.Error)
		for _, o := range full.Outputs {
			if o.OutputType == api.OutputExecuteResult {
				events = append(events, api.EventResult, api.EventResultData{Repr: *full.Result, Data: o.Data, Metadata: o.Metadata})
			} else {
				events = append(events, api.EventDisplay, o)
			}
		}
		events = append(events, api.EventDone, stripped(full))
		ndjson(w, events...)
	}))
}

// The reassembled response is exactly Execute's for the same run.
func TestExecuteStreamReassembles(t *testing.T) {
	for name, figures := range map[string][]api.Figure{
		"figures":    {{Name: "figure_1.png", ContentB64: "iVBO"}, {Name: "figure_2.png", ContentB64: "iVBP"}},
		"no figures": {},
	} {
		t.Run(name, func(t *testing.T) {
			c := streamServer(t, sampleResponse(figures))
			want, err := c.Execute(context.Background(), &api.ExecuteRequest{Code: "x"})
			if err != nil {
				t.Fatal(err)
			}
			var events []api.Event
			var stdout strings.Builder
			got, err := c.ExecuteStream(context.Background(), &api.ExecuteRequest{Code: "x"}, func(ev api.Event) error {
				events = append(events, ev)
				if ev.Event == api.EventStdout {
					var text api.EventText
					json.Unmarshal(ev.Data, &text)
					stdout.WriteString(text.Text)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("streamed\n%+v\nwant Execute's\n%+v", got, want)
			}
			if stdout.String() != want.Stdout {
				t.Errorf("stdout events %q", stdout.String())
			}
			if n := len(events); n != 9+len(figures) || events[0].Event != api.EventStart || events[n-1].Event != api.EventDone || events[n-1].ID != int64(n) {
				t.Errorf("events %+v", events)
			}
			// on may be nil.
			if got, err := c.ExecuteStream(context.Background(), &api.ExecuteRequest{Code: "x"}, nil); err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("without on: %+v, %v", got, err)
			}
		})
	}
}

func TestSessionExecuteStream(t *testing.T) {
	full := sampleResponse([]api.Figure{{Name: "f.png", ContentB64: "iVBO"}})
	var path, accept string
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, accept = r.URL.EscapedPath(), r.Header.Get("Accept")
		ndjson(w,
			api.EventStdout, api.EventText{Text: full.Stdout},
			api.EventStderr, api.EventText{Text: full.Stderr},
			api.EventFigure, full.Figures[0],
			api.EventDisplay, full.Outputs[0],
			api.EventResult, api.EventResultData{Repr: *full.Result, Data: full.Outputs[1].Data},
			api.EventDone, api.SessionExecuteResponse{ExecuteResponse: stripped(full), ExecutionCount: 4,
				Session: api.SessionStatus{SessionID: "s 1", State: api.SessionIdle}})
	}))
	resp, err := c.SessionExecuteStream(context.Background(), "s 1", &api.SessionExecuteRequest{Code: "x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if path != "/v1/sessions/s%201/execute" || accept != api.MediaNDJSON {
		t.Errorf("request %s, Accept %q", path, accept)
	}
	four := 4
	full.Outputs[1].ExecutionCount = &four // the call's, from done
	if !reflect.DeepEqual(resp.ExecuteResponse, full) || resp.ExecutionCount != 4 || resp.Session.SessionID != "s 1" {
		t.Errorf("response %+v", resp)
	}
}

// An error event is the error Execute gets for the same failure.
func TestExecuteStreamErrorEvent(t *testing.T) {
	body := api.ErrorBody{Error: api.ErrorDetail{Type: "unavailable", Message: "the daemon is shutting down"}}
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != api.MediaNDJSON {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			json.NewEncoder(w).Encode(body)
			return
		}
		ndjson(w, api.EventStart, api.EventStartData{RunID: "r1"}, api.EventStdout, api.EventText{Text: "a"}, api.EventError, body)
	}))
	_, want := c.Execute(context.Background(), &api.ExecuteRequest{Code: "x"})
	var last string
	_, err := c.ExecuteStream(context.Background(), &api.ExecuteRequest{Code: "x"}, func(ev api.Event) error {
		last = ev.Event
		return nil
	})
	if !errors.Is(err, errdefs.ErrUnavailable) || err.Error() != want.Error() || last != api.EventError {
		t.Fatalf("err %v (last event %q); want %v", err, last, want)
	}
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Errorf("api.Error %#v; want status 503", ae)
	}

	// An error body that is not one is still an error of a class.
	c = serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ndjson(w, api.EventError, "nonsense")
	}))
	_, err = c.ExecuteStream(context.Background(), &api.ExecuteRequest{Code: "x"}, nil)
	if !errors.Is(err, errdefs.ErrInternal) || !strings.Contains(err.Error(), "error event") {
		t.Errorf("garbage error event: %v", err)
	}
}

// Errors before the stream began are Execute's.
func TestExecuteStreamErrorResponse(t *testing.T) {
	for _, tt := range []struct {
		status int
		body   string
		class  error
	}{
		{429, `{"error":{"type":"rate_limited","message":"quota exhausted"}}`, errdefs.ErrRateLimited},
		{400, `{"error":{"type":"invalid_argument","message":"files[0].file_id: no such file","field":"files[0].file_id"}}`, errdefs.ErrInvalidArgument},
		{507, `{"error":{"type":"insufficient_storage","message":"the file store is full"}}`, errdefs.ErrInsufficientStorage},
	} {
		c := serve(t, raw.JSON(tt.status, map[string]string{"Retry-After": "7"}, tt.body))
		_, want := c.Execute(context.Background(), &api.ExecuteRequest{Code: "x"})
		_, err := c.ExecuteStream(context.Background(), &api.ExecuteRequest{Code: "x"}, func(api.Event) error {
			t.Error("an event from an error response")
			return nil
		})
		var ce *Error
		if !errors.Is(err, tt.class) || err.Error() != want.Error() || !errors.As(err, &ce) || ce.RetryAfter != 7*time.Second {
			t.Errorf("%d: %v; want %v", tt.status, err, want)
		}
	}
}

func TestExecuteStreamMalformed(t *testing.T) {
	done := api.ExecuteResponse{RunID: "r1", Status: "ok"}
	line := func(id int64, event, data string) string {
		return fmt.Sprintf(`{"id":%d,"event":%q,"data":%s}`+"\n", id, event, data)
	}
	for _, tt := range []struct {
		name, ctype, body, want string
	}{
		{"early end", api.MediaNDJSON, line(1, "start", `{}`) + line(2, "stdout", `{"text":"a"}`), "stream ended early: no done or error event after event 2"},
		{"empty", api.MediaNDJSON, "", "stream ended early: no done or error event after event 0"},
		{"gap", api.MediaNDJSON, line(1, "start", `{}`) + line(3, "stdout", `{"text":"a"}`), "malformed stream: event 3 after event 1"},
		{"not from 1", api.MediaNDJSON, line(0, "start", `{}`), "malformed stream: event 0 after event 0"},
		{"repeated", api.MediaNDJSON, line(1, "start", `{}`) + line(1, "start", `{}`), "malformed stream: event 1 after event 1"},
		{"not json", api.MediaNDJSON, "hello\n", "malformed stream: event after event 0"},
		{"bad text", api.MediaNDJSON, line(1, "stdout", `{"text":5}`), "malformed stream: event 1 (stdout)"},
		{"done null", api.MediaNDJSON, line(1, "done", `null`), "malformed stream: done event 1: not a JSON object"},
		{"done without status", api.MediaNDJSON, line(1, "done", `{"run_id":"r1"}`), "done event 1: no status"},
		{"neither", "text/html", "<html>", "malformed response: not a JSON object"},
		{"json without status", "application/json", `{"run_id":"r1"}`, "malformed response: no status"},
		{"json garbage", "application/json", `[]`, "malformed response: not a JSON object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tt.ctype)
				io.WriteString(w, tt.body)
			}))
			resp, err := c.ExecuteStream(context.Background(), &api.ExecuteRequest{Code: "x"}, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "jaild POST /v1/execute: ") {
				t.Errorf("got %+v, %v; want an error with %q", resp, err, tt.want)
			}
		})
	}
	// Blank lines are nothing; events after done are not read.
	ok, _ := json.Marshal(done)
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", api.MediaNDJSON+"; charset=utf-8")
		io.WriteString(w, "\n"+line(1, "stdout", `{"text":"a"}`)+"\r\n"+line(2, "done", string(ok))+"junk")
	}))
	if resp, err := c.ExecuteStream(context.Background(), &api.ExecuteRequest{Code: "x"}, nil); err != nil || resp.Stdout != "a" || resp.RunID != "r1" {
		t.Errorf("blank lines: %+v, %v", resp, err)
	}
}

func TestExecuteStreamBounds(t *testing.T) {
	big := strings.Repeat("a", 600<<10)
	for name, events := range map[string][]any{
		"one event": {api.EventStdout, api.EventText{Text: big + big}},
		"all":       {api.EventStdout, api.EventText{Text: big}, api.EventStderr, api.EventText{Text: big}, api.EventDone, api.ExecuteResponse{Status: "ok"}},
	} {
		c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ndjson(w, events...) }))
		c.maxResponse = 1 << 20
		_, err := c.ExecuteStream(context.Background(), &api.ExecuteRequest{Code: "x"}, nil)
		if err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
			t.Errorf("%s: %v; want a size error", name, err)
		}
	}
}

// A daemon from before streaming answers JSON: the response is Execute's
// and on sees the events the response stands for.
func TestExecuteStreamJSONFallback(t *testing.T) {
	full := sampleResponse([]api.Figure{{Name: "f.png", ContentB64: "iVBO"}})
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(full)
	}))
	want, err := c.Execute(context.Background(), &api.ExecuteRequest{Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var done api.ExecuteResponse
	got, err := c.ExecuteStream(context.Background(), &api.ExecuteRequest{Code: "x"}, func(ev api.Event) error {
		if ev.ID != int64(len(names)+1) {
			t.Errorf("event %d is number %d", ev.ID, len(names)+1)
		}
		names = append(names, ev.Event)
		if ev.Event == api.EventDone {
			json.Unmarshal(ev.Data, &done)
		}
		return nil
	})
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v\nwant %+v", got, err, want)
	}
	if strings.Join(names, " ") != "start stdout stderr figure exception display result done" {
		t.Errorf("events %q", names)
	}
	if !reflect.DeepEqual(done, stripped(full)) {
		t.Errorf("done %+v; want the response without its output", done)
	}
	if got.Stdout != full.Stdout || len(got.Figures) != 1 {
		t.Errorf("the replay changed the response: %+v", got)
	}
}

// An error from on ends the request: the daemon sees it go away, the
// caller gets the error as it is.
func TestExecuteStreamCallbackError(t *testing.T) {
	gone := make(chan struct{})
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ndjson(w, api.EventStart, api.EventStartData{RunID: "r1"})
		<-r.Context().Done()
		close(gone)
	}))
	stop := errors.New("stop")
	_, err := c.ExecuteStream(context.Background(), &api.ExecuteRequest{Code: "x"}, func(api.Event) error { return stop })
	if !errors.Is(err, stop) || err.Error() != "stop" {
		t.Errorf("err %v; want on's error as it is", err)
	}
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Error("the request was not closed")
	}
}

func TestExecuteStreamCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ndjson(w, api.EventStart, api.EventStartData{RunID: "r1"}, api.EventStdout, api.EventText{Text: "a"})
		<-r.Context().Done()
	}))
	_, err := c.ExecuteStream(ctx, &api.ExecuteRequest{Code: "x"}, func(ev api.Event) error {
		if ev.Event == api.EventStdout {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err %v; want Canceled", err)
	}
}

// FuzzStream feeds arbitrary bodies to the stream reader: an error or a
// response with a status, never a panic.
func FuzzStream(f *testing.F) {
	f.Add("{\"id\":1,\"event\":\"stdout\",\"data\":{\"text\":\"a\"}}\n{\"id\":2,\"event\":\"done\",\"data\":{\"status\":\"ok\"}}\n")
	f.Add("{\"id\":1,\"event\":\"error\",\"data\":{\"error\":{\"type\":\"busy\"}}}\n")
	f.Add("{\"id\":1,\"event\":\"figure\",\"data\":null}\n\n")
	f.Fuzz(func(t *testing.T, body string) {
		var resp api.ExecuteResponse
		s := &streamReader{max: 1 << 20, out: &resp, base: &resp, on: func(api.Event) error { return nil }}
		if err := s.read(strings.NewReader(body)); err == nil && resp.Status == "" {
			t.Fatal("a response without a status")
		}
	})
}
