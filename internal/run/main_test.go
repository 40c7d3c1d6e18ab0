//go:build !unit

package run

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/jail"
)

// The tests in this package run real jails: they need root, the seccomp
// build tag and a built rootfs image (`make rootfs`). Without any of those
// they fail; they never skip. Their files, this TestMain's among them, are
// built only without the unit tag (`//go:build !unit`): `make test-unit`
// builds with it and runs the rest (unit_test.go), which need neither root
// nor an image, while `make test-host` builds every file, so that a root
// test that cannot run fails there. A root test put in an untagged file
// does not compile with the tag (testEngine is not there): it cannot slip
// into test-unit.

var (
	testEngine  *Service // a service without a pool
	testJails   *jail.Engine
	testImage   string
	testProfile string
)

func TestMain(m *testing.M) {
	jail.Init() // libcontainer re-executes the test binary as the jail's init
	if probe := os.Getenv(controlProbeEnv); probe != "" {
		controlProbe(probe) // never returns
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "internal/run tests run real jails and need root (run `make test-host` as root; `make test-unit` runs those that need neither root nor an image)")
		return 1
	}
	testImage = os.Getenv("JAILD_IMAGE_DIR")
	if testImage == "" {
		testImage = "/var/cache/jaild/rootfs/current"
	}
	testProfile, _ = filepath.Abs("../../seccomp-profiles/default.json")
	runDir, err := os.MkdirTemp("", "jaild-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(runDir)
	testJails, err = jail.New(jail.Config{
		ImageDir:       testImage,
		SeccompProfile: testProfile,
		RunDir:         runDir,
		CgroupName:     "jaild-test-" + strconv.Itoa(os.Getpid()),
		HostIDBase:     1_200_000_000,
		CRIU:           testCRIU(),
		CheckpointKey:  []byte("run tests' checkpoint key, 32 bytes or more"),
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot create the jail engine (image %s; build it with `make rootfs`): %v\n", testImage, err)
		return 1
	}
	if testEngine, err = New(testJails, Config{CheckpointDir: filepath.Join(runDir, "checkpoints")}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	testCheckpoints = testEngine.ProbeCheckpoints(time.Minute)
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
	req := &Request{Code: code, Limits: jail.DefaultLimits()}
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

func withLimits(f func(*jail.Limits)) func(*Request) { return func(r *Request) { f(&r.Limits) } }

// checkNoLeaks asserts that a finished run left no process in the jails'
// uid range, no cgroup, no mount, no state and no run directory.
func checkNoLeaks(t *testing.T, id string) {
	t.Helper()
	testEngine.Idle()
	if left := testJails.Leftovers(); len(left) != 0 {
		t.Errorf("leak after run %s: %v", id, left)
	}
	if pids := jailProcesses(testJails.HostIDBase()); len(pids) != 0 {
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
				if uid, _ := strconv.ParseUint(f[1], 10, 32); uid >= uint64(base) && uid < uint64(base)+jail.MaxJails*jail.IDsPerJail {
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
	if len(m) != 3 || m[0] != "0" || m[2] != strconv.Itoa(jail.IDsPerJail) {
		return false
	}
	host, err := strconv.ParseUint(m[1], 10, 32)
	return err == nil && host >= uint64(base) && host < uint64(base)+jail.MaxJails*jail.IDsPerJail && (host-uint64(base))%jail.IDsPerJail == 0
}

func near(d, want time.Duration, slack time.Duration) bool {
	return d >= want-slack && d <= want+slack
}

// testCheckpoints is why sessions cannot pause here ("" when they can),
// as the service's probe found at the start.
var testCheckpoints string

// testCRIU is the criu the tests checkpoint with: $JAILD_CRIU, else what
// `make deps` fetched (deploy/criu/fetch.sh).
func testCRIU() string {
	if p := os.Getenv("JAILD_CRIU"); p != "" {
		return p
	}
	return "/var/cache/jaild/criu/current/bin/criu"
}
