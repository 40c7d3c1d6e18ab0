//go:build !unit

package jail

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// jailPID is the host pid of the process of j named comm (its first, by
// /proc order), waiting up to 10 s for it to appear.
func jailPID(t *testing.T, j *Jail, comm string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ents, _ := os.ReadDir("/proc")
		for _, ent := range ents {
			pid, err := strconv.Atoi(ent.Name())
			if err != nil {
				continue
			}
			c, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "comm"))
			st, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "status"))
			if strings.TrimSpace(string(c)) == comm && bytes.Contains(st, []byte("\nUid:\t"+strconv.Itoa(j.HostUID())+"\t")) {
				return pid
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no process %s in jail %s", comm, j.ID())
	return 0
}

// filterOf reads the seccomp filter of process pid back from the kernel.
// pid must not be a child of the test process: the engine's wait for a
// jail's first process (its child) would take the ptrace stop.
func filterOf(t *testing.T, pid int) []byte {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prog, err := tracedFilter(pid)
	if err != nil {
		t.Fatalf("filter of pid %d: %v", pid, err)
	}
	return prog
}

// statusLine is the value of field name in /proc/<pid>/status.
func statusLine(t *testing.T, pid int, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func seccompFilters(t *testing.T, pid int) string { return statusLine(t, pid, "Seccomp_filters") }

// The filter a jail's init loads from the engine's program is the one
// libcontainer loads itself, instruction for instruction: both are read
// back from the kernel, from a process in a jail of each kind, and each
// has that one filter.
func TestJailFilterLoadedByInit(t *testing.T) {
	if testEngine.filterProg == nil {
		t.Fatal("the engine has no seccomp program compiled ahead (see its log)")
	}
	if !testEngine.Manifest().RunnerCan(FeatureSeccompFD) {
		t.Fatalf("the test image's init cannot load a filter (runner features %v): rebuild it (make rootfs)", testEngine.Manifest().RunnerFeatures)
	}
	start := func(byInit bool) (*Jail, *os.File) {
		j, err := testEngine.Create(Spec{Limits: DefaultLimits(), InitLoadsFilter: byInit})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(j.Destroy)
		if j.filterByInit != byInit {
			t.Fatalf("filterByInit %v, want %v", j.filterByInit, byInit)
		}
		inR, inW, _ := os.Pipe()
		// cat is not the jail's first process (see filterOf).
		args := []string{"/bin/sh", "-c", "/bin/cat; exit 0"}
		if byInit {
			args = []string{j.Manifest().Init, "/bin/cat"}
		}
		if err := j.Start(Process{Args: args, Stdin: inR}); err != nil {
			t.Fatal(err)
		}
		inR.Close()
		t.Cleanup(func() { inW.Close() })
		return j, inW
	}
	lc, _ := start(false)
	byInit, _ := start(true)
	lcCat := jailPID(t, lc, "cat")
	fromLibcontainer := filterOf(t, lcCat)
	catPID := jailPID(t, byInit, "cat")
	// What filter flags and no_new_privs show: the same in both.
	for _, name := range []string{"Seccomp", "NoNewPrivs", "Speculation_Store_Bypass", "Seccomp_filters"} {
		if a, b := statusLine(t, lcCat, name), statusLine(t, catPID, name); a != b {
			t.Errorf("%s: %q under libcontainer's filter, %q under the init's", name, a, b)
		}
	}
	fromInit := filterOf(t, catPID)
	if !bytes.Equal(fromLibcontainer, testEngine.filterProg) {
		t.Errorf("libcontainer's filter (%d bytes) differs from the engine's program (%d bytes)", len(fromLibcontainer), len(testEngine.filterProg))
	}
	if !bytes.Equal(fromInit, fromLibcontainer) {
		t.Errorf("the filter the image's init loaded (%d bytes) differs from libcontainer's (%d bytes)", len(fromInit), len(fromLibcontainer))
	}
	// One filter, the init's (a child inherits its parent's): the init
	// loaded it before it started cat.
	if n := seccompFilters(t, catPID); n != "1" {
		t.Errorf("Seccomp_filters: %q in the init-filtered jail, want 1", n)
	}
	if n := seccompFilters(t, jailPID(t, byInit, "init")); n != "1" {
		t.Errorf("Seccomp_filters: %q for the image's init, want 1", n)
	}
	// Fail closed: such a jail's further processes run only under a
	// second copy of its init, which loads the filter first (see
	// TestJailExecGroup): nothing it could not hand over is taken.
	if _, err := byInit.Exec(Process{Args: []string{"true"}}); err == nil {
		t.Error("Exec of a program without a path accepted in a jail whose filter its init loads")
	}
	if _, err := byInit.Exec(Process{Args: []string{"/bin/true"}, ExtraFiles: []*os.File{os.Stdin}}); err == nil {
		t.Error("Exec with extra files accepted in a jail whose filter its init loads")
	}
	j, err := testEngine.Create(Spec{Limits: DefaultLimits(), InitLoadsFilter: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Destroy()
	if err := j.Start(Process{Args: []string{"/bin/true"}}); err == nil {
		t.Error("a jail whose filter its init loads started /bin/true as its first process")
	}
}

// The image's init refuses to start its program when the filter cannot be
// loaded: a jail whose init gets no valid program ends before Python.
func TestJailInitFilterFailsClosed(t *testing.T) {
	for _, c := range []struct {
		name string
		prog []byte // nil: no fd at all
	}{
		{"not a whole instruction", []byte{1, 2, 3}},
		{"empty", []byte{}},
		{"an instruction the kernel refuses", []byte{0xff, 0xff, 0, 0, 0, 0, 0, 0}},
		{"no such fd", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			j, err := testEngine.Create(Spec{Limits: DefaultLimits()})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Destroy()
			var extra []*os.File
			if c.prog != nil {
				f, err := os.CreateTemp("", "jaild-bad-filter")
				if err != nil {
					t.Fatal(err)
				}
				defer os.Remove(f.Name())
				defer f.Close()
				if _, err := f.Write(c.prog); err != nil {
					t.Fatal(err)
				}
				if _, err := f.Seek(0, 0); err != nil {
					t.Fatal(err)
				}
				extra = []*os.File{f}
			}
			errR, errW, _ := os.Pipe()
			defer errR.Close()
			if err := j.Start(Process{Args: []string{j.Manifest().Init, "--seccomp-fd", "3", "/bin/echo", "ran"}, ExtraFiles: extra, Stderr: errW, Stdout: errW}); err != nil {
				t.Fatal(err)
			}
			errW.Close()
			b, _ := io.ReadAll(io.LimitReader(errR, 1<<16))
			out := string(b)
			<-j.Done()
			if x := j.Exit(); x.Code != 2 || strings.Contains(out, "ran") || !strings.Contains(out, "cannot load the jail's seccomp filter") {
				t.Errorf("exit %+v, output %q: want exit 2 before the program, with the reason", x, out)
			}
		})
	}
}
