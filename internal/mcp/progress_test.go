package mcp

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/server/servertest/raw"
)

// handlerDaemon serves h as the daemon on a Unix socket.
func handlerDaemon(t *testing.T, h http.HandlerFunc) *fakeDaemon {
	t.Helper()
	return &fakeDaemon{sock: raw.Serve(t, h)}
}

// streamingDaemon answers GET /v1/info with infoReply(false) and any
// other request with a stream that begins with the start of run r1 and
// goes on as stream writes it.
func streamingDaemon(t *testing.T, stream func(s *ndjson)) *fakeDaemon {
	t.Helper()
	return handlerDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/info" {
			w.Write([]byte(infoReply(false).body))
			return
		}
		s := newNDJSON(w)
		s.send(api.EventStart, api.EventStartData{RunID: "r1"})
		stream(s)
	})
}

// ndjson writes a stream of events, numbered from 1, flushing each.
type ndjson struct {
	w  http.ResponseWriter
	id int64
}

func newNDJSON(w http.ResponseWriter) *ndjson {
	w.Header().Set("Content-Type", api.MediaNDJSON)
	w.WriteHeader(http.StatusOK)
	return &ndjson{w: w}
}

func (n *ndjson) send(event string, data any) {
	raw, err := json.Marshal(data)
	if err != nil {
		panic(err)
	}
	n.id++
	line, _ := json.Marshal(api.Event{ID: n.id, Event: event, Data: raw})
	n.w.Write(append(line, '\n'))
	n.w.(http.Flusher).Flush()
}

// progressLog records the progress notifications a client receives.
type progressLog struct {
	mu     sync.Mutex
	notes  []sdk.ProgressNotificationParams
	first  chan struct{} // closed at the first notification with output
	once   sync.Once
	block  chan struct{} // the handler waits for it, if not nil, or for giveUp
	giveUp <-chan time.Time
	gaveUp bool // the handler stopped waiting for block
}

func newProgressLog() *progressLog { return &progressLog{first: make(chan struct{})} }

func (l *progressLog) options() *sdk.ClientOptions {
	return &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
		l.mu.Lock()
		l.notes = append(l.notes, *req.Params)
		l.mu.Unlock()
		if req.Params.Message != "" {
			l.once.Do(func() { close(l.first) })
		}
		if l.block != nil {
			select {
			case <-l.block:
			case <-l.giveUp:
				l.mu.Lock()
				l.gaveUp = true
				l.mu.Unlock()
			}
		}
	}}
}

func (l *progressLog) get() []sdk.ProgressNotificationParams {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]sdk.ProgressNotificationParams(nil), l.notes...)
}

// wait waits for c and reports whether it came within 5 s.
func wait(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	case <-time.After(5 * time.Second):
		return false
	}
}

func callWithToken(t *testing.T, cs *sdk.ClientSession, token any, args map[string]any) *sdk.CallToolResult {
	t.Helper()
	params := &sdk.CallToolParams{Name: RunTool, Arguments: args}
	if token != nil {
		params.SetProgressToken(token)
	}
	res, err := cs.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func marshal(t *testing.T, res *sdk.CallToolResult) string {
	t.Helper()
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// With a progress token the run is streamed and the client hears its
// output while it runs, before the result; the result is the one of an
// unstreamed run. Without one, the run is not streamed and nothing is
// notified.
func TestProgressNotifications(t *testing.T) {
	for _, sess := range []bool{false, true} {
		log := newProgressLog()
		var mu sync.Mutex
		streamed, plain, waited := 0, 0, true
		resp := api.ExecuteResponse{RunID: "r1", Status: api.StatusOK, ExitCode: new(0), Usage: api.Usage{DurationMs: 30}}
		sresp := func(r api.ExecuteResponse) api.SessionExecuteResponse {
			return api.SessionExecuteResponse{ExecuteResponse: r, ExecutionCount: 1, Session: api.SessionStatus{SessionID: "s-1", State: api.SessionIdle}}
		}
		f := handlerDaemon(t, func(w http.ResponseWriter, r *http.Request) {
			route := r.Method + " " + r.URL.Path
			switch route {
			case "GET /v1/info":
				w.Write([]byte(infoReply(false).body))
				return
			case "POST /v1/execute", "POST /v1/sessions/s-1/execute":
			default:
				http.NotFound(w, r)
				return
			}
			if r.Header.Get("Accept") != api.MediaNDJSON {
				mu.Lock()
				plain++
				mu.Unlock()
				full := resp
				full.Stdout, full.Stderr = "hello\n", "warn\n"
				var body any = full
				if sess {
					body = sresp(full)
				}
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(body)
				return
			}
			mu.Lock()
			streamed++
			mu.Unlock()
			s := newNDJSON(w)
			s.send(api.EventStart, api.EventStartData{RunID: "r1"})
			s.send(api.EventStdout, api.EventText{Text: "hello\n"})
			// The run goes on until the client has heard of it.
			if !wait(log.first) {
				mu.Lock()
				waited = false
				mu.Unlock()
			}
			s.send(api.EventStderr, api.EventText{Text: "warn\n"})
			var done any = resp
			if sess {
				done = sresp(resp)
			}
			s.send(api.EventDone, done)
		})
		_, cs := serverSession(t, f, Options{Version: "test", AllSessions: true}, log.options())
		args := map[string]any{"code": "print('hello')"}
		if sess {
			args["session_id"] = "s-1"
		}
		withToken := callWithToken(t, cs, "tok-1", args)
		notes := log.get()
		mu.Lock()
		if streamed != 1 || plain != 0 || !waited {
			t.Errorf("session %v: with a token: %d streamed and %d plain requests, notified during the run: %v", sess, streamed, plain, waited)
		}
		mu.Unlock()
		if len(notes) == 0 {
			t.Fatalf("session %v: no progress notification before the result", sess)
		}
		heard := false
		for _, n := range notes {
			heard = heard || strings.Contains(n.Message, "hello\n")
			if n.ProgressToken != "tok-1" || n.Progress <= 0 {
				t.Errorf("session %v: notification %+v", sess, n)
			}
		}
		if !heard {
			t.Errorf("session %v: no notification says hello: %+v", sess, notes)
		}
		for i := 1; i < len(notes); i++ {
			if notes[i].Progress <= notes[i-1].Progress {
				t.Errorf("session %v: progress %g after %g", sess, notes[i].Progress, notes[i-1].Progress)
			}
		}

		without := callWithToken(t, cs, nil, args)
		mu.Lock()
		if streamed != 1 || plain != 1 {
			t.Errorf("session %v: without a token: %d streamed and %d plain requests, want the plain one", sess, streamed, plain)
		}
		mu.Unlock()
		if got := len(log.get()); got != len(notes) {
			t.Errorf("session %v: %d notifications for a call without a token", sess, got-len(notes))
		}
		if a, b := marshal(t, withToken), marshal(t, without); a != b {
			t.Errorf("session %v: results differ:\nstreamed %s\n   plain %s", sess, a, b)
		}
		if !strings.Contains(resultText(withToken), "stdout:\nhello\n") || !strings.Contains(resultText(withToken), "stderr:\nwarn") {
			t.Errorf("session %v: result text:\n%s", sess, resultText(withToken))
		}
	}
}

// Output that comes faster than the interval is coalesced: few
// notifications, each with at most MaxProgressBytes of the latest output,
// valid UTF-8 though the cut falls inside a rune.
func TestProgressCoalesces(t *testing.T) {
	defer func(d time.Duration) { progressInterval = d }(progressInterval)
	progressInterval = 50 * time.Millisecond
	const chunks = 500
	chunk := strings.Repeat("é", 50) + "\n" // 101 bytes: 1024 falls inside a rune
	f := streamingDaemon(t, func(s *ndjson) {
		for range chunks {
			s.send(api.EventStdout, api.EventText{Text: chunk})
		}
		s.send(api.EventStderr, api.EventText{Text: "the end\n"})
		time.Sleep(4 * progressInterval)
		s.send(api.EventDone, api.ExecuteResponse{RunID: "r1", Status: api.StatusOK, ExitCode: new(0)})
	})
	log := newProgressLog()
	_, cs := sessionWith(t, f, log.options())
	start := time.Now()
	res := callWithToken(t, cs, 7, map[string]any{"code": "x"})
	elapsed := time.Since(start)
	notes := log.get()
	if max := int(elapsed/progressInterval) + 2; len(notes) == 0 || len(notes) > max {
		t.Errorf("%d notifications in %s, want 1 to %d", len(notes), elapsed, max)
	}
	for _, n := range notes {
		if len(n.Message) > MaxProgressBytes || !utf8.ValidString(n.Message) || strings.HasPrefix(n.Message, "\uFFFD") {
			t.Errorf("message of %d bytes, valid UTF-8 %v: %q", len(n.Message), utf8.ValidString(n.Message), n.Message[:min(len(n.Message), 20)])
		}
	}
	last := notes[len(notes)-1]
	if last.Progress != chunks+2 || !strings.HasSuffix(last.Message, "the end\n") {
		t.Errorf("last notification: progress %g, message %q", last.Progress, last.Message)
	}
	if out := res.StructuredContent.(map[string]any)["stdout"].(string); out != strings.Repeat(chunk, chunks) {
		t.Errorf("stdout of %d bytes, want all %d", len(out), chunks*len(chunk))
	}
}

// A client that does not read its notifications never holds up the run:
// the daemon's stream is read to its end while the client is stuck.
func TestProgressSlowClient(t *testing.T) {
	const chunks = 5000
	chunk := strings.Repeat("x", 200) + "\n" // 1 MB in all: more than socket buffers hold
	sentAll := make(chan struct{})
	f := streamingDaemon(t, func(s *ndjson) {
		for range chunks {
			s.send(api.EventStdout, api.EventText{Text: chunk})
		}
		s.send(api.EventDone, api.ExecuteResponse{RunID: "r1", Status: api.StatusOK, ExitCode: new(0)})
		close(sentAll)
	})
	log := newProgressLog()
	log.block, log.giveUp = sentAll, time.After(10*time.Second)
	_, cs := sessionWith(t, f, log.options())
	start := time.Now()
	res := callWithToken(t, cs, "slow", map[string]any{"code": "x"})
	elapsed := time.Since(start)
	log.mu.Lock()
	if log.gaveUp {
		t.Errorf("the stream was not read to its end while the client was stuck")
	}
	log.mu.Unlock()
	if out := res.StructuredContent.(map[string]any)["stdout"].(string); len(out) != chunks*len(chunk) {
		t.Errorf("stdout of %d bytes, want %d", len(out), chunks*len(chunk))
	}
	if n, max := len(log.get()), int(elapsed/progressInterval)+2; n == 0 || n > max {
		t.Errorf("%d notifications in %s, want 1 to %d", n, elapsed, max)
	}
}

// A run that fails after the stream began is the tool error an
// unstreamed one would be.
func TestProgressErrorEvent(t *testing.T) {
	const body = `{"error":{"type":"internal","message":"the jail vanished"}}`
	f := handlerDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/info":
			w.Write([]byte(infoReply(false).body))
		case r.Header.Get("Accept") == api.MediaNDJSON:
			s := newNDJSON(w)
			s.send(api.EventStart, api.EventStartData{RunID: "r1"})
			s.send(api.EventError, json.RawMessage(body))
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte(body))
		}
	})
	_, cs := sessionWith(t, f, newProgressLog().options())
	streamed := callWithToken(t, cs, "t", map[string]any{"code": "x"})
	plain := callWithToken(t, cs, nil, map[string]any{"code": "x"})
	if !streamed.IsError || !strings.Contains(resultText(streamed), "jaild did not run the code: ") || !strings.Contains(resultText(streamed), "the jail vanished") {
		t.Errorf("streamed: isError %v, %q", streamed.IsError, resultText(streamed))
	}
	if resultText(streamed) != resultText(plain) {
		t.Errorf("streamed %q, plain %q", resultText(streamed), resultText(plain))
	}
}

func TestProgressTail(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks []string
		n      int
		want   string
	}{
		{"fits", []string{"ab", "cd"}, 8, "abcd"},
		{"drops the oldest", []string{"abcdef", "gh"}, 4, "efgh"},
		{"one big chunk", []string{"ab", "0123456789"}, 4, "6789"},
		{"cut rune dropped", []string{"aé€"}, 4, "€"},            // é is 2 bytes, € 3
		{"cut rune across chunks", []string{"é", "€x"}, 5, "€x"}, // keeps \xa9€x
		{"whole runes kept", []string{"é€"}, 5, "é€"},
	} {
		var b []byte
		for _, c := range tc.chunks {
			b = appendTail(b, c, tc.n)
			if len(b) > tc.n {
				t.Errorf("%s: %d bytes kept, bound %d", tc.name, len(b), tc.n)
			}
		}
		if got := tailText(b); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := tailText([]byte("a\xffb")); got != "a\uFFFDb" {
		t.Errorf("invalid UTF-8: %q", got)
	}
}

// Over Streamable HTTP the notifications go on the call's own stream.
func TestProgressOverHTTP(t *testing.T) {
	log := newProgressLog()
	waited := make(chan bool, 1)
	f := streamingDaemon(t, func(s *ndjson) {
		s.send(api.EventStdout, api.EventText{Text: "over http\n"})
		waited <- wait(log.first)
		s.send(api.EventDone, api.ExecuteResponse{RunID: "r1", Status: api.StatusOK, ExitCode: new(0)})
	})
	s, _ := session(t, f)
	tok := testToken(t)
	srv := httptest.NewServer(s.Handler(tok))
	defer srv.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, log.options()).
		Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: srv.URL + Path, HTTPClient: bearerClient(tok)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res := callWithToken(t, cs, "h", map[string]any{"code": "x"})
	if !<-waited || res.IsError {
		t.Fatalf("no notification during the run; result %q", resultText(res))
	}
	if notes := log.get(); !strings.Contains(notes[len(notes)-1].Message, "over http\n") {
		t.Errorf("notifications %+v", notes)
	}
}
