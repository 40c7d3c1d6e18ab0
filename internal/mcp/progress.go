package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
)

// MaxProgressBytes bounds the output one progress notification carries:
// the last bytes of stdout and stderr since the previous one.
const MaxProgressBytes = 1 << 10

// ProgressInterval is the least time between two progress notifications
// of a call: output that arrives meanwhile is coalesced.
const ProgressInterval = 250 * time.Millisecond

// progressInterval is ProgressInterval; tests shorten it.
var progressInterval = ProgressInterval

// progress reports a streamed run to the client that asked for it with a
// progress token: notifications/progress whose progress is the number of
// the run's events so far and whose message is the recent output. The run
// never waits for the client: events are folded into a bounded tail under
// a lock, and one goroutine sends at most one notification per
// progressInterval, so a slow client gets fewer notifications, not a
// backlog.
type progress struct {
	ss    *sdk.ServerSession
	token any
	wake  chan struct{} // cap 1: new events since the sender last looked
	stop  chan struct{}
	done  chan struct{} // the sender returned

	mu     sync.Mutex
	events int64  // events folded in so far
	out    []byte // the tail of the output since the last notification
}

// startProgress starts reporting the call req, or returns nil when its
// client gave no progress token. Events go to event; finish ends it.
func startProgress(ctx context.Context, req *sdk.CallToolRequest) *progress {
	if req == nil || req.Session == nil || req.Params == nil {
		return nil
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil
	}
	p := &progress{
		ss: req.Session, token: token,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		out: make([]byte, 0, MaxProgressBytes),
	}
	go p.send(ctx)
	return p
}

// event folds one event of the stream into the next notification. It
// never blocks on the client, and never fails the run.
func (p *progress) event(ev api.Event) error {
	if ev.Event == api.EventDone || ev.Event == api.EventError {
		// The result follows at once.
		return nil
	}
	var text api.EventText
	if ev.Event == api.EventStdout || ev.Event == api.EventStderr {
		// Malformed data costs the message, not the run: the final
		// response is the client's to check.
		_ = json.Unmarshal(ev.Data, &text)
	}
	p.mu.Lock()
	p.events++
	p.out = appendTail(p.out, text.Text, MaxProgressBytes)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

// finish stops the notifications and waits for one being sent, so that
// none follows the call's result.
func (p *progress) finish() {
	close(p.stop)
	<-p.done
}

func (p *progress) send(ctx context.Context) {
	defer close(p.done)
	var last time.Time
	var sent int64
	for {
		select {
		case <-p.wake:
		case <-p.stop:
			return
		}
		if wait := time.Until(last.Add(progressInterval)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-p.stop:
				t.Stop()
				return
			}
		}
		select {
		case <-p.stop:
			return
		default:
		}
		p.mu.Lock()
		n, msg := p.events, tailText(p.out)
		p.out = p.out[:0]
		p.mu.Unlock()
		if n == sent {
			continue
		}
		sent = n
		err := p.ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: p.token, Progress: float64(n), Message: msg})
		if err != nil {
			// The connection is gone or the call cancelled: the run ends
			// through ctx, and nobody is listening.
			return
		}
		last = time.Now()
	}
}

// appendTail appends s to b and keeps the last n bytes, without growing b
// past n.
func appendTail(b []byte, s string, n int) []byte {
	if len(s) > n {
		s = s[len(s)-n:]
	}
	if over := len(b) + len(s) - n; over > 0 {
		b = b[:copy(b, b[over:])]
	}
	return append(b, s...)
}

// tailText is a tail of output as valid UTF-8: a rune cut at the front is
// dropped whole.
func tailText(b []byte) string {
	i := 0
	for i < len(b) && i < utf8.UTFMax-1 && !utf8.RuneStart(b[i]) {
		i++
	}
	return strings.ToValidUTF8(string(b[i:]), "\uFFFD")
}
