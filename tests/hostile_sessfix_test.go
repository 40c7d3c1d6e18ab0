package tests

// Sessions whose interpreter ends between a call's end and the freeze
// (issue 27, finding 7).

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

func sessfixCases() []hcase {
	return []hcase{
		{id: "S40", cat: catSession, title: "an interpreter that ends just after its call's end record, before the freeze: os._exit right after the runner writes the end, and (made from the host) init's exit report waiting while the jail is frozen",
			expect: "the loss is reported once, state_lost with lost_reason exited, by the exiting call or the next (200, never a session ended restart_failed); with the report waiting in the frozen jail, the next call runs in a fresh interpreter and says so; the call after it runs in a fresh interpreter (its variables gone, the workspace kept); the session is frozen again between calls",
			run:    runSessionExitBeforeFreeze},
	}
}

// exitAfterEnd has the runner end with os._exit(0) right after it wrote
// the call's end record: its records writer, found in the runner's frame,
// wrapped.
const exitAfterEnd = `import os, sys
f = sys._getframe()
while f is not None and 'records' not in f.f_locals:
    f = f.f_back
w = f.f_locals['records']
def emit(rec, orig=w.emit):
    orig(rec)
    if rec.get('type') == 'end':
        os._exit(0)
w.emit = emit
x = 1
open('kept', 'w').write('k')
`

// lostExited says the call reports its interpreter lost by an exit.
func lostExited(r *api.SessionExecuteResponse) bool {
	return r.Session.StateLost && r.Session.LostReason != nil && *r.Session.LostReason == "exited"
}

// freshCall checks that a call ran in a fresh interpreter: x is gone, the
// workspace's file is there.
func freshCall(t *testing.T, ss *sessionSet, s *sess, what string) {
	t.Helper()
	r := ss.exec(s, code("print('x' in globals(), open('kept').read())"))
	if r.Status != "ok" || r.Stdout != "False k\n" || r.Session.State != api.SessionIdle {
		t.Errorf("%s: status %s stdout %q session %+v, want a fresh interpreter with the workspace kept", what, r.Status, r.Stdout, r.Session)
	}
}

func runSessionExitBeforeFreeze(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	wantCall(t, ss.exec(s, code("print(1)")), "ok")
	ctrl := time.Now()
	h.print1(t)
	control := time.Since(ctrl)

	// The race as user code makes it. init's report comes before the
	// freeze or is held by it; it may even be read before the end record
	// (two pipes). Either the call itself or the next says, once, that
	// the state was lost; the session lives on and the call after runs in
	// a fresh interpreter.
	const rounds = 3
	for i := range rounds {
		a := ss.exec(s, code(exitAfterEnd))
		status, raw := ss.request(false, "POST", "/v1/sessions/"+s.id+"/execute", code("print('x' in globals())"))
		if status != http.StatusOK {
			t.Fatalf("round %d: the call after the exit: HTTP %d %s", i, status, raw)
		}
		b := ss.callResult(s, raw)
		lostA, lostB := lostExited(a), lostExited(b)
		if a.Status != "ok" || lostA == lostB || b.Session.State != api.SessionIdle {
			t.Fatalf("round %d: the exiting call %s %+v, the next %+v: want the loss (exited) reported once and the session idle", i, a.Status, a.Session, b.Session)
		}
		freshCall(t, ss, s, fmt.Sprintf("round %d", i))
	}

	// The order the race rarely shows, made from the host: the
	// interpreter ends while the jail is thawed behind the daemon's back,
	// init reports it, and the jail is frozen again before the next call.
	wantCall(t, ss.exec(s, code("x = 1\nimport os, threading\nthreading.Timer(0.3, os._exit, (0,)).start()")), "ok")
	if err := h.cg.thawBehind(s.jail); err != nil {
		t.Fatal(err)
	}
	// init alone in the cgroup, sleeping in its wait for 'r': the exit is
	// reported.
	waitFor(t, 10*time.Second, "init alone, its report written", func() bool {
		procs := h.cg.jailProcs(s.jail)
		if len(procs) != 1 {
			return false
		}
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", procs[0]))
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", procs[0]))
		i := strings.LastIndexByte(string(st), ')')
		return i > 0 && len(st) > i+2 && st[i+2] == 'S' && strings.Contains(string(wchan), "poll")
	})
	if err := h.cg.freezeBehind(s.jail); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	status, raw := ss.request(false, "POST", "/v1/sessions/"+s.id+"/execute", code("print('x' in globals(), open('kept').read())"))
	took := time.Since(start)
	if status != http.StatusOK {
		t.Fatalf("the call after an exit reported into a frozen jail (%v): HTTP %d %s", took, status, raw)
	}
	r := ss.callResult(s, raw)
	if r.Stdout != "False k\n" || !r.Session.StateLost || r.Session.LostReason == nil || *r.Session.LostReason != "exited" || r.Session.State != api.SessionIdle {
		t.Fatalf("the call after an exit reported into a frozen jail: stdout %q session %+v", r.Stdout, r.Session)
	}
	// The daemon's bound on a restart is 10 s: the call did not wait it out.
	if took >= 10*time.Second {
		t.Errorf("the call after an exit reported into a frozen jail took %v, the restart's whole bound", took)
	}
	if frozen, err := h.cg.jailFrozen(s.jail); err != nil || !frozen {
		t.Errorf("the session is not frozen after the call (%v)", err)
	}
	freshCall(t, ss, s, "the call after")
	// Another caller is served as before.
	lat := time.Now()
	h.print1(t)
	if d := time.Since(lat); d > 10*control+2*time.Second {
		t.Errorf("another caller's print(1) took %v (control %v)", d, control)
	}
	return fmt.Sprintf("%d rounds of os._exit after the end record: the loss reported once (state_lost exited), then a fresh interpreter; the report waiting in a frozen jail: the next call 200, run in a fresh interpreter, state_lost exited, the session frozen again", rounds)
}

// freezeBehind freezes a jail's cgroup from the host and waits until it
// is frozen.
func (cg *jailCgroups) freezeBehind(id string) error {
	f, on := cg.jailFile(id, "freezer.state"), "FROZEN"
	if f == "" {
		f, on = cg.jailFile(id, "cgroup.freeze"), "1"
	}
	if f == "" {
		return fmt.Errorf("jail %s has no freezer file", id)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if err := os.WriteFile(f, []byte(on), 0o644); err != nil {
			return err
		}
		if frozen, err := cg.jailFrozen(id); err != nil || frozen {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jail %s did not freeze", id)
		}
	}
}
