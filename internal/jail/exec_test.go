//go:build !unit

package jail

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A jail whose init loaded the filter (a session's) runs further processes
// under a second init with the same filter, in a group of its own; its
// exit code and killing signal come back; EndGroup ends everything the
// group started, even a process that left its parent and session, and
// removes the group.
func TestJailExecGroup(t *testing.T) {
	if testEngine.filterProg == nil || !testEngine.Manifest().RunnerCan(FeatureSeccompFD) {
		t.Fatal("the test image's init cannot load a filter: rebuild it (make rootfs)")
	}
	j, err := testEngine.Create(Spec{Limits: DefaultLimits(), InitLoadsFilter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Destroy()
	if err := j.Start(Process{Args: []string{j.Manifest().Init, "/bin/sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	init1 := filterOf(t, jailPID(t, j, "sleep"))
	run := func(group string, args ...string) (*Proc, string) {
		t.Helper()
		outR, outW, _ := os.Pipe()
		defer outR.Close()
		p, err := j.Exec(Process{Args: args, Stdout: outW, Stderr: outW, Group: group, Cwd: "/tmp"})
		outW.Close()
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(io.LimitReader(outR, 1<<20))
		select {
		case <-p.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the exec'd process did not end")
		}
		return p, string(out)
	}
	p, out := run("g1", "/bin/sh", "-c", `pwd; id -u; cat /proc/self/cgroup | cut -d: -f3 | sort -u; grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; exit 7`)
	if x := p.Exit(); x.Code != 7 || x.Signal != 0 {
		t.Errorf("exit %+v, want code 7", x)
	}
	if want := "/tmp\n1000\n/g1\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if j.GroupCPU("g1") <= 0 {
		t.Error("the group's CPU time is not counted")
	}
	cpu := j.EndGroup("g1")
	if cpu <= 0 {
		t.Error("EndGroup counted no CPU time")
	}
	for _, d := range j.groupPaths("g1") {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("group directory %s left: %v", d, err)
		}
	}
	// Killed by a signal: said so, not as 128+N. And exit 137 is an exit.
	if p, _ := run("", "/bin/sh", "-c", `kill -TERM $$`); p.Exit().Signal != int(unix.SIGTERM) {
		t.Errorf("killed by SIGTERM: %+v", p.Exit())
	}
	if p, _ := run("", "/bin/sh", "-c", `exit 137`); p.Exit() != (Exit{Code: 137}) {
		t.Errorf("exit 137: %+v", p.Exit())
	}
	// A process that leaves its parent and session stays in the group.
	p, out = run("g2", "/bin/sh", "-c", `setsid sh -c 'sleep 1000 >/dev/null 2>&1 & echo $!' </dev/null`)
	if p.Exit().Code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("detach: %+v %q", p.Exit(), out)
	}
	pids, err := j.GroupPids("g2")
	if err != nil || len(pids) != 1 {
		t.Fatalf("group g2 holds %v (%v), want the detached sleep", pids, err)
	}
	if f := filterOf(t, pids[0]); string(f) != string(init1) {
		t.Error("a command's process runs under another filter than the jail's")
	}
	j.EndGroup("g2")
	// Killed: gone, or a zombie until the jail's init reaps it.
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pids[0])); err == nil {
		if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) == 0 || f[0] != "Z" {
			t.Errorf("the detached process outlived EndGroup: %s", st)
		}
	}
	// Signal reaches the program, not its wrapper.
	long, err := j.Exec(Process{Args: []string{"/bin/sleep", "1000"}, Group: "g3"})
	if err != nil {
		t.Fatal(err)
	}
	if pid := long.JailPid(); pid <= 1 {
		t.Errorf("the program's pid in the jail: %d", pid)
	}
	deadline := time.Now().Add(5 * time.Second)
	for long.Signal(unix.SIGUSR1) != nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the wrapper has not forked yet
	}
	select {
	case <-long.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGUSR1 did not end the program")
	}
	if x := long.Exit(); x.Signal != int(unix.SIGUSR1) {
		t.Errorf("exit %+v, want SIGUSR1", x)
	}
	j.EndGroup("g3")
	if _, err := j.Exec(Process{Args: []string{"/bin/true"}, Group: "../x"}); err == nil {
		t.Error("a group name with a path was accepted")
	}
}

// DialLoopback reaches a listener on the jail's loopback, and not one on
// the host's loopback at the same port.
func TestJailDialLoopback(t *testing.T) {
	j, err := testEngine.Create(Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Destroy()
	if err := j.Start(Process{Args: []string{"/usr/bin/python3", "-c",
		"import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 7000))\ns.listen()\nwhile True:\n    c, _ = s.accept()\n    c.sendall(b'from the jail')\n    c.close()"}}); err != nil {
		t.Fatal(err)
	}
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	var c net.Conn
	deadline := time.Now().Add(20 * time.Second)
	for {
		if c, err = j.DialLoopback(7000); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // python is starting
	}
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(io.LimitReader(c, 100))
	c.Close()
	if string(b) != "from the jail" {
		t.Errorf("read %q", b)
	}
	port := host.Addr().(*net.TCPAddr).Port
	if c, err := j.DialLoopback(port); err == nil {
		c.Close()
		t.Errorf("DialLoopback(%d) reached the host's listener", port)
	}
	// The daemon's thread came back to its own namespace.
	if c, err := net.Dial("tcp", host.Addr().String()); err != nil {
		t.Errorf("the host's loopback after DialLoopback: %v", err)
	} else {
		c.Close()
	}
}
