package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
)

func TestMemBudget(t *testing.T) {
	b := newMemBudget(100)
	ctx := context.Background()
	a, c := &lease{b: b}, &lease{b: b}
	if err := a.acquire(ctx, 60, time.Second, "a"); err != nil {
		t.Fatal(err)
	}
	if err := a.acquire(ctx, 30, time.Second, "a"); err != nil || b.inUse() != 90 {
		t.Fatalf("%v, in use %d", err, b.inUse())
	}
	// More than the whole budget: refused at once, naming the bound.
	err := c.acquire(ctx, 101, time.Hour, "the run")
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), "memory_budget_mb") {
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
