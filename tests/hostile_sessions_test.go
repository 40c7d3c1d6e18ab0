package tests

// Sessions: one jail whose interpreter lives across calls, frozen between
// them. The cases try to keep something running or planted past a call,
// past the session, or into another caller's session, and to reach what
// the daemon and the jail's init keep from the user's code. Every case
// deletes every session it opened, so that the leak checks after it find
// nothing of them; each session's jail id (the run_id of its calls) is
// noted for those checks.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

// nobodyUID is the unprivileged caller of the cases (curlAs).
const nobodyUID = 65534

// sessMaxPerUID is sessions.max_per_uid, the shipped default, which the
// hostile daemon keeps.
const sessMaxPerUID = 4

// sess is a session a case opened.
type sess struct {
	id     string
	nobody bool   // owned by uid 65534, else by root
	jail   string // its jail's id, once a call has told it
	closed bool
}

// sessionSet opens sessions for one case and deletes every one of them,
// whatever happened to the case: `ss := h.sessions(t); defer ss.closeAll()`.
type sessionSet struct {
	h   *hostile
	d   *daemon
	t   *testing.T
	all []*sess
}

func (h *hostile) sessions(t *testing.T) *sessionSet {
	return &sessionSet{h: h, d: h.d, t: t}
}

// request sends a request to a session endpoint as the session's owner (or
// as uid 65534 when nobody is set) and returns the status and the body.
func (ss *sessionSet) request(nobody bool, method, path string, body any) (int, []byte) {
	ss.t.Helper()
	if nobody {
		var s string
		switch b := body.(type) {
		case nil:
		case string:
			s = b
		default:
			j, _ := json.Marshal(b)
			s = string(j)
		}
		status, _, out := curlAs(ss.t, ss.d.Socket, method, path, s)
		return status, out
	}
	var raw json.RawMessage
	status, _ := ss.d.call(ss.t, method, path, body, &raw)
	return status, raw
}

// open creates a session as root; in the networked suite it asks for the
// same network as every run.
func (ss *sessionSet) open(body api.SessionCreateRequest) *sess {
	ss.t.Helper()
	s, status, raw := ss.create(false, ss.d.withInject(body).(api.SessionCreateRequest))
	if s == nil {
		ss.t.Fatalf("create a session: HTTP %d: %s", status, raw)
	}
	return s
}

// openNobody creates a session as uid 65534: the session, or nil with the
// status and body of the refusal.
func (ss *sessionSet) openNobody(body api.SessionCreateRequest) (*sess, int, []byte) {
	ss.t.Helper()
	return ss.create(true, body)
}

func (ss *sessionSet) create(nobody bool, body api.SessionCreateRequest) (*sess, int, []byte) {
	ss.t.Helper()
	status, raw := ss.request(nobody, "POST", "/v1/sessions", body)
	if status != http.StatusCreated {
		return nil, status, raw
	}
	var info api.Session
	if err := strictJSON(raw, &info); err != nil || info.SessionID == "" || info.State != api.SessionIdle {
		ss.t.Fatalf("create a session: malformed 201 (%v): %s", err, raw)
	}
	want := uint32(0)
	if nobody {
		want = nobodyUID
	}
	if info.UID != want {
		ss.t.Errorf("session %s: uid %d, want %d", info.SessionID, info.UID, want)
	}
	if n := body.Network; n != "" && info.Network != n {
		ss.t.Errorf("session %s: network %q, asked for %v", info.SessionID, info.Network, n)
	}
	s := &sess{id: info.SessionID, nobody: nobody}
	ss.all = append(ss.all, s)
	return s, status, raw
}

// exec runs a call of s as its owner and returns its 200 response, failing
// the test on anything else. Every call of a session runs in the same
// jail: its run_id.
func (ss *sessionSet) exec(s *sess, req any) *api.SessionExecuteResponse {
	ss.t.Helper()
	status, raw := ss.request(s.nobody, "POST", "/v1/sessions/"+s.id+"/execute", req)
	if status != http.StatusOK {
		ss.t.Fatalf("session call: HTTP %d: %s", status, raw)
	}
	return ss.callResult(s, raw)
}

func (ss *sessionSet) callResult(s *sess, raw []byte) *api.SessionExecuteResponse {
	ss.t.Helper()
	var r api.SessionExecuteResponse
	if err := strictJSON(raw, &r); err != nil {
		ss.t.Fatalf("session call: malformed response: %v\n%s", err, raw)
	}
	if r.Status == "" || r.RunID == "" || r.Session.SessionID != s.id {
		ss.t.Fatalf("session call: response without status or run_id, or of another session: %s", raw)
	}
	ss.h.noteRun(r.RunID)
	if s.jail == "" {
		s.jail = r.RunID
	} else if s.jail != r.RunID {
		ss.t.Errorf("session %s: call %d ran in jail %s, earlier calls in %s", s.id, r.ExecutionCount, r.RunID, s.jail)
	}
	return &r
}

// code is the body of a call of code alone.
func code(src string) api.SessionExecuteRequest { return api.SessionExecuteRequest{Code: src} }

// asyncCall is a call running in the background (as root).
type asyncCall struct {
	status int
	raw    []byte
	err    error
}

func (ss *sessionSet) execAsync(s *sess, req any) <-chan asyncCall {
	ch := make(chan asyncCall, 1)
	body, _ := json.Marshal(req)
	go func() {
		var a asyncCall
		client := burstClient(ss.d)
		defer client.CloseIdleConnections() // no connection left open in the daemon
		resp, err := client.Post("http://jaild/v1/sessions/"+s.id+"/execute", "application/json", bytes.NewReader(body))
		if err != nil {
			a.err = err
		} else {
			a.status = resp.StatusCode
			a.raw, a.err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		ch <- a
	}()
	return ch
}

// wait takes an asynchronous call's 200 response.
func (ss *sessionSet) wait(s *sess, ch <-chan asyncCall) *api.SessionExecuteResponse {
	ss.t.Helper()
	var a asyncCall
	select {
	case a = <-ch:
	case <-time.After(90 * time.Second):
		ss.t.Fatalf("session %s: no answer to a call within 90 s", s.id)
	}
	if a.err != nil || a.status != http.StatusOK {
		ss.t.Fatalf("session call: HTTP %d (%v): %s", a.status, a.err, a.raw)
	}
	return ss.callResult(s, a.raw)
}

// get returns s as its owner sees it.
func (ss *sessionSet) get(s *sess) api.Session {
	ss.t.Helper()
	status, raw := ss.request(s.nobody, "GET", "/v1/sessions/"+s.id, nil)
	var info api.Session
	if err := strictJSON(raw, &info); status != http.StatusOK || err != nil {
		ss.t.Fatalf("GET session: HTTP %d (%v): %s", status, err, raw)
	}
	return info
}

// del deletes s as its owner: 200, and the session has ended.
func (ss *sessionSet) del(s *sess) api.Session {
	ss.t.Helper()
	s.closed = true
	status, raw := ss.request(s.nobody, "DELETE", "/v1/sessions/"+s.id, nil)
	var info api.Session
	if err := strictJSON(raw, &info); status != http.StatusOK || err != nil || info.State != api.SessionEnded || info.EndReason == nil {
		ss.t.Errorf("DELETE session %s: HTTP %d (%v): %s", s.id, status, err, raw)
	}
	return info
}

// closeAll deletes every session of the case not deleted yet.
func (ss *sessionSet) closeAll() {
	for _, s := range ss.all {
		if !s.closed {
			ss.del(s)
		}
	}
}

// apiError decodes the one error shape.
func apiError(t *testing.T, raw []byte) api.ErrorBody {
	t.Helper()
	var e api.ErrorBody
	if err := strictJSON(raw, &e); err != nil || e.Error.Type == "" || e.Error.Message == "" {
		t.Errorf("not the error shape (%v): %s", err, raw)
	}
	return e
}

// fields formats the values of m at keys, separated by spaces.
func fields(m map[string]any, keys ...string) string {
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprint(m[k]))
	}
	return strings.Join(out, " ")
}

// callJSON decodes the last stdout line of a call as the snippet's JSON.
func callJSON(t *testing.T, r *api.SessionExecuteResponse) map[string]any {
	t.Helper()
	return outJSON(t, &r.ExecuteResponse)
}

// wantCall checks a call's status, that the interpreter was kept and that
// the session lives on.
func wantCall(t *testing.T, r *api.SessionExecuteResponse, status string) {
	t.Helper()
	wantStatus(t, &r.ExecuteResponse, status)
	if r.Session.StateLost || r.Session.State != api.SessionIdle {
		t.Errorf("call %d: session %+v, want it idle with its interpreter kept", r.ExecutionCount, r.Session)
	}
}

// jailFile is the path of name in the jail's cgroup, in whichever of the
// daemon's hierarchies has it ("" if none).
func (cg *jailCgroups) jailFile(id, name string) string {
	for _, p := range cg.parents {
		f := filepath.Join(p, id, name)
		if _, err := os.Stat(f); err == nil {
			return f
		}
	}
	return ""
}

// jailCPU is the CPU time a jail's cgroup has used: cpuacct.usage on
// cgroup v1, cpu.stat's usage_usec on v2.
func (cg *jailCgroups) jailCPU(id string) (time.Duration, error) {
	if f := cg.jailFile(id, "cpuacct.usage"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return time.Duration(ns), err
	}
	if f := cg.jailFile(id, "cpu.stat"); f != "" {
		if us, ok := kvFile(f)["usage_usec"]; ok {
			return time.Duration(us) * time.Microsecond, nil
		}
	}
	return 0, fmt.Errorf("jail %s has no CPU accounting file", id)
}

// jailFrozen reports the jail cgroup's freezer state: freezer.state on
// cgroup v1, cgroup.events' frozen on v2.
func (cg *jailCgroups) jailFrozen(id string) (bool, error) {
	if f := cg.jailFile(id, "freezer.state"); f != "" {
		b, err := os.ReadFile(f)
		return strings.TrimSpace(string(b)) == "FROZEN", err
	}
	if f := cg.jailFile(id, "cgroup.events"); f != "" {
		if v, ok := kvFile(f)["frozen"]; ok {
			return v == 1, nil
		}
	}
	return false, fmt.Errorf("jail %s has no freezer file", id)
}

// jailProcs lists the host pids of the processes in a jail's cgroup.
func (cg *jailCgroups) jailProcs(id string) []int {
	b, _ := os.ReadFile(filepath.Join(cg.memory, id, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(f); err == nil {
			pids = append(pids, p)
		}
	}
	return pids
}

// survivors lists which of pids still run in the jail's cgroup (a pid
// reused by another process does not count).
func survivors(pids []int, jail string) []string {
	var left []string
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", p))
		if err == nil && strings.Contains(string(b), jail) {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
			left = append(left, fmt.Sprintf("pid %d (%s)", p, strings.ReplaceAll(strings.TrimSpace(string(cmd)), "\x00", " ")))
		}
	}
	return left
}

// heldBy lists the host processes that hold one of the fd targets (a
// "pipe:[inode]", "socket:[inode]", ...).
func heldBy(targets map[string]bool) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		for _, l := range fdLinks(pid) {
			if targets[l] {
				comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				out = append(out, fmt.Sprintf("pid %d (%s) holds %s", pid, strings.TrimSpace(string(comm)), l))
			}
		}
	}
	sort.Strings(out)
	return out
}

func sessionCases() []hcase {
	return []hcase{
		{id: "S01", cat: catSession, title: "a background sleep, a spinning forked child and a spinning daemon thread left running between calls",
			expect: "between calls the session's cgroup is frozen: its processes are there but use no CPU; they run again in the next call; after DELETE none of them is left",
			run:    runSessionFrozen},
		{id: "S02", cat: catSession, title: "files in /tmp, the workspace and /dev/shm and an abstract socket planted by one session for another",
			expect: "the planting session sees them in its next call; another session of the same uid, a session of another uid and a fresh run see none of them",
			run:    runSessionPlant},
		{id: "S03", cat: catSession, title: "fds kept in globals across calls (file, pipe, socketpair, listening socket, memfd), and init's control and status fds",
			expect: "the runner has only fds 0-4 (5 and 6, init's control and status pipes, are not among them); /proc/1/fd of the non-dumpable init is refused; kept fds work in the next call; after DELETE no host process holds any of the jail's pipes or sockets",
			run:    runSessionFds},
		{id: "S04", cat: catSession, title: "forged end records: for the next calls on fd 4, and from a frozen child that wakes in the next call",
			expect: "ends of later calls written in one call are dropped: the next call returns its own output; a forger woken in a later call can cut short only its own session's call: a concurrent session's call is exact and the forger's session keeps its state",
			run:    runSessionForgedRecords},
		{id: "S05", cat: catSession, title: "SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGSEGV, SIGSTOP and SIGKILL to pid 1, then kill(-1, SIGKILL) from a child",
			expect: "pid 1 (init) ignores them all and the session keeps its state; kill(-1) loses only the session's own interpreter (a fresh one in the same jail); another session is untouched",
			run:    runSessionSignals},
		{id: "S06", cat: catSession, title: "uid 65534 against root's session while it runs a call, then opens sessions past its cap",
			expect: "GET, execute, interrupt and DELETE of root's session answer 404 exactly as for an id that never existed, root's call completes untouched; uid 65534 gets 429 naming sessions.max_per_uid past 4 live sessions, and may open another once it deleted them",
			run:    runSessionOtherUID},
		{id: "S07", cat: catSession, title: "kill -9 of the daemon with an idle session (and its background process) and a session running a call, then a restart",
			expect: "the start-up sweep removes both jails (processes, frozen ones too, cgroups, mounts, state and run directories); calls on the old ids answer 409 naming daemon_restart; new sessions work",
			run:    runSessionCrashRestart},
		{id: "S08", cat: catSession, title: "a call that ignores SIGINT and spins past its timeout, with a background process from an earlier call",
			expect: "status timeout, state_lost with lost_reason timeout; the fresh interpreter is alone with init (the background process is gone) in the same jail; the workspace and /tmp are kept",
			run:    runSessionLoss},
		{id: "S09", cat: catSession, title: "a session with idle_timeout_s 1 and a background process, never deleted by its client",
			expect: "the reaper pauses it (sessions.on_idle; where it cannot pause: a session with egress, it ends it, end_reason idle_timeout) and its jail is destroyed; paused, its next call restores it with its background process; ended, a later call answers 409 and DELETE answers 200 with the reason kept",
			run:    runSessionIdle},
		{id: "S10", cat: catSession, title: "a call asks for the jail's own fields: limits.memory_mb, limits.pids, limits.file_size_mb, env, network, and a timeout above the maximum",
			expect: "400 invalid_argument naming each field; the session is unchanged",
			run:    runSessionCallFields},
		{id: "S11", cat: catSession, title: "the freeze between calls fails (simulated: the session's cgroup thawed from the host, the state libcontainer leaves after cgroup v1's \"unable to freeze\")",
			expect: "the next calls are served with the session's state (or the session ends with a reason); never a 5xx",
			run:    runSessionThawed},
	}
}

const spawnSpinners = `import json, os, subprocess, threading
p = subprocess.Popen(['sleep', '1000'])
child = os.fork()
if child == 0:
    while True: pass
def spin():
    while True: pass
spinner = threading.Thread(target=spin, daemon=True)
spinner.start()
print(json.dumps({'sleep': p.pid, 'child': child}))
`

func runSessionFrozen(t *testing.T, h *hostile) string {
	// The spinners' CPU is measured: no refill of the warm pools (a
	// preloaded jail imports for a second or more) may compete with them.
	h.waitPoolFull(t)
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	wantCall(t, ss.exec(s, code(spawnSpinners)), "ok")
	// In the next call the spinners run (the call's CPU time shows them)
	// and the processes of the first call are still there.
	r := ss.exec(s, code("import time\ntime.sleep(1)\nprint(p.poll(), os.waitpid(child, os.WNOHANG)[0], spinner.is_alive())"))
	wantCall(t, r, "ok")
	if r.Stdout != "None 0 True\n" {
		t.Errorf("the first call's processes in the second: %q, want the sleep, the child and the thread alive", r.Stdout)
	}
	if r.Usage.CPUMs < 500 {
		t.Errorf("a 1 s call with two spinners used %d ms of CPU: the spinners did not run", r.Usage.CPUMs)
	}
	// Between calls: frozen, its processes present, no CPU used.
	frozen, err := h.cg.jailFrozen(s.jail)
	if err != nil || !frozen {
		t.Errorf("between calls the session's cgroup is not frozen (%v)", err)
	}
	procs := h.cg.jailProcs(s.jail)
	if len(procs) < 4 {
		t.Errorf("between calls the session's cgroup holds %d processes, want init, the runner, the sleep and the child", len(procs))
	}
	c0, err := h.cg.jailCPU(s.jail)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	c1, _ := h.cg.jailCPU(s.jail)
	t.Logf("idle for 2 s: the session's cgroup used %v of CPU", c1-c0)
	if c1-c0 > 20*time.Millisecond {
		t.Errorf("idle between calls, the session's cgroup used %v of CPU in 2 s", c1-c0)
	}
	ss.del(s)
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if left = survivors(procs, s.jail); len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("10 s after DELETE the session's processes run on: %v", left)
	}
	return "frozen between calls: its processes are there and used no CPU in 2 s idle; they ran again in the next call; none is left after DELETE"
}

// plantProbe reports which of the planted things a call sees.
const plantProbe = `import json, os, socket
T = '%s'
def names(d):
    try: return sorted(n for n in os.listdir(d) if 'planted' in n)
    except OSError as e: return str(e)
s = socket.socket(socket.AF_UNIX)
try: s.connect('\0planted-' + T); abstract = 'connected'
except OSError as e: abstract = e.strerror
print(json.dumps({'tmp': os.path.exists('/tmp/planted-' + T), 'workspace': os.path.exists('planted-' + T),
                  'shm': os.path.exists('/dev/shm/planted-' + T), 'abstract': abstract,
                  'names': names('/tmp') + names('.') + names('/dev/shm')}))
`

func runSessionPlant(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	token := randHex(6)
	probe := fmt.Sprintf(plantProbe, token)
	a := ss.open(api.SessionCreateRequest{})
	wantCall(t, ss.exec(a, code(fmt.Sprintf(`import socket
T = '%s'
for p in ('/tmp/planted-' + T, 'planted-' + T, '/dev/shm/planted-' + T):
    open(p, 'w').write('import os; os.system("id")')
listener = socket.socket(socket.AF_UNIX)
listener.bind('\0planted-' + T)
listener.listen()
print('planted')
`, token))), "ok")
	// Control: the planting session sees all of it in its next call.
	r := ss.exec(a, code(probe))
	wantCall(t, r, "ok")
	if got := callJSON(t, r); fields(got, "tmp", "workspace", "shm", "abstract") != "true true true connected" {
		t.Fatalf("the planting session does not see its own plants: %v", got)
	}
	clean := func(who string, out map[string]any) {
		t.Helper()
		if fields(out, "tmp", "workspace", "shm", "abstract") != "false false false Connection refused" || fmt.Sprint(out["names"]) != "[]" {
			t.Errorf("%s sees what session A planted: %v", who, out)
		}
	}
	b := ss.open(api.SessionCreateRequest{})
	r = ss.exec(b, code(probe))
	wantCall(t, r, "ok")
	clean("another session of the same uid", callJSON(t, r))
	c, status, raw := ss.openNobody(api.SessionCreateRequest{})
	if c == nil {
		t.Fatalf("create a session as uid %d: HTTP %d: %s", nobodyUID, status, raw)
	}
	r = ss.exec(c, code(probe))
	wantCall(t, r, "ok")
	clean("a session of uid 65534", callJSON(t, r))
	clean("a fresh run", outJSON(t, h.exec(t, api.ExecuteRequest{Code: probe})))
	ss.del(a)
	clean("a fresh run after the planting session ended", outJSON(t, h.exec(t, api.ExecuteRequest{Code: probe})))
	return "the planting session sees all four in its next call; another session of root, a session of uid 65534 and fresh runs (during and after) see none"
}

func runSessionFds(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	r := ss.exec(s, code(`import errno, json, os, socket, stat
def kind(fd):
    try: m = os.fstat(fd).st_mode
    except OSError: return None
    return 'fifo' if stat.S_ISFIFO(m) else 'socket' if stat.S_ISSOCK(m) else 'char' if stat.S_ISCHR(m) else 'file' if stat.S_ISREG(m) else oct(m)
fds = {fd: kind(fd) for fd in range(256) if kind(fd)}
def attempt(f):
    try: f(); return 'allowed'
    except OSError as e: return errno.errorcode.get(e.errno, str(e.errno))
init = {'listdir /proc/1/fd': attempt(lambda: os.listdir('/proc/1/fd')),
        'listdir /proc/1/fdinfo': attempt(lambda: os.listdir('/proc/1/fdinfo')),
        'readlink /proc/1/fd/5': attempt(lambda: os.readlink('/proc/1/fd/5')),
        'write /proc/1/fd/5': attempt(lambda: os.close(os.open('/proc/1/fd/5', os.O_WRONLY))),
        'read /proc/1/fd/6': attempt(lambda: os.close(os.open('/proc/1/fd/6', os.O_RDONLY)))}
held_file = open('/tmp/held', 'w+')
held_file.write('kept')
held_file.flush()
pr, pw = os.pipe()
os.write(pw, b'queued')
sa, sb = socket.socketpair()
listener = socket.socket()
listener.bind(('127.0.0.1', 0))
listener.listen()
memfd = os.memfd_create('jaild-held')
os.write(memfd, b'memfd')
print(json.dumps({'fds': fds, 'init': init}))
`))
	wantCall(t, r, "ok")
	out := callJSON(t, r)
	fds, _ := out["fds"].(map[string]any)
	var open []int
	for fd := range fds {
		n, _ := strconv.Atoi(fd)
		open = append(open, n)
	}
	sort.Ints(open)
	if fmt.Sprint(open) != "[0 1 2 3 4]" || fds["3"] != "fifo" || fds["4"] != "fifo" {
		t.Errorf("the runner's fds at a call's start: %v, want 0-4 only (3 jobs and 4 records pipes)", fds)
	}
	init, _ := out["init"].(map[string]any)
	for _, k := range []string{"listdir /proc/1/fd", "listdir /proc/1/fdinfo", "readlink /proc/1/fd/5", "write /proc/1/fd/5", "read /proc/1/fd/6"} {
		if init[k] != "EACCES" {
			t.Errorf("%s from the user's code: %v, want EACCES (init is non-dumpable)", k, init[k])
		}
	}
	// The kept fds work in the next call, and init's stay out of reach.
	r = ss.exec(s, code(`import json
sa.send(b'ping')
held_file.seek(0)
os.lseek(memfd, 0, 0)
print(json.dumps({'pipe': os.read(pr, 6).decode(), 'socketpair': sb.recv(4).decode(), 'file': held_file.read(),
                  'memfd': os.read(memfd, 5).decode(), 'listening': listener.getsockname()[0], 'init': attempt(lambda: os.listdir('/proc/1/fd'))}))
`))
	wantCall(t, r, "ok")
	if got := callJSON(t, r); fields(got, "pipe", "socketpair", "file", "memfd", "listening", "init") != "queued ping kept memfd 127.0.0.1 EACCES" {
		t.Errorf("kept fds in the next call: %v", got)
	}
	// What the jail's processes hold now: none of it may outlive DELETE.
	procs := h.cg.jailProcs(s.jail)
	targets := map[string]bool{}
	sockets := 0
	for _, p := range procs {
		for _, l := range fdLinks(p) {
			if strings.HasPrefix(l, "pipe:[") || strings.HasPrefix(l, "socket:[") || strings.HasPrefix(l, "/memfd:jaild-held") {
				targets[l] = true
				if strings.HasPrefix(l, "socket:[") {
					sockets++
				}
			}
		}
	}
	if sockets < 3 {
		t.Errorf("the host sees %d sockets held by the session's processes, want the socketpair and the listener", sockets)
	}
	ss.del(s)
	var held []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if held = heldBy(targets); len(held) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(held) > 0 {
		t.Errorf("30 s after DELETE, host processes still hold the session's fds: %v", held)
	}
	return "the runner holds fds 0-4 only; /proc/1/fd, fdinfo and fds 5 and 6 of init: EACCES; kept fds worked in the next call; after DELETE no host process holds any of the session's pipes, sockets or memfd"
}

func runSessionForgedRecords(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	a, b := ss.open(api.SessionCreateRequest{}), ss.open(api.SessionCreateRequest{})
	r := ss.exec(a, code(`import json, os
n = 1
for call in range(1, 41):
    os.write(4, json.dumps({'type': 'end', 'status': 0, 'call': call + 1}).encode() + b'\n')
os.write(4, b'{"type": "end", "status": 0}\n{"type": "exit", "signal": 9}\n')
print('one')
`))
	wantCall(t, r, "ok")
	if r.Stdout != "one\n" {
		t.Errorf("call 1 stdout %q", r.Stdout)
	}
	r = ss.exec(a, code("import time\ntime.sleep(0.5)\nprint('two')\nn += 1"))
	wantCall(t, r, "ok")
	if r.Stdout != "two\n" || r.ExecutionCount != 2 {
		t.Errorf("call 2 after forged ends of calls 2-41: count %d stdout %q, want its own output whole", r.ExecutionCount, r.Stdout)
	}
	// A child frozen with the session wakes in call 4 and forges its end,
	// and writes to the session's stdout, while session B runs a call.
	wantCall(t, ss.exec(a, code(`import json, os, time
if os.fork() == 0:
    time.sleep(0.2)
    for i in range(25):
        os.write(4, json.dumps({'type': 'end', 'status': 0, 'call': 4}).encode() + b'\n')
        os.write(1, b'FORGED\n')
        time.sleep(0.02)
    os._exit(0)
n += 1
print('three')
`)), "ok")
	ra := ss.execAsync(a, code("import time\ntime.sleep(1)\nprint('four')\nn += 1"))
	rb := ss.exec(b, code("import time\ntime.sleep(1)\nprint('bee')"))
	wantCall(t, rb, "ok")
	if rb.Stdout != "bee\n" {
		t.Errorf("session B's call beside session A's forger: stdout %q, want %q", rb.Stdout, "bee\n")
	}
	r4 := ss.wait(a, ra)
	t.Logf("session A's call 4 with a forger: status %s after %d ms, stdout %q", r4.Status, r4.Usage.DurationMs, r4.Stdout)
	// Whatever call 4 returned, A goes on: its state kept, its own output
	// in its next call (after what call 4's code printed late, if the
	// forged end cut it short).
	r = ss.exec(a, code("import time\ntime.sleep(0.5)\nprint('five', n)"))
	wantCall(t, r, "ok")
	if !strings.HasSuffix(r.Stdout, "five 4\n") || r.ExecutionCount != 5 {
		t.Errorf("session A after its forger: call %d stdout %q, want its own output and n == 4", r.ExecutionCount, r.Stdout)
	}
	return "call 2 returned its own output whole after 40 forged ends in call 1; a woken forger's end of call 4 touched only its own session: session B's concurrent call exact, session A's state kept"
}

func runSessionSignals(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	a, b := ss.open(api.SessionCreateRequest{}), ss.open(api.SessionCreateRequest{})
	wantCall(t, ss.exec(b, code("y = 7")), "ok")
	r := ss.exec(a, code(`import json, os, signal, time
x = 41
start = open('/proc/1/stat').read().split()[21]
sigs = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGSEGV, signal.SIGSTOP, signal.SIGKILL]
sent = {}
for s in sigs:
    try: os.kill(1, s); sent[s.name] = 'sent'
    except OSError as e: sent[s.name] = e.strerror
c = os.fork()
if c == 0:
    for s in sigs: os.kill(1, s)
    os._exit(0)
os.waitpid(c, 0)
time.sleep(0.3)
state = [l.split()[1] for l in open('/proc/1/status') if l.startswith('State:')][0]
print(json.dumps({'sent': sent, 'state': state, 'start': start}))
`))
	wantCall(t, r, "ok")
	out := callJSON(t, r)
	if out["state"] != "S" {
		t.Errorf("pid 1's state after the signals: %v, want S (sleeping), not stopped", out["state"])
	}
	r = ss.exec(a, code("print(x + 1, open('/proc/1/stat').read().split()[21] == start)"))
	wantCall(t, r, "ok")
	if r.Stdout != "42 True\n" {
		t.Errorf("after signalling pid 1, the next call: %q, want the same init and x kept", r.Stdout)
	}
	// kill(-1, SIGKILL) from a child kills the runner: the session's own
	// interpreter, nothing else.
	r = ss.exec(a, code(`import os, signal, time
if os.fork() == 0:
    os.kill(-1, signal.SIGKILL)
    os._exit(0)
time.sleep(5)
print('survived')
`))
	if !r.Session.StateLost || r.Session.State != api.SessionIdle || r.Session.LostReason == nil || *r.Session.LostReason != "crashed" {
		t.Errorf("kill(-1, SIGKILL) from a child: status %s session %+v, want state_lost (crashed) and the session idle", r.Status, r.Session)
	}
	r = ss.exec(a, code(fmt.Sprintf(`try: x
except NameError: x = 'fresh'
print(x, open('/proc/1/stat').read().split()[21] == %q)
`, fmt.Sprint(out["start"]))))
	wantCall(t, r, "ok")
	if r.Stdout != "fresh True\n" {
		t.Errorf("after the loss: %q, want a fresh interpreter beside the same init", r.Stdout)
	}
	r = ss.exec(b, code("print(y)"))
	wantCall(t, r, "ok")
	if r.Stdout != "7\n" {
		t.Errorf("the other session after session A's signals: %q", r.Stdout)
	}
	return fmt.Sprintf("pid 1 stayed (state %v) and the session kept its state; kill(-1, SIGKILL) lost only its own interpreter (crashed), a fresh one started in the same jail; the other session untouched", out["state"])
}

func runSessionOtherUID(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	a := ss.open(api.SessionCreateRequest{})
	wantCall(t, ss.exec(a, code("secret = 'root-session'")), "ok")
	running := ss.execAsync(a, code("import time\ntime.sleep(3)\nprint(secret)"))
	waitFor(t, 30*time.Second, "root's call to run", func() bool { return ss.get(a).State == api.SessionRunning })

	// A well-formed id of this daemon that never existed.
	never := a.id[:strings.LastIndex(a.id, "-")+1] + strings.Repeat("0", 24)
	type probe struct{ method, suffix, body string }
	for _, p := range []probe{{"GET", "", ""}, {"POST", "/execute", `{"code":"print(secret)"}`}, {"POST", "/interrupt", `{}`}, {"DELETE", "", ""}} {
		status, _, raw := curlAs(t, h.d.Socket, p.method, "/v1/sessions/"+a.id+p.suffix, p.body)
		e := apiError(t, raw)
		status2, _, raw2 := curlAs(t, h.d.Socket, p.method, "/v1/sessions/"+never+p.suffix, p.body)
		e2 := apiError(t, raw2)
		if status != http.StatusNotFound || e.Error.Type != "not_found" {
			t.Errorf("%s /v1/sessions/{root's}%s as uid %d: HTTP %d %+v, want 404 not_found", p.method, p.suffix, nobodyUID, status, e.Error)
		}
		if status != status2 || strings.ReplaceAll(e.Error.Message, a.id, "ID") != strings.ReplaceAll(e2.Error.Message, never, "ID") {
			t.Errorf("%s%s: root's session (HTTP %d %q) is told apart from one that never existed (HTTP %d %q)", p.method, p.suffix, status, e.Error.Message, status2, e2.Error.Message)
		}
	}
	status, _, raw := curlAs(t, h.d.Socket, "GET", "/v1/sessions", "")
	var list api.SessionList
	if err := strictJSON(raw, &list); status != http.StatusOK || err != nil {
		t.Errorf("GET /v1/sessions as uid %d: HTTP %d (%v): %s", nobodyUID, status, err, raw)
	}
	for _, s := range list.Sessions {
		if s.UID != nobodyUID || s.SessionID == a.id {
			t.Errorf("GET /v1/sessions as uid %d lists session %s of uid %d", nobodyUID, s.SessionID, s.UID)
		}
	}
	r := ss.wait(a, running)
	wantCall(t, r, "ok")
	if r.Stdout != "root-session\n" {
		t.Errorf("root's call while uid %d probed its session: stdout %q", nobodyUID, r.Stdout)
	}

	// The per-uid cap.
	var mine []*sess
	var refused api.ErrorBody
	refusedStatus := 0
	for range sessMaxPerUID + 2 {
		s, status, raw := ss.openNobody(api.SessionCreateRequest{})
		if s == nil {
			refusedStatus, refused = status, apiError(t, raw)
			break
		}
		mine = append(mine, s)
	}
	if len(mine) != sessMaxPerUID || refusedStatus != http.StatusTooManyRequests || refused.Error.Type != "rate_limited" || !strings.Contains(refused.Error.Message, "max_per_uid") {
		t.Errorf("uid %d opened %d sessions, then HTTP %d %+v; want %d, then 429 rate_limited naming max_per_uid", nobodyUID, len(mine), refusedStatus, refused.Error, sessMaxPerUID)
	}
	for i, s := range mine {
		r := ss.exec(s, code(fmt.Sprintf("print(%d)", i)))
		wantCall(t, r, "ok")
	}
	for _, s := range mine {
		ss.del(s)
	}
	again, status, raw := ss.openNobody(api.SessionCreateRequest{})
	if again == nil {
		t.Errorf("uid %d after deleting its sessions: HTTP %d %s, want a new session", nobodyUID, status, raw)
	} else {
		wantCall(t, ss.exec(again, code("print(1)")), "ok")
		ss.del(again)
	}
	wantCall(t, ss.exec(a, code("print(secret)")), "ok")
	return fmt.Sprintf("GET, execute, interrupt, DELETE: HTTP 404 not_found, as for an id that never existed; root's call completed; past %d sessions HTTP %d %s naming max_per_uid; a new one after DELETE", len(mine), refusedStatus, refused.Error.Type)
}

func runSessionCrashRestart(t *testing.T, h *hostile) string {
	d, cg, end := h.caseDaemon(t)
	defer end()
	ss := &sessionSet{h: h, d: d, t: t}
	idle, busy := ss.open(api.SessionCreateRequest{}), ss.open(api.SessionCreateRequest{})
	wantCall(t, ss.exec(idle, code("import subprocess\np = subprocess.Popen(['sleep', '1000'])")), "ok")
	wantCall(t, ss.exec(busy, code("x = 1")), "ok")
	ss.execAsync(busy, api.SessionExecuteRequest{Code: "open('started', 'w').close()\nimport time\ntime.sleep(120)", Limits: &api.Limits{TimeoutMs: ptr(int64(120000))}})
	waitFor(t, 30*time.Second, "the call to start", func() bool {
		_, err := os.Stat(filepath.Join(d.Dir, "run", "runs", busy.jail, "work", "started"))
		return err == nil
	})
	frozen, _ := cg.jailFrozen(idle.jail)
	if !frozen {
		t.Errorf("the idle session's cgroup is not frozen")
	}
	if err := d.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.Exited()
	live := cg.live()
	if !live[idle.jail] || !live[busy.jail] {
		t.Fatalf("after kill -9 the sessions' jails should be orphaned; live: %v", live)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	var why string
	waitFor(t, 60*time.Second, "the sweep", func() bool {
		jails := []string{idle.jail, busy.jail}
		why = h.sweepLeft(d, cg, jails, jails)
		return why == ""
	})
	for _, s := range ss.all {
		s.closed = true // the restart ended them
	}
	type probe struct{ method, suffix string }
	for _, s := range []*sess{idle, busy} {
		for _, p := range []probe{{"POST", "/execute"}, {"GET", ""}, {"DELETE", ""}} {
			var body any
			if p.method == "POST" {
				body = code("print(p)")
			}
			status, raw := ss.request(false, p.method, "/v1/sessions/"+s.id+p.suffix, body)
			if e := apiError(t, raw); status != http.StatusConflict || e.Error.Type != "conflict" || !strings.Contains(e.Error.Message, "daemon_restart") {
				t.Errorf("%s of a session of the killed daemon: HTTP %d %+v, want 409 conflict naming daemon_restart", p.method+p.suffix, status, e.Error)
			}
		}
	}
	var list api.SessionList
	if status, _ := d.call(t, "GET", "/v1/sessions", nil, &list); status != http.StatusOK || len(list.Sessions) != 0 {
		t.Errorf("the restarted daemon lists sessions: HTTP %d %+v", status, list)
	}
	fresh := ss.open(api.SessionCreateRequest{})
	r := ss.exec(fresh, code("n = 1\nn + 1"))
	wantCall(t, r, "ok")
	if r.Result == nil || *r.Result != "2" {
		t.Errorf("a new session after the restart: %+v", r.ExecuteResponse)
	}
	ss.del(fresh)
	waitFor(t, 30*time.Second, "the new session's jail to go", func() bool { return !cg.live()[fresh.jail] })
	if err := d.Stop(); err != nil {
		t.Error(err)
	}
	for _, p := range cg.parents {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("cgroup directory %s left after a clean stop", p)
		}
	}
	return "both jails swept at restart (the frozen one too): processes, cgroups, mounts, state and run dirs; execute, GET and DELETE of the old ids: HTTP 409 conflict naming daemon_restart; a new session works"
}

func runSessionLoss(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	wantCall(t, ss.exec(s, code(`import subprocess
p = subprocess.Popen(['sleep', '1000'])
open('/tmp/kept', 'w').write('tmp')
open('kept', 'w').write('workspace')
x = 1
start = open('/proc/1/stat').read().split()[21]
`)), "ok")
	r := ss.exec(s, api.SessionExecuteRequest{Code: "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass", Limits: &api.Limits{TimeoutMs: ptr(int64(1000))}})
	wantStatus(t, &r.ExecuteResponse, "timeout")
	if !r.Session.StateLost || r.Session.LostReason == nil || *r.Session.LostReason != "timeout" || r.Session.State != api.SessionIdle {
		t.Errorf("a call that ignores SIGINT past its timeout: session %+v, want state_lost (timeout) and the session idle", r.Session)
	}
	r = ss.exec(s, code(`import json, os
try: x; fresh = False
except NameError: fresh = True
print(json.dumps({'fresh': fresh, 'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()),
                  'tmp': open('/tmp/kept').read(), 'workspace': open('kept').read()}))
`))
	wantCall(t, r, "ok")
	if got := callJSON(t, r); fields(got, "fresh", "pids", "tmp", "workspace") != "true [1] tmp workspace" {
		t.Errorf("after the loss: %v, want a fresh interpreter alone with init, the workspace and /tmp kept", got)
	}
	if n := len(h.cg.jailProcs(s.jail)); n != 2 {
		t.Errorf("after the loss the session's cgroup holds %d processes, want init and the runner", n)
	}
	return "status timeout, state_lost (timeout); the fresh interpreter is alone with init in the same jail, the background process gone; /tmp and the workspace kept"
}

func runSessionIdle(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{IdleTimeoutS: ptr(int64(1))})
	wantCall(t, ss.exec(s, code("import subprocess\np = subprocess.Popen(['sleep', '1000'])")), "ok")
	var info api.Session
	waitFor(t, 15*time.Second, "the reaper to pause or end the session", func() bool {
		info = ss.get(s)
		return info.State == api.SessionEnded || info.State == api.SessionPaused
	})
	waitFor(t, 30*time.Second, "the idle session's jail to go", func() bool { return !h.cg.live()[s.jail] })
	pausable := h.info(t).Sessions.Pause.Available && s.jail != "" && h.d.inject == nil
	if info.State == api.SessionPaused {
		if !pausable {
			t.Errorf("paused where the daemon cannot pause it (%+v)", h.info(t).Sessions.Pause)
		}
		// Its next call restores it, the background process with it.
		s.jail = ""
		r := ss.exec(s, code("print(p.poll())"))
		wantCall(t, r, "ok")
		if r.Stdout != "None\n" || !r.Session.Resumed {
			t.Errorf("the call after the idle pause: %q resumed %v, want the sleep still running", r.Stdout, r.Session.Resumed)
		}
		if got := ss.del(s); got.EndReason == nil || *got.EndReason != "deleted" {
			t.Errorf("DELETE of the resumed session: end_reason %v", deref2(got.EndReason))
		}
		return "paused by the reaper, its jail destroyed; the next call restored it with its background process; DELETE: 200"
	}
	if pausable {
		t.Errorf("ended (%s) where the daemon can pause it", deref2(info.EndReason))
	}
	if info.EndReason == nil || *info.EndReason != "idle_timeout" {
		t.Errorf("ended idle session: end_reason %v", deref2(info.EndReason))
	}
	status, raw := ss.request(false, "POST", "/v1/sessions/"+s.id+"/execute", code("print(p)"))
	e := apiError(t, raw)
	if status != http.StatusConflict || !strings.Contains(e.Error.Message, "idle_timeout") {
		t.Errorf("a call after the idle timeout: HTTP %d %+v, want 409 naming idle_timeout", status, e.Error)
	}
	if got := ss.del(s); got.EndReason == nil || *got.EndReason != "idle_timeout" {
		t.Errorf("DELETE of the ended session: end_reason %v, want idle_timeout kept", deref2(got.EndReason))
	}
	return fmt.Sprintf("ended by the reaper (%s), its jail destroyed; a later call: HTTP %d %s; DELETE: 200, reason kept", deref2(info.EndReason), status, e.Error.Type)
}

func runSessionCallFields(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	wantCall(t, ss.exec(s, code("k = 'kept'")), "ok")
	maxTimeout := h.info(t).AdminMaxima.TimeoutMs
	var named []string
	for _, c := range []struct {
		field string
		body  api.SessionExecuteRequest
	}{
		{"limits.memory_mb", api.SessionExecuteRequest{Code: "1", Limits: &api.Limits{MemoryMB: ptr(int64(2048))}}},
		{"limits.pids", api.SessionExecuteRequest{Code: "1", Limits: &api.Limits{Pids: ptr(int64(1024))}}},
		{"limits.file_size_mb", api.SessionExecuteRequest{Code: "1", Limits: &api.Limits{FileSizeMB: ptr(int64(1024))}}},
		{"env", api.SessionExecuteRequest{Code: "1", Env: map[string]string{"A": "b"}}},
		{"network", api.SessionExecuteRequest{Code: "1", Network: "internet"}},
		{"limits.timeout_ms", api.SessionExecuteRequest{Code: "1", Limits: &api.Limits{TimeoutMs: ptr(int64(maxTimeout + 1))}}},
	} {
		status, raw := ss.request(false, "POST", "/v1/sessions/"+s.id+"/execute", c.body)
		e := apiError(t, raw)
		if status != http.StatusBadRequest || e.Error.Type != "invalid_argument" || !strings.Contains(e.Error.Message, c.field) {
			t.Errorf("a call with %s: HTTP %d %+v, want 400 invalid_argument naming it", c.field, status, e.Error)
			continue
		}
		named = append(named, c.field)
	}
	r := ss.exec(s, code("print(k)"))
	wantCall(t, r, "ok")
	info := ss.get(s)
	if r.Stdout != "kept\n" || r.ExecutionCount != 2 || info.Limits.MemoryMB != h.info(t).Defaults.MemoryMB {
		t.Errorf("the session after the refused calls: call %d stdout %q, limits %+v", r.ExecutionCount, r.Stdout, info.Limits)
	}
	if info.ExecutionCount != r.ExecutionCount {
		t.Logf("GET says execution_count %d, the last call was number %d", info.ExecutionCount, r.ExecutionCount)
	}
	return "HTTP 400 invalid_argument naming " + strings.Join(named, ", ") + "; the session unchanged"
}

// thawBehind thaws a jail's cgroup behind the daemon's back, as
// libcontainer leaves it when freezing fails (on cgroup v1 it gives up on a
// cgroup stuck in FREEZING, e.g. a task in uninterruptible sleep, and
// thaws it back).
func (cg *jailCgroups) thawBehind(id string) error {
	if f := cg.jailFile(id, "freezer.state"); f != "" {
		return os.WriteFile(f, []byte("THAWED"), 0o644)
	}
	if f := cg.jailFile(id, "cgroup.freeze"); f != "" {
		return os.WriteFile(f, []byte("0"), 0o644)
	}
	return fmt.Errorf("jail %s has no freezer file", id)
}

func runSessionThawed(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	wantCall(t, ss.exec(s, code("x = 'kept'")), "ok")
	if frozen, err := h.cg.jailFrozen(s.jail); err != nil || !frozen {
		t.Fatalf("the session is not frozen after a call (%v)", err)
	}
	if err := h.cg.thawBehind(s.jail); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for i := range 2 {
		status, raw := ss.request(false, "POST", "/v1/sessions/"+s.id+"/execute", code("print(x)"))
		switch {
		case status == http.StatusOK:
			r := ss.callResult(s, raw)
			wantCall(t, r, "ok")
			if r.Stdout != "kept\n" {
				t.Errorf("call %d after the failed freeze: stdout %q, want the session's state", i+2, r.Stdout)
			}
			seen = append(seen, "HTTP 200 with the state kept")
		case status == http.StatusConflict:
			e := apiError(t, raw)
			if info := ss.get(s); info.State != api.SessionEnded || info.EndReason == nil {
				t.Errorf("call %d after the failed freeze: HTTP 409 %+v, but the session is %s", i+2, e.Error, info.State)
			}
			seen = append(seen, "HTTP 409 "+e.Error.Type+", the session ended")
		default:
			e := apiError(t, raw)
			t.Errorf("call %d after the failed freeze: HTTP %d %+v, want the call served or the session ended", i+2, status, e.Error)
			seen = append(seen, fmt.Sprintf("HTTP %d %s", status, e.Error.Type))
		}
	}
	return "the next two calls: " + strings.Join(seen, "; ")
}
