package server

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
)

// memBudget bounds the bytes the daemon holds for requests in flight:
// their bodies while decoded, their runs' captured output, returned files
// and figures. A request reserves its body as the bytes arrive and its
// run's worst case before the run starts, and waits (within the queue
// wait) while the budget is taken; so the daemon's memory stays bounded
// whatever the runs do. One non-admin uid holds at most half of it, so
// that one caller cannot take it all from the others.
type memBudget struct {
	max int64

	mu      sync.Mutex
	used    int64
	perUID  map[uint32]int64 // what each non-admin uid holds
	changed chan struct{}    // closed and replaced at each release
}

func newMemBudget(max int64) *memBudget {
	return &memBudget{max: max, perUID: map[uint32]int64{}, changed: make(chan struct{})}
}

// share is the most one caller may hold.
func (b *memBudget) share(who peer.Caller) int64 {
	if who.Admin {
		return b.max
	}
	return b.max / 2
}

// inUse reports the bytes reserved now.
func (b *memBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// lease is one request's share of the budget; release returns it all.
type lease struct {
	b    *memBudget
	who  peer.Caller
	held int64
	run  int64 // of held, the run's worst case (reserveRun)
}

func (s *Server) newLease(who peer.Caller) *lease { return &lease{b: s.budget, who: who} }

// acquire reserves n more bytes for the request, waiting up to wait for
// room. It fails at once when the request would need more than the
// caller's share of the budget (what names what needs it).
func (l *lease) acquire(ctx context.Context, n int64, wait time.Duration, what string) error {
	b := l.b
	if share := b.share(l.who); l.held+n > share {
		return errdefs.New(errdefs.ErrTooLarge, "%s: the request needs up to %d MiB of the daemon's memory, more than a caller's share of its budget (%d MiB of memory_budget_mb %d MiB); send large inputs through the file store and return large outputs to it (return_files_as \"store\"), or lower limits.output_bytes",
			what, mib(l.held+n), mib(share), mib(b.max))
	}
	var deadline <-chan time.Time
	for {
		b.mu.Lock()
		fits := b.used+n <= b.max && (l.who.Admin || b.perUID[l.who.UID]+n <= b.max/2)
		if fits {
			b.used += n
			if !l.who.Admin {
				b.perUID[l.who.UID] += n
			}
			b.mu.Unlock()
			l.held += n
			return nil
		}
		ch := b.changed
		b.mu.Unlock()
		if deadline == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-ch:
		case <-deadline:
			return errdefs.New(errdefs.ErrBusy, "the daemon's memory for requests in flight (memory_budget_mb, %d MiB) is taken; %s needs up to %d MiB: retry later", mib(b.max), what, mib(n))
		case <-ctx.Done():
			return errdefs.New(errdefs.ErrUnavailable, "client went away while waiting for memory")
		}
	}
}

// release returns everything the request holds.
func (l *lease) release() {
	l.give(l.held)
	l.run = 0
}

// shrinkRun returns what the run reserved beyond keep, the bytes its
// response really holds: once a run has ended, its lease is its response,
// not its worst case, however long the client takes to read it.
func (l *lease) shrinkRun(keep int64) {
	if extra := l.run - max(keep, 0); extra > 0 {
		l.give(extra)
		l.run -= extra
	}
}

// give returns n of what the request holds.
func (l *lease) give(n int64) {
	if n <= 0 {
		return
	}
	b := l.b
	b.mu.Lock()
	b.used -= n
	if !l.who.Admin {
		if b.perUID[l.who.UID] -= n; b.perUID[l.who.UID] <= 0 {
			delete(b.perUID, l.who.UID)
		}
	}
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
	l.held -= n
}

// bodyFactor is what decoding a JSON body holds per byte of it: the
// decoder's buffer (grown by doubling: up to twice the body, and the
// smaller buffers it left), the strings decoded from it, and the files
// decoded from those. Measured: a 21 MiB body (16 MiB of base64 file)
// raised the daemon's peak RSS by 100 MiB.
const bodyFactor = 5

// budgetedBody reserves bodyFactor times each chunk of a body as it is
// read: a client that sends its headers and then stalls holds nothing.
type budgetedBody struct {
	r    io.Reader
	l    *lease
	ctx  context.Context
	wait time.Duration
}

func (b *budgetedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		if rerr := b.l.acquire(b.ctx, bodyFactor*int64(n), b.wait, "the request's body"); rerr != nil {
			return 0, rerr
		}
	}
	return n, err
}

func mib(n int64) int64 { return (n + 1<<20 - 1) >> 20 }
