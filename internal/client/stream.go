package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/jaild/jaild/internal/api"
)

// ExecuteStream runs code in a jail as Execute does, asking the daemon to
// stream the run's events (POST /v1/execute with Accept:
// application/x-ndjson). on, unless nil, is called with each event in
// order, on the calling goroutine, the last done or error event included;
// an error it returns ends the request (the daemon then stops the run)
// and is returned as it is.
//
// The response is the one Execute would return: done's, with Stdout and
// Stderr the concatenations of the stdout and stderr events and Figures
// those of the figure events. The errors are Execute's: an error response
// before the stream began and an error event both give the *Error of the
// failure's class. A stream that ends before its done or error event,
// skips an event ID, holds a malformed event, or holds more than
// MaxResponseBytes (in one event or in all) is an error too.
//
// A daemon that ignores the Accept header and answers with JSON (any
// response not of type application/x-ndjson) is read as Execute reads it, and on sees the events that response stands for
// (start, stdout, stderr, figure, exception, result, done), so a caller
// that prints the events prints the same output either way.
func (c *Client) ExecuteStream(ctx context.Context, req *api.ExecuteRequest, on func(api.Event) error) (*api.ExecuteResponse, error) {
	var resp api.ExecuteResponse
	if err := c.stream(ctx, "/v1/execute", req, on, &resp, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// SessionExecuteStream runs code in a session (POST
// /v1/sessions/{id}/execute) with its events streamed: SessionExecute as
// ExecuteStream is Execute. done's data is the SessionExecuteResponse.
func (c *Client) SessionExecuteStream(ctx context.Context, id string, req *api.SessionExecuteRequest, on func(api.Event) error) (*api.SessionExecuteResponse, error) {
	var resp api.SessionExecuteResponse
	path := "/v1/sessions/" + url.PathEscape(id) + "/execute"
	if err := c.stream(ctx, path, req, on, &resp, &resp.ExecuteResponse); err != nil {
		return nil, err
	}
	return &resp, nil
}

// callbackError is an error returned by a stream's on: it is returned to
// the caller unwrapped.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }

// stream does a streamed execute at path. out receives done's data (or
// the JSON response's); base is out's ExecuteResponse, which the output
// events complete.
func (c *Client) stream(ctx context.Context, path string, in any, on func(api.Event) error, out any, base *api.ExecuteResponse) error {
	const method = http.MethodPost
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", path, err)
	}
	req, err := c.newRequest(ctx, method, path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", api.MediaNDJSON)
	resp, err := c.sendOK(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()

	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == api.MediaNDJSON {
		s := &streamReader{max: c.maxResponse, on: on, out: out, base: base}
		err = s.read(resp.Body)
	} else {
		// A daemon from before streaming (application/json): the whole
		// response at once, read as Execute reads it.
		var raw json.RawMessage
		if raw, err = c.readObject(resp, method, path); err != nil {
			return err
		}
		if err = json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("jaild %s %s: malformed response: %w", method, path, err)
		}
		if base.Status == "" {
			return fmt.Errorf("jaild %s %s: malformed response: no status", method, path)
		}
		if on != nil {
			err = replay(base, out, on)
		}
	}

	var cbErr *callbackError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &cbErr):
		return cbErr.err
	case errors.As(err, new(*Error)):
		return err
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		// A read cut by the context: say so, as Execute does.
		return fmt.Errorf("jaild %s %s: %w", method, path, ctx.Err())
	}
	return fmt.Errorf("jaild %s %s: %w", method, path, err)
}

// streamReader reads the events of one NDJSON stream.
type streamReader struct {
	max  int64 // bytes in one event, and kept in all
	on   func(api.Event) error
	out  any
	base *api.ExecuteResponse

	next           int64 // the ID the next event must have
	held           int64
	stdout, stderr strings.Builder
	figures        []api.Figure
	outputs        []api.Output
}

func (s *streamReader) read(body io.Reader) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), int(min(s.max, 1<<40)))
	s.next = 1
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		last, err := s.event(line)
		if err != nil || last {
			return err
		}
	}
	switch err := sc.Err(); {
	case errors.Is(err, bufio.ErrTooLong):
		return fmt.Errorf("malformed stream: an event after event %d is larger than %d bytes", s.next-1, s.max)
	case err != nil:
		return fmt.Errorf("read stream: %w", err)
	}
	return fmt.Errorf("stream ended early: no done or error event after event %d", s.next-1)
}

// event handles one line. last is true after done; an error event is
// returned as the failure's *Error.
func (s *streamReader) event(line []byte) (last bool, err error) {
	var ev api.Event
	if err := json.Unmarshal(line, &ev); err != nil {
		return false, fmt.Errorf("malformed stream: event after event %d: %w", s.next-1, err)
	}
	if ev.ID != s.next {
		return false, fmt.Errorf("malformed stream: event %d after event %d", ev.ID, s.next-1)
	}
	s.next++
	decode := func(v any) error {
		if err := json.Unmarshal(ev.Data, v); err != nil {
			return fmt.Errorf("malformed stream: event %d (%s): %w", ev.ID, ev.Event, err)
		}
		return nil
	}
	var failure *api.ErrorBody
	switch ev.Event {
	case api.EventStdout, api.EventStderr:
		var t api.EventText
		if err := decode(&t); err != nil {
			return false, err
		}
		if ev.Event == api.EventStdout {
			s.stdout.WriteString(t.Text)
		} else {
			s.stderr.WriteString(t.Text)
		}
		s.held += int64(len(t.Text))
	case api.EventFigure:
		var f api.Figure
		if err := decode(&f); err != nil {
			return false, err
		}
		s.figures = append(s.figures, f)
		s.held += int64(len(f.ContentB64))
	case api.EventDisplay:
		var o api.Output
		if err := decode(&o); err != nil {
			return false, err
		}
		s.outputs = append(s.outputs, o)
		s.held += int64(len(ev.Data))
	case api.EventResult:
		var r api.EventResultData
		if err := decode(&r); err != nil {
			return false, err
		}
		if len(r.Data) > 0 {
			if r.Metadata == nil {
				r.Metadata = map[string]json.RawMessage{}
			}
			s.outputs = append(s.outputs, api.Output{OutputType: api.OutputExecuteResult, Data: r.Data, Metadata: r.Metadata})
			s.held += int64(len(ev.Data))
		}
	case api.EventDone:
		if err := checkObject(ev.Data); err != nil {
			return false, fmt.Errorf("malformed stream: done event %d: %w", ev.ID, err)
		}
		if err := decode(s.out); err != nil {
			return false, err
		}
		if s.base.Status == "" {
			return false, fmt.Errorf("malformed stream: done event %d: no status", ev.ID)
		}
		s.held += int64(len(ev.Data))
		last = true
	case api.EventError:
		failure = &api.ErrorBody{}
		if json.Unmarshal(ev.Data, failure) != nil {
			failure.Error = api.ErrorDetail{}
		}
	}
	if s.held > s.max {
		return false, fmt.Errorf("response larger than %d bytes", s.max)
	}
	if s.on != nil {
		if err := s.on(ev); err != nil {
			return false, &callbackError{err}
		}
	}
	if failure != nil {
		return false, streamError(failure.Error)
	}
	if last {
		// done's stdout, stderr and figures were the events; a daemon
		// that repeated them there would otherwise count twice.
		if s.stdout.Len() > 0 {
			s.base.Stdout = s.stdout.String()
		}
		if s.stderr.Len() > 0 {
			s.base.Stderr = s.stderr.String()
		}
		if len(s.figures) > 0 {
			s.base.Figures = s.figures
		}
		if len(s.outputs) > 0 {
			// A session call's execute_result carries the call's number,
			// which the result event does not: it is done's.
			var count struct {
				N *int `json:"execution_count"`
			}
			_ = json.Unmarshal(ev.Data, &count)
			for i := range s.outputs {
				if s.outputs[i].OutputType == api.OutputExecuteResult && s.outputs[i].ExecutionCount == nil {
					s.outputs[i].ExecutionCount = count.N
				}
			}
			s.base.Outputs = s.outputs
		}
	}
	return last, nil
}

// replay calls on with the events a stream of the response base (within
// out) would have had.
func replay(base *api.ExecuteResponse, out any, on func(api.Event) error) error {
	var events []api.Event
	add := func(name string, v any) error {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		events = append(events, api.Event{ID: int64(len(events) + 1), Event: name, Data: data})
		return nil
	}
	var err error
	try := func(name string, v any) {
		if err == nil {
			err = add(name, v)
		}
	}
	try(api.EventStart, api.EventStartData{RunID: base.RunID, Warm: base.Usage.Warm})
	if base.Stdout != "" {
		try(api.EventStdout, api.EventText{Text: base.Stdout})
	}
	if base.Stderr != "" {
		try(api.EventStderr, api.EventText{Text: base.Stderr})
	}
	for _, f := range base.Figures {
		try(api.EventFigure, f)
	}
	if base.Error != nil {
		try(api.EventException, base.Error)
	}
	result := false
	for _, o := range base.Outputs {
		if o.OutputType == api.OutputExecuteResult && base.Result != nil {
			result = true
			try(api.EventResult, api.EventResultData{Repr: *base.Result, Data: o.Data, Metadata: o.Metadata})
		} else {
			try(api.EventDisplay, o)
		}
	}
	if base.Result != nil && !result {
		try(api.EventResult, api.EventResultData{Repr: *base.Result})
	}
	// done as a stream has it: without what the events carried.
	stdout, stderr, figures, outputs := base.Stdout, base.Stderr, base.Figures, base.Outputs
	base.Stdout, base.Stderr, base.Figures, base.Outputs = "", "", []api.Figure{}, []api.Output{}
	try(api.EventDone, out)
	base.Stdout, base.Stderr, base.Figures, base.Outputs = stdout, stderr, figures, outputs
	if err != nil {
		return fmt.Errorf("encode events: %w", err)
	}
	for _, ev := range events {
		if err := on(ev); err != nil {
			return &callbackError{err}
		}
	}
	return nil
}
