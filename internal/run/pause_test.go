//go:build !unit

package run

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
)

func needCheckpoints(t *testing.T) {
	t.Helper()
	if testCheckpoints != "" {
		t.Fatalf("this host cannot pause sessions: %s", testCheckpoints)
	}
}

// A paused session's next call finds everything as it was: globals,
// imports, an open file, files in the workspace and /tmp, the working
// directory, the environment, and the call count; it says it resumed.
// Pause again, Resume explicitly, and the session still has it all.
func TestSessionPauseResume(t *testing.T) {
	needCheckpoints(t)
	ss := newTestSession(t, File{Path: "in.txt", Data: []byte("data")})
	setup := "import os, json, decimal\nx = {'n': 41}\nf = open('/tmp/log.txt', 'w')\nf.write('first\\n'); f.flush()\n" +
		"os.makedirs('sub', exist_ok=True)\nos.chdir('sub')\nos.environ['MINE'] = 'yes'\nprint('set')"
	if r := call(t, ss, setup); r.Status != spec.StatusOK || string(r.Stdout) != "set\n" {
		t.Fatalf("setup: %+v %s", r, r.Stderr)
	}
	cpu0 := ss.CPU()
	pi, err := ss.Pause(nil)
	if err != nil {
		t.Fatal(err)
	}
	// The first jail's CPU time is kept while paused.
	if c := ss.CPU(); c < cpu0 || c <= 0 {
		t.Errorf("the session's CPU while paused: %v, before the pause %v", c, cpu0)
	}
	if pi.Bytes <= 0 || pi.At.IsZero() {
		t.Errorf("pause info %+v", pi)
	}
	if got, ok := ss.Paused(); !ok || got.Bytes != pi.Bytes {
		t.Errorf("Paused() = %+v, %v", got, ok)
	}
	if pids := jailProcesses(testJails.HostIDBase()); len(pids) != 0 {
		t.Errorf("processes left while paused: %v", pids)
	}
	check := "f.write('second\\n'); f.close()\nprint(x['n'] + 1, decimal.Decimal('1.5'), os.getcwd(), os.environ['MINE'], open('/tmp/log.txt').read().split(), open('../in.txt').read())"
	r := call(t, ss, check)
	want := "42 1.5 /workspace/sub yes ['first', 'second'] data\n"
	if r.Status != spec.StatusOK || string(r.Stdout) != want {
		t.Fatalf("after the pause: %q (status %s) %s, want %q", r.Stdout, r.Status, r.Stderr, want)
	}
	if !r.Resumed || r.Restore <= 0 || r.Count != 2 {
		t.Errorf("resumed %v after %v, count %d; want resumed, count 2", r.Resumed, r.Restore, r.Count)
	}
	// The restored jail's CPU adds to the first one's.
	if c := ss.CPU(); c <= cpu0 {
		t.Errorf("the session's CPU after a call in its restored jail: %v, not more than the first jail's %v", c, cpu0)
	}
	if _, ok := ss.Paused(); ok {
		t.Error("still paused after a call")
	}
	if took, err := ss.Resume(); err != nil || took != 0 {
		t.Errorf("Resume of a live session: %v, %v", took, err)
	}
	// A resumed session pauses again (its init executed afresh after the
	// restore), and again: its state whole each time.
	for i := range 2 {
		if _, err := ss.Pause(nil); err != nil {
			t.Fatalf("pause %d after a resume: %v", i+2, err)
		}
		r = call(t, ss, "x['n'] += 1\nx['n']")
		if want := strconv.Itoa(42 + i); r.Status != spec.StatusOK || strings.TrimSpace(string(r.Stdout)) != want || !r.Resumed || r.Count != 3+i {
			t.Errorf("after pause %d: %q (want %s) %+v %s", i+2, r.Stdout, want, r, r.Stderr)
		}
	}
}

// Resume restores without a call, and leaves the session frozen as
// between calls; the next call is not a resume.
func TestSessionResumeExplicit(t *testing.T) {
	needCheckpoints(t)
	ss := newTestSession(t)
	call(t, ss, "y = [1, 2, 3]")
	if _, err := ss.Pause(nil); err != nil {
		t.Fatal(err)
	}
	took, err := ss.Resume()
	if err != nil || took <= 0 {
		t.Fatalf("Resume: %v, %v", took, err)
	}
	r := call(t, ss, "sum(y)")
	if r.Status != spec.StatusOK || strings.TrimSpace(string(r.Stdout)) != "6" || r.Resumed {
		t.Errorf("after Resume: %+v %s", r, r.Stderr)
	}
}

// A checkpoint changed on disk while the session is paused ends the
// session at its next call, which is refused: nothing of it is restored.
func TestSessionPausedTampered(t *testing.T) {
	needCheckpoints(t)
	ss := newTestSession(t)
	call(t, ss, "secret = 42")
	if _, err := ss.Pause(nil); err != nil {
		t.Fatal(err)
	}
	ss.mu.Lock()
	dir := ss.paused.dir
	ss.mu.Unlock()
	pages, _ := filepath.Glob(filepath.Join(dir, "images", "pages-*.img"))
	if len(pages) == 0 {
		t.Fatal("no pages image")
	}
	b, err := os.ReadFile(pages[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 0x40
	if err := os.WriteFile(pages[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = ss.Exec(context.Background(), &Call{Code: "secret", Timeout: 10 * time.Second, OutputBytes: 1 << 20})
	if !errors.Is(err, errdefs.ErrConflict) || ss.EndReason() != spec.EndResumeFailed {
		t.Errorf("call on a tampered checkpoint: %v, session %q; want a conflict and %q", err, ss.EndReason(), spec.EndResumeFailed)
	}
	testEngine.Idle() // the teardown removes it
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the checkpoint is still there: %v", err)
	}
}

// What CRIU cannot dump fails the pause with its reason, and the session
// runs on with its state: a deleted file still open, larger than CRIU
// keeps of such files (its ghost limit, 1 MiB).
func TestSessionPauseRefused(t *testing.T) {
	needCheckpoints(t)
	ss := newTestSession(t)
	code := "import os\nx = 7\nf = open('/tmp/big', 'wb')\nf.write(os.urandom(2 << 20)); f.flush()\nos.unlink('/tmp/big')\nprint(True, True)"
	if r := call(t, ss, code); r.Status != spec.StatusOK || string(r.Stdout) != "True True\n" {
		t.Fatalf("setup: %+v %q %s", r.Status, r.Stdout, r.Stderr)
	}
	_, err := ss.Pause(nil)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "cannot be paused (it keeps running): ") {
		t.Fatalf("pause of a session holding a large deleted file: %v, want a conflict with CRIU's reason", err)
	}
	t.Logf("refused: %v", err)
	if strings.Contains(err.Error(), "/tmp/jaild-test") || strings.Contains(err.Error(), "/run/") {
		t.Errorf("the reason names a host path: %v", err)
	}
	if _, ok := ss.Paused(); ok {
		t.Error("paused after a refused pause")
	}
	r := call(t, ss, "x + 1")
	if r.Status != spec.StatusOK || strings.TrimSpace(string(r.Stdout)) != "8" {
		t.Fatalf("the session did not run on: %+v %s", r, r.Stderr)
	}
}

// A paused session outlives its service: Detach leaves its checkpoint,
// and another service on the same directory (a daemon after a restart)
// adopts it with the record it was paused with, restores it at its next
// call with its state and count of calls, and removes what is not a
// whole checkpoint of its key (a pause cut short, a forged record).
func TestSessionRecoveredAfterRestart(t *testing.T) {
	needCheckpoints(t)
	dir := t.TempDir()
	service := func() *Service {
		s, err := New(testJails, Config{CheckpointDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		why := "" // the probe passed for the jail engine both services share
		s.cpWhy.Store(&why)
		return s
	}
	first := service()
	l := jail.DefaultLimits()
	l.Timeout = time.Hour
	ss, err := first.NewSession(SessionSpec{Limits: l, Env: map[string]string{"MINE": "kept"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ss.Close)
	call(t, ss, "import os\nstate = {'n': 1}\nopen('w.txt', 'w').write('workspace')")
	call(t, ss, "state['n'] += 1")
	if _, err := ss.Pause([]byte(`{"table":"record"}`)); err != nil {
		t.Fatal(err)
	}
	ss.Detach()
	<-ss.Done()
	first.Idle()
	// What a daemon killed at the wrong moment leaves, and a forgery.
	for _, d := range []string{"s-cut.tmp-abc", "probe-abc", "s-forged"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "s-forged", "meta.json"), []byte(`{"record":{"v":1,"table":{}}}`), 0o600); err != nil {
		t.Fatal(err)
	}

	second := service()
	recs := second.RecoverPaused()
	if len(recs) != 1 {
		t.Fatalf("recovered %d sessions, want 1", len(recs))
	}
	rs := recs[0].Session
	t.Cleanup(rs.Close)
	second.Idle() // the forgery's removal
	if string(recs[0].Table) != `{"table":"record"}` || recs[0].Paused.Bytes <= 0 {
		t.Errorf("recovered %s, %+v", recs[0].Table, recs[0].Paused)
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 1 || !strings.HasPrefix(names[0], "s-") || names[0] == "s-forged" {
		t.Errorf("the checkpoint directory after the recovery: %v, want the session's checkpoint alone", names)
	}
	r := call(t, rs, "print(state['n'], open('w.txt').read(), os.environ['MINE'])")
	if r.Status != spec.StatusOK || string(r.Stdout) != "2 workspace kept\n" || !r.Resumed || r.Count != 3 {
		t.Errorf("the recovered session's call: %q %+v %s", r.Stdout, r, r.Stderr)
	}
	// Its interpreter restarts with its environment after a loss.
	call(t, rs, "os._exit(3)")
	if r := call(t, rs, "import os\nprint(os.environ['MINE'])"); string(r.Stdout) != "kept\n" {
		t.Errorf("after a fresh interpreter: %q %s", r.Stdout, r.Stderr)
	}
	rs.Close()
	second.Idle()
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left after the recovered session ended: %v", ents)
	}
}

// A fork's children carry on from the parent's state, each in a jail of
// its own (host ids, workspace), independent of one another and of the
// parent, which runs on; their random generators are reseeded (the
// random module's and one of the user's own), so that no two draw the
// same numbers; a child's call count goes on from the parent's.
func TestSessionFork(t *testing.T) {
	needCheckpoints(t)
	parent := newTestSession(t)
	call(t, parent, "import random, os\nrandom.seed(7)\nmine = random.Random(9)\nstate = ['parent']\nopen('w.txt', 'w').write('parent')")
	kids, err := parent.Fork(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		t.Cleanup(k.Close)
	}
	draw := "print(random.random(), mine.random())"
	seen := map[string]bool{}
	pr := call(t, parent, draw)
	if pr.Status != spec.StatusOK || pr.Count != 2 {
		t.Fatalf("the parent after the fork: %+v %s", pr, pr.Stderr)
	}
	seen[string(pr.Stdout)] = true
	hostUIDs := map[int]bool{parent.st.j.HostUID(): true}
	for i, k := range kids {
		r := call(t, k, draw)
		if r.Status != spec.StatusOK || r.Count != 2 {
			t.Fatalf("child %d: %+v %s", i, r, r.Stderr)
		}
		if seen[string(r.Stdout)] {
			t.Errorf("child %d drew what another drew: %s", i, r.Stdout)
		}
		seen[string(r.Stdout)] = true
		hostUIDs[k.st.j.HostUID()] = true
		w := call(t, k, "state.append("+strconv.Itoa(i)+")\nopen('w.txt', 'a').write('"+strconv.Itoa(i)+"')\nprint(state, open('w.txt').read())")
		if want := "['parent', " + strconv.Itoa(i) + "] parent" + strconv.Itoa(i) + "\n"; string(w.Stdout) != want {
			t.Errorf("child %d: %q, want %q", i, w.Stdout, want)
		}
	}
	if len(hostUIDs) != 4 {
		t.Errorf("host uids of the parent and its 3 children: %v", hostUIDs)
	}
	if r := call(t, parent, "print(state, open('w.txt').read())"); string(r.Stdout) != "['parent'] parent\n" {
		t.Errorf("the parent after its children's calls: %q", r.Stdout)
	}
	// A paused parent forks from its checkpoint and stays paused.
	if _, err := parent.Pause(nil); err != nil {
		t.Fatal(err)
	}
	more, err := parent.Fork(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(more[0].Close)
	if _, ok := parent.Paused(); !ok {
		t.Error("a paused parent resumed by its fork")
	}
	if r := call(t, more[0], "print(state)"); string(r.Stdout) != "['parent']\n" {
		t.Errorf("the paused parent's child: %q %s", r.Stdout, r.Stderr)
	}
	if r := call(t, parent, "print(state)"); string(r.Stdout) != "['parent']\n" || !r.Resumed {
		t.Errorf("the paused parent after its fork: %q %s", r.Stdout, r.Stderr)
	}
	if _, err := parent.Fork(MaxForks + 1); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a fork of %d: %v", MaxForks+1, err)
	}
}

// A snapshot leaves the session running; the session rolls back to it
// (its state and count of calls as they were), any number of times, and
// new sessions start from it, their random generators reseeded; a
// rollback that cannot restore leaves the session as it was.
func TestSessionSnapshotRollback(t *testing.T) {
	needCheckpoints(t)
	ss := newTestSession(t)
	call(t, ss, "import random\nrandom.seed(5)\nstate = ['at the snapshot']\nopen('w.txt', 'w').write('v1')")
	sn, err := ss.Snapshot([]byte(`{"t":1}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sn.Remove)
	if sn.Bytes() <= 0 {
		t.Errorf("snapshot of %d bytes", sn.Bytes())
	}
	call(t, ss, "state.append('after')\nopen('w.txt', 'w').write('v2')")
	if r := call(t, ss, "print(state, open('w.txt').read())"); string(r.Stdout) != "['at the snapshot', 'after'] v2\n" {
		t.Fatalf("the session after its snapshot: %q %s", r.Stdout, r.Stderr)
	}
	for i := range 2 {
		took, err := ss.Rollback(sn)
		if err != nil || took <= 0 {
			t.Fatalf("rollback %d: %v %v", i, took, err)
		}
		r := call(t, ss, "print(state, open('w.txt').read(), random.random())")
		if !strings.HasPrefix(string(r.Stdout), "['at the snapshot'] v1 ") || r.Count != 2 {
			t.Errorf("after rollback %d: %q %s count %d", i, r.Stdout, r.Stderr, r.Count)
		}
		call(t, ss, "state.append('again')")
	}
	kid, err := testEngine.FromSnapshot(sn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kid.Close)
	a := call(t, ss, "random.seed(5)\nprint(random.random())")
	b := call(t, kid, "print(state, random.random())")
	if !strings.HasPrefix(string(b.Stdout), "['at the snapshot'] ") || strings.HasSuffix(string(b.Stdout), " "+string(a.Stdout)) {
		t.Errorf("a session from the snapshot: %q (the seeded draw: %q)", b.Stdout, a.Stdout)
	}
	// A snapshot changed on disk: the rollback is refused, the session as
	// it was.
	pages, _ := filepath.Glob(filepath.Join(sn.dir, "images", "pages-*.img"))
	if len(pages) == 0 {
		t.Fatal("no pages image")
	}
	f, err := os.OpenFile(pages[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("x"))
	f.Close()
	call(t, ss, "state = ['kept']")
	if _, err := ss.Rollback(sn); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("rollback to a changed snapshot: %v", err)
	}
	if r := call(t, ss, "print(state)"); string(r.Stdout) != "['kept']\n" {
		t.Errorf("after a refused rollback: %q %s", r.Stdout, r.Stderr)
	}
}
