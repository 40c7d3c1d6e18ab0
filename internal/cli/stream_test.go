package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

// events writes a streamed execute's events, numbered from 1, a line
// each, flushed at once.
type events struct {
	w http.ResponseWriter
	n int64
}

func newEvents(w http.ResponseWriter) *events {
	w.Header().Set("Content-Type", api.MediaNDJSON)
	w.WriteHeader(http.StatusOK)
	return &events{w: w}
}

func (s *events) send(name string, data any) {
	d, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	s.n++
	line, _ := json.Marshal(api.Event{ID: s.n, Event: name, Data: d})
	s.w.Write(append(line, '\n'))
	s.w.(http.Flusher).Flush()
}

// serveMux serves mux on a temporary Unix socket and returns its path.
func serveMux(t *testing.T, mux http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "jc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return sock
}

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

// exec prints the output as it arrives: the daemon sends the rest only
// once jailctl's stdout and stderr hold the first chunks. The report after
// the run does not print them again.
func TestExecStreamsOutput(t *testing.T) {
	stdout, stderr := newSeenWriter("tick 1\n"), newSeenWriter("warn\n")
	var accept string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/execute", func(w http.ResponseWriter, r *http.Request) {
		accept = r.Header.Get("Accept")
		ev := newEvents(w)
		ev.send(api.EventStart, api.EventStartData{RunID: "r1"})
		ev.send(api.EventStdout, api.EventText{Text: "tick 1\n"})
		ev.send(api.EventStderr, api.EventText{Text: "warn\n"})
		for _, seen := range []chan struct{}{stdout.seen, stderr.seen} {
			select {
			case <-seen:
			case <-time.After(5 * time.Second):
				t.Error("jailctl did not print the output as it arrived")
			}
		}
		ev.send(api.EventKeepalive, struct{}{})
		ev.send(api.EventStdout, api.EventText{Text: "tick 2"})
		ev.send(api.EventFigure, api.Figure{Name: "figure_1.png", ContentB64: b64("\x89PNG")})
		ev.send(api.EventDone, api.ExecuteResponse{RunID: "r1", Status: "timeout", TimedOut: true, Signal: intp(9),
			StdoutTruncated: true, Message: "timed out after 1s", Figures: []api.Figure{}})
	})
	sock := serveMux(t, mux)
	dir := t.TempDir()
	code := Main(context.Background(), []string{"--socket", sock, "exec", "-c", "x", "--out-dir", dir}, strings.NewReader(""), stdout, stderr)
	if accept != api.MediaNDJSON {
		t.Errorf("Accept %q", accept)
	}
	want := "warn\njailctl: the run's stdout was truncated\nwrote " + filepath.Join(dir, "figure_1.png") + "\njailctl: timed out after 1s\n"
	if code != 124 || stdout.String() != "tick 1\ntick 2" || stderr.String() != want {
		t.Errorf("got %d %q %q\nwant 124 %q %q", code, stdout.String(), stderr.String(), "tick 1\ntick 2", want)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "figure_1.png")); err != nil || string(got) != "\x89PNG" {
		t.Errorf("figure %q %v", got, err)
	}
}

// An error after the stream began is the daemon's error, after the
// output that came before it.
func TestExecStreamError(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/execute", func(w http.ResponseWriter, r *http.Request) {
		ev := newEvents(w)
		ev.send(api.EventStdout, api.EventText{Text: "partial\n"})
		ev.send(api.EventError, api.ErrorBody{Error: api.ErrorDetail{Type: "unavailable", Message: "the daemon is shutting down"}})
	})
	sock := serveMux(t, mux)
	r := jailctl(t, sock, "", "exec", "-c", "x")
	if r.code != 2 || r.stdout != "partial\n" || r.stderr != "jailctl: the daemon is shutting down\n" {
		t.Errorf("got %+v", r)
	}
	// The daemon went away mid-stream.
	mux = http.NewServeMux()
	mux.HandleFunc("POST /v1/execute", func(w http.ResponseWriter, r *http.Request) {
		newEvents(w).send(api.EventStdout, api.EventText{Text: "partial\n"})
	})
	sock = serveMux(t, mux)
	if r := jailctl(t, sock, "", "exec", "-c", "x"); r.code != 2 || !strings.Contains(r.stderr, "stream ended early") {
		t.Errorf("early end: %+v", r)
	}
}

// --json asks for no stream: the daemon's one object, as it came.
func TestExecJSONIsNotStreamed(t *testing.T) {
	var accept string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/execute", func(w http.ResponseWriter, r *http.Request) {
		accept = r.Header.Get("Accept")
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"run_id":"r1","status":"ok","exit_code":0,"stdout":"hi\n","extra":1}`))
	})
	sock := serveMux(t, mux)
	r := jailctl(t, sock, "", "exec", "--json", "-c", "x")
	if r.code != 0 || r.stdout != `{"run_id":"r1","status":"ok","exit_code":0,"stdout":"hi\n","extra":1}`+"\n" || accept != "application/json" {
		t.Errorf("got %+v, Accept %q", r, accept)
	}
}

// session exec streams too, and Ctrl-C still interrupts the call first.
func TestSessionExecStreams(t *testing.T) {
	sigs := fakeSignals(t)
	stdout := newSeenWriter("tick\n")
	interrupted := make(chan struct{})
	var once sync.Once
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions/s-1/interrupt", func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(interrupted) })
		json.NewEncoder(w).Encode(api.SessionInterruptResponse{Interrupted: true})
	})
	mux.HandleFunc("POST /v1/sessions/s-1/execute", func(w http.ResponseWriter, r *http.Request) {
		ev := newEvents(w)
		ev.send(api.EventStdout, api.EventText{Text: "tick\n"})
		<-stdout.seen
		sigs <- os.Interrupt
		<-interrupted
		ev.send(api.EventStderr, api.EventText{Text: "KeyboardInterrupt\n"})
		ev.send(api.EventDone, api.SessionExecuteResponse{
			ExecuteResponse: api.ExecuteResponse{Status: "error", ExitCode: intp(1), Error: &api.ExecError{Type: "KeyboardInterrupt"}},
			Session:         api.SessionStatus{SessionID: "s-1", State: api.SessionIdle},
		})
	})
	sock := serveMux(t, mux)
	var stderr bytes.Buffer
	code := Main(context.Background(), []string{"--socket", sock, "session", "exec", "s-1", "-c", "while True: print('tick')"}, strings.NewReader(""), stdout, &stderr)
	want := "jailctl: interrupting the call (Ctrl-C again to abandon it)\nKeyboardInterrupt\n"
	if code != 130 || stdout.String() != "tick\n" || stderr.String() != want {
		t.Errorf("got %d %q %q; want 130 %q", code, stdout.String(), stderr.String(), want)
	}
}

// The REPL streams each call's output.
func TestReplStreams(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		json.NewEncoder(w).Encode(api.Session{SessionID: "s-1", State: api.SessionIdle})
	})
	mux.HandleFunc("DELETE /v1/sessions/s-1", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.Session{SessionID: "s-1", State: api.SessionEnded})
	})
	mux.HandleFunc("POST /v1/sessions/s-1/execute", func(w http.ResponseWriter, r *http.Request) {
		ev := newEvents(w)
		ev.send(api.EventStdout, api.EventText{Text: "a\n"})
		ev.send(api.EventStdout, api.EventText{Text: "b\n"})
		ev.send(api.EventDone, api.SessionExecuteResponse{ExecuteResponse: api.ExecuteResponse{Status: "ok", ExitCode: intp(0)},
			Session: api.SessionStatus{State: api.SessionIdle}})
	})
	sock := serveMux(t, mux)
	if r := jailctl(t, sock, "x\ny\n", "repl"); r.code != 0 || r.stdout != "a\nb\na\nb\n" || r.stderr != "" {
		t.Errorf("got %+v", r)
	}
}
