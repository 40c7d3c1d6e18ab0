package tests

import (
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

// What a hostile-load case (issue 27) measures of the daemon it attacks,
// before the attack (the control) and during it: the daemon's RSS, the
// memory budget's in_use_bytes and how long another caller's print(1)
// takes; and the bound such a print(1) is held to. One set of measures
// for every case, so that their numbers compare.

// loadSample is one measure of a daemon under (or before) an attack.
type loadSample struct {
	rss, inUse int64 // bytes
	print1     time.Duration
}

// sampleLoad measures d: its RSS, in_use_bytes and the median of three
// print(1)s by root (an admin: never refused for a non-admin's budget).
func sampleLoad(t *testing.T, d *daemon) loadSample {
	t.Helper()
	return loadSample{rss: vmRSS(d.Cmd.Process.Pid), inUse: inUseBytes(t, d), print1: print1Control(t, d)}
}

// inUseBytes is the memory budget's in_use_bytes (GET /v1/info).
func inUseBytes(t *testing.T, d *daemon) int64 {
	t.Helper()
	var info api.Info
	if status, _ := d.call(t, "GET", "/v1/info", nil, &info); status != 200 {
		t.Fatalf("info: HTTP %d", status)
	}
	return info.Memory.InUseBytes
}

// timedPrint1 runs print(1) as root and returns how long it took and its
// status, with the body on a refusal.
func timedPrint1(t *testing.T, d *daemon) (time.Duration, int, string) {
	t.Helper()
	var raw json.RawMessage
	start := time.Now()
	status, _ := d.call(t, "POST", "/v1/execute", `{"code":"print(1)"}`, &raw)
	return time.Since(start), status, string(raw)
}

// print1Control is the median of three print(1)s, each of which must
// succeed: the control measured on this host before an attack.
func print1Control(t *testing.T, d *daemon) time.Duration {
	t.Helper()
	var took []time.Duration
	for range 3 {
		d, status, body := timedPrint1(t, d)
		if status != 200 {
			t.Fatalf("control print(1): HTTP %d %s", status, body)
		}
		took = append(took, d)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	return took[1]
}

// print1Bound is what a print(1) during an attack may take: generous
// factors over the control measured on this host, and an absolute bound
// (the tightest of the bounds the cases had before they shared this).
func print1Bound(control time.Duration) time.Duration {
	return min(max(4*control, control+2*time.Second), 10*time.Second)
}

// holdLoad measures d again (one print(1)) and holds it to before: the
// daemon's RSS at most 64 MiB more, in_use_bytes at most 16 MiB more, the
// print(1) served within print1Bound.
func holdLoad(t *testing.T, d *daemon, before loadSample) {
	t.Helper()
	took, status, body := timedPrint1(t, d)
	rss, inUse := vmRSS(d.Cmd.Process.Pid), inUseBytes(t, d)
	if status != 200 {
		t.Errorf("another caller's print(1): HTTP %d %s", status, body)
	}
	if limit := print1Bound(before.print1); took > limit {
		t.Errorf("another caller's print(1) took %v, control %v: want at most %v", took, before.print1, limit)
	}
	if rss > before.rss+64<<20 {
		t.Errorf("daemon RSS %d MiB, control %d MiB: want at most 64 MiB more", rss>>20, before.rss>>20)
	}
	if inUse > before.inUse+16<<20 {
		t.Errorf("in_use_bytes %d, control %d: want at most 16 MiB more", inUse, before.inUse)
	}
}
