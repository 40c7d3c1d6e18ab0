//go:build !unit

package jail

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"

	"github.com/jaild/jaild/internal/errdefs"
)

// sh runs script with /bin/sh as a jail's first process and returns the
// jail (started), its stdout and stderr once it ended. The caller destroys
// the jail.
func sh(t *testing.T, l Limits, script string, prepare func(*Jail)) (*Jail, string, string) {
	t.Helper()
	j, err := testEngine.Create(Spec{Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Destroy)
	if prepare != nil {
		prepare(j)
	}
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	defer outR.Close()
	defer errR.Close()
	if err := j.Start(Process{Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: outW, Stderr: errW}); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	errW.Close()
	var out, serr bytes.Buffer
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(&out, io.LimitReader(outR, 1<<20)) })
	wg.Go(func() { _, _ = io.Copy(&serr, io.LimitReader(errR, 1<<20)) })
	select {
	case <-j.Done():
	case <-time.After(30 * time.Second):
		j.Kill()
		t.Fatalf("jail still running after 30 s")
	}
	j.KillAll()
	wg.Wait()
	return j, out.String(), serr.String()
}

// A jail runs its first process as UID:GID in WorkspaceDir, with nothing
// of the daemon's environment, and reports how it ended.
func TestJailStartAndExit(t *testing.T) {
	j, out, serr := sh(t, DefaultLimits(), `id -u; id -g; pwd; cat /proc/self/status | grep -E '^(Seccomp|NoNewPrivs|CapEff):'; env | sort; exit 7`, nil)
	if x := j.Exit(); x.Code != 7 || x.Signal != 0 || x.Err != nil {
		t.Errorf("exit %+v, want code 7", x)
	}
	want := []string{"1000", "1000", WorkspaceDir, "Seccomp:\t2", "NoNewPrivs:\t1", "CapEff:\t0000000000000000"}
	for _, w := range want {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("output lacks %q:\n%s%s", w, out, serr)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		// HOME is libcontainer's default when the process sets none.
		if name, _, ok := strings.Cut(line, "="); ok && name != "PATH" && name != "PWD" && name != "HOME" {
			t.Errorf("environment beyond the process's own: %s", line)
		}
	}
}

// A kill from the host is reported as a signal, and no process of the
// jail outlives its first one.
func TestJailSignalAndStragglers(t *testing.T) {
	j, err := testEngine.Create(Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Destroy()
	if err := j.Start(Process{Args: []string{"/bin/sh", "-c", "sleep 1000 & sleep 1000 & wait"}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); jailProcessCount(j) < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the sleepers never started (%d processes)", jailProcessCount(j))
		}
	}
	j.Kill()
	<-j.Done()
	j.KillAll()
	if x := j.Exit(); x.Signal != 9 || x.Code != -1 {
		t.Errorf("exit %+v, want signal 9", x)
	}
	if left := jailProcessCount(j); left != 0 {
		t.Errorf("%d processes left after KillAll", left)
	}
}

// Files the daemon writes into WorkDir, owned by HostUID, are the jail's
// user's; what the jail writes there is read back from the host.
func TestJailWorkDir(t *testing.T) {
	_, out, serr := sh(t, DefaultLimits(), `cat in.txt; ls -ln in.txt | cut -d' ' -f3,4; echo back > out.txt`, func(j *Jail) {
		p := filepath.Join(j.WorkDir(), "in.txt")
		if err := os.WriteFile(p, []byte("hello\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, j.HostUID(), j.HostGID()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if b, err := os.ReadFile(filepath.Join(j.WorkDir(), "out.txt")); err != nil || string(b) != "back\n" {
				t.Errorf("out.txt from the host: %q %v", b, err)
			}
		})
	})
	if out != "hello\n1000 1000\n" {
		t.Errorf("output %q (%s)", out, serr)
	}
}

// Stats count the jail's CPU and memory; Resize gives a started jail new
// cgroup limits, and a process over the new memory limit is OOM-killed.
func TestJailStatsAndResize(t *testing.T) {
	l := DefaultLimits()
	j, err := testEngine.Create(Spec{Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Destroy()
	inR, inW, _ := os.Pipe()
	defer inW.Close()
	// Waits for a line on stdin, then fills 200 MB of a tmpfs-free memory
	// (a shell variable doubling), which the resized limit forbids.
	script := `read go; i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; x=aaaaaaaaaaaaaaaa; while true; do x=$x$x; done`
	if err := j.Start(Process{Args: []string{"/bin/sh", "-c", script}, Stdin: inR}); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	small := l
	small.MemoryBytes = 32 << 20
	if err := j.Resize(small); err != nil {
		t.Fatal(err)
	}
	if got := j.Limits(); got.MemoryBytes != 32<<20 {
		t.Errorf("Limits after Resize: %d", got.MemoryBytes)
	}
	_, _ = inW.Write([]byte("go\n"))
	select {
	case <-j.Done():
	case <-time.After(30 * time.Second):
		j.Kill()
		t.Fatal("the memory hog was not killed")
	}
	j.KillAll()
	st := j.Stats()
	if x := j.Exit(); x.Signal != 9 || st.OOMKills == 0 {
		t.Errorf("exit %+v, oom kills %d: want an OOM kill", x, st.OOMKills)
	}
	if st.CPU <= 0 || st.PeakMemoryBytes == 0 || st.PeakMemoryBytes > 40<<20 {
		t.Errorf("stats %+v: want CPU used and a peak under the new limit", st)
	}
}

// Freeze stops the jail's processes and Thaw resumes them.
func TestJailFreezeThaw(t *testing.T) {
	j, err := testEngine.Create(Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Destroy()
	outR, outW, _ := os.Pipe()
	defer outR.Close()
	if err := j.Start(Process{Args: []string{"/bin/sh", "-c", "while true; do echo tick; sleep 0.05; done"}, Stdout: outW}); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	buf := make([]byte, 4096)
	if _, err := outR.Read(buf); err != nil {
		t.Fatal(err)
	}
	if err := j.Freeze(); err != nil {
		t.Fatal(err)
	}
	// Ticks written before the freeze may still be in the pipe.
	for {
		_ = outR.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if _, err := outR.Read(buf); err != nil {
			break
		}
	}
	_ = outR.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, err := outR.Read(buf); err == nil {
		t.Fatalf("a frozen jail kept writing: %q", buf[:n])
	}
	if err := j.Thaw(); err != nil {
		t.Fatal(err)
	}
	_ = outR.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := outR.Read(buf); err != nil {
		t.Fatalf("no output after Thaw: %v", err)
	}
	j.Kill()
	<-j.Done()
}

// Destroy removes everything and frees the host id range; a Start on a
// second call and a Create after Close are refused.
func TestJailLifecycle(t *testing.T) {
	before := testEngine.JailCounts()
	j, err := testEngine.Create(Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	if n := testEngine.JailCounts().Alive; n != before.Alive+1 {
		t.Errorf("%d jails alive after a Create, %d before", n, before.Alive)
	}
	defer j.Destroy() // a jail left alive would hold the engine's Close forever
	if err := j.Start(Process{Args: []string{"/bin/true"}}); err != nil {
		t.Fatal(err)
	}
	if err := j.Start(Process{Args: []string{"/bin/true"}}); err == nil {
		t.Error("a second Start was accepted")
	}
	<-j.Done()
	j.Destroy()
	j.Destroy() // idempotent
	if left := testEngine.Leftovers(); len(left) != 0 {
		t.Errorf("left after Destroy: %v", left)
	}
	if c := testEngine.JailCounts(); c.Alive != before.Alive || c.TeardownFailures != before.TeardownFailures {
		t.Errorf("counts after Destroy %+v, before %+v", c, before)
	}
	// A jail destroyed before it started leaves nothing either.
	j2, err := testEngine.Create(Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	j2.Destroy()
	if left := testEngine.Leftovers(); len(left) != 0 {
		t.Errorf("left after destroying an unstarted jail: %v", left)
	}
	if _, err := testEngine.Create(Spec{Limits: Limits{}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Create with zero limits: %v", err)
	}
	if _, err := testEngine.Create(Spec{Limits: DefaultLimits(), Network: &Network{}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Create with egress on an engine without it: %v", err)
	}
}

// jailProcessCount counts the processes in j's host uid range.
func jailProcessCount(j *Jail) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == strconv.Itoa(j.HostUID()) {
				n++
			}
		}
	}
	return n
}

// Exec starts a further process in a live jail: same pid namespace, same
// user, the same filter and no privileges; it ends on its own or with the
// jail, and a jail whose first process ended takes no more.
func TestJailExec(t *testing.T) {
	j, err := testEngine.Create(Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Destroy()
	if _, err := j.Exec(Process{Args: []string{"/bin/true"}}); err == nil {
		t.Error("Exec before Start was accepted")
	}
	if err := j.Start(Process{Args: []string{"/bin/sleep", "1000"}}); err != nil {
		t.Fatal(err)
	}
	outR, outW, _ := os.Pipe()
	defer outR.Close()
	p, err := j.Exec(Process{Args: []string{"/bin/sh", "-c",
		`id -u; tr '\0' ' ' < /proc/1/cmdline; echo; grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status; exit 5`}, Stdout: outW, Stderr: outW})
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
	if x := p.Exit(); x.Code != 5 {
		t.Errorf("exit %+v, want 5", x)
	}
	want := "1000\n/bin/sleep 1000 \nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n"
	if string(out) != want {
		t.Errorf("output %q, want %q", out, want)
	}
	// A process left running dies with the jail.
	long, err := j.Exec(Process{Args: []string{"/bin/sleep", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	j.Kill()
	<-j.Done()
	select {
	case <-long.Done():
	case <-time.After(10 * time.Second):
		t.Error("an exec'd process outlived the jail's first one")
	}
	if _, err := j.Exec(Process{Args: []string{"/bin/true"}}); err == nil {
		t.Error("Exec after the first process ended was accepted")
	}
}

// The daemon holds a jail's mount namespace from its start to its
// teardown, so that the end of the jail's last process (which would
// otherwise unmount every mount of the jail before the daemon learns of
// it) does not tear it down on the run's path; Destroy lets it go.
func TestJailMountNamespaceHeld(t *testing.T) {
	j, err := testEngine.Create(Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Destroy()
	inR, inW, _ := os.Pipe()
	defer inW.Close()
	if err := j.Start(Process{Args: []string{"/bin/cat"}, Stdin: inR}); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	state, err := j.c.State()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", state.InitProcessPid))
	if err != nil {
		t.Fatal(err)
	}
	if own, _ := os.Readlink("/proc/self/ns/mnt"); ns == own || !strings.HasPrefix(ns, "mnt:[") {
		t.Fatalf("jail's mount namespace %q (the daemon's: %q)", ns, own)
	}
	inW.Close() // cat ends, and with it the jail's last process
	<-j.Done()
	held := func() int {
		n := 0
		ents, _ := os.ReadDir("/proc/self/fd")
		for _, ent := range ents {
			if l, _ := os.Readlink("/proc/self/fd/" + ent.Name()); l == ns {
				n++
			}
		}
		return n
	}
	if n := held(); n != 1 {
		t.Errorf("%d fds of the daemon on the ended jail's mount namespace %s, want 1", n, ns)
	}
	j.Destroy()
	if n := held(); n != 0 {
		t.Errorf("%d fds on the jail's mount namespace %s after Destroy", n, ns)
	}
	if left := testEngine.Leftovers(); len(left) != 0 {
		t.Errorf("left after Destroy: %v", left)
	}
}

// A Resize to the limits the jail has writes none of them again (the warm
// path's common case) but still starts the peak afresh; one to other
// limits writes them, and one back writes them again.
func TestJailResizeSameLimits(t *testing.T) {
	l := DefaultLimits()
	j, err := testEngine.Create(Spec{Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Destroy()
	inR, inW, _ := os.Pipe()
	outR, outW, _ := os.Pipe()
	defer inW.Close()
	defer outR.Close()
	// A subshell holds 40 MB and ends; then the jail waits.
	script := `(x=$(head -c 40000000 /dev/zero | tr '\0' a); echo ${#x}); echo ended; read go`
	if err := j.Start(Process{Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"}, Stdin: inR, Stdout: outW}); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	lines := bufio.NewScanner(outR)
	var said []string
	for len(said) < 2 && lines.Scan() {
		said = append(said, lines.Text())
	}
	if strings.Join(said, " ") != "40000000 ended" {
		t.Fatalf("the jail said %q", said)
	}
	v2 := cgroups.IsCgroup2UnifiedMode()
	limitFile := func() string {
		p := filepath.Join(j.cgroups["memory"], "memory.limit_in_bytes")
		if v2 {
			p = filepath.Join(j.cgroups[""], "memory.max")
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	want := strconv.FormatInt(l.MemoryBytes, 10)
	if got := limitFile(); got != want {
		t.Fatalf("memory limit %s, want %s", got, want)
	}
	// The peak is known on v1, and on v2 where memory.peak exists (5.19+).
	_, peakErr := os.Stat(filepath.Join(j.cgroups[""], "memory.peak"))
	peakKnown := !v2 || peakErr == nil
	if p := j.Stats().PeakMemoryBytes; peakKnown && p < 40e6 {
		t.Fatalf("peak %d before the Resize, want at least 40 MB", p)
	}
	// A limit changed behind the jail's back shows whether the Resize
	// wrote it again.
	marker := strconv.FormatInt(l.MemoryBytes-(16<<20), 10)
	limitPath := filepath.Join(j.cgroups["memory"], "memory.limit_in_bytes")
	if v2 {
		limitPath = filepath.Join(j.cgroups[""], "memory.max")
	}
	if err := os.WriteFile(limitPath, []byte(marker), 0); err != nil {
		t.Fatal(err)
	}
	if err := j.Resize(l); err != nil {
		t.Fatal(err)
	}
	if got := limitFile(); got != marker {
		t.Errorf("memory limit %s after a Resize to the same limits, want %s untouched", got, marker)
	}
	if err := os.WriteFile(limitPath, []byte(want), 0); err != nil {
		t.Fatal(err)
	}
	// The peak restarts where the kernel can (v1; v2 with memory.peak
	// resettable, Linux 6.12+).
	if !v2 || j.peak != nil {
		if p := j.Stats().PeakMemoryBytes; p >= 40e6 {
			t.Errorf("peak %d after a Resize to the same limits: not started afresh", p)
		}
	}
	small := l
	small.MemoryBytes = 96 << 20
	if err := j.Resize(small); err != nil {
		t.Fatal(err)
	}
	if got := limitFile(); got != strconv.FormatInt(small.MemoryBytes, 10) {
		t.Errorf("memory limit %s after a Resize to %d", got, small.MemoryBytes)
	}
	if err := j.Resize(l); err != nil {
		t.Fatal(err)
	}
	if got := limitFile(); got != want {
		t.Errorf("memory limit %s after a Resize back, want %s", got, want)
	}
	inW.Close()
	<-j.Done()
}
