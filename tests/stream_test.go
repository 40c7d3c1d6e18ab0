package tests

// Streamed execute against real daemons (issue 14): events arrive while a
// run is still going, in both framings; the events of a run together are
// its JSON response; caps, timeouts and client disconnects behave as
// without streaming; a reader slower than the run costs the daemon about
// the output cap and no more; errors before the stream are plain HTTP
// errors; a session's call streams; jailctl exec prints as output comes.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

// sleepGap: the codes that print, sleep 2 s and print again must show
// their first output at least this long before the run's done event. It
// is below the sleep by what delivery may cost on a loaded host; no
// absolute latency is asserted.
const sleepGap = 1500 * time.Millisecond

// startStreamDaemon starts a daemon of the streaming tests' own: their
// cases run in parallel, beyond the shared daemon's two slots, and their
// runs must not queue for long.
func startStreamDaemon(t *testing.T) *daemon {
	t.Helper()
	d := startDaemon(t, daemontest.Options{Tune: func(c string) string {
		return setKeys(c, map[string]string{"max_concurrent": "6", "queue_size": "64", "queue_wait": `"60s"`})
	}})
	return d
}

// postStream sends body to path asking for the streamed form accept and
// returns the response with its body unread.
func postStream(ctx context.Context, d *daemon, path string, body any, accept string) (*http.Response, error) {
	j, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://jaild"+path, bytes.NewReader(j))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", accept)
	return d.Client.Do(req)
}

// arrived is an event of a stream and when the test read it.
type arrived struct {
	api.Event
	at time.Time
}

// eventReader reads a stream's events one at a time, as they arrive, and
// strictly: NDJSON is exactly one api.Event per line; SSE is the server's
// framing, an id, an event and one data line of JSON, then a blank line.
type eventReader struct {
	br  *bufio.Reader
	sse bool
}

func (r *eventReader) next() (api.Event, error) {
	var ev api.Event
	if !r.sse {
		line, err := r.br.ReadBytes('\n')
		if err == io.EOF && len(line) == 0 {
			return ev, io.EOF
		}
		if err != nil {
			return ev, fmt.Errorf("NDJSON line %q: %w", short(string(line)), err)
		}
		if err := strictJSON(line, &ev); err != nil {
			return ev, fmt.Errorf("NDJSON line %q: %v", short(string(line)), err)
		}
		return ev, nil
	}
	seen := map[string]bool{}
	for {
		line, err := r.br.ReadString('\n')
		if errors.Is(err, io.EOF) && line == "" && len(seen) == 0 {
			return ev, io.EOF
		}
		if err != nil {
			return ev, fmt.Errorf("SSE line %q: %w", short(line), err)
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if len(seen) != 3 {
				return ev, fmt.Errorf("SSE event without an id, event or data field: %+v", ev)
			}
			return ev, nil
		}
		name, value, ok := strings.Cut(line, ": ")
		if !ok || seen[name] {
			return ev, fmt.Errorf("SSE: malformed or repeated field %q", short(line))
		}
		seen[name] = true
		switch name {
		case "id":
			if ev.ID, err = strconv.ParseInt(value, 10, 64); err != nil {
				return ev, fmt.Errorf("SSE id %q: %v", value, err)
			}
		case "event":
			ev.Event = value
		case "data":
			if !json.Valid([]byte(value)) {
				return ev, fmt.Errorf("SSE data is not JSON: %q", short(value))
			}
			ev.Data = json.RawMessage(value)
		default:
			return ev, fmt.Errorf("SSE: unknown field %q", name)
		}
	}
}

// readEvents reads a stream to its end, timing each event's arrival.
func readEvents(resp *http.Response, format string) ([]arrived, error) {
	defer resp.Body.Close()
	r := &eventReader{br: bufio.NewReader(resp.Body), sse: format == api.MediaSSE}
	var out []arrived
	for {
		ev, err := r.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("after %d events: %w", len(out), err)
		}
		out = append(out, arrived{ev, time.Now()})
	}
}

// streamed is a stream's events, checked and decoded.
type streamed struct {
	events         []arrived
	start          api.EventStartData
	stdout, stderr string
	stdoutEvents   int
	figures        []api.Figure
	outputs        []api.Output // display events, and result's bundle
	exception      *api.ExecError
	result         *string
	keepalives     int
	done           json.RawMessage // the done event's data; nil after an error event
	failure        *api.ErrorBody  // the error event's data
}

// parseStream checks a stream's framing (ids from 1 without gaps, start
// first, exactly one done or error and it last, one exception and result
// at most) and decodes every event's data strictly.
func parseStream(evs []arrived) (*streamed, error) {
	s := &streamed{events: evs, figures: []api.Figure{}, outputs: []api.Output{}}
	if len(evs) < 2 {
		return s, fmt.Errorf("%d events, want at least start and done", len(evs))
	}
	var errs []error
	for i, a := range evs {
		ev := a.Event
		if ev.ID != int64(i+1) {
			errs = append(errs, fmt.Errorf("event %d has id %d", i+1, ev.ID))
		}
		last := i == len(evs)-1
		if first := i == 0; first != (ev.Event == api.EventStart) {
			errs = append(errs, fmt.Errorf("event %d is %q: start must be first, and only first", i+1, ev.Event))
		}
		if end := ev.Event == api.EventDone || ev.Event == api.EventError; end != last {
			errs = append(errs, fmt.Errorf("event %d of %d is %q: exactly one done or error, last", i+1, len(evs), ev.Event))
		}
		var err error
		switch ev.Event {
		case api.EventStart:
			err = strictJSON(ev.Data, &s.start)
			if err == nil && s.start.RunID == "" {
				err = errors.New("no run_id")
			}
		case api.EventStdout, api.EventStderr:
			var txt api.EventText
			if err = strictJSON(ev.Data, &txt); err == nil && txt.Text == "" {
				err = errors.New("empty text")
			}
			if ev.Event == api.EventStdout {
				s.stdout += txt.Text
				s.stdoutEvents++
			} else {
				s.stderr += txt.Text
			}
		case api.EventFigure:
			var f api.Figure
			err = strictJSON(ev.Data, &f)
			s.figures = append(s.figures, f)
		case api.EventException:
			if s.exception != nil {
				err = errors.New("a second exception event")
			}
			s.exception = &api.ExecError{}
			err = errors.Join(err, strictJSON(ev.Data, s.exception))
		case api.EventResult:
			if s.result != nil {
				err = errors.New("a second result event")
			}
			var r api.EventResultData
			err = errors.Join(err, strictJSON(ev.Data, &r))
			s.result = &r.Repr
			if len(r.Data) > 0 {
				if r.Metadata == nil {
					r.Metadata = map[string]json.RawMessage{}
				}
				s.outputs = append(s.outputs, api.Output{OutputType: api.OutputExecuteResult, Data: r.Data, Metadata: r.Metadata})
			}
		case api.EventDisplay:
			var o api.Output
			err = strictJSON(ev.Data, &o)
			if err == nil && o.OutputType != api.OutputDisplayData {
				err = fmt.Errorf("a display event of output_type %q", o.OutputType)
			}
			s.outputs = append(s.outputs, o)
		case api.EventKeepalive:
			s.keepalives++
			if string(ev.Data) != "{}" {
				err = errors.New("keepalive data is not {}")
			}
		case api.EventDone:
			s.done = ev.Data
		case api.EventError:
			s.failure = &api.ErrorBody{}
			err = strictJSON(ev.Data, s.failure)
		default:
			err = errors.New("unknown event")
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("event %d (%s) %s: %v", ev.ID, ev.Event, short(string(ev.Data)), err))
		}
	}
	return s, errors.Join(errs...)
}

// finish checks done (r, decoded from the done event) against the other
// events and puts the streamed output and figures in it, so that it can
// be compared with the non-streamed response.
func (s *streamed) finish(r *api.ExecuteResponse) error {
	var errs []error
	if r.Stdout != "" || r.Stderr != "" || len(r.Figures) != 0 || len(r.Outputs) != 0 {
		errs = append(errs, fmt.Errorf("done repeats output: stdout %q stderr %q %d figures %d outputs", short(r.Stdout), short(r.Stderr), len(r.Figures), len(r.Outputs)))
	}
	if r.RunID != s.start.RunID || r.Usage.Warm != s.start.Warm {
		errs = append(errs, fmt.Errorf("start %+v, done run_id %q warm %v", s.start, r.RunID, r.Usage.Warm))
	}
	if !reflect.DeepEqual(r.Error, s.exception) {
		errs = append(errs, fmt.Errorf("exception event %+v, done's error %+v", s.exception, r.Error))
	}
	if !reflect.DeepEqual(r.Result, s.result) {
		errs = append(errs, fmt.Errorf("result event %v, done's result %v", deref2(s.result), deref2(r.Result)))
	}
	r.Stdout, r.Stderr, r.Figures, r.Outputs = s.stdout, s.stderr, s.figures, s.outputs
	return errors.Join(errs...)
}

// execute is the stream's run as an execute response: done, with the
// output and figures of the events.
func (s *streamed) execute() (*api.ExecuteResponse, error) {
	if s.done == nil {
		return nil, fmt.Errorf("the stream ended with an error event: %+v", s.failure)
	}
	var r api.ExecuteResponse
	if err := strictJSON(s.done, &r); err != nil {
		return nil, fmt.Errorf("done: %v: %s", err, short(string(s.done)))
	}
	return &r, s.finish(&r)
}

// session is execute for a session's call.
func (s *streamed) session() (*api.SessionExecuteResponse, error) {
	if s.done == nil {
		return nil, fmt.Errorf("the stream ended with an error event: %+v", s.failure)
	}
	var r api.SessionExecuteResponse
	if err := strictJSON(s.done, &r); err != nil {
		return nil, fmt.Errorf("done: %v: %s", err, short(string(s.done)))
	}
	err := s.finish(&r.ExecuteResponse)
	// The execute_result's execution_count is done's (the result event
	// does not repeat it).
	for i := range r.Outputs {
		if r.Outputs[i].OutputType == api.OutputExecuteResult {
			r.Outputs[i].ExecutionCount = &r.ExecutionCount
		}
	}
	return &r, err
}

// firstAt is when the first event named name arrived (zero if none).
func (s *streamed) firstAt(name string) time.Time {
	for _, a := range s.events {
		if a.Event.Event == name {
			return a.at
		}
	}
	return time.Time{}
}

// doneAt is when the last event arrived.
func (s *streamed) doneAt() time.Time { return s.events[len(s.events)-1].at }

// streamExec runs a streamed request to its end: HTTP 200 with the media
// type asked, and a well-formed stream.
func streamExec(ctx context.Context, d *daemon, path string, body any, format string) (*streamed, error) {
	resp, err := postStream(ctx, d, path, body, format)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != format {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil, fmt.Errorf("HTTP %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), short(string(b)))
	}
	evs, err := readEvents(resp, format)
	if err != nil {
		return nil, err
	}
	return parseStream(evs)
}

// disconnectBounds bound dropAfterOutput's waits: for the run's
// processes to die (wait), how soon after the disconnect they must have
// died (die), and for its jail to be torn down (down).
type disconnectBounds struct{ wait, die, down time.Duration }

// dropAfterOutput reads a streamed run's events up to its first output
// (onStart, if set, gets the run's id as soon as it is known), checks that
// the run has processes in cg, drops the connection (cancel) and checks
// that the processes die and the jail is torn down within b.
func dropAfterOutput(t *testing.T, resp *http.Response, cancel context.CancelFunc, cg *jailCgroups, onStart func(runID string), b disconnectBounds) {
	t.Helper()
	r := &eventReader{br: bufio.NewReader(resp.Body)}
	var start api.EventStartData
	for {
		ev, err := r.next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Event == api.EventStart {
			_ = json.Unmarshal(ev.Data, &start)
			if onStart != nil {
				onStart(start.RunID)
			}
		}
		if ev.Event == api.EventStdout {
			break
		}
	}
	pids := cg.jailProcs(start.RunID)
	if len(pids) == 0 {
		t.Fatalf("run %s has no processes in its cgroup while it prints", start.RunID)
	}
	cancel()
	resp.Body.Close()
	gone := time.Now()
	waitFor(t, b.wait, "the run's processes to die", func() bool { return len(survivors(pids, start.RunID)) == 0 })
	if took := time.Since(gone); took > b.die {
		t.Errorf("the run died %v after the disconnect, want within %v", took, b.die)
	}
	waitFor(t, b.down, "the run's jail to be torn down", func() bool { return !cg.live()[start.RunID] })
}

// plainExec runs an execute request without streaming. Unlike
// daemon.call it reports errors instead of failing the test, so that it
// can run in a goroutine.
func plainExec(d *daemon, body any) (*api.ExecuteResponse, error) {
	j, _ := json.Marshal(body)
	resp, err := d.Client.Post("http://jaild/v1/execute", "application/json", bytes.NewReader(j))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, short(string(raw)))
	}
	var r api.ExecuteResponse
	if err := strictJSON(raw, &r); err != nil {
		return nil, fmt.Errorf("%v: %s", err, short(string(raw)))
	}
	return &r, nil
}

// diffResponses compares two responses field by field, but for what
// differs between any two runs of the same code (run_id, usage).
func diffResponses(streamed, plain *api.ExecuteResponse) []string {
	fields := func(r api.ExecuteResponse) map[string]any {
		r.RunID, r.Usage = "", api.Usage{}
		b, _ := json.Marshal(r)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return m
	}
	a, b := fields(*streamed), fields(*plain)
	var diffs []string
	for k := range a {
		if !reflect.DeepEqual(a[k], b[k]) {
			sa, _ := json.Marshal(a[k])
			sb, _ := json.Marshal(b[k])
			diffs = append(diffs, fmt.Sprintf("%s: streamed %s, not streamed %s", k, short(string(sa)), short(string(sb))))
		}
	}
	slices.Sort(diffs)
	return diffs
}

// short cuts s for a message.
func short(s string) string {
	if len(s) > 300 {
		return s[:300] + fmt.Sprintf("...(%d bytes)", len(s))
	}
	return s
}

// twoLines prints a line, sleeps 2 s (no flush: a streamed run's stdout
// is line-buffered) and prints another.
const twoLines = "import time\nprint('first')\ntime.sleep(2)\nprint('second')"

func TestStream(t *testing.T) {
	t.Parallel()
	d := startStreamDaemon(t)
	cg, err := cgroupsOf(d)
	if err != nil {
		t.Fatal(err)
	}

	// The first line comes while the run sleeps, in both framings.
	t.Run("events arrive during the run", func(t *testing.T) {
		for _, format := range []string{api.MediaNDJSON, api.MediaSSE} {
			t.Run(format, func(t *testing.T) {
				t.Parallel()
				s, err := streamExec(context.Background(), d, "/v1/execute", api.ExecuteRequest{Code: twoLines}, format)
				if err != nil {
					t.Fatal(err)
				}
				r, err := s.execute()
				if err != nil {
					t.Fatal(err)
				}
				if r.Status != "ok" || r.Stdout != "first\nsecond\n" {
					t.Errorf("status %q stdout %q", r.Status, r.Stdout)
				}
				var first api.EventText
				for _, a := range s.events {
					ev := a.Event
					if ev.Event == api.EventStdout {
						_ = json.Unmarshal(ev.Data, &first)
						break
					}
				}
				if gap := s.doneAt().Sub(s.firstAt(api.EventStdout)); first.Text != "first\n" || gap < sleepGap {
					t.Errorf("first stdout event %q came %v before done, want \"first\\n\" at least %v before", first.Text, gap, sleepGap)
				}
			})
		}
	})

	// Each code runs without streaming and streamed in both framings; the
	// events of a stream together must be the JSON response.
	t.Run("events equal the JSON response", func(t *testing.T) {
		type tc struct {
			name  string
			body  api.ExecuteRequest
			check func(t *testing.T, plain *api.ExecuteResponse, s *streamed)
		}
		rawBytes := make([]byte, 256)
		for i := range rawBytes {
			rawBytes[i] = byte(i)
		}
		cases := []tc{
			{name: "prints", body: api.ExecuteRequest{Code: "for i in range(300):\n    print('line', i)\nprint('ünïcödé €', end='')"}},
			{
				name: "stdout and stderr",
				body: api.ExecuteRequest{Code: "import sys\nprint('out 1')\nprint('err 1', file=sys.stderr)\nsys.stderr.write('partial')\nprint('out 2')\nsys.exit(3)"},
				check: func(t *testing.T, p *api.ExecuteResponse, _ *streamed) {
					if p.ExitCode == nil || *p.ExitCode != 3 || p.Stderr != "err 1\npartial" {
						t.Errorf("exit %v stderr %q", p.ExitCode, p.Stderr)
					}
				},
			},
			{
				// A euro sign (e2 82 ac) cut by a flush and a sleep, a lead
				// byte followed by no continuation, and a run of two invalid
				// bytes cut the same way (one U+FFFD, as in the JSON response).
				name: "invalid UTF-8 across flushes",
				body: api.ExecuteRequest{Code: "import sys, time\n" +
					"o, e = sys.stdout.buffer, sys.stderr.buffer\n" +
					"o.write(b'a\\xffb\\xe2\\x82'); o.flush(); e.write(b'x\\xff'); e.flush()\n" +
					"time.sleep(0.3)\n" +
					"o.write(b'\\xac end\\xc3'); o.flush(); e.write(b'\\xfey\\n'); e.flush()\n" +
					"time.sleep(0.3)\n" +
					"o.write(b'(\\n')"},
				check: func(t *testing.T, p *api.ExecuteResponse, s *streamed) {
					if p.Stdout != "a\uFFFDb€ end\uFFFD(\n" || p.Stderr != "x\uFFFDy\n" {
						t.Errorf("not streamed: stdout %q stderr %q", p.Stdout, p.Stderr)
					}
					if s != nil && s.stdoutEvents < 2 {
						t.Errorf("stdout came in %d event(s): the cut sequence was not cut in the stream", s.stdoutEvents)
					}
				},
			},
			{
				name: "exception",
				body: api.ExecuteRequest{Code: "print('before')\ndef f():\n    raise ValueError('bad thing')\nf()"},
				check: func(t *testing.T, p *api.ExecuteResponse, s *streamed) {
					if p.Status != "error" || p.Error == nil || p.Error.Type != "ValueError" || (s != nil && s.exception == nil) {
						t.Errorf("status %q error %+v", p.Status, p.Error)
					}
				},
			},
			{
				name: "last_line_interactive",
				body: api.ExecuteRequest{Code: "x = 6\nprint('computing')\nx * 7", LastLineInteractive: true},
				check: func(t *testing.T, p *api.ExecuteResponse, s *streamed) {
					if p.Result == nil || *p.Result != "42" || (s != nil && s.result == nil) {
						t.Errorf("result %v", deref2(p.Result))
					}
				},
			},
			{
				name: "figures",
				body: api.ExecuteRequest{Code: "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.figure()\nplt.bar([1, 2], [3, 4])\nprint('plotted')"},
				check: func(t *testing.T, p *api.ExecuteResponse, _ *streamed) {
					if len(p.Figures) != 2 {
						t.Errorf("%d figures, want 2", len(p.Figures))
					}
				},
			},
			{
				name: "return_files",
				body: api.ExecuteRequest{
					Code:        "import os\nos.makedirs('out')\nopen('out/sum.txt', 'w').write(str(sum(int(l) for l in open('in.csv'))))\nopen('out/raw.bin', 'wb').write(bytes(range(256)))\nprint('wrote')",
					Files:       []api.FileIn{{Path: "in.csv", ContentB64: base64.StdEncoding.EncodeToString([]byte("1\n2\n3\n"))}},
					ReturnFiles: []string{"out/*"},
				},
				check: func(t *testing.T, p *api.ExecuteResponse, _ *streamed) {
					got := filesByPath(p)
					if content(t, got["out/sum.txt"]) != "6" || content(t, got["out/raw.bin"]) != string(rawBytes) {
						t.Errorf("files %+v", p.Files)
					}
				},
			},
			{
				// The one case with a silence longer than keepaliveEvery (5 s).
				name: "keepalive in silence",
				body: api.ExecuteRequest{Code: "import time\nprint('a')\ntime.sleep(6)\nprint('b')"},
				check: func(t *testing.T, _ *api.ExecuteResponse, s *streamed) {
					if s == nil {
						return
					}
					var seq []string
					for _, a := range s.events {
						ev := a.Event
						if ev.Event == api.EventStdout || ev.Event == api.EventKeepalive {
							seq = append(seq, ev.Event)
						}
					}
					if len(seq) < 3 || seq[0] != api.EventStdout || seq[1] != api.EventKeepalive || seq[len(seq)-1] != api.EventStdout {
						t.Errorf("stdout and keepalive events %v, want a keepalive between the two lines", seq)
					}
				},
			},
			{
				// 100-byte lines: the cap falls on a line's end.
				name: "output cap",
				body: api.ExecuteRequest{Code: "while True:\n    print('x' * 99)", Limits: &api.Limits{OutputBytes: ptr(int64(100_000))}},
				check: func(t *testing.T, p *api.ExecuteResponse, s *streamed) {
					if p.Status != "output_limit" || !p.StdoutTruncated || p.Stdout != strings.Repeat(strings.Repeat("x", 99)+"\n", 1000) {
						t.Errorf("status %q truncated %v, %d bytes of stdout", p.Status, p.StdoutTruncated, len(p.Stdout))
					}
					if s != nil && len(s.stdout) != 100_000 {
						t.Errorf("%d bytes streamed, want the cap of 100000", len(s.stdout))
					}
				},
			},
			{
				name: "timeout",
				body: api.ExecuteRequest{Code: "import time\nprint('going', flush=True)\ntime.sleep(30)", Limits: &api.Limits{TimeoutMs: ptr(int64(1500))}},
				check: func(t *testing.T, p *api.ExecuteResponse, _ *streamed) {
					if p.Status != "timeout" || !p.TimedOut || p.Stdout != "going\n" {
						t.Errorf("status %q timed_out %v stdout %q", p.Status, p.TimedOut, p.Stdout)
					}
				},
			},
			{
				// A line printed without a flush before the run is killed:
				// what reaches the response must not depend on streaming
				// (a streamed run's stdout is line-buffered).
				name: "unflushed line at a timeout",
				body: api.ExecuteRequest{Code: "import time\nprint('going')\ntime.sleep(30)", Limits: &api.Limits{TimeoutMs: ptr(int64(1500))}},
				check: func(t *testing.T, p *api.ExecuteResponse, _ *streamed) {
					if p.Status != "timeout" {
						t.Errorf("status %q", p.Status)
					}
				},
			},
		}
		formats := []string{api.MediaNDJSON, api.MediaSSE}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				var (
					wg      sync.WaitGroup
					plain   *api.ExecuteResponse
					perr    error
					streams = make([]*streamed, len(formats))
					serrs   = make([]error, len(formats))
				)
				wg.Go(func() { plain, perr = plainExec(d, c.body) })
				for i, f := range formats {
					wg.Go(func() { streams[i], serrs[i] = streamExec(context.Background(), d, "/v1/execute", c.body, f) })
				}
				wg.Wait()
				if perr != nil {
					t.Fatalf("not streamed: %v", perr)
				}
				if c.check != nil {
					c.check(t, plain, nil)
				}
				for i, f := range formats {
					if serrs[i] != nil {
						t.Errorf("%s: %v", f, serrs[i])
						continue
					}
					r, err := streams[i].execute()
					if err != nil {
						t.Errorf("%s: %v", f, err)
						continue
					}
					for _, diff := range diffResponses(r, plain) {
						t.Errorf("%s: %s", f, diff)
					}
					if c.check != nil {
						c.check(t, r, streams[i])
					}
				}
			})
		}
	})

	// A client that goes away after the first output gets its run killed
	// within about a second, whether the run writes (the next write
	// fails) or is silent (only the connection's end tells).
	t.Run("disconnect kills the run", func(t *testing.T) {
		for _, c := range []struct{ name, code string }{
			{"printing", "import itertools, time\nfor i in itertools.count():\n    print('tick', i)\n    time.sleep(0.01)"},
			{"sleeping", "import time\nprint('started')\ntime.sleep(60)"},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				resp, err := postStream(ctx, d, "/v1/execute", api.ExecuteRequest{Code: c.code, Limits: &api.Limits{TimeoutMs: ptr(int64(60_000))}}, api.MediaNDJSON)
				if err != nil {
					t.Fatal(err)
				}
				dropAfterOutput(t, resp, cancel, cg, nil, disconnectBounds{wait: 5 * time.Second, die: 1500 * time.Millisecond, down: 15 * time.Second})
			})
		}
	})

	// A request refused before its run starts is answered as without
	// streaming: an HTTP error with a JSON body.
	t.Run("error before the stream", func(t *testing.T) {
		t.Parallel()
		cases := []struct {
			name, path, body string
			status           int
			typ, mentions    string
		}{
			{"unknown field", "/v1/execute", `{"code":"print(1)","nope":1}`, 400, "invalid_argument", "nope"},
			{"limit above maximum", "/v1/execute", `{"code":"1","limits":{"memory_mb":999999}}`, 400, "invalid_argument", "limits.memory_mb"},
			{"no such session", "/v1/sessions/nosuchsession/execute", `{"code":"1"}`, 404, "not_found", ""},
		}
		for _, c := range cases {
			for _, format := range []string{api.MediaNDJSON, api.MediaSSE} {
				req, _ := http.NewRequest(http.MethodPost, "http://jaild"+c.path, strings.NewReader(c.body))
				req.Header.Set("Accept", format)
				resp, err := d.Client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
				var e api.ErrorBody
				err = strictJSON(raw, &e)
				if resp.StatusCode != c.status || mt != "application/json" || err != nil || e.Error.Type != c.typ || !strings.Contains(e.Error.Message, c.mentions) {
					t.Errorf("%s, Accept %s: HTTP %d %q %s (%v), want %d %s mentioning %q",
						c.name, format, resp.StatusCode, resp.Header.Get("Content-Type"), short(string(raw)), err, c.status, c.typ, c.mentions)
				}
			}
		}
	})

	// A session's call streams too; its state is the same whether a call
	// is streamed or not.
	t.Run("session", func(t *testing.T) {
		t.Parallel()
		sess := newSession(t, d, api.SessionCreateRequest{})
		defer deleteSession(t, d, sess.SessionID)
		path := "/v1/sessions/" + sess.SessionID + "/execute"
		call := func(format, code string) (*streamed, *api.SessionExecuteResponse) {
			t.Helper()
			s, err := streamExec(context.Background(), d, path, api.ExecuteRequest{Code: code}, format)
			if err != nil {
				t.Fatal(err)
			}
			r, err := s.session()
			if err != nil {
				t.Fatal(err)
			}
			return s, r
		}
		s, r := call(api.MediaNDJSON, "x = 41\n"+twoLines)
		if r.Status != "ok" || r.Stdout != "first\nsecond\n" || r.ExecutionCount != 1 ||
			r.Session.SessionID != sess.SessionID || r.Session.State != api.SessionIdle || r.Session.StateLost {
			t.Errorf("streamed call 1: %+v", r)
		}
		if gap := s.doneAt().Sub(s.firstAt(api.EventStdout)); gap < sleepGap {
			t.Errorf("first stdout event came %v before done, want at least %v", gap, sleepGap)
		}
		if r := mustExec(t, d, sess.SessionID, "x += 1\nprint('x is', x)"); r.Stdout != "x is 42\n" || r.ExecutionCount != 2 {
			t.Errorf("call 2, not streamed: %+v", r)
		}
		_, r = call(api.MediaSSE, "print('still', x)")
		if r.Stdout != "still 42\n" || r.ExecutionCount != 3 || r.Session.SessionID != sess.SessionID {
			t.Errorf("streamed call 3: %+v", r)
		}
	})

	// jailctl exec prints a run's output as it comes.
	t.Run("jailctl exec", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(filepath.Join(binDir, "jailctl"), "--socket", d.Socket, "exec", "-c", twoLines)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(out)
		first, _ := br.ReadString('\n')
		firstAt := time.Now()
		rest, _ := io.ReadAll(br)
		err = cmd.Wait()
		if gap := time.Since(firstAt); first != "first\n" || string(rest) != "second\n" || err != nil || gap < sleepGap {
			t.Errorf("jailctl exec: %v; first line %q %v before its end, then %q; stderr %q", err, first, gap, rest, stderr.String())
		}
	})
}

// A run writes its whole output cap at once to a client that reads
// nothing for 3 s: the stream is complete and correct, the run did not
// wait for the reader, and the daemon held about the cap, not more. The
// test has a daemon of its own, so that other runs do not move its RSS.
func TestStreamSlowReader(t *testing.T) {
	t.Parallel()
	d := startStreamDaemon(t)
	const (
		outputCap = 8 << 20
		pause     = 3 * time.Second
		lines     = outputCap / 1024
	)
	line := strings.Repeat("y", 1023) + "\n"
	// A first streamed run: what the daemon allocates once is in the
	// baseline.
	if _, err := streamExec(context.Background(), d, "/v1/execute", api.ExecuteRequest{Code: "print('warm-up')"}, api.MediaNDJSON); err != nil {
		t.Fatal(err)
	}
	pid := d.Cmd.Process.Pid
	base := vmRSS(pid)
	stop := make(chan struct{})
	peak, sampled := sampleRSS(pid, stop)
	resp, err := postStream(context.Background(), d, "/v1/execute", api.ExecuteRequest{
		Code:   fmt.Sprintf("import sys\nline = 'y' * 1023 + '\\n'\nfor _ in range(%d):\n    sys.stdout.write(line)", lines),
		Limits: &api.Limits{OutputBytes: ptr(int64(outputCap))},
	}, api.MediaNDJSON)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause)
	evs, err := readEvents(resp, api.MediaNDJSON)
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseStream(evs)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.execute()
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "ok" || r.StdoutTruncated || len(r.Stdout) != outputCap || r.Stdout != strings.Repeat(line, lines) {
		t.Errorf("status %q truncated %v, %d bytes of stdout (want exactly the %d written)", r.Status, r.StdoutTruncated, len(r.Stdout), outputCap)
	}
	// The run took a fraction of the pause; held back by the reader, it
	// would take the pause at least (and a slow enough reader would make
	// it time out).
	if took := time.Duration(r.Usage.DurationMs) * time.Millisecond; took >= pause {
		t.Errorf("the run took %v: it waited for the reader", took)
	}
	// The bound, 3 x the cap: the daemon holds the queued output, at most
	// the cap; the Go runtime lets the heap grow to twice what is live
	// before it collects (GOGC 100), and writing the events out makes
	// garbage, so RSS may show twice the cap; one more cap is slack for
	// the rest of the request. It depends on the cap, not on the machine.
	// (Measured: about 1.3 x the cap while the reader pauses, 2-2.6 x at
	// the peak, during the read-out.)
	if grew := peak.Load() - base; grew >= 3*outputCap {
		t.Errorf("daemon RSS grew by %d MiB (from %d MiB) with a slow reader, want under 3 x the cap of %d MiB", grew>>20, base>>20, outputCap>>20)
	} else {
		t.Logf("daemon RSS grew by %.1f MiB (from %d MiB); the run took %d ms", float64(grew)/(1<<20), base>>20, r.Usage.DurationMs)
	}
}
