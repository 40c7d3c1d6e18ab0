package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/admission"
	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/run"
	"github.com/jaild/jaild/internal/server/servertest"
	"github.com/jaild/jaild/internal/server/servertest/raw"
)

// result is what one jailctl command did.
type result struct {
	code           int
	stdout, stderr string
}

// jailctl runs the command in-process against sock ("" gives no
// --socket).
func jailctl(t *testing.T, sock, stdin string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	if sock != "" {
		args = append([]string{"--socket", sock}, args...)
	}
	code := Main(context.Background(), args, strings.NewReader(stdin), &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// newDaemon serves the daemon's API in process: servertest, the real
// handlers over a fake engine, to the caller uid 1000. tune changes the
// configuration first.
func newDaemon(t *testing.T, tune ...func(*config.Config)) *servertest.Harness {
	t.Helper()
	cfg := config.Default()
	for _, f := range tune {
		f(&cfg)
	}
	return servertest.New(t, cfg, admission.Caller{UID: 1000})
}

// audited returns the operations the daemon audited, in order: what
// reached it (execute, file_upload, session_create, ...).
func audited(h *servertest.Harness) string {
	var ops []string
	for _, line := range strings.Split(h.Log(), "\n") {
		var l struct{ Msg, Op string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "audit" {
			ops = append(ops, l.Op)
		}
	}
	return strings.Join(ops, " ")
}

// lastRun is the last request the fake engine ran.
func lastRun(t *testing.T, h *servertest.Harness) *run.Request {
	t.Helper()
	reqs := h.Engine.Requests()
	if len(reqs) == 0 {
		t.Fatal("no run reached the engine")
	}
	return reqs[len(reqs)-1]
}

// newSession creates a session on h and returns its ID.
func newSession(t *testing.T, h *servertest.Harness) string {
	t.Helper()
	s, err := h.Client.CreateSession(context.Background(), &api.SessionCreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return s.SessionID
}

// misbehaving serves h on a Unix socket and returns its path: the one
// stand-in for a daemon that servertest cannot be (error answers given
// by hand, malformed or cut-short bodies, a newer daemon's fields, an
// answer on a test's cue).
func misbehaving(t *testing.T, h http.Handler) string { return raw.Serve(t, h) }

// canned answers with status and body, and Retry-After when retry is set.
func canned(status int, retry, body string) http.HandlerFunc {
	var h map[string]string
	if retry != "" {
		h = map[string]string{"Retry-After": retry}
	}
	return raw.JSON(status, h, body)
}

func intp(n int) *int       { return &n }
func strp(s string) *string { return &s }

// fakeSignals makes notifySignals hand out a channel the test sends to.
func fakeSignals(t *testing.T) chan<- os.Signal {
	t.Helper()
	ch := make(chan os.Signal, 4)
	old := notifySignals
	notifySignals = func(c chan<- os.Signal) func() {
		done := make(chan struct{})
		go func() {
			for {
				select {
				case s := <-ch:
					c <- s
				case <-done:
					return
				}
			}
		}()
		return func() { close(done) }
	}
	t.Cleanup(func() { notifySignals = old })
	return ch
}
