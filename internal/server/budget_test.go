package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
)

func TestMemBudget(t *testing.T) {
	b := newMemBudget(100)
	ctx := context.Background()
	admin := peer.Caller{UID: 0, Admin: true}
	a, c := &lease{b: b, who: admin}, &lease{b: b, who: admin}
	if err := a.acquire(ctx, 60, time.Second, "a"); err != nil {
		t.Fatal(err)
	}
	if err := a.acquire(ctx, 30, time.Second, "a"); err != nil || b.inUse() != 90 {
		t.Fatalf("%v, in use %d", err, b.inUse())
	}
	// More than the whole budget (what the request holds counts): refused
	// at once, naming the bound.
	if err := a.acquire(ctx, 11, time.Hour, "the run"); !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "memory_budget_mb") {
		t.Fatalf("too big: %v", err)
	}
	// No room within the wait: busy.
	start := time.Now()
	if err := c.acquire(ctx, 20, 50*time.Millisecond, "the run"); !errors.Is(err, errdefs.ErrBusy) || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("no room: %v after %v", err, time.Since(start))
	}
	// Room made while waiting: granted.
	got := make(chan error)
	go func() { got <- c.acquire(ctx, 20, time.Minute, "the run") }()
	time.Sleep(20 * time.Millisecond)
	a.release()
	if err := <-got; err != nil || b.inUse() != 20 {
		t.Fatalf("after release: %v, in use %d", err, b.inUse())
	}
	// A caller that goes away stops waiting.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.acquire(cctx, 90, time.Minute, "x"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("cancelled: %v", err)
	}
	c.release()
	if b.inUse() != 0 || a.held != 0 || c.held != 0 {
		t.Fatalf("left %d", b.inUse())
	}
}

// One non-admin uid holds at most half the budget, whatever its number of
// requests; another uid still gets its share.
func TestMemBudgetShare(t *testing.T) {
	b := newMemBudget(100)
	ctx := context.Background()
	u1, u1b, u2 := &lease{b: b, who: peer.Caller{UID: 1000}}, &lease{b: b, who: peer.Caller{UID: 1000}}, &lease{b: b, who: peer.Caller{UID: 1001}}
	if err := u1.acquire(ctx, 51, time.Second, "x"); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("over a share: %v", err)
	}
	if err := u1.acquire(ctx, 40, time.Second, "x"); err != nil {
		t.Fatal(err)
	}
	if err := u1b.acquire(ctx, 20, 30*time.Millisecond, "x"); !errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("the same uid past its share: %v", err)
	}
	if err := u2.acquire(ctx, 50, time.Second, "x"); err != nil {
		t.Fatalf("another uid: %v", err)
	}
	u1.release()
	u2.release()
	if b.inUse() != 0 || len(b.perUID) != 0 {
		t.Fatalf("left %d %v", b.inUse(), b.perUID)
	}
}
