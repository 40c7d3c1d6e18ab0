package admission

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
)

func TestAdmitBusyWhenQueueFull(t *testing.T) {
	c := New(Config{MaxConcurrent: 1, QueueSize: 1, QueueWait: time.Hour})
	who := Caller{UID: 1000}
	rel, err := c.Admit(context.Background(), who)
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan error, 1)
	go func() {
		r, err := c.Admit(context.Background(), who)
		if err == nil {
			r()
		}
		queued <- err
	}()
	for {
		if _, q := c.Usage(); q == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_, err = c.Admit(context.Background(), who)
	var re *RetryError
	if !errors.Is(err, errdefs.ErrBusy) || !errors.As(err, &re) || re.After <= 0 {
		t.Fatalf("third request: %v, want busy with Retry-After", err)
	}
	rel()
	if err := <-queued; err != nil {
		t.Fatalf("queued request: %v, want admitted once the slot is free", err)
	}
	if running, q := c.Usage(); running != 0 || q != 0 {
		t.Errorf("usage after release: %d running %d queued", running, q)
	}
}

func TestAdmitQueueWaitExpires(t *testing.T) {
	c := New(Config{MaxConcurrent: 1, QueueSize: 5, QueueWait: 20 * time.Millisecond})
	rel, _ := c.Admit(context.Background(), Caller{UID: 1})
	defer rel()
	if _, err := c.Admit(context.Background(), Caller{UID: 1}); !errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("got %v, want busy after the queue wait", err)
	}
}

func TestRateLimitAndQuota(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := New(Config{MaxConcurrent: 10, RatePerMinute: 60, Burst: 2, DailyQuota: 3})
	c.now = func() time.Time { return now }
	user, root := Caller{UID: 1000}, Caller{UID: 0, Admin: true}
	admit := func(who Caller) error {
		rel, err := c.Admit(context.Background(), who)
		if err == nil {
			rel()
		}
		return err
	}
	for i := 0; i < 2; i++ {
		if err := admit(user); err != nil {
			t.Fatalf("burst request %d: %v", i, err)
		}
	}
	err := admit(user)
	var re *RetryError
	if !errors.Is(err, errdefs.ErrRateLimited) || !errors.As(err, &re) || re.After <= 0 || re.After > time.Second {
		t.Fatalf("over the rate: %v, want rate_limited retrying within a second", err)
	}
	now = now.Add(time.Second)
	if err := admit(user); err != nil {
		t.Fatalf("after a second: %v", err)
	}
	if got := c.QuotaRemaining(user); got != 0 {
		t.Errorf("quota remaining %d, want 0", got)
	}
	now = now.Add(time.Minute)
	if err := admit(user); !errors.Is(err, errdefs.ErrRateLimited) {
		t.Fatalf("over the daily quota: %v, want rate_limited", err)
	}
	for i := 0; i < 10; i++ {
		if err := admit(root); err != nil {
			t.Fatalf("admin request %d: %v (admins bypass rates and quotas)", i, err)
		}
	}
	if c.QuotaRemaining(root) != -1 {
		t.Error("admins have no quota")
	}
	now = now.Add(24 * time.Hour)
	if err := admit(user); err != nil {
		t.Fatalf("next day: %v, want the quota reset", err)
	}
}

func TestBusyRefundsQuota(t *testing.T) {
	c := New(Config{MaxConcurrent: 1, QueueSize: 0, DailyQuota: 5})
	rel, _ := c.Admit(context.Background(), Caller{UID: 7})
	defer rel()
	if _, err := c.Admit(context.Background(), Caller{UID: 7}); !errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("got %v, want busy", err)
	}
	if got := c.QuotaRemaining(Caller{UID: 7}); got != 4 {
		t.Errorf("quota remaining %d, want 4: a busy refusal must not use quota", got)
	}
}
