package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
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

// Once a run ends its lease keeps only its response; what the body holds
// stays until the request ends.
func TestLeaseShrinkRun(t *testing.T) {
	b := newMemBudget(100)
	l := &lease{b: b, who: peer.Caller{UID: 1000}}
	if err := l.acquire(context.Background(), 10, time.Second, "the body"); err != nil {
		t.Fatal(err)
	}
	if err := l.acquire(context.Background(), 40, time.Second, "the run"); err != nil {
		t.Fatal(err)
	}
	l.run = 40
	l.shrinkRun(15)
	if b.inUse() != 25 || l.held != 25 || l.run != 15 {
		t.Fatalf("after shrinking to 15: in use %d, held %d, run %d", b.inUse(), l.held, l.run)
	}
	l.shrinkRun(30) // never grows
	if b.inUse() != 25 {
		t.Fatalf("a larger keep grew the lease: %d", b.inUse())
	}
	l.release()
	if b.inUse() != 0 || b.perUID[1000] != 0 {
		t.Fatalf("left %d", b.inUse())
	}
}

// A client that reads slower than the pace is dropped within timeout plus
// its bytes at rate; one that reads promptly gets everything.
func TestPaceWriter(t *testing.T) {
	p := pace{timeout: 300 * time.Millisecond, rate: 256 << 10}
	const size = 16 << 20
	errs := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pw := &paceWriter{w: w, rc: http.NewResponseController(w), pace: p}
		chunk := make([]byte, 32<<10)
		var err error
		for n := 0; n < size && err == nil; n += len(chunk) {
			_, err = pw.Write(chunk)
		}
		if err == nil {
			err = pw.flush()
		}
		errs <- err
	}))
	defer srv.Close()

	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err := <-errs; err != nil || n != size {
		t.Fatalf("a prompt reader: %d bytes, handler %v", n, err)
	}

	resp, err = http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	start := time.Now()
	buf := make([]byte, 4<<10)
	var got error
	for got == nil && time.Since(start) < 20*time.Second {
		select {
		case got = <-errs:
		case <-time.After(100 * time.Millisecond): // 40 KiB/s
			_, _ = resp.Body.Read(buf)
		}
	}
	// The client had at most a few socket buffers (well under 8 MiB: 32 s
	// at rate) when it was dropped.
	if took := time.Since(start); got == nil || took > 10*time.Second {
		t.Fatalf("a reader at 40 KiB/s: handler %v after %v, want a write error within a few seconds", got, took)
	}
}
