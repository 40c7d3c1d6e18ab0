package pool

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// eventually waits up to 10 s for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

// of returns the items f made of key, oldest first.
func (f *factory) of(key Key) []*item {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*item
	for _, it := range f.made {
		if it.key == key {
			out = append(out, it)
		}
	}
	return out
}

func destroyed(items []*item) (n int) {
	for _, it := range items {
		if it.destroyed.Load() > 0 {
			n++
		}
	}
	return n
}

// gate makes creations of a key wait until it is opened: a creation
// under way, as long as the test wants.
type gate struct {
	f       factory
	mu      sync.Mutex
	shut    map[Key]chan struct{}
	started chan Key // a creation that waits at the gate
}

func newGate() *gate { return &gate{shut: map[Key]chan struct{}{}, started: make(chan Key, 16)} }

func (g *gate) close(key Key) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := make(chan struct{})
	g.shut[key] = ch
	return ch
}

func (g *gate) create(key Key, stop <-chan struct{}) (Item, error) {
	g.mu.Lock()
	ch := g.shut[key]
	g.mu.Unlock()
	if ch != nil {
		g.started <- key
		select {
		case <-ch:
		case <-stop:
			return nil, errors.New("stopped")
		}
	}
	return g.f.create(key, stop)
}

// TestSetSizes: a key shrunk loses its extra idle items, a key removed
// all of its idle items (never taken again, never made again), and a new
// key fills.
func TestSetSizes(t *testing.T) {
	f := &factory{}
	p := New(Config{Sizes: []Size{{a, 3}, {c, 2}}, MinAvailableBytes: 1}, f.create)
	defer p.Close()
	waitFull(t, p)
	p.SetSizes([]Size{{a, 1}, {b, 2}})
	waitFull(t, p)
	eventually(t, "the extra and removed items destroyed", func() bool {
		return destroyed(f.of(a)) == 2 && destroyed(f.of(c)) == 2
	})
	st := p.Stats()
	if st.Size[a] != 1 || st.Ready[a] != 1 || st.Size[b] != 2 || st.Ready[b] != 2 || p.Size(c) != 0 {
		t.Fatalf("stats %+v, want a 1/1, b 2/2 and no c", st)
	}
	if _, ok := st.Size[c]; ok {
		t.Errorf("a removed key is still listed: %+v", st)
	}
	if _, _, ok := p.Take(c); ok {
		t.Error("took an item of a removed key")
	}
	it, _, ok := p.Take(a)
	if !ok || it.(*item).destroyed.Load() != 0 {
		t.Fatalf("Take(a) = %v %v, want the item kept", it, ok)
	}
	if _, _, ok := p.Take(a); ok {
		t.Error("took a second item of a key shrunk to 1")
	}
	p.Kick()
	waitFull(t, p)
	time.Sleep(50 * time.Millisecond) // time for a wrong refill of c
	if n := len(f.of(c)); n != 2 {
		t.Errorf("made %d items of the removed key, want its first 2", n)
	}
	for _, it := range append(f.of(a), f.of(c)...) {
		if n := it.destroyed.Load(); n > 1 {
			t.Errorf("an item destroyed %d times", n)
		}
	}
	// Back to the start: the removed key fills again.
	p.SetSizes([]Size{{a, 3}, {c, 2}})
	waitFull(t, p)
	if st := p.Stats(); st.Ready[c] != 2 || st.Ready[b] != 0 {
		t.Errorf("stats %+v after restoring the sizes", st)
	}
}

// TestSetSizesDuringCreation: an item whose creation was under way when
// its key was removed, or shrunk to what is ready, is destroyed when it
// is made, not kept; the other keys go on filling.
func TestSetSizesDuringCreation(t *testing.T) {
	t.Run("removed", func(t *testing.T) {
		g := newGate()
		open := g.close(a)
		p := New(Config{Sizes: []Size{{a, 1}}, MinAvailableBytes: 1}, g.create)
		defer p.Close()
		<-g.started
		p.SetSizes([]Size{{c, 1}})
		close(open)
		eventually(t, "the item made for the removed key destroyed", func() bool {
			return len(g.f.of(a)) == 1 && destroyed(g.f.of(a)) == 1
		})
		waitFull(t, p)
		if st := p.Stats(); st.Ready[a] != 0 || st.Ready[c] != 1 {
			t.Errorf("stats %+v, want c's item only", st)
		}
		if _, _, ok := p.Take(a); ok {
			t.Error("took the item made for a removed key")
		}
	})
	t.Run("shrunk", func(t *testing.T) {
		g := newGate()
		p := New(Config{Sizes: []Size{{a, 2}}, MinAvailableBytes: 1}, g.create)
		defer p.Close()
		waitFull(t, p)
		open := g.close(a)
		taken, _, ok := p.Take(a)
		if !ok {
			t.Fatal("nothing to take")
		}
		p.Kick()
		<-g.started // the refill of the one taken
		p.SetSizes([]Size{{a, 1}})
		close(open)
		eventually(t, "the item made beyond the new size destroyed", func() bool {
			return len(g.f.of(a)) == 3 && g.f.of(a)[2].destroyed.Load() == 1
		})
		if st := p.Stats(); st.Ready[a] != 1 {
			t.Errorf("stats %+v, want 1 ready", st)
		}
		for i, it := range g.f.of(a)[:2] {
			if it == taken.(*item) {
				continue
			}
			if it.destroyed.Load() != 0 {
				t.Errorf("item %d, ready, was destroyed", i)
			}
		}
	})
}

// TestKindRefillsSurviveRemoval: the refills of a removed key leave
// Stats.Refills (which lists the keys kept now) but stay counted in
// KindRefills, which only grows.
func TestKindRefillsSurviveRemoval(t *testing.T) {
	f := &factory{}
	p := New(Config{Sizes: []Size{{a, 2}, {b, 1}}, MinAvailableBytes: 1}, f.create)
	defer p.Close()
	waitFull(t, p)
	st := p.Stats()
	if st.KindRefills["plain"].Count != 2 || st.KindRefills["preloaded"].Count != 1 {
		t.Fatalf("kind refills %+v, want plain 2 and preloaded 1", st.KindRefills)
	}
	p.SetSizes([]Size{{c, 1}})
	waitFull(t, p)
	st = p.Stats()
	if _, ok := st.Refills[a]; ok {
		t.Errorf("refills %+v list a removed key", st.Refills)
	}
	if st.Refills[c].Count != 1 {
		t.Errorf("refills of c %+v, want 1", st.Refills[c])
	}
	plain, pre := st.KindRefills["plain"], st.KindRefills["preloaded"]
	if plain.Count != 3 || pre.Count != 1 {
		t.Errorf("kind refills %+v, want plain 3 (a's 2 and c's 1) and preloaded 1 (b's, removed)", st.KindRefills)
	}
	for kind, r := range st.KindRefills {
		if len(r.Buckets) != len(RefillBuckets) || r.Buckets[len(r.Buckets)-1] != r.Count {
			t.Errorf("%s: buckets %v for %d items", kind, r.Buckets, r.Count)
		}
	}
	// Put back, a is a new key (its creations before are in its kind's
	// total only), and the kind's total goes on growing.
	p.SetSizes([]Size{{a, 1}, {c, 1}})
	waitFull(t, p)
	if n := p.Stats().KindRefills["plain"].Count; n != 4 {
		t.Errorf("plain refills %d, want 4", n)
	}
	if n := p.Stats().Refills[a].Count; n != 1 {
		t.Errorf("a's refills %d after it came back, want 1 (its own since)", n)
	}
}
