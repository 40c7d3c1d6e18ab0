package server

import (
	"context"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
)

// memBudget bounds the bytes the daemon holds for requests in flight:
// their bodies while decoded, their runs' captured output, returned files
// and figures. A request reserves its worst case before it holds any of
// it, and waits (within the queue wait) while the budget is taken; so the
// daemon's memory stays bounded whatever the runs do.
type memBudget struct {
	max int64

	mu      sync.Mutex
	used    int64
	changed chan struct{} // closed and replaced at each release
}

func newMemBudget(max int64) *memBudget {
	return &memBudget{max: max, changed: make(chan struct{})}
}

// inUse reports the bytes reserved now.
func (b *memBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// acquire reserves n bytes, waiting up to wait for room. It fails at once
// when n is more than the whole budget (what needs it names why).
func (b *memBudget) acquire(ctx context.Context, n int64, wait time.Duration, what string) error {
	if n > b.max {
		return errdefs.New(errdefs.ErrTooLarge, "%s needs up to %d MiB of the daemon's memory, more than its budget of %d MiB (memory_budget_mb)", what, mib(n), mib(b.max))
	}
	var deadline <-chan time.Time
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
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

func (b *memBudget) release(n int64) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// lease is one request's share of the budget; release returns it all.
type lease struct {
	b    *memBudget
	held int64
}

func (l *lease) acquire(ctx context.Context, n int64, wait time.Duration, what string) error {
	if err := l.b.acquire(ctx, n, wait, what); err != nil {
		return err
	}
	l.held += n
	return nil
}

func (l *lease) release() {
	l.b.release(l.held)
	l.held = 0
}

func mib(n int64) int64 { return (n + 1<<20 - 1) >> 20 }
