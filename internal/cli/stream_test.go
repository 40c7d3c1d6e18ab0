package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/run"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/workspace"
)

// seenWriter is a buffer that says when it first holds want.
type seenWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newSeenWriter(want string) *seenWriter {
	return &seenWriter{want: want, seen: make(chan struct{})}
}

func (w *seenWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *seenWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitSeen fails t unless every seen channel closes soon.
func waitSeen(t *testing.T, seen ...chan struct{}) {
	for _, s := range seen {
		select {
		case <-s:
		case <-time.After(5 * time.Second):
			t.Error("jailctl did not print the output as it arrived")
		}
	}
}

// exec prints the output as it arrives: the engine sends the rest only
// once jailctl's stdout and stderr hold the first chunks. The report after
// the run does not print them again.
func TestExecStreamsOutput(t *testing.T) {
	stdout, stderr := newSeenWriter("tick 1\n"), newSeenWriter("warn\n")
	h := newDaemon(t)
	h.Engine.RunFunc = func(_ context.Context, req *run.Request) (*run.Result, error) {
		req.Hooks.OnStart("r1", false)
		req.Hooks.Output(1, []byte("tick 1\n"))
		req.Hooks.Output(2, []byte("warn\n"))
		waitSeen(t, stdout.seen, stderr.seen)
		req.Hooks.Output(1, []byte("tick 2"))
		return &run.Result{Status: spec.StatusTimeout, TimedOut: true, Signal: 9, ExitCode: -1, StdoutTruncated: true,
			Figures: []workspace.Figure{{Name: "figure_1.png", Data: []byte("\x89PNG")}}}, nil
	}
	dir := t.TempDir()
	code := Main(context.Background(), []string{"--socket", h.Socket, "exec", "-c", "x", "--out-dir", dir}, strings.NewReader(""), stdout, stderr)
	want := "warn\njailctl: the run's stdout was truncated\nwrote " + filepath.Join(dir, "figure_1.png") + "\njailctl: Execution terminated after 10 seconds (the time limit)\n"
	if code != 124 || stdout.String() != "tick 1\ntick 2" || stderr.String() != want {
		t.Errorf("got %d %q %q\nwant 124 %q %q", code, stdout.String(), stderr.String(), "tick 1\ntick 2", want)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "figure_1.png")); err != nil || string(got) != "\x89PNG" {
		t.Errorf("figure %q %v", got, err)
	}
}

// events writes a streamed answer's events, numbered from 1, a line each.
func events(w http.ResponseWriter, evs ...api.Event) {
	w.Header().Set("Content-Type", api.MediaNDJSON)
	for i, ev := range evs {
		ev.ID = int64(i + 1)
		line, _ := json.Marshal(ev)
		w.Write(append(line, '\n'))
	}
}

func event(name string, data any) api.Event {
	d, _ := json.Marshal(data)
	return api.Event{Event: name, Data: d}
}

// An error after the stream began is the daemon's error, after the
// output that came before it; a stream cut short is said to be.
func TestExecStreamError(t *testing.T) {
	partial := event(api.EventStdout, api.EventText{Text: "partial\n"})
	sock := misbehaving(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		events(w, partial, event(api.EventError, api.ErrorBody{Error: api.ErrorDetail{Type: "unavailable", Message: "the daemon is shutting down"}}))
	}))
	if r := jailctl(t, sock, "", "exec", "-c", "x"); r.code != 2 || r.stdout != "partial\n" || r.stderr != "jailctl: the daemon is shutting down\n" {
		t.Errorf("got %+v", r)
	}
	sock = misbehaving(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { events(w, partial) }))
	if r := jailctl(t, sock, "", "exec", "-c", "x"); r.code != 2 || !strings.Contains(r.stderr, "stream ended early") {
		t.Errorf("early end: %+v", r)
	}
}

// session exec streams too, and Ctrl-C still interrupts the call first.
func TestSessionExecStreams(t *testing.T) {
	sigs := fakeSignals(t)
	stdout := newSeenWriter("tick\n")
	h := newDaemon(t)
	h.Engine.SessionExec = func(_ context.Context, c *run.Call) (*run.CallResult, error) {
		c.Hooks.OnStart("r1", false)
		c.Hooks.Output(1, []byte("tick\n"))
		<-stdout.seen
		sigs <- os.Interrupt
		<-h.Engine.Sessions()[0].Interrupted()
		c.Hooks.Output(2, []byte("KeyboardInterrupt\n"))
		return &run.CallResult{Result: run.Result{Status: spec.StatusError, ExitCode: 1, Exception: exception("KeyboardInterrupt")}}, nil
	}
	id := newSession(t, h)
	var stderr bytes.Buffer
	code := Main(context.Background(), []string{"--socket", h.Socket, "session", "exec", id, "-c", "while True: print('tick')"}, strings.NewReader(""), stdout, &stderr)
	want := "jailctl: interrupting the call (Ctrl-C again to abandon it)\nKeyboardInterrupt\njailctl: KeyboardInterrupt\n"
	if code != 130 || stdout.String() != "tick\n" || stderr.String() != want {
		t.Errorf("got %d %q %q; want 130 %q", code, stdout.String(), stderr.String(), want)
	}
}

// The REPL streams each call's output.
func TestReplStreams(t *testing.T) {
	h := newDaemon(t)
	h.Engine.SessionExec = func(_ context.Context, c *run.Call) (*run.CallResult, error) {
		c.Hooks.OnStart("r1", false)
		c.Hooks.Output(1, []byte("a\n"))
		c.Hooks.Output(1, []byte("b\n"))
		return &run.CallResult{Result: run.Result{Status: spec.StatusOK}}, nil
	}
	if r := jailctl(t, h.Socket, "x\ny\n", "repl"); r.code != 0 || r.stdout != "a\nb\na\nb\n" || r.stderr != "" {
		t.Errorf("got %+v", r)
	}
}
