package tests

// Session memory (issue 27, finding 6): a session holds its memory_mb
// between calls, frozen, for up to its lifetime. The case floods a daemon
// of its own, with small bounds, with concurrent creations and checks that
// the memory of live sessions stays within sessions.max_memory_per_uid_mb
// and max_memory_total_mb, while another caller is served, and that the
// reservation is back to zero once every session ended.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

// The case daemon's bounds: sessions of 128 MiB, two per uid, three in
// all.
const (
	memSessionMB = 128
	memPerUIDMB  = 256
	memTotalMB   = 384
)

func sessMemCases() []hcase {
	return []hcase{
		{id: "S30", cat: catSession, title: "uid 65534 asks for 4 sessions of 128 MiB at once, root for 3 more, each then holding its memory frozen (sessions.max_memory_per_uid_mb 256, max_memory_total_mb 384)",
			expect: "2 of uid 65534's creations succeed and 2 get 429 naming sessions.max_memory_per_uid_mb; 1 of root's succeeds and 2 get 503 naming sessions.max_memory_total_mb; /v1/info shows 384 MiB reserved while they live and 0 once they ended (DELETE) or paused (idle timeout); another caller's print(1) served throughout",
			run:    runSessionMemory},
	}
}

// memDaemon starts the case's daemon: small session memory bounds, and an
// admission queue that lets every creation of the flood wait for a slot
// (so that each answer is the memory bounds', not a busy queue's).
func (h *hostile) memDaemon(t *testing.T) (*daemon, func()) {
	t.Helper()
	d := startDaemon(t, daemontest.Options{Config: "socket_mode = \"0666\"\n", Tune: func(c string) string {
		return setKeys(c, map[string]string{"queue_size": "16", "queue_wait": `"60s"`, "daily_quota": "1000"}) +
			fmt.Sprintf("[defaults]\nmemory_mb = %d\n[sessions]\nmax_memory_per_uid_mb = %d\nmax_memory_total_mb = %d\n", memSessionMB, memPerUIDMB, memTotalMB)
	}})
	cg, err := cgroupsOf(d)
	if err != nil {
		t.Fatal(err)
	}
	h.extraParents = []string{cg.rel}
	t.Logf("the case's daemon: %s, jails under %s", d.Dir, cg.rel)
	return d, func() {
		h.extraParents = nil
		if err := d.Stop(); err != nil {
			t.Errorf("stop the case's daemon: %v", err)
		}
	}
}

// memSample is what the case measures: a loadSample (one print(1), not
// a median) and the sessions' reserved memory.
type memSample struct {
	loadSample
	reserved int64
}

func sampleMem(t *testing.T, d *daemon) memSample {
	t.Helper()
	took, status, body := timedPrint1(t, d)
	if status != http.StatusOK {
		t.Errorf("another caller's print(1): HTTP %d %s", status, body)
	}
	var info api.Info
	if status, _ := d.call(t, "GET", "/v1/info", nil, &info); status != http.StatusOK {
		t.Fatalf("info: HTTP %d", status)
	}
	return memSample{loadSample{rss: vmRSS(d.Cmd.Process.Pid), inUse: info.Memory.InUseBytes, print1: took}, info.Sessions.MemoryReservedBytes}
}

// worst is the slowest print(1) of three and the largest of the rest.
func worst(t *testing.T, d *daemon) memSample {
	t.Helper()
	var w memSample
	for range 3 {
		s := sampleMem(t, d)
		w.rss, w.inUse, w.reserved, w.print1 = max(w.rss, s.rss), max(w.inUse, s.inUse), max(w.reserved, s.reserved), max(w.print1, s.print1)
	}
	return w
}

// created is one creation's answer.
type created struct {
	status int
	id     string
	err    api.ErrorDetail
}

func createdOf(status int, body []byte) created {
	c := created{status: status}
	if status == http.StatusCreated {
		var s api.Session
		_ = json.Unmarshal(body, &s)
		c.id = s.SessionID
	} else {
		var e api.ErrorBody
		_ = json.Unmarshal(body, &e)
		c.err = e.Error
	}
	return c
}

// flood sends n creations of body at once, as uid 65534 or as root, and
// returns their answers, the sessions first.
func flood(t *testing.T, d *daemon, nobody bool, n int, body string) []created {
	t.Helper()
	out := make([]created, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if nobody {
				status, _, b, err := curlNobodyErr(nil, curlJSONArgs(d.Socket, "POST", "/v1/sessions", body)...)
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				out[i] = createdOf(status, b)
				return
			}
			resp, err := d.Client.Post("http://jaild/v1/sessions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Errorf("create: %v", err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			out[i] = createdOf(resp.StatusCode, b)
		})
	}
	wg.Wait()
	sort.SliceStable(out, func(i, j int) bool { return out[i].id != "" && out[j].id == "" })
	return out
}

// refusals checks that every answer but the first ok ones is status of
// type naming bound, and returns how many sessions were made.
func refusals(t *testing.T, who string, got []created, ok, status int, typ, bound string) int {
	t.Helper()
	made := 0
	for _, c := range got {
		if c.id != "" {
			made++
		}
	}
	if made != ok {
		t.Errorf("%s: %d sessions made, want %d: %+v", who, made, ok, got)
	}
	for _, c := range got[made:] {
		if c.status != status || c.err.Type != typ || !strings.Contains(c.err.Message, bound) {
			t.Errorf("%s: HTTP %d %+v, want %d %s naming %s", who, c.status, c.err, status, typ, bound)
		}
	}
	return made
}

func runSessionMemory(t *testing.T, h *hostile) string {
	d, end := h.memDaemon(t)
	defer end()
	var live []sessRef
	defer func() {
		for _, s := range live {
			s.del(t, d)
		}
	}()
	// The control: the idle daemon, measured as the attack will be.
	sampleMem(t, d) // the first run opens what the daemon keeps open
	before := worst(t, d)

	// uid 65534 floods; then root, an admin (no per-uid bound), meets the
	// total.
	const sessBody = `{"idle_timeout_s":600}`
	mine := flood(t, d, true, 4, sessBody)
	nMine := refusals(t, "uid 65534", mine, memPerUIDMB/memSessionMB, http.StatusTooManyRequests, "rate_limited", "sessions.max_memory_per_uid_mb")
	root := flood(t, d, false, 3, sessBody)
	nRoot := refusals(t, "root", root, (memTotalMB-memPerUIDMB)/memSessionMB, http.StatusServiceUnavailable, "unavailable", "sessions.max_memory_total_mb")
	for _, c := range mine {
		if c.id != "" {
			live = append(live, sessRef{id: c.id, nobody: true})
		}
	}
	for _, c := range root {
		if c.id != "" {
			live = append(live, sessRef{id: c.id})
		}
	}
	// Each session then takes most of its memory and keeps it, frozen.
	for _, s := range live {
		s.call(t, d, "x = bytearray(96 << 20)\nprint(len(x) >> 20)", "96\n")
	}
	during := worst(t, d)
	reservedLive := during.reserved

	// Every session ends: by DELETE, and one made after by its idle
	// timeout; the reservation is back to zero.
	for _, s := range live {
		s.del(t, d)
	}
	live = nil
	idle := flood(t, d, false, 1, `{"idle_timeout_s":1}`)
	if idle[0].id == "" {
		t.Fatalf("a session after the others ended: %+v", idle[0])
	}
	// Its idle timeout pauses it where the host can (its jail, and with it
	// its memory, is gone then too) or ends it.
	waitFor(t, 30*time.Second, "the idle session to pause or end", func() bool {
		var s api.Session
		status, _ := d.call(t, "GET", "/v1/sessions/"+idle[0].id, nil, &s)
		return status == http.StatusOK && (s.State == api.SessionEnded || s.State == api.SessionPaused)
	})
	after := worst(t, d)

	t.Logf("S30: daemon RSS %d -> %d -> %d MiB; in_use_bytes %d -> %d -> %d; print(1) %v -> %v -> %v; sessions reserved %d -> %d -> %d MiB (limit %d); sessions made: uid 65534 %d of 4, root %d of 3",
		before.rss>>20, during.rss>>20, after.rss>>20, before.inUse, during.inUse, after.inUse,
		before.print1.Round(time.Millisecond), during.print1.Round(time.Millisecond), after.print1.Round(time.Millisecond),
		before.reserved>>20, reservedLive>>20, after.reserved>>20, memTotalMB, nMine, nRoot)
	if want := int64(nMine+nRoot) * memSessionMB << 20; reservedLive != want || reservedLive > memTotalMB<<20 {
		t.Errorf("sessions reserved %d MiB while %d of %d MiB lived; bound %d MiB", reservedLive>>20, nMine+nRoot, memSessionMB, memTotalMB)
	}
	if after.reserved != 0 || before.reserved != 0 {
		t.Errorf("sessions reserved %d MiB before and %d MiB after every session ended, want 0", before.reserved>>20, after.reserved>>20)
	}
	// Bounds from the control, generous, and absolute sanity bounds: the
	// sessions' memory is their jails', never the daemon's.
	if lim := print1Bound(before.print1); during.print1 > lim {
		t.Errorf("another caller's print(1) took %v with the sessions live, against %v before (bound %v)", during.print1, before.print1, lim)
	}
	if lim := before.rss + 64<<20; during.rss > lim || during.rss > 512<<20 {
		t.Errorf("daemon RSS %d MiB with the sessions live, %d MiB before", during.rss>>20, before.rss>>20)
	}
	if lim := before.inUse + 16<<20; during.inUse > lim || after.inUse > lim {
		t.Errorf("in_use_bytes %d during and %d after, %d before", during.inUse, after.inUse, before.inUse)
	}
	return fmt.Sprintf("uid 65534: %d made, the rest HTTP 429 rate_limited naming sessions.max_memory_per_uid_mb; root: %d made, the rest HTTP 503 unavailable naming sessions.max_memory_total_mb; %d MiB reserved while they lived, 0 after DELETE and the idle timeout; another caller's print(1) served throughout",
		nMine, nRoot, reservedLive>>20)
}

// sessRef is a session of the case's daemon.
type sessRef struct {
	id     string
	nobody bool
}

func (s sessRef) request(t *testing.T, d *daemon, method, path, body string) (int, []byte) {
	t.Helper()
	if s.nobody {
		status, _, b, err := curlNobodyErr(nil, curlJSONArgs(d.Socket, method, path, body)...)
		if err != nil {
			t.Fatal(err)
		}
		return status, b
	}
	var raw json.RawMessage
	var b any
	if body != "" {
		b = body
	}
	status, _ := d.call(t, method, path, b, &raw)
	return status, raw
}

func (s sessRef) call(t *testing.T, d *daemon, src, stdout string) {
	t.Helper()
	body, _ := json.Marshal(api.SessionExecuteRequest{Code: src})
	status, raw := s.request(t, d, "POST", "/v1/sessions/"+s.id+"/execute", string(body))
	var r api.SessionExecuteResponse
	if err := json.Unmarshal(raw, &r); status != http.StatusOK || err != nil || r.Status != "ok" || r.Stdout != stdout {
		t.Errorf("session %s call: HTTP %d: %.500s", s.id, status, raw)
	}
}

func (s sessRef) del(t *testing.T, d *daemon) {
	t.Helper()
	if status, raw := s.request(t, d, "DELETE", "/v1/sessions/"+s.id, ""); status != http.StatusOK {
		t.Errorf("DELETE session %s: HTTP %d: %s", s.id, status, raw)
	}
}
