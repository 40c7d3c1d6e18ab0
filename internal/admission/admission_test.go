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

// A caller with Limits of its own (a TLS client) is held to them, not to
// the configured ones, and messages name it as a client.
func TestCallerLimits(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	c := New(Config{MaxConcurrent: 10, RatePerMinute: 60, Burst: 2, DailyQuota: 3})
	c.now = func() time.Time { return now }
	admit := func(who Caller) error {
		rel, err := c.Admit(context.Background(), who)
		if err == nil {
			rel()
		}
		return err
	}
	local := Caller{UID: 1000}
	generous := Caller{UID: 1<<31 | 2, PID: -1, Client: "agent-a", Limits: &Limits{DailyQuota: 5}} // no rate limit
	slow := Caller{UID: 1<<31 | 4, PID: -1, Client: "slow", Limits: &Limits{RatePerMinute: 1, Burst: 1}}

	for i := range 5 {
		if err := admit(generous); err != nil {
			t.Fatalf("agent-a run %d in the same instant (no rate of its own, quota 5): %v", i, err)
		}
	}
	if got := c.QuotaRemaining(generous); got != 0 {
		t.Errorf("agent-a's quota remaining %d, want 0", got)
	}
	err := admit(generous)
	var re *RetryError
	if !errors.Is(err, errdefs.ErrRateLimited) || !errors.As(err, &re) || re.After <= 0 ||
		err.Error() != `daily quota of 5 runs used up for client "agent-a"; it resets at 00:00 UTC` {
		t.Errorf("agent-a past its quota: %v", err)
	}

	// The local caller still has the configured burst and quota: agent-a's
	// runs were not charged to it.
	if got := c.QuotaRemaining(local); got != 3 {
		t.Errorf("local caller's quota remaining %d, want the configured 3", got)
	}
	for i := range 2 {
		if err := admit(local); err != nil {
			t.Fatalf("local run %d: %v", i, err)
		}
	}
	if err := admit(local); !errors.Is(err, errdefs.ErrRateLimited) || err.Error() != "rate limit of 60 runs per minute (burst 2) exceeded for uid 1000" {
		t.Errorf("local caller past the configured burst: %v", err)
	}

	if got := c.QuotaRemaining(slow); got != -1 {
		t.Errorf("slow's quota remaining %d, want -1 (its own quota is unlimited)", got)
	}
	if err := admit(slow); err != nil {
		t.Fatalf("slow's first run: %v", err)
	}
	err = admit(slow)
	if !errors.Is(err, errdefs.ErrRateLimited) || !errors.As(err, &re) || re.After <= 30*time.Second ||
		err.Error() != `rate limit of 1 runs per minute (burst 1) exceeded for client "slow"` {
		t.Errorf("slow's second run in the same instant: %v (retry after %v), want its own rate of 1 a minute", err, re.After)
	}
	now = now.Add(time.Minute)
	if err := admit(slow); err != nil {
		t.Errorf("slow a minute later: %v", err)
	}
}

// A busy refusal gives the caller back the token of its own rate.
func TestBusyRefundsOwnRate(t *testing.T) {
	c := New(Config{MaxConcurrent: 1, QueueSize: 0}) // no configured rate
	c.now = func() time.Time { return time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC) }
	rel, err := c.Admit(context.Background(), Caller{UID: 0, Admin: true})
	if err != nil {
		t.Fatal(err)
	}
	who := Caller{UID: 1<<31 | 8, PID: -1, Client: "one", Limits: &Limits{RatePerMinute: 1, Burst: 1}}
	if _, err := c.Admit(context.Background(), who); !errors.Is(err, errdefs.ErrBusy) {
		t.Fatalf("with the slot taken: %v, want busy", err)
	}
	rel()
	r, err := c.Admit(context.Background(), who)
	if err != nil {
		t.Fatalf("once the slot is free: %v; the busy refusal kept the caller's only token", err)
	}
	r()
}

func TestCallerWho(t *testing.T) {
	for _, tc := range []struct {
		c    Caller
		want string
	}{
		{Caller{UID: 1000, PID: 42}, "uid 1000"},
		{Caller{UID: 0, Admin: true}, "uid 0"},
		{Caller{UID: 1<<31 | 6, PID: -1, Client: "agent-a"}, `client "agent-a"`},
		{Caller{UID: 1<<31 | 6, PID: -1, Client: `a"b`}, `client "a\"b"`},
	} {
		if got := tc.c.Who(); got != tc.want {
			t.Errorf("%+v: Who() = %s, want %s", tc.c, got, tc.want)
		}
	}
}
