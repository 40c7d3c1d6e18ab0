package pool

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type item struct {
	key       Key
	dead      atomic.Bool
	destroyed atomic.Int32
}

func (it *item) Dead() bool { return it.dead.Load() }
func (it *item) Destroy()   { it.destroyed.Add(1) }

type factory struct {
	mu    sync.Mutex
	made  []*item
	fail  atomic.Bool
	block chan struct{} // when set, creation waits for it or stop
}

func (f *factory) create(key Key, stop <-chan struct{}) (Item, error) {
	if f.block != nil {
		select {
		case <-f.block:
		case <-stop:
			return nil, errors.New("stopped")
		}
	}
	if f.fail.Load() {
		return nil, errors.New("no")
	}
	it := &item{key: key}
	f.mu.Lock()
	f.made = append(f.made, it)
	f.mu.Unlock()
	return it, nil
}

var (
	a = Key{Image: "sha256:1", Kind: "plain"}
	b = Key{Image: "sha256:1", Kind: "preloaded"}
	c = Key{Image: "sha256:2", Kind: "plain"} // a second image is a key
)

func waitFull(t *testing.T, p *Pool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		st := p.Stats()
		full := true
		for k, n := range st.Size {
			full = full && st.Ready[k] == n
		}
		if full {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never full: %+v", st)
		}
	}
}

func TestPoolFillsTakesAndRefills(t *testing.T) {
	f := &factory{}
	p := New(Config{Sizes: []Size{{a, 2}, {b, 1}, {c, 1}}, MinAvailableBytes: 1}, f.create)
	defer p.Close()
	waitFull(t, p)
	if it, key, ok := p.Take(b, a); !ok || key != b || it.(*item).key != b {
		t.Fatalf("Take(b, a) = %v %v %v", it, key, ok)
	}
	if _, key, ok := p.Take(b, c); !ok || key != c {
		t.Fatalf("Take(b, c) with b empty = %v %v; want c", key, ok)
	}
	if _, _, ok := p.Take(Key{Image: "sha256:3", Kind: "plain"}); ok {
		t.Fatal("took an item of a key the pool does not keep")
	}
	p.Kick()
	waitFull(t, p)
	if n := len(f.made); n != 6 {
		t.Errorf("made %d items, want 4 then 2 refills", n)
	}
}

func TestPoolDropsDeadItems(t *testing.T) {
	f := &factory{}
	p := New(Config{Sizes: []Size{{a, 1}}, MinAvailableBytes: 1}, f.create)
	waitFull(t, p)
	f.mu.Lock()
	first := f.made[0]
	f.mu.Unlock()
	first.dead.Store(true)
	it, _, ok := p.Take(a)
	for !ok { // the refill of the dead one
		time.Sleep(time.Millisecond)
		it, _, ok = p.Take(a)
	}
	if it == Item(first) {
		t.Fatal("a dead item was handed out")
	}
	p.Close()
	if first.destroyed.Load() != 1 {
		t.Errorf("the dead item was destroyed %d times", first.destroyed.Load())
	}
}

func TestPoolCloseDestroysIdleAndStopsCreating(t *testing.T) {
	f := &factory{}
	p := New(Config{Sizes: []Size{{a, 3}}, MinAvailableBytes: 1}, f.create)
	waitFull(t, p)
	p.Close()
	for _, it := range f.made {
		if it.destroyed.Load() != 1 {
			t.Errorf("idle item destroyed %d times", it.destroyed.Load())
		}
	}
	// A creation in progress ends with the stop.
	f2 := &factory{block: make(chan struct{})}
	p2 := New(Config{Sizes: []Size{{a, 1}}, MinAvailableBytes: 1}, f2.create)
	done := make(chan struct{})
	go func() { p2.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited for a blocked creation")
	}
}

func TestPoolUnderPressurePauses(t *testing.T) {
	f := &factory{}
	p := New(Config{Sizes: []Size{{a, 1}}, MinAvailableBytes: 1 << 62}, f.create)
	defer p.Close()
	for deadline := time.Now().Add(10 * time.Second); !p.Stats().Paused; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("never paused with 4 EiB asked to stay free")
		}
	}
	if len(f.made) != 0 {
		t.Errorf("created %d items under pressure", len(f.made))
	}
}

func TestNilAndEmptyPool(t *testing.T) {
	var p *Pool
	if _, _, ok := p.Take(a); ok || p.Size(a) != 0 {
		t.Error("a nil pool has items")
	}
	p.Kick()
	p.Close()
	e := New(Config{}, (&factory{}).create)
	if _, _, ok := e.Take(a); ok {
		t.Error("an empty pool has items")
	}
	e.Close()
}

// TestRefillsTimed: every creation is counted once in its key's refill
// histogram, failures apart; the buckets are cumulative.
func TestRefillsTimed(t *testing.T) {
	f := &factory{block: make(chan struct{})}
	p := New(Config{Sizes: []Size{{a, 2}, {b, 1}}, MinAvailableBytes: 1}, f.create)
	defer p.Close()
	time.Sleep(30 * time.Millisecond) // the first creation waits ≥ 30 ms
	close(f.block)
	waitFull(t, p)
	st := p.Stats()
	ra, rb := st.Refills[a], st.Refills[b]
	if ra.Count != 2 || rb.Count != 1 || ra.Failed != 0 {
		t.Fatalf("refills a %+v b %+v; want 2 and 1 made", ra, rb)
	}
	if ra.Sum+rb.Sum < 0.03 {
		t.Errorf("sum %g s, want ≥ 0.03 s (one creation waited 30 ms)", ra.Sum+rb.Sum)
	}
	for _, r := range []Refills{ra, rb} {
		if len(r.Buckets) != len(RefillBuckets) || r.Buckets[len(r.Buckets)-1] != r.Count {
			t.Errorf("buckets %v for %d items", r.Buckets, r.Count)
		}
		for i := 1; i < len(r.Buckets); i++ {
			if r.Buckets[i] < r.Buckets[i-1] {
				t.Errorf("buckets %v not cumulative", r.Buckets)
			}
		}
	}
	f.fail.Store(true)
	p.Take(a)
	p.Kick()
	for deadline := time.Now().Add(10 * time.Second); p.Stats().Refills[a].Failed == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a failed creation was not counted")
		}
	}
	if got := p.Stats().Refills[a].Count; got != 2 {
		t.Errorf("count %d after a failure, want 2", got)
	}
}

// TestFailingKeyBacksOff: a key whose creations fail waits longer after
// each failure, and the other keys refill meanwhile.
func TestFailingKeyBacksOff(t *testing.T) {
	var attempts atomic.Int32
	ok := &factory{}
	create := func(key Key, stop <-chan struct{}) (Item, error) {
		if key == b {
			attempts.Add(1)
			return nil, errors.New("cannot preload")
		}
		return ok.create(key, stop)
	}
	// b first in the order and always the furthest below its size.
	p := New(Config{Sizes: []Size{{b, 1}, {a, 2}}, MinAvailableBytes: 1}, create)
	defer p.Close()
	for deadline := time.Now().Add(10 * time.Second); p.Stats().Ready[a] != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a never filled while b failed: %+v", p.Stats())
		}
	}
	// Taking from a kicks the loop each time; b is not retried before its
	// backoff (2 s after the first failure).
	for range 20 {
		p.Take(a)
		p.Kick()
		time.Sleep(10 * time.Millisecond)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("b tried %d times within its first backoff, want 1", n)
	}
	if got := p.Stats().Refills[b].Failed; got != 1 {
		t.Errorf("b's failures %d, want 1", got)
	}
	for i, want := range []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute} {
		if got := backoff(i + 1); got != want {
			t.Errorf("backoff(%d) = %v, want %v", i+1, got, want)
		}
	}
}
