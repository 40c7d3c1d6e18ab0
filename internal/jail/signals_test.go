//go:build !unit

package jail

import (
	"bytes"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// signalsChildEnv marks the test binary run, by TestJailSignalsReset,
// with SIGHUP ignored as nohup leaves it.
const signalsChildEnv = "JAILD_TEST_SIGNALS_CHILD"

// sigLines prints a process's SigBlk and SigIgn lines of /proc/self/status.
const sigLines = `import sys
sys.stdout.write(''.join(l for l in open('/proc/self/status') if l.startswith(('SigBlk:', 'SigIgn:'))))
`

// The image's init resets every disposition and the mask: a jail's
// processes start as a fresh process would, whatever the daemon's parent
// ignored (nohup's SIGHUP; an execve keeps ignored signals ignored, and Go
// keeps an inherited SIG_IGN of SIGHUP). The test binary runs again with
// SIGHUP ignored, as under nohup; the control is a jail of this process,
// which does not ignore it. Both are the image's python3: no python3 is
// needed on the host (the VM guest has none).
func TestJailSignalsReset(t *testing.T) {
	if os.Getenv(signalsChildEnv) != "" {
		st, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "SigIgn:") {
				os.Stdout.WriteString("own " + l + "\n")
			}
		}
		for _, l := range strings.Split(strings.TrimSpace(jailSigLines(t)), "\n") {
			os.Stdout.WriteString("jail " + l + "\n")
		}
		return
	}
	control := []byte(jailSigLines(t))
	if field(t, control, "SigIgn:")&1 != 0 {
		t.Fatalf("this process ignores SIGHUP and so does its jail: the test proves nothing\n%s", control)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestJailSignalsReset$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), signalsChildEnv+"=1")
	// Ignored while the child starts: an execve keeps it ignored, and the
	// child's Go runtime keeps an inherited SIG_IGN of SIGHUP.
	signal.Ignore(syscall.SIGHUP)
	out, err := cmd.CombinedOutput()
	signal.Reset(syscall.SIGHUP)
	if err != nil {
		t.Fatalf("the test binary with SIGHUP ignored: %v\n%s", err, out)
	}
	own := field(t, out, "own SigIgn:")
	if own&1 == 0 {
		t.Fatalf("the engine's process does not ignore SIGHUP (SigIgn %#x): the test proves nothing", own)
	}
	for _, name := range []string{"SigIgn:", "SigBlk:"} {
		if got, ctl := field(t, out, "jail "+name), field(t, control, name); got != ctl {
			t.Errorf("the jail's python3 %s %#x under a daemon that ignores %#x, %#x under this one", name, got, own, ctl)
		}
	}
}

// jailSigLines runs python3 under the image's init in a jail and returns
// its SigBlk and SigIgn lines.
func jailSigLines(t *testing.T) string {
	t.Helper()
	j, err := testEngine.Create(Spec{Limits: DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Destroy()
	outR, outW, _ := os.Pipe()
	defer outR.Close()
	if err := j.Start(Process{Args: []string{j.Manifest().Init, "/usr/bin/python3", "-c", sigLines}, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: outW, Stderr: outW}); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	var out bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = out.ReadFrom(outR); close(done) }()
	select {
	case <-j.Done():
	case <-time.After(30 * time.Second):
		j.Kill()
		t.Fatal("jail still running after 30 s")
	}
	<-done
	if x := j.Exit(); x.Code != 0 {
		t.Fatalf("python3 in the jail: %+v\n%s", x, out.String())
	}
	return out.String()
}

// field is the hexadecimal value after prefix at a line's start in out.
func field(t *testing.T, out []byte, prefix string) uint64 {
	t.Helper()
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			var n uint64
			for _, c := range strings.TrimSpace(v) {
				d := strings.IndexRune("0123456789abcdef", c)
				if d < 0 {
					t.Fatalf("%q: not hexadecimal", l)
				}
				n = n<<4 | uint64(d)
			}
			return n
		}
	}
	t.Fatalf("no %q line in:\n%s", prefix, out)
	return 0
}
