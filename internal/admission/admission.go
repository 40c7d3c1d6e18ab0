// Package admission decides whether a request may run now: a global bound
// on concurrent runs with a bounded, deadline-limited queue, and per-caller
// (per-uid) rate limits and daily quotas that admins bypass.
package admission

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
)

// Config configures a Controller.
type Config struct {
	MaxConcurrent int           // runs at once, at least 1
	QueueSize     int           // requests that may wait for a slot
	QueueWait     time.Duration // how long one may wait
	RatePerMinute float64       // per uid; 0: unlimited
	Burst         int           // bucket size for RatePerMinute
	DailyQuota    int64         // per uid per UTC day; 0: unlimited
}

// Caller is who asks (see peer.Caller).
type Caller = peer.Caller

// Limits are a caller's rate limit and daily quota (see peer.Limits).
type Limits = peer.Limits

// RetryError is a refusal that tells the caller when to try again. It
// unwraps to errdefs.ErrRateLimited or errdefs.ErrBusy.
type RetryError struct {
	Class error
	Msg   string
	After time.Duration
}

func (e *RetryError) Error() string { return e.Msg }

// Unwrap returns the error class.
func (e *RetryError) Unwrap() error { return e.Class }

// Controller is safe for concurrent use.
type Controller struct {
	cfg   Config
	slots chan struct{}
	now   func() time.Time

	mu      sync.Mutex
	queued  int
	callers map[uint32]*callerState
	day     string
}

type callerState struct {
	tokens float64
	last   time.Time
	used   int64 // runs admitted today
}

// New returns a Controller.
func New(cfg Config) *Controller {
	cfg.MaxConcurrent = max(cfg.MaxConcurrent, 1)
	return &Controller{cfg: cfg, slots: make(chan struct{}, cfg.MaxConcurrent), now: time.Now, callers: map[uint32]*callerState{}}
}

// Admit charges the caller's rate limit and quota, then waits for a run
// slot. On success the caller must call release exactly once when the run
// is over. Errors: a *RetryError of class errdefs.ErrRateLimited (rate or
// quota) or errdefs.ErrBusy (queue full or wait expired), or ctx's error.
func (c *Controller) Admit(ctx context.Context, who Caller) (release func(), err error) {
	if !who.Admin {
		if err := c.charge(who); err != nil {
			return nil, err
		}
	}
	release = func() { <-c.slots }
	select {
	case c.slots <- struct{}{}:
		return release, nil
	default:
	}
	c.mu.Lock()
	if c.queued >= c.cfg.QueueSize {
		c.mu.Unlock()
		c.refund(who)
		return nil, &RetryError{Class: errdefs.ErrBusy, After: time.Second,
			Msg: fmt.Sprintf("server busy: %d runs in progress and %d queued (the queue limit); retry later", c.cfg.MaxConcurrent, c.cfg.QueueSize)}
	}
	c.queued++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.queued--
		c.mu.Unlock()
	}()
	timer := time.NewTimer(c.cfg.QueueWait)
	defer timer.Stop()
	select {
	case c.slots <- struct{}{}:
		return release, nil
	case <-timer.C:
		c.refund(who)
		return nil, &RetryError{Class: errdefs.ErrBusy, After: time.Second,
			Msg: fmt.Sprintf("server busy: no run slot became free within %v; retry later", c.cfg.QueueWait)}
	case <-ctx.Done():
		c.refund(who)
		return nil, ctx.Err()
	}
}

// Usage returns how many runs are in progress and queued.
func (c *Controller) Usage() (running, queued int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.slots), c.queued
}

// QuotaRemaining returns what is left of uid's daily quota, or -1 when
// the caller has none (unlimited, or an admin).
func (c *Controller) QuotaRemaining(who Caller) int64 {
	l := c.limits(who)
	if who.Admin || l.DailyQuota == 0 {
		return -1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rollDay()
	if st := c.callers[who.UID]; st != nil {
		return max(0, l.DailyQuota-st.used)
	}
	return l.DailyQuota
}

// limits are who's rate and quota: its own, or the configured ones.
func (c *Controller) limits(who Caller) Limits {
	if who.Limits != nil {
		return *who.Limits
	}
	return Limits{RatePerMinute: c.cfg.RatePerMinute, Burst: c.cfg.Burst, DailyQuota: c.cfg.DailyQuota}
}

func (c *Controller) rollDay() {
	if d := c.now().UTC().Format(time.DateOnly); d != c.day {
		c.day = d
		for _, st := range c.callers {
			st.used = 0
		}
	}
}

func (c *Controller) charge(who Caller) error {
	l := c.limits(who)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rollDay()
	now := c.now()
	st := c.callers[who.UID]
	if st == nil {
		st = &callerState{tokens: float64(l.Burst), last: now}
		c.callers[who.UID] = st
	}
	if l.DailyQuota > 0 && st.used >= l.DailyQuota {
		y, m, d := now.UTC().Date()
		reset := time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC).Sub(now)
		return &RetryError{Class: errdefs.ErrRateLimited, After: reset,
			Msg: fmt.Sprintf("daily quota of %d runs used up for %s; it resets at 00:00 UTC", l.DailyQuota, who.Who())}
	}
	if l.RatePerMinute > 0 {
		perSec := l.RatePerMinute / 60
		st.tokens = min(float64(l.Burst), st.tokens+now.Sub(st.last).Seconds()*perSec)
		st.last = now
		if st.tokens < 1 {
			wait := time.Duration((1 - st.tokens) / perSec * float64(time.Second))
			return &RetryError{Class: errdefs.ErrRateLimited, After: wait,
				Msg: fmt.Sprintf("rate limit of %g runs per minute (burst %d) exceeded for %s", l.RatePerMinute, l.Burst, who.Who())}
		}
		st.tokens--
	}
	st.used++
	return nil
}

// refund returns a charge for a run that was admitted by the rate limiter
// but then refused for capacity, so busy refusals do not eat quota.
func (c *Controller) refund(who Caller) {
	if who.Admin {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if st := c.callers[who.UID]; st != nil {
		st.used = max(0, st.used-1)
		if l := c.limits(who); l.RatePerMinute > 0 {
			st.tokens = min(float64(l.Burst), st.tokens+1)
		}
	}
}
