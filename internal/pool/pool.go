// Package pool keeps warm items (jails started ahead of requests) ready,
// by key: a key is an image and a kind of item, so a second image is a new
// key, not a new pool. It refills one item at a time, the key furthest
// below its size first; under memory pressure it stops refilling and drops
// what is idle. It knows nothing of what an item is: a create function
// makes one, and an item says whether it is still alive and destroys
// itself.
package pool

import (
	"bufio"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Key names a kind of warm item.
type Key struct {
	Image string // the image's digest
	Kind  string // what was started in it ("plain", "preloaded", ...)
}

// Item is a warm item.
type Item interface {
	// Dead reports whether the item can no longer serve.
	Dead() bool
	// Destroy releases the item; it must be bounded in time.
	Destroy()
}

// Size is how many items of Key to keep ready.
type Size struct {
	Key Key
	N   int
}

// Config configures a Pool.
type Config struct {
	// Sizes, in order: on a tie between keys equally below their sizes,
	// the first refills first.
	Sizes []Size
	// MinAvailableBytes: below this much MemAvailable the pool stops
	// refilling and drops its idle items. 0 means 10% of MemTotal.
	MinAvailableBytes uint64
	// Logger receives creation failures; nil means slog.Default().
	Logger *slog.Logger
}

// Create makes one ready item of key. It must return soon after stop is
// closed (an item cut short then is not an error).
type Create func(key Key, stop <-chan struct{}) (Item, error)

// Pool is safe for concurrent use. The zero value and nil are an empty
// pool that never has items.
type Pool struct {
	cfg    Config
	create Create
	log    *slog.Logger
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	drops  sync.WaitGroup // destroys of dead items

	mu      sync.Mutex
	ready   map[Key][]Item
	pause   bool
	refills map[Key]*Refills
	// A key whose creations fail in a row waits before the next try,
	// twice as long each time (up to maxBackoff), and meanwhile the other
	// keys refill: an image that cannot make an item (a module to
	// preload that it lacks) neither spins nor starves the rest.
	failing map[Key]int
	retryAt map[Key]time.Time
	retired map[string]Refills // creations of keys that went, by kind
}

// Backoff after failed creations of a key: minBackoff after the first,
// doubling to maxBackoff.
const (
	minBackoff = 2 * time.Second
	maxBackoff = time.Minute
)

func backoff(fails int) time.Duration {
	d := minBackoff
	for i := 1; i < fails && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// New starts a pool that keeps cfg.Sizes items ready, made by create.
func New(cfg Config, create Create) *Pool {
	p := &Pool{cfg: cfg, create: create, log: cfg.Logger, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), ready: map[Key][]Item{}, refills: map[Key]*Refills{},
		failing: map[Key]int{}, retryAt: map[Key]time.Time{}, retired: map[string]Refills{}}
	if p.log == nil {
		p.log = slog.Default()
	}
	go p.loop()
	return p
}

// SetSizes replaces the sizes: idle items of a key no longer listed, or
// beyond its new size, are destroyed, and the pool refills to the new
// ones. An item whose creation was under way for a key that went is
// destroyed when it is ready.
func (p *Pool) SetSizes(sizes []Size) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.cfg.Sizes = slices.Clone(sizes)
	var drop []Item
	for k, list := range p.ready {
		n := p.sizeLocked(k)
		if len(list) > n {
			drop = append(drop, list[n:]...)
			p.ready[k] = list[:n]
		}
		if n == 0 {
			delete(p.ready, k)
		}
	}
	// A key that went is forgotten: its failures, and its creations
	// (counted on in retired, by kind, so that KindRefills only grows).
	for k := range p.failing {
		if p.sizeLocked(k) == 0 {
			delete(p.failing, k)
			delete(p.retryAt, k)
		}
	}
	for k, r := range p.refills {
		if p.sizeLocked(k) == 0 {
			p.retired[k.Kind] = addRefills(p.retired[k.Kind], *r)
			delete(p.refills, k)
		}
	}
	p.mu.Unlock()
	for _, it := range drop {
		p.drops.Go(it.Destroy)
	}
	p.Kick()
}

// Size returns how many items of key the pool keeps ready.
func (p *Pool) Size(key Key) int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sizeLocked(key)
}

func (p *Pool) sizeLocked(key Key) int {
	for _, s := range p.cfg.Sizes {
		if s.Key == key {
			return s.N
		}
	}
	return 0
}

// Take returns a ready item of the first key in order that has one, and
// that key. Dead items met on the way are destroyed. The caller owns the
// item; call Kick once the work it was taken for no longer needs the CPU.
func (p *Pool) Take(order ...Key) (Item, Key, bool) {
	if p == nil {
		return nil, Key{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, key := range order {
		for len(p.ready[key]) > 0 {
			it := p.ready[key][0]
			p.ready[key] = p.ready[key][1:]
			if it.Dead() {
				p.drops.Go(it.Destroy)
				p.Kick()
				continue
			}
			return it, key, true
		}
	}
	return nil, Key{}, false
}

// Kick asks the pool to refill now.
func (p *Pool) Kick() {
	if p == nil {
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Stats are the pool's sizes and ready counts.
type Stats struct {
	Size, Ready map[Key]int
	Paused      bool // under memory pressure
	// Refills are the creations of items of each key listed now since
	// the start; KindRefills those of every key ever, by Kind (so that
	// they only grow when keys come and go).
	Refills     map[Key]Refills
	KindRefills map[string]Refills
}

// RefillBuckets are the upper bounds, in seconds, of Refills.Buckets: a
// plain jail starts in tens of milliseconds, a preloaded one imports its
// modules for up to a few seconds.
var RefillBuckets = []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Refills is a histogram of the time creations of one key took.
type Refills struct {
	Count   uint64   // items made
	Sum     float64  // seconds they took together
	Buckets []uint64 // items made within each of RefillBuckets (cumulative)
	Failed  uint64   // creations that failed (not counted above)
}

func (r *Refills) observe(d time.Duration) {
	if r.Buckets == nil {
		r.Buckets = make([]uint64, len(RefillBuckets))
	}
	sec := d.Seconds()
	r.Count++
	r.Sum += sec
	for i, b := range RefillBuckets {
		if sec <= b {
			r.Buckets[i]++
		}
	}
}

// Stats describes the pool.
func (p *Pool) Stats() Stats {
	st := Stats{Size: map[Key]int{}, Ready: map[Key]int{}, Refills: map[Key]Refills{}, KindRefills: map[string]Refills{}}
	if p == nil {
		return st
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.cfg.Sizes {
		st.Size[s.Key] = s.N
		st.Ready[s.Key] = len(p.ready[s.Key])
		if r := p.refills[s.Key]; r != nil {
			c := *r
			c.Buckets = append([]uint64(nil), r.Buckets...)
			st.Refills[s.Key] = c
		}
	}
	for kind, r := range p.retired {
		st.KindRefills[kind] = addRefills(st.KindRefills[kind], r)
	}
	for k, r := range p.refills {
		st.KindRefills[k.Kind] = addRefills(st.KindRefills[k.Kind], *r)
	}
	st.Paused = p.pause
	return st
}

// loop keeps the pool full, one creation at a time, pausing and dropping
// idle items under memory pressure.
func (p *Pool) loop() {
	defer close(p.done)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		// Refilling can go on for many items in a row; a stop must not
		// wait for all of them (systemctl stop took 18-32 s).
		select {
		case <-p.stop:
			return
		default:
		}
		pressure := p.memoryPressure()
		p.mu.Lock()
		p.pause = pressure
		var drop []Item
		if pressure {
			for k := range p.ready {
				drop = append(drop, p.ready[k]...)
				delete(p.ready, k)
			}
		}
		var key Key
		need := 0.0
		now := time.Now()
		for _, s := range p.cfg.Sizes {
			if s.N == 0 || now.Before(p.retryAt[s.Key]) {
				continue
			}
			if n := float64(s.N-len(p.ready[s.Key])) / float64(s.N); n > need {
				key, need = s.Key, n
			}
		}
		p.mu.Unlock()
		for _, it := range drop {
			it.Destroy()
		}
		if !pressure && need > 0 {
			began := time.Now()
			it, err := p.create(key, p.stop)
			took := time.Since(began)
			select {
			case <-p.stop:
				if it != nil {
					it.Destroy()
				}
				return // an item cut short by the stop is no error
			default:
			}
			p.mu.Lock()
			r := p.refills[key]
			if r == nil {
				r = &Refills{}
				p.refills[key] = r
			}
			var wait time.Duration
			if err != nil {
				r.Failed++
				if p.sizeLocked(key) > 0 { // else its key went (SetSizes)
					p.failing[key]++
					wait = backoff(p.failing[key])
					p.retryAt[key] = time.Now().Add(wait)
				}
			} else {
				r.observe(took)
				delete(p.failing, key)
				delete(p.retryAt, key)
				if len(p.ready[key]) < p.sizeLocked(key) {
					p.ready[key] = append(p.ready[key], it)
					it = nil
				}
			}
			p.mu.Unlock()
			if it != nil && err == nil {
				it.Destroy() // its key went (SetSizes) while it was made
			}
			if err != nil {
				p.log.Error("warm pool: create", "image", key.Image, "kind", key.Kind, "err", err, "retry_in", wait)
			}
			continue // more may be needed, of this key or (while it waits) another
		}
		select {
		case <-p.stop:
			return
		case <-p.wake:
		case <-tick.C:
		}
	}
}

// Close stops refilling and destroys the idle items.
func (p *Pool) Close() {
	if p == nil {
		return
	}
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
	p.mu.Lock()
	ready := p.ready
	p.ready = map[Key][]Item{}
	p.mu.Unlock()
	for _, list := range ready {
		for _, it := range list {
			it.Destroy()
		}
	}
	p.drops.Wait()
}

func (p *Pool) memoryPressure() bool {
	total, avail := meminfo()
	if total == 0 {
		return false
	}
	min := p.cfg.MinAvailableBytes
	if min == 0 {
		min = total / 10
	}
	return avail < min
}

func meminfo() (total, avail uint64) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseUint(fields[1], 10, 64)
		switch fields[0] {
		case "MemTotal:":
			total = v << 10
		case "MemAvailable:":
			avail = v << 10
		}
	}
	return total, avail
}

// addRefills is a+b, in new buckets.
func addRefills(a, b Refills) Refills {
	c := Refills{Count: a.Count + b.Count, Sum: a.Sum + b.Sum, Failed: a.Failed + b.Failed, Buckets: make([]uint64, len(RefillBuckets))}
	for i := range c.Buckets {
		if i < len(a.Buckets) {
			c.Buckets[i] += a.Buckets[i]
		}
		if i < len(b.Buckets) {
			c.Buckets[i] += b.Buckets[i]
		}
	}
	return c
}
