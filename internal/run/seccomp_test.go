//go:build !unit

package run

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/seccomp"
)

// Every syscall the profile denies is refused by the filter from inside a
// real jail: EPERM (ENOSYS for clone3, SIGSYS for the x32 ABI), never the
// EFAULT/EBADF/EINVAL of a kernel that saw the call.
func TestJailSeccompDenies(t *testing.T) {
	denied, err := seccomp.Denied(testEngine.Seccomp())
	if err != nil {
		t.Fatal(err)
	}
	probes := append(denied, seccomp.ConditionalProbes()...)
	if len(denied) < 50 {
		t.Fatalf("only %d denied syscalls to probe", len(denied))
	}
	stdin := seccomp.ProberInput(probes)
	res := run(t, seccomp.ProberScript, func(r *Request) { r.Stdin = stdin; r.Limits.Pids = 16 })
	if res.Status != spec.StatusOK {
		t.Fatalf("prober: status %s\nstderr %s", res.Status, res.Stderr)
	}
	var got []seccomp.ProbeOutcome
	if err := json.Unmarshal(res.Stdout, &got); err != nil || len(got) != len(probes) {
		t.Fatalf("prober output (%d of %d probes): %v", len(got), len(probes), err)
	}
	failed, excused := seccomp.CheckOutcomes(probes, got, func(p seccomp.Probe) int { return unconfinedSignal(t, p.Nr, p.Args) })
	for _, e := range excused {
		t.Log(e)
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d probes not refused by the filter:\n%s", len(failed), len(probes), strings.Join(failed, "\n"))
	}
	t.Logf("%d denied syscalls and %d conditional cases refused by the filter", len(denied), len(probes)-len(denied))
}

// controlProbeEnv makes the test binary a control prober: it makes one
// system call ("nr,a0,...,a5"), unconfined, and exits.
const controlProbeEnv = "JAILD_TEST_CONTROL_SYSCALL"

func controlProbe(spec string) {
	var v [7]uintptr
	for i, f := range strings.SplitN(spec, ",", 7) {
		n, _ := strconv.ParseUint(f, 10, 64)
		v[i] = uintptr(n)
	}
	_, _, errno := unix.RawSyscall6(v[0], v[1], v[2], v[3], v[4], v[5], v[6])
	os.Exit(int(errno) & 0x7f)
}

// unconfinedSignal makes the system call nr in a child of this host,
// outside any jail, and returns the signal that ended the child (0: none).
func unconfinedSignal(t *testing.T, nr int, args [6]uint64) int {
	t.Helper()
	spec := strconv.Itoa(nr)
	for _, a := range args {
		spec += "," + strconv.FormatUint(a, 10)
	}
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), controlProbeEnv+"="+spec)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return int(ws.Signal())
		}
		// Go's runtime turns a synchronous signal (SIGILL, SIGSEGV, ...)
		// into a crash with exit status 2 that names it.
		if m := regexp.MustCompile(`\bSIG[A-Z]+\b`).FindString(stderr.String()); m != "" && ee.ExitCode() == 2 {
			return int(unix.SignalNum(m))
		}
	}
	return 0
}
