package jail

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The tests in this package run real jails: they need root, the seccomp
// build tag and a built rootfs image (`make rootfs`). Without any of those
// they fail; they never skip.

var testEngine *Engine

func TestMain(m *testing.M) {
	Init() // libcontainer re-executes the test binary as the jail's init
	if probe := os.Getenv(controlProbeEnv); probe != "" {
		controlProbe(probe) // never returns
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "internal/jail tests run real jails and need root (run `make test` as root)")
		return 1
	}
	imageDir := os.Getenv("JAILD_IMAGE_DIR")
	if imageDir == "" {
		imageDir = "/var/cache/jaild/rootfs/current"
	}
	profile, _ := filepath.Abs("../../seccomp-profiles/default.json")
	runDir, err := os.MkdirTemp("", "jaild-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(runDir)
	testEngine, err = New(Config{
		ImageDir:       imageDir,
		SeccompProfile: profile,
		RunDir:         runDir,
		CgroupName:     "jaild-test-" + strconv.Itoa(os.Getpid()),
		HostIDBase:     1_200_000_000,
		FavorDynmods:   true,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot create the jail engine (image %s; build it with `make rootfs`): %v\n", imageDir, err)
		return 1
	}
	code := m.Run()
	if err := testEngine.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close engine:", err)
		code = 1
	}
	return code
}

// run executes code in a fresh jail with default limits changed by opts,
// fails the test on an engine error, and checks nothing was left behind.
func run(t *testing.T, code string, opts ...func(*Request)) *Result {
	t.Helper()
	req := &Request{Code: code, Limits: DefaultLimits()}
	for _, o := range opts {
		o(req)
	}
	res, err := testEngine.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	checkNoLeaks(t, res.ID)
	return res
}

func withLimits(f func(*Limits)) func(*Request) { return func(r *Request) { f(&r.Limits) } }

// checkNoLeaks asserts that a finished run left no process in the jails'
// uid range, no cgroup, no mount, no state and no run directory.
func checkNoLeaks(t *testing.T, id string) {
	t.Helper()
	e := testEngine
	e.Idle()
	for _, dir := range []string{e.stateDir, e.runsDir} {
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("leak: %s not empty after run: %s", dir, ents[0].Name())
		}
	}
	if ids := e.leftoverCgroups(); len(ids) != 0 {
		t.Errorf("leak: cgroups left: %v", ids)
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mi), e.runsDir) {
		t.Errorf("leak: a run mount is still in /proc/self/mountinfo")
	}
	if pids := jailProcesses(e.cfg.HostIDBase); len(pids) != 0 {
		t.Errorf("leak: processes in the jails' uid range: %v", pids)
	}
}

func jailProcesses(base uint32) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				if uid, _ := strconv.ParseUint(f[1], 10, 32); uid >= uint64(base) && uid < uint64(base)+MaxJails*idMapSize {
					pids = append(pids, pid)
				}
			}
		}
	}
	return pids
}

// oneJailRange reports whether an id map line (inside, host, count) maps
// the jail's 65536 ids to one of the jails' host ranges above base.
func oneJailRange(m []string, base uint32) bool {
	if len(m) != 3 || m[0] != "0" || m[2] != strconv.Itoa(idMapSize) {
		return false
	}
	host, err := strconv.ParseUint(m[1], 10, 32)
	return err == nil && host >= uint64(base) && host < uint64(base)+MaxJails*idMapSize && (host-uint64(base))%idMapSize == 0
}

func near(d, want time.Duration, slack time.Duration) bool {
	return d >= want-slack && d <= want+slack
}
