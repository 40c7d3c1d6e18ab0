package tests

// Paused sessions (issue 28): a checkpoint is the session's memory, on the
// daemon's disk. The cases: a checkpoint changed on disk, a session
// holding what CRIU cannot dump, another uid after a paused session and
// its checkpoint, a session looking for traces of its pause after the
// restore, fork children after each other, another uid after a
// snapshot, and pausing as a way past the session caps. Their sessions ask for no network (a session with egress cannot
// pause), in the networked suite too.

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

func pauseCases() []hcase {
	return []hcase{
		{id: "S50", cat: catSession, title: "a paused session's checkpoint changed on disk (one bit of its memory), then called",
			expect: "the call is refused (409 naming resume_failed) and nothing of the checkpoint runs; the session has ended and its checkpoint is deleted",
			run:    runPauseTampered},
		{id: "S51", cat: catSession, title: "a session holding what CRIU cannot dump (a 2 MiB file in /tmp, deleted and kept open), paused",
			expect: "the pause answers 409 with CRIU's reason, naming no host path; the session keeps running with its state; nothing of a checkpoint is left",
			run:    runPauseRefused},
		{id: "S52", cat: catSession, title: "uid 65534 after root's paused session: pause, resume, execute, GET and DELETE of its id, and its checkpoint on the host's disk",
			expect: "every request is 404 as for an id that never existed, and the session stays paused; the checkpoint directory is root's 0700: uid 65534 opens none of its files; the owner's next call restores it",
			run:    runPauseOtherUID},
		{id: "S53", cat: catSession, title: "a restored session looks for traces of its pause: its mounts, cgroup, fds, environment and uid map before and after",
			expect: "the same view as before the pause but for the jail's new host ids (uid_map): no host path, no checkpoint, no fd beyond its own; init (executed afresh after the restore) is still non-dumpable: /proc/1/fd refused",
			run:    runPauseTraces},
		{id: "S54", cat: catSession, title: "two fork children of a session go after each other and the parent: kill(-1, SIGKILL) in one, a look for the others' files and processes, random draws compared",
			expect: "the kill reaches only the child's own processes: the other child and the parent answer with their state; no child sees another's /tmp or processes; no two of them draw the same random numbers",
			run:    runForkIsolation},
		{id: "S55", cat: catSession, title: "uid 65534 after root's session and its snapshot: fork of the session, GET and DELETE of the snapshot, a session from it, its own session rolled back to it",
			expect: "every request is 404 as for an id that never existed (the rollback's naming snapshot_id); the snapshot stays, and root's session rolls back to it",
			run:    runSnapshotOtherUID},
		{id: "S56", cat: catSession, title: "pausing as a way past the session caps: uid 65534 pauses two sessions, opens sessions.max_per_uid more in their place, then calls a paused one",
			expect: "the call is 429 naming sessions.max_per_uid and saying the session stays paused (a paused session holds no room, and restoring it asks for it again); it stays paused, and once one session is closed the call restores it with its state",
			run:    runPauseCaps},
	}
}

func runPauseCaps(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	var paused []*sess
	for _, v := range []string{"a", "b"} {
		s, st, raw := ss.openNobody(api.SessionCreateRequest{})
		if s == nil {
			t.Fatalf("uid 65534's session: HTTP %d: %s", st, raw)
		}
		wantCall(t, ss.exec(s, code("v = '"+v+"'")), "ok")
		if status, raw := ss.request(true, "POST", "/v1/sessions/"+s.id+"/pause", nil); status != http.StatusOK {
			t.Fatalf("pause: HTTP %d: %s", status, raw)
		}
		s.jail = ""
		paused = append(paused, s)
	}
	var more []*sess
	for range sessMaxPerUID {
		s, st, raw := ss.openNobody(api.SessionCreateRequest{})
		if s == nil {
			t.Fatalf("uid 65534's sessions in place of the paused ones: HTTP %d: %s", st, raw)
		}
		more = append(more, s)
	}
	a := paused[0]
	status, raw := ss.request(true, "POST", "/v1/sessions/"+a.id+"/execute", code("v"))
	if e := apiError(t, raw); status != http.StatusTooManyRequests || !strings.Contains(e.Error.Message, "sessions.max_per_uid") || !strings.Contains(e.Error.Message, "stays paused") {
		t.Fatalf("a call on a paused session past uid 65534's cap: HTTP %d %s", status, raw)
	}
	var info api.Session
	if status, raw := ss.request(true, "GET", "/v1/sessions/"+a.id, nil); status != http.StatusOK || strictJSON(raw, &info) != nil || info.State != api.SessionPaused {
		t.Errorf("the refused session: HTTP %d %s, want paused", status, raw)
	}
	ss.del(more[0])
	if r := ss.exec(a, code("v")); r.Result == nil || *r.Result != "'a'" || !r.Session.Resumed {
		t.Errorf("the call once a session was closed: %+v", r)
	}
	return "the call was 429 naming sessions.max_per_uid, the session stayed paused; once one session was closed, the call restored it with its state"
}

func runForkIsolation(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	parent := pauseSession(t, ss, "import os, random, signal\nstate = 'parent'\nopen('/tmp/mine', 'w').write('parent')")
	status, raw := ss.request(false, "POST", "/v1/sessions/"+parent.id+"/fork", map[string]any{"count": 2})
	var fr api.SessionForkResponse
	if status != http.StatusOK || strictJSON(raw, &fr) != nil || len(fr.Sessions) != 2 {
		t.Fatalf("fork: HTTP %d: %s", status, raw)
	}
	a, b := &sess{id: fr.Sessions[0].SessionID}, &sess{id: fr.Sessions[1].SessionID}
	ss.all = append(ss.all, a, b)
	wantCall(t, ss.exec(a, code("state = 'a'\nopen('/tmp/mine', 'w').write('a')\nopen('/tmp/a-only', 'w').write('a')")), "ok")
	r := ss.exec(a, code("try:\n    os.kill(-1, signal.SIGKILL)\nexcept OSError as e:\n    print(e)"))
	if r.Status == "ok" && r.Session.StateLost {
		t.Logf("the killing child lost its own interpreter, as it may")
	}
	look := code("print(state, open('/tmp/mine').read(), os.path.exists('/tmp/a-only'), random.random())")
	rb, rp := ss.exec(b, look), ss.exec(parent, look)
	wantCall(t, rb, "ok")
	wantCall(t, rp, "ok")
	if !strings.HasPrefix(rb.Stdout, "parent parent False ") || !strings.HasPrefix(rp.Stdout, "parent parent False ") {
		t.Errorf("after child a's kill(-1): child b %q, parent %q", rb.Stdout, rp.Stdout)
	}
	drawB, drawP := strings.Fields(rb.Stdout), strings.Fields(rp.Stdout)
	if len(drawB) == 0 || len(drawP) == 0 || drawB[len(drawB)-1] == drawP[len(drawP)-1] {
		t.Errorf("child b and the parent drew the same: %q %q", rb.Stdout, rp.Stdout)
	}
	pb := ss.exec(b, code("print(len([p for p in os.listdir('/proc') if p.isdigit()]))"))
	pp := ss.exec(parent, code("print(len([p for p in os.listdir('/proc') if p.isdigit()]))"))
	if pb.Stdout != pp.Stdout {
		t.Errorf("processes seen: child b %q, the parent %q", pb.Stdout, pp.Stdout)
	}
	return "child a's kill(-1) reached only its own processes; child b and the parent answered with their state, saw neither a's /tmp nor its processes, and drew different numbers"
}

func runSnapshotOtherUID(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := pauseSession(t, ss, "token = 'root-only'")
	status, raw := ss.request(false, "POST", "/v1/sessions/"+s.id+"/snapshots", nil)
	var sn api.Snapshot
	if status != http.StatusCreated || strictJSON(raw, &sn) != nil {
		t.Fatalf("snapshot: HTTP %d: %s", status, raw)
	}
	defer ss.request(false, "DELETE", "/v1/snapshots/"+sn.SnapshotID, nil) //nolint:errcheck // the case's cleanup
	mine, st, raw := ss.openNobody(api.SessionCreateRequest{})
	if mine == nil {
		t.Fatalf("uid 65534's own session: HTTP %d: %s", st, raw)
	}
	for _, r := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/sessions/" + s.id + "/fork", map[string]any{"count": 1}},
		{"POST", "/v1/sessions/" + s.id + "/snapshots", nil},
		{"GET", "/v1/snapshots/" + sn.SnapshotID, nil},
		{"DELETE", "/v1/snapshots/" + sn.SnapshotID, nil},
		{"POST", "/v1/sessions", map[string]any{"from_snapshot": sn.SnapshotID}},
		{"POST", "/v1/sessions/" + mine.id + "/restore", map[string]any{"snapshot_id": sn.SnapshotID}},
	} {
		if status, raw := ss.request(true, r.method, r.path, r.body); status != http.StatusNotFound {
			t.Errorf("uid 65534 %s %s: HTTP %d %s", r.method, r.path, status, raw)
		}
	}
	if status, raw := ss.request(true, "GET", "/v1/snapshots", nil); status != http.StatusOK || strings.Contains(string(raw), sn.SnapshotID) {
		t.Errorf("uid 65534's list of snapshots: HTTP %d %s", status, raw)
	}
	wantCall(t, ss.exec(s, code("token = 'changed'")), "ok")
	if status, raw := ss.request(false, "POST", "/v1/sessions/"+s.id+"/restore", map[string]any{"snapshot_id": sn.SnapshotID}); status != http.StatusOK {
		t.Fatalf("root's rollback: HTTP %d %s", status, raw)
	}
	s.jail = ""
	if r := ss.exec(s, code("token")); r.Result == nil || *r.Result != "'root-only'" {
		t.Errorf("after root's rollback: %+v", r)
	}
	return "every request of uid 65534 404; the snapshot stayed, and root's session rolled back to it"
}

// pauseSession opens a session without network (whatever the suite
// injects) and runs setup in it.
func pauseSession(t *testing.T, ss *sessionSet, setup string) *sess {
	t.Helper()
	s, status, raw := ss.create(false, api.SessionCreateRequest{})
	if s == nil {
		t.Fatalf("create a session: HTTP %d: %s", status, raw)
	}
	wantCall(t, ss.exec(s, code(setup)), "ok")
	return s
}

// pauseIt pauses s and checks the answer.
func pauseIt(t *testing.T, ss *sessionSet, s *sess) api.SessionPauseResponse {
	t.Helper()
	status, raw := ss.request(false, "POST", "/v1/sessions/"+s.id+"/pause", nil)
	var pr api.SessionPauseResponse
	if status != http.StatusOK || strictJSON(raw, &pr) != nil || pr.Session.State != api.SessionPaused {
		t.Fatalf("pause: HTTP %d: %s", status, raw)
	}
	s.jail = "" // the restore makes a new jail
	return pr
}

func checkpointDir(h *hostile) string { return filepath.Join(h.d.Dir, "checkpoints") }

func runPauseTampered(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := pauseSession(t, ss, "secret = 'kept'")
	pauseIt(t, ss, s)
	pages, _ := filepath.Glob(filepath.Join(checkpointDir(h), "*", "images", "pages-*.img"))
	largest, size := "", int64(0)
	for _, p := range pages {
		if fi, err := os.Stat(p); err == nil && fi.Size() > size {
			largest, size = p, fi.Size()
		}
	}
	if largest == "" {
		t.Fatalf("no pages image in the checkpoint directory")
	}
	b, err := os.ReadFile(largest)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(largest, b, 0o600); err != nil {
		t.Fatal(err)
	}
	status, raw := ss.request(false, "POST", "/v1/sessions/"+s.id+"/execute", code("print(secret)"))
	var e api.ErrorBody
	if status != http.StatusConflict || json.Unmarshal(raw, &e) != nil || !strings.Contains(e.Error.Message, "resume_failed") {
		t.Errorf("call on a tampered checkpoint: HTTP %d %s, want 409 naming resume_failed", status, raw)
	}
	var info api.Session
	if st, raw := ss.request(false, "GET", "/v1/sessions/"+s.id, nil); st != http.StatusOK || json.Unmarshal(raw, &info) != nil || info.State != api.SessionEnded {
		t.Errorf("the session after the refused restore: HTTP %d %s", st, raw)
	}
	s.closed = true
	waitFor(t, 10*time.Second, "the tampered checkpoint removed", func() bool {
		left, _ := filepath.Glob(filepath.Join(checkpointDir(h), "s-*"))
		return len(left) == 0
	})
	return "409 naming resume_failed; nothing of it ran; the session ended and its checkpoint is gone"
}

func runPauseRefused(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := pauseSession(t, ss, "import os\nx = 7\nf = open('/tmp/big', 'wb')\nf.write(os.urandom(2 << 20)); f.flush()\nos.unlink('/tmp/big')")
	status, raw := ss.request(false, "POST", "/v1/sessions/"+s.id+"/pause", nil)
	var e api.ErrorBody
	if status != http.StatusConflict || json.Unmarshal(raw, &e) != nil || !strings.Contains(e.Error.Message, "cannot be paused (it keeps running)") {
		t.Fatalf("pause of a session CRIU cannot dump: HTTP %d %s", status, raw)
	}
	if strings.Contains(e.Error.Message, h.d.Dir) || strings.Contains(e.Error.Message, "/run/") {
		t.Errorf("the refusal names a host path: %s", e.Error.Message)
	}
	r := ss.exec(s, code("x + 1"))
	wantCall(t, r, "ok")
	if r.Result == nil || *r.Result != "8" || r.Session.Resumed {
		t.Errorf("after the refused pause: %+v", r)
	}
	if left, _ := filepath.Glob(filepath.Join(checkpointDir(h), "s-*")); len(left) != 0 {
		t.Errorf("a refused pause left %v", left)
	}
	return "409: " + e.Error.Message[strings.Index(e.Error.Message, ": ")+2:] + "; the session ran on with its state"
}

func runPauseOtherUID(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := pauseSession(t, ss, "token = 'root-only'")
	pauseIt(t, ss, s)
	for _, r := range []struct{ method, path string }{
		{"POST", "/pause"}, {"POST", "/resume"}, {"POST", "/execute"}, {"GET", ""}, {"DELETE", ""},
	} {
		var body any
		if r.path == "/execute" {
			body = code("print(token)")
		}
		if status, raw := ss.request(true, r.method, "/v1/sessions/"+s.id+r.path, body); status != http.StatusNotFound {
			t.Errorf("uid 65534 %s %s: HTTP %d %s", r.method, r.path, status, raw)
		}
	}
	var info api.Session
	if st, raw := ss.request(false, "GET", "/v1/sessions/"+s.id, nil); st != http.StatusOK || json.Unmarshal(raw, &info) != nil || info.State != api.SessionPaused {
		t.Errorf("the session after uid 65534's requests: HTTP %d %s", st, raw)
	}
	// The checkpoint on the host's disk: beneath the daemon's 0700
	// directory, which uid 65534 cannot enter, so none of its files opens.
	dir := checkpointDir(h)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("checkpoint directory: %v %v", fi, err)
	}
	n := 0
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return nil
		}
		n++
		cmd := exec.Command("cat", p)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyUID, Gid: nobodyUID}}
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "Permission denied") {
			t.Errorf("uid 65534 reads %s: %v %.100q", p, err, out)
		}
		return nil
	})
	if _, _, body := curlAs(t, h.d.Socket, "GET", "/v1/files", ""); strings.Contains(string(body), "pages") {
		t.Errorf("the file store lists a checkpoint: %s", body)
	}
	r := ss.exec(s, code("token"))
	wantCall(t, r, "ok")
	if r.Result == nil || *r.Result != "'root-only'" || !r.Session.Resumed {
		t.Errorf("the owner's call: %+v", r)
	}
	if n == 0 {
		t.Error("no file in the checkpoint directory while the session is paused")
	}
	return "every request of uid 65534 404; the checkpoint directory is 0700: uid 65534 opens none of its files; the owner's call restored it"
}

// tracesProbe prints what a session can see of where it runs.
const tracesProbe = `import os, json
def init_fds():
    try: return str(len(os.listdir('/proc/1/fd')))
    except OSError as e: return e.strerror
fds = {}
for n in os.listdir('/proc/self/fd'):
    try: fds[n] = os.readlink('/proc/self/fd/' + n)
    except OSError as e: fds[n] = e.strerror
print(json.dumps({'mounts': sorted(l.split()[4] + ' ' + l.split(' - ')[1].split()[0] for l in open('/proc/self/mountinfo')),
    'cgroup': open('/proc/self/cgroup').read(), 'env': sorted(os.environ), 'cwd': os.getcwd(),
    'fds': sorted(n for n in fds), 'targets': sorted(set(v.split(':')[0] for v in fds.values())),
    'uid_map': open('/proc/self/uid_map').read().split(), 'init_fds': init_fds()}))
`

func runPauseTraces(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := pauseSession(t, ss, "x = 1")
	type view struct {
		Mounts  []string `json:"mounts"`
		Cgroup  string   `json:"cgroup"`
		Env     []string `json:"env"`
		Cwd     string   `json:"cwd"`
		Fds     []string `json:"fds"`
		Targets []string `json:"targets"`
		UIDMap  []string `json:"uid_map"`
		InitFds string   `json:"init_fds"`
	}
	look := func() (view, string) {
		r := ss.exec(s, code(tracesProbe))
		wantCall(t, r, "ok")
		var v view
		if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil {
			t.Fatalf("probe: %v: %s %s", err, r.Stdout, r.Stderr)
		}
		return v, r.Stdout
	}
	before, _ := look()
	pauseIt(t, ss, s)
	after, raw := look()
	for _, host := range []string{h.d.Dir, "checkpoint", "criu", "/var/lib", "/run/jaild"} {
		if strings.Contains(raw, host) {
			t.Errorf("the restored session sees %q: %s", host, raw)
		}
	}
	eq := func(a, b []string) bool { return strings.Join(a, "\n") == strings.Join(b, "\n") }
	if !eq(before.Mounts, after.Mounts) || before.Cgroup != after.Cgroup || !eq(before.Env, after.Env) || before.Cwd != after.Cwd || !eq(before.Targets, after.Targets) {
		t.Errorf("the view changed with the pause:\nbefore %+v\nafter  %+v", before, after)
	}
	if before.InitFds != "Permission denied" || after.InitFds != "Permission denied" {
		t.Errorf("/proc/1/fd of init (non-dumpable): %q before the pause, %q after, want refused both times", before.InitFds, after.InitFds)
	}
	if len(after.UIDMap) != 3 || after.UIDMap[0] != "0" || after.UIDMap[2] != "65536" {
		t.Errorf("uid_map after the restore: %v", after.UIDMap)
	}
	return "the same mounts, cgroup, environment, working directory and kinds of fds as before the pause, /proc/1/fd refused before and after; only the uid map's host ids are the new jail's"
}
