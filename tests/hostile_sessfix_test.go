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

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/api"
)

func sessfixCases() []hcase {
	return []hcase{
		{id: "S40", cat: catSession, title: "an interpreter that ends just after its call's end record, before the freeze: os._exit right after the runner writes the end, and (made from the host) init's exit report waiting while the jail is frozen",
			expect: "the loss is reported once, state_lost with lost_reason exited, by the exiting call or the next (200, never a session ended restart_failed), and the next call's code runs (never an ok for code that did not run); with the report waiting in the frozen jail, the next call runs in a fresh interpreter and says so; with init held (made from the host) until the next call's job went to the dead interpreter, that call runs in a fresh interpreter, its output and result its own, and says state_lost exited; the call after runs in a fresh interpreter (its variables gone, the workspace kept); the session is frozen again between calls",
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
	before := sampleLoad(t, h.d)

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
		// Whichever reported the loss, the next call's code ran, in a
		// fresh interpreter.
		if b.Status != "ok" || b.Stdout != "False\n" {
			t.Fatalf("round %d: the call after the exit: status %s stdout %q (lost %v), want its code run in a fresh interpreter", i, b.Status, b.Stdout, lostB)
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

	// The order that made a call whose code never ran say ok: init held
	// (SIGSTOP from the host reaches a pid namespace's init) while the
	// interpreter ends after its call, and let go only once the next
	// call's job is in the job pipe: the job went to the dead interpreter,
	// the exit report comes during the call.
	wantCall(t, ss.exec(s, code("x = 1\nimport os, threading\nthreading.Timer(0.3, os._exit, (0,)).start()")), "ok")
	pid1 := jailPid1(h.cg.jailProcs(s.jail))
	if pid1 == 0 {
		t.Fatal("the session's init not found")
	}
	if err := h.cg.thawBehind(s.jail); err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(pid1, unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer unix.Kill(pid1, unix.SIGCONT) //nolint:errcheck // a failed case's cleanup
	waitFor(t, 10*time.Second, "init stopped, the interpreter dead and unreaped", func() bool {
		kids := strings.Fields(readFile(fmt.Sprintf("/proc/%d/task/%d/children", pid1, pid1)))
		for _, k := range kids {
			if procStateOf(readFile("/proc/"+k+"/stat")) != 'Z' {
				return false
			}
		}
		return len(kids) > 0 && procStateOf(readFile(fmt.Sprintf("/proc/%d/stat", pid1))) == 'T'
	})
	type reply struct {
		status int
		raw    []byte
	}
	got := make(chan reply, 1)
	start = time.Now()
	go func() {
		status, raw := ss.request(false, "POST", "/v1/sessions/"+s.id+"/execute", code("print('ran', 'x' in globals(), open('kept').read())\n41 + 1"))
		got <- reply{status, raw}
	}()
	// init's copy of the job pipe (its fd 10 and up): the job is there.
	queued := func() bool {
		for fd := 10; fd < 16; fd++ {
			p := fmt.Sprintf("/proc/%d/fd/%d", pid1, fd)
			if l, err := os.Readlink(p); err != nil || !strings.HasPrefix(l, "pipe:") {
				continue
			}
			f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NONBLOCK, 0)
			if err != nil {
				continue
			}
			n, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCINQ)
			f.Close()
			if err == nil && n > 0 {
				return true
			}
		}
		return false
	}
	waitFor(t, 10*time.Second, "the next call's job in the dead interpreter's pipe", queued)
	if err := unix.Kill(pid1, unix.SIGCONT); err != nil {
		t.Fatal(err)
	}
	rep := <-got
	took = time.Since(start)
	if rep.status != http.StatusOK {
		t.Fatalf("the call whose job went to the dead interpreter (%v): HTTP %d %s", took, rep.status, rep.raw)
	}
	r = ss.callResult(s, rep.raw)
	if r.Status != "ok" || r.Stdout != "ran False k\n42\n" || !lostExited(r) || r.Session.State != api.SessionIdle {
		t.Fatalf("the call whose job went to the dead interpreter: status %s stdout %q session %+v, want its code run in a fresh interpreter and state_lost exited", r.Status, r.Stdout, r.Session)
	}
	if frozen, err := h.cg.jailFrozen(s.jail); err != nil || !frozen {
		t.Errorf("the session is not frozen after the call (%v)", err)
	}
	freshCall(t, ss, s, "the call after the held report")
	// Another caller is served as before; the daemon holds nothing more.
	holdLoad(t, h.d, before)
	return fmt.Sprintf("%d rounds of os._exit after the end record: the loss reported once (state_lost exited), the next call's code run in a fresh interpreter; the report waiting in a frozen jail: the next call 200, run in a fresh interpreter, state_lost exited, the session frozen again; init held until the next call's job went to the dead interpreter: that call 200 ok, its own output and result from a fresh interpreter, state_lost exited", rounds)
}

// jailPid1 is the one of a jail's host pids that is pid 1 of its pid
// namespace (init); 0 if none is.
func jailPid1(pids []int) int {
	for _, p := range pids {
		for _, l := range strings.Split(readFile(fmt.Sprintf("/proc/%d/status", p)), "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				return p
			}
		}
	}
	return 0
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// procStateOf is the state letter of a /proc/PID/stat line; 0 without one.
func procStateOf(stat string) byte {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || len(stat) < i+3 {
		return 0
	}
	return stat[i+2]
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
