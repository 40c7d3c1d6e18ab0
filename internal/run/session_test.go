//go:build !unit

package run

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
)

func newTestSession(t *testing.T, files ...File) *Session {
	t.Helper()
	l := jail.DefaultLimits()
	l.Timeout = time.Hour
	ss, err := testEngine.NewSession(SessionSpec{Limits: l, Files: files})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ss.Close()
		testEngine.Idle()
		if left := testJails.Leftovers(); len(left) > 0 {
			t.Errorf("left behind: %v", left)
		}
	})
	return ss
}

func call(t *testing.T, ss *Session, code string, opts ...func(*Call)) *CallResult {
	t.Helper()
	c := &Call{Code: code, Timeout: 10 * time.Second, OutputBytes: 1 << 20, LastLineInteractive: true}
	for _, o := range opts {
		o(c)
	}
	res, err := ss.Exec(context.Background(), c)
	if err != nil {
		t.Fatalf("call %q: %v", code, err)
	}
	return res
}

func TestSessionKeepsState(t *testing.T) {
	ss := newTestSession(t, File{Path: "in.txt", Data: []byte("data")})
	r := call(t, ss, "import math\nx = 41\nopen('out.txt', 'w').write(open('in.txt').read())\nprint('one')")
	if r.Status != spec.StatusOK || string(r.Stdout) != "one\n" || r.Count != 1 {
		t.Fatalf("call 1: %+v stderr %s", r, r.Stderr)
	}
	r = call(t, ss, "print(open('out.txt').read(), math.floor(2.5))\nx + 1")
	if r.Status != spec.StatusOK || string(r.Stdout) != "data 2\n42\n" || r.ResultRepr == nil || *r.ResultRepr != "42" || r.Count != 2 {
		t.Fatalf("call 2: %+v stdout %q stderr %s", r, r.Stdout, r.Stderr)
	}
	r = call(t, ss, "import sys\nprint('bye')\nsys.exit(3)")
	if r.Status != spec.StatusError || r.ExitCode != 3 || r.StateLost || string(r.Stdout) != "bye\n" {
		t.Fatalf("call 3: %+v stdout %q stderr %s", r, r.Stdout, r.Stderr)
	}
	r = call(t, ss, "x", func(c *Call) { c.Stdin = []byte("in\n") })
	if r.Status != spec.StatusOK || r.ResultRepr == nil || *r.ResultRepr != "41" {
		t.Fatalf("call 4: %+v stderr %s", r, r.Stderr)
	}
	r = call(t, ss, "print(input())", func(c *Call) { c.Stdin = []byte("héllo\xff\n") })
	if r.Status != spec.StatusOK || !strings.HasPrefix(string(r.Stdout), "héllo") {
		t.Fatalf("stdin: %+v stdout %q stderr %s", r, r.Stdout, r.Stderr)
	}
	r = call(t, ss, "1/0")
	if r.Status != spec.StatusError || r.Exception == nil || r.Exception.Type != "ZeroDivisionError" || r.Exception.Line != 1 {
		t.Fatalf("exception: %+v", r)
	}
}

func TestSessionTimeoutKeepsState(t *testing.T) {
	ss := newTestSession(t)
	call(t, ss, "x = 1")
	r := call(t, ss, "while True: pass", func(c *Call) { c.Timeout = 500 * time.Millisecond })
	if r.Status != spec.StatusTimeout || r.StateLost || r.Exception == nil || r.Exception.Type != "KeyboardInterrupt" {
		t.Fatalf("timeout: %+v stderr %s", r, r.Stderr)
	}
	r = call(t, ss, "x")
	if r.ResultRepr == nil || *r.ResultRepr != "1" {
		t.Fatalf("after timeout: %+v stderr %s", r, r.Stderr)
	}
}

func TestSessionLosesStateOnlyWhenItMust(t *testing.T) {
	ss := newTestSession(t)
	call(t, ss, "x = 1\nopen('/tmp/kept', 'w').write('k')\nopen('kept', 'w').write('k')")
	start := time.Now()
	r := call(t, ss, "import signal, subprocess\np = subprocess.Popen(['sleep', '1000'])\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass",
		func(c *Call) { c.Timeout = 300 * time.Millisecond })
	if r.Status != spec.StatusTimeout || !r.StateLost || r.LostReason != spec.LostTimeout || r.Ended {
		t.Fatalf("ignored SIGINT: %+v stderr %s", r, r.Stderr)
	}
	if d := time.Since(start); d < spec.InterruptGrace {
		t.Errorf("killed after %v, before the grace", d)
	}
	r = call(t, ss, "import os\nprint(sorted(p for p in os.listdir('/proc') if p.isdigit()), open('/tmp/kept').read(), open('kept').read())\nx")
	if r.Exception == nil || r.Exception.Type != "NameError" || !strings.Contains(string(r.Stdout), "k k") {
		t.Fatalf("after the loss: %+v stdout %q stderr %s", r, r.Stdout, r.Stderr)
	}
	// init (1) and the runner only: the sleeper went with its interpreter.
	if strings.Count(string(r.Stdout), "'") != 4 {
		t.Errorf("processes after the loss: %s", r.Stdout)
	}
	r = call(t, ss, "import os\nos._exit(7)")
	if !r.StateLost || r.LostReason != spec.LostExited || r.ExitCode != 7 || r.Ended {
		t.Fatalf("os._exit: %+v", r)
	}
	r = call(t, ss, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
	if !r.StateLost || r.LostReason != spec.LostCrashed || r.Signal != 11 || r.Ended {
		t.Fatalf("crash: %+v", r)
	}
	r = call(t, ss, "import os\nos._exit(1)")
	if !r.StateLost || !r.Ended || r.EndReason != spec.EndLosses {
		t.Fatalf("third loss in a row: %+v", r)
	}
	if _, err := ss.Exec(context.Background(), &Call{Code: "1", Timeout: time.Second, OutputBytes: 100}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("call after the end: %v", err)
	}
}

func TestSessionMemoryLimit(t *testing.T) {
	ss := newTestSession(t)
	call(t, ss, "x = 1")
	r := call(t, ss, "b = []\nwhile True: b.append(bytearray(16 << 20))")
	if r.Status != spec.StatusMemoryLimit || !r.StateLost || r.LostReason != spec.LostMemory {
		t.Fatalf("OOM: %+v stderr %s", r, r.Stderr)
	}
	r = call(t, ss, "print('alive')")
	if r.Status != spec.StatusOK || string(r.Stdout) != "alive\n" {
		t.Fatalf("after OOM: %+v stderr %s", r, r.Stderr)
	}
}

func TestSessionInterruptAndConflict(t *testing.T) {
	ss := newTestSession(t)
	done := make(chan *CallResult)
	go func() {
		res, _ := ss.Exec(context.Background(), &Call{Code: "import time\ny = 5\nopen('looping', 'w').close()\nwhile True: time.sleep(0.01)", Timeout: 60 * time.Second, OutputBytes: 1 << 20})
		done <- res
	}()
	// The call is in its loop once its marker exists (a fixed wait was
	// too short under emulation: the interrupt came before y = 5).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := FilesIn(ss.st.j.FilesDir(), spec.FSRequest{Op: spec.FSStat, Path: "/workspace/looping"}, 0, -1, -1); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call did not reach its loop within 30 s")
		}
	}
	if _, err := ss.Exec(context.Background(), &Call{Code: "1", Timeout: time.Second, OutputBytes: 100}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("concurrent call: %v", err)
	}
	ss.Interrupt()
	select {
	case r := <-done:
		if r == nil || r.Exception == nil || r.Exception.Type != "KeyboardInterrupt" || r.StateLost || r.Status != spec.StatusError {
			t.Fatalf("interrupted: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("interrupt did not end the call")
	}
	if r := call(t, ss, "y"); r.ResultRepr == nil || *r.ResultRepr != "5" {
		t.Fatalf("after interrupt: %+v", r)
	}
}

func TestSessionFrozenBetweenCalls(t *testing.T) {
	ss := newTestSession(t)
	call(t, ss, "import threading\ndef spin():\n    while True: pass\nthreading.Thread(target=spin, daemon=True).start()")
	a := ss.st.j.Stats().CPU
	time.Sleep(time.Second)
	b := ss.st.j.Stats().CPU
	if b-a > 50*time.Millisecond {
		t.Errorf("an idle session used %v of CPU in 1s", b-a)
	}
	r := call(t, ss, "import time\ntime.sleep(0.3)")
	if r.CPUTime < 100*time.Millisecond {
		t.Errorf("the thread did not run during the call: cpu %v", r.CPUTime)
	}
}

func TestSessionCloseLeavesNothing(t *testing.T) {
	ss := newTestSession(t)
	call(t, ss, "import subprocess\nsubprocess.Popen(['sleep', '1000'])")
	dir := ss.st.j.WorkDir()
	ss.Close()
	<-ss.Done()
	testEngine.Idle()
	if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
		t.Errorf("run dir still there: %v", err)
	}
	if ss.EndReason() != spec.EndClosed {
		t.Errorf("reason %q", ss.EndReason())
	}
}

// An interrupt asked for before the call's code has begun (the first call
// of a cold session, while Python starts) is held until it begins, not
// lost to the runner's start-up.
func TestSessionEarlyInterrupt(t *testing.T) {
	ss := newTestSession(t)
	done := make(chan *CallResult, 1)
	go func() {
		r, _ := ss.Exec(context.Background(), &Call{Code: "while True: pass", Timeout: 60 * time.Second, OutputBytes: 1 << 20})
		done <- r
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Microsecond) {
		ss.mu.Lock()
		running := ss.cur != nil
		ss.mu.Unlock()
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the call never began")
		}
	}
	ss.Interrupt()
	select {
	case r := <-done:
		if r == nil || r.Exception == nil || r.Exception.Type != "KeyboardInterrupt" || r.StateLost {
			t.Fatalf("early interrupt: %+v", r)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("an interrupt sent as the call began was lost")
	}
}

// Files a call cannot write into the session's workspace (full, or the
// path taken by a link the session made) are the caller's conflict, not
// the daemon's error, and never follow the link.
func TestSessionFilesIntoAShapedWorkspace(t *testing.T) {
	ss := newTestSession(t)
	call(t, ss, "import os\nos.symlink('/etc', 'link')\nos.mkdir('dir')")
	for _, f := range []File{{Path: "link/x", Data: []byte("x")}, {Path: "dir", Data: []byte("x")}} {
		_, err := ss.Exec(context.Background(), &Call{Code: "1", Files: []File{f}, Timeout: time.Second, OutputBytes: 100})
		if !errors.Is(err, errdefs.ErrConflict) || strings.Contains(err.Error(), "/") && strings.Contains(err.Error(), "jaild") {
			t.Errorf("%s: %v", f.Path, err)
		}
	}
	if _, err := os.Lstat("/etc/x"); err == nil {
		t.Fatal("a file was written through the session's link")
	}
	if r := call(t, ss, "print('still fine')"); string(r.Stdout) != "still fine\n" {
		t.Errorf("%+v", r)
	}
	// A regular file is replaced: an agent sends its data again.
	call(t, ss, "open('data.csv', 'w').write('old')")
	r := call(t, ss, "open('data.csv').read()", func(c *Call) { c.Files = []File{{Path: "data.csv", Data: []byte("new")}} })
	if r.ResultRepr == nil || *r.ResultRepr != "'new'" {
		t.Errorf("replaced file: %+v", r)
	}
}

// A session the host thawed behind its back (libcontainer thaws a cgroup
// v1 freezer it could not freeze) still serves its next call, and is
// frozen again after it.
func TestSessionThawedBehindItsBack(t *testing.T) {
	ss := newTestSession(t)
	call(t, ss, "x = 1")
	if err := ss.st.j.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err := ss.st.j.Thaw(); err != nil {
		t.Fatalf("a second thaw: %v", err)
	}
	if r := call(t, ss, "x + 1"); r.ResultRepr == nil || *r.ResultRepr != "2" {
		t.Fatalf("%+v", r)
	}
	if err := ss.st.j.Freeze(); err != nil {
		t.Fatalf("freezing a frozen session: %v", err)
	}
}

// Files that do not fit what the session left of its workspace are the
// caller's invalid argument, as for a run, not a conflict or the daemon's.
func TestSessionFilesBeyondTheWorkspace(t *testing.T) {
	ss := newTestSession(t)
	call(t, ss, "for n in ('a', 'b'): open(n, 'wb').write(b'x' * (60 << 20))")
	_, err := ss.Exec(context.Background(), &Call{Code: "1", Files: []File{{Path: "more", Data: make([]byte, 16<<20)}}, Timeout: time.Second, OutputBytes: 100})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || strings.Contains(err.Error(), "/tmp/") {
		t.Fatalf("files beyond the workspace: %v", err)
	}
}

// An interpreter that ends after its call's end record but before the
// freeze (a background thread's os._exit) leaves init's exit report
// waiting and the jail frozen, init with it. The next call gets a fresh
// interpreter and says so; it does not wait for a restart a frozen init
// cannot make (the session ended restart_failed after restartTimeout).
func TestSessionInterpreterEndedBeforeTheFreeze(t *testing.T) {
	ss := newTestSession(t)
	call(t, ss, "x = 1\nimport os, threading\nthreading.Timer(0.2, os._exit, (0,)).start()")
	// The state the race leaves, made on purpose: thawed until init has
	// reported the exit, then frozen again.
	if err := ss.st.j.Thaw(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(ss.events) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("init did not report the interpreter's exit")
		}
	}
	if err := ss.st.j.Freeze(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := call(t, ss, "print('x' in globals())")
	took := time.Since(start)
	if r.Ended || r.Status != spec.StatusOK || string(r.Stdout) != "False\n" || !r.StateLost || r.LostReason != spec.LostExited {
		t.Fatalf("the call after the loss (%v): %+v stdout %q stderr %s", took, r, r.Stdout, r.Stderr)
	}
	if took >= restartTimeout {
		t.Errorf("the call after the loss took %v, the restart's whole bound", took)
	}
	r = call(t, ss, "x = 2\nx")
	if r.Ended || r.StateLost || r.ResultRepr == nil || *r.ResultRepr != "2" {
		t.Fatalf("the next call: %+v stderr %s", r, r.Stderr)
	}
	// Frozen again between calls.
	call(t, ss, "import threading\ndef spin():\n    while True: pass\nthreading.Thread(target=spin, daemon=True).start()")
	a := ss.st.j.Stats().CPU
	time.Sleep(300 * time.Millisecond)
	if b := ss.st.j.Stats().CPU; b-a > 50*time.Millisecond {
		t.Errorf("the session ran %v between calls", b-a)
	}
}

// An interpreter that ended after its call's end record, its exit report
// held by the freeze until the next call thawed the jail: that call's job
// went to the dead interpreter. Made from the host: init stopped (SIGSTOP
// reaches a pid namespace's init from outside) while the interpreter
// ends, and let go only as the next call thaws the jail, after that
// call's look for a loss found before it.
func TestSessionInterpreterEndedBeforeItsReport(t *testing.T) {
	ss := newTestSession(t)
	call(t, ss, "x = 1\nimport os, threading\nthreading.Timer(0.3, os._exit, (0,)).start()")
	pid1 := jailInit(t, ss.ID())
	if err := ss.st.j.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err := ss.st.j.Signal(unix.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// init stopped, its children (the interpreter) dead and unreaped.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		kids := strings.Fields(readProc(fmt.Sprintf("/proc/%d/task/%d/children", pid1, pid1)))
		zombies := 0
		for _, k := range kids {
			if procState(readProc("/proc/"+k+"/stat")) == 'Z' {
				zombies++
			}
		}
		if procState(readProc(fmt.Sprintf("/proc/%d/stat", pid1))) == 'T' && len(kids) > 0 && zombies == len(kids) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("init not stopped with its interpreter dead: children %v", kids)
		}
	}
	if len(ss.events) != 0 {
		t.Fatal("init reported while stopped")
	}
	cont := func(c *Call) {
		c.OnStart = func(string, bool) {
			if err := ss.st.j.Signal(unix.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	r := call(t, ss, "print('ran', 'x' in globals())\n41 + 1", cont)
	if r.Ended || r.Status != spec.StatusOK || string(r.Stdout) != "ran False\n42\n" || r.ResultRepr == nil || *r.ResultRepr != "42" || !r.StateLost || r.LostReason != spec.LostExited || r.Count != 2 {
		t.Fatalf("the call whose job went to the dead interpreter: %+v stdout %q stderr %s", r, r.Stdout, r.Stderr)
	}
	r = call(t, ss, "x = 2\nx")
	if r.Ended || r.StateLost || r.ResultRepr == nil || *r.ResultRepr != "2" || r.Count != 3 {
		t.Fatalf("the next call: %+v stderr %s", r, r.Stderr)
	}
}

// jailInit is the host pid of the jail's init: the process of its cgroup
// that is pid 1 of its pid namespace.
func jailInit(t *testing.T, id string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !strings.Contains(readProc("/proc/"+e.Name()+"/cgroup"), id) {
			continue
		}
		for _, l := range strings.Split(readProc("/proc/"+e.Name()+"/status"), "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "NSpid:" && f[len(f)-1] == "1" {
				return pid
			}
		}
	}
	t.Fatalf("no init found for jail %s", id)
	return 0
}

func readProc(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// procState is the state letter of a /proc/PID/stat line; 0 without one.
func procState(stat string) byte {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 || len(stat) < i+3 {
		return 0
	}
	return stat[i+2]
}
