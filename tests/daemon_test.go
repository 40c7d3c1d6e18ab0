package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/daemontest"
	"github.com/jaild/jaild/internal/jail"
)

const testIDBase = 1_300_000_000

// inJailRange reports whether a host id belongs to some jail of the test
// daemons: each live jail has its own 65536 ids above testIDBase.
func inJailRange(id uint64) bool {
	return id >= testIDBase && id < testIDBase+config.HostIDSpan
}

// jailPids lists host processes in the test daemons' jail uid range.
func jailPids() []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				if uid, _ := strconv.ParseUint(f[1], 10, 32); inJailRange(uid) {
					pids = append(pids, pid)
				}
			}
		}
	}
	return pids
}

// The README's curl examples run verbatim, but for the socket path.
func TestREADMECurlExamples(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?m)^curl --unix-socket /run/jaild/jaild.sock .*$")
	cmds := re.FindAllString(string(readme), -1)
	if len(cmds) < 4 {
		t.Fatalf("found %d curl examples in README.md, want at least 4", len(cmds))
	}
	for _, c := range cmds {
		c = strings.ReplaceAll(c, "/run/jaild/jaild.sock", shared.Socket)
		out, err := exec.Command("bash", "-c", c+" -w '\\n%{http_code}'").Output()
		if err != nil {
			t.Errorf("%s: %v", c, err)
			continue
		}
		body, code, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) > 1 {
			code = lines[len(lines)-1]
			body = strings.Join(lines[:len(lines)-1], "\n")
		}
		var v map[string]any
		if code != "200" || json.Unmarshal([]byte(body), &v) != nil {
			t.Errorf("%s\n-> HTTP %s %s", c, code, body)
		}
	}
}

// Under systemd-socket-activate the daemon starts on the first connection,
// serves it, and serves later requests on the inherited socket.
func TestSocketActivation(t *testing.T) {
	dir, err := os.MkdirTemp("", "jsa")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "act.sock")
	d := activated(t, sock)
	for i := range 3 {
		var r api.ExecuteResponse
		if status, _ := d.call(t, "POST", "/v1/execute", `{"code":"print(6*7)"}`, &r); status != 200 || r.Stdout != "42\n" {
			t.Fatalf("request %d: HTTP %d %+v\n%s", i, status, r, d.Log.String())
		}
	}
	if !strings.Contains(d.Log.String(), `"socket_activated":true`) {
		t.Errorf("daemon did not report socket activation:\n%s", d.Log.String())
	}
	if _, err := os.Stat(filepath.Join(d.Dir, "s.sock")); err == nil {
		t.Error("an activated daemon also created its own socket")
	}
	if err := d.Stop(); err != nil {
		t.Error(err)
	}
}

// SIGTERM: stop accepting, let the run in flight finish, exit cleanly and
// leave nothing behind.
func TestGracefulShutdown(t *testing.T) {
	d := startDaemon(t, daemontest.Options{})
	result := make(chan api.ExecuteResponse, 1)
	go func() {
		var r api.ExecuteResponse
		d.call(t, "POST", "/v1/execute", `{"code":"import time\ntime.sleep(2)\nprint('finished')"}`, &r)
		result <- r
	}()
	waitFor(t, 10*time.Second, "the run to start", func() bool { return len(jailPids()) > 0 })
	if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if c, err := net.Dial("unix", d.Socket); err == nil {
		c.Close()
		t.Error("daemon still accepts connections after SIGTERM")
	}
	if r := <-result; r.Status != "ok" || r.Stdout != "finished\n" {
		t.Errorf("run in flight: %+v", r)
	}
	if err := d.WaitExit(); err != nil {
		t.Errorf("exit: %v\n%s", err, d.Log.String())
	}
	if ents, _ := os.ReadDir(filepath.Join(d.Dir, "run", "runs")); len(ents) != 0 {
		t.Errorf("run directories left: %v", ents)
	}
	if len(jailPids()) != 0 {
		t.Error("jail processes left after shutdown")
	}
	os.RemoveAll(d.Dir)
}

// An unprivileged user cannot reach a socket with the default mode.
func TestSocketPermissions(t *testing.T) {
	d := startDaemon(t, daemontest.Options{Config: "socket_mode = \"0600\"\n"})
	fi, err := os.Stat(d.Socket)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v: %v", fi.Mode(), err)
	}
	cmd := exec.Command("curl", "-s", "--unix-socket", d.Socket, "http://jaild/v1/health")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("uid 65534 reached a 0600 root socket: %s", out)
	}
}

// kill -9 of the daemon with a run in flight, then a restart: the start-up
// sweep removes the orphaned jail, its cgroup, mounts and run directory.
func TestRestartSweepsCrashLeftovers(t *testing.T) {
	d := startDaemon(t, daemontest.Options{})
	go func() {
		// Fails with EOF when the daemon is killed.
		resp, err := d.Client.Post("http://jaild/v1/execute", "application/json",
			strings.NewReader(`{"code":"import time\ntime.sleep(120)","limits":{"timeout_ms":120000}}`))
		if err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, 10*time.Second, "the run to start", func() bool { return len(jailPids()) > 0 })
	if err := d.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.Exited()
	runs := filepath.Join(d.Dir, "run", "runs")
	if ents, _ := os.ReadDir(runs); len(ents) == 0 || len(jailPids()) == 0 {
		t.Fatalf("after kill -9 the run should be orphaned (runs %d, pids %d)", len(ents), len(jailPids()))
	}
	// Restart on the same configuration (the stale socket is replaced).
	d.Opts.ReadyWithin = 30 * time.Second
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	// Killed processes whose parent died are reaped by the host's init.
	waitFor(t, 5*time.Second, "the orphaned jail's processes to be gone", func() bool { return len(jailPids()) == 0 })
	if ents, _ := os.ReadDir(runs); len(ents) != 0 {
		t.Errorf("run directories survived the restart: %v", ents)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), runs) {
		t.Error("a run mount survived the restart")
	}
	var r api.ExecuteResponse
	if status, _ := d.call(t, "POST", "/v1/execute", `{"code":"print(1)"}`, &r); status != 200 || r.Stdout != "1\n" {
		t.Errorf("after restart: HTTP %d %+v", status, r)
	}
}

// With a warm pool, requests that fit are served by jails started ahead of
// them (visible in /v1/info), and they behave like cold ones.
func TestWarmPoolDaemon(t *testing.T) {
	d := startDaemon(t, daemontest.Options{Pool: 1})
	ready := func() bool {
		var info api.Info
		d.call(t, "GET", "/v1/info", nil, &info)
		p := info.Pool
		return p.Size == 1 && p.Ready == 1 && p.PlainSize == 1 && p.PlainReady == 1 && len(p.Preimport) > 0
	}
	// Code that imports a pre-import is served by a preloaded jail, other
	// code by a plain one (which imported nothing of the user's).
	for i, c := range []struct {
		code, stdout string
		line         int
	}{
		{"import sys\nprint('pandas' in sys.modules)\nimport pandas\nraise ValueError('x')", "True\n", 4},
		{"import sys\nprint('pandas' in sys.modules)\nraise ValueError('x')", "False\n", 3},
		{"import sys; print('pandas' in sys.modules); import pandas as pd\nraise ValueError('x')", "True\n", 2},
	} {
		waitFor(t, 60*time.Second, "a full warm pool", ready)
		var r api.ExecuteResponse
		body, _ := json.Marshal(map[string]string{"code": c.code})
		d.call(t, "POST", "/v1/execute", string(body), &r)
		if r.Status != "error" || r.Stdout != c.stdout || r.Error == nil || r.Error.Type != "ValueError" || *r.Error.Line != c.line || !r.Usage.Warm {
			t.Errorf("warm run %d: %+v", i, r)
		}
	}
}

// Two daemons given the same host_id_base (here the shared daemon and
// another) never hand out the same host ids at once: while a run of each
// lives, their processes' host uids are in different ranges, and the
// daemon that found a range taken says so in its log.
func TestSharedHostIDBase(t *testing.T) {
	d := startDaemon(t, daemontest.Options{})
	// The shared daemon makes its jail first, so it takes the lowest
	// range. Sessions hold their jails (and processes) until deleted,
	// however slow the host: no run can end before the ids are read.
	var ids []string
	for _, dm := range []*daemon{shared, d} {
		var s api.Session
		if status, _ := dm.call(t, "POST", "/v1/sessions", `{}`, &s); status != 201 {
			t.Fatalf("create a session: HTTP %d", status)
		}
		ids = append(ids, s.SessionID)
		waitFor(t, 20*time.Second, "the session's jail", func() bool {
			cg, err := cgroupsOf(dm)
			return err == nil && len(cg.live()) == 1
		})
	}
	defer func() {
		for i, dm := range []*daemon{shared, d} {
			dm.call(t, "DELETE", "/v1/sessions/"+ids[i], nil, nil)
		}
	}()
	ranges := map[uint64]int{} // the first id of each range: its processes
	for _, pid := range jailPids() {
		b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				uid, _ := strconv.ParseUint(f[1], 10, 32)
				ranges[testIDBase+(uid-testIDBase)/uint64(jail.IDsPerJail)*uint64(jail.IDsPerJail)]++
			}
		}
	}
	if len(ranges) != 2 {
		t.Errorf("the two daemons' runs hold host id ranges %v, want two different ones", ranges)
	}
	if !strings.Contains(d.Log.String(), "another jaild on this host uses host ids") {
		t.Errorf("the second daemon did not say it skipped the shared daemon's range:\n%s", d.Log.String())
	}
}

// A daemon started where no cgroup hierarchy is mounted (`ip netns exec`
// mounts a fresh /sys without /sys/fs/cgroup's hierarchies) refuses to
// start, naming what is missing, instead of saying it is ready and failing
// every run.
func TestNoCgroupsRefusesStart(t *testing.T) {
	ns := fmt.Sprintf("jdnocg-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	defer exec.Command("ip", "netns", "delete", ns).Run()
	d, err := prepareDaemon(daemontest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	d.Opts.Wrap = []string{"ip", "netns", "exec", ns}
	if err := d.Start(); !errors.Is(err, daemontest.ErrExited) || !strings.Contains(d.Log.String(), "no cgroup hierarchy for jails") {
		t.Errorf("jaild without cgroups: %v\n%s", err, d.Log.String())
	}
	if _, err := os.Stat(d.Socket); err == nil {
		t.Error("it made its socket")
	}
}

// The daemon runs from a sealed copy of its binary (a memfd with its
// write, grow, shrink and seal seals, so libcontainer starts each jail
// from it as it is, with no copy per jail), and neither the copy nor the
// binary on disk can be opened for writing through /proc/<pid>/exe; its
// threads keep the binary's name.
func TestSealedBinary(t *testing.T) {
	d := startDaemon(t, daemontest.Options{})
	exe := fmt.Sprintf("/proc/%d/exe", d.Cmd.Process.Pid)
	target, err := os.Readlink(exe)
	if err != nil || !strings.HasPrefix(target, "/memfd:") {
		t.Fatalf("%s -> %q (%v), want a memfd", exe, target, err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	const want = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if err != nil || seals&want != want {
		t.Errorf("%s: seals %#x (%v), want %#x at least", exe, seals, err, want)
	}
	if w, err := os.OpenFile(exe, os.O_WRONLY, 0); err == nil {
		w.Close()
		t.Errorf("%s opened for writing", exe)
	}
	// It still serves: a jail starts from the sealed copy.
	var r api.ExecuteResponse
	d.call(t, "POST", "/v1/execute", `{"code":"print(6 * 7)"}`, &r)
	if r.Status != "ok" || r.Stdout != "42\n" {
		t.Errorf("run: %+v", r)
	}
	// Every thread is named after the binary, not the /proc/self/fd/N
	// path it was executed by.
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", d.Cmd.Process.Pid))
	if err != nil || len(tasks) < 2 {
		t.Fatalf("threads: %v (%d)", err, len(tasks))
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", d.Cmd.Process.Pid, task.Name()))
		if err == nil && string(b) != "jaild\n" {
			t.Errorf("thread %s is named %q, want jaild", task.Name(), b)
		}
	}
}
