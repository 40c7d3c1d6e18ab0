//go:build !unit

package jail

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// The tests in this package create real jails: they need root, the
// seccomp build tag and a built rootfs image (`make rootfs`). Without any
// of those they fail; they never skip. They run the image's shell and
// coreutils: the sandbox knows nothing of what runs in it (the
// orchestration is tested in internal/run). Their files, this TestMain's
// among them, are built only without the unit tag (`//go:build !unit`):
// `make test-unit` builds with it and runs the rest (unit_test.go), which
// need neither root nor an image, while `make test-host` builds every
// file, so that a root test that cannot run fails there.

var testEngine *Engine

func TestMain(m *testing.M) {
	Init() // libcontainer re-executes the test binary as the jail's init
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "internal/jail tests create real jails and need root (run `make test-host` as root; `make test-unit` runs those that need neither root nor an image)")
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
		CgroupName:     "jaild-jail-test-" + strconv.Itoa(os.Getpid()),
		HostIDBase:     hostIDBase(),
		FavorDynmods:   true, // only this package's engine: TestFavorDynmods checks it set it
		CRIU:           testCRIU(),
		CheckpointKey:  []byte("jail tests' checkpoint key, 32 bytes or more"),
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
	if left := testEngine.Leftovers(); len(left) != 0 {
		fmt.Fprintln(os.Stderr, "leftovers after Close:", left)
		code = 1
	}
	return code
}

// hostIDBase is apart from internal/run (1.2e9) and tests/ (1.3e9), which
// may run at once, and the test binary's run by TestJailSignalsReset has
// its own.
func hostIDBase() uint32 {
	if os.Getenv(signalsChildEnv) != "" {
		return 1_600_000_000
	}
	return 1_500_000_000
}

// testCRIU is the criu the tests checkpoint with: $JAILD_CRIU, else what
// `make deps` fetched (deploy/criu/fetch.sh).
func testCRIU() string {
	if p := os.Getenv("JAILD_CRIU"); p != "" {
		return p
	}
	return "/var/cache/jaild/criu/current/bin/criu"
}
