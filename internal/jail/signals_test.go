//go:build !unit

package jail

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// signalsChildEnv marks the test binary run, by TestJailSignalsReset,
// with signals ignored as nohup (or a shell) leaves them.
const signalsChildEnv = "JAILD_TEST_SIGNALS_CHILD"

// sigLines prints a process's SigBlk and SigIgn lines of /proc/self/status.
const sigLines = `import sys
sys.stdout.write(''.join(l for l in open('/proc/self/status') if l.startswith(('SigBlk:', 'SigIgn:'))))
`

// The image's init resets every disposition and the mask: a jail's
// processes start as a fresh process would, whatever the daemon's parent
// ignored (nohup's SIGHUP; an execve keeps ignored signals ignored, and Go
// keeps an inherited SIG_IGN of SIGHUP and of the signals it never
// handles). The expectation is the host's python3 started clean: what
// Python itself ignores.
func TestJailSignalsReset(t *testing.T) {
	if os.Getenv(signalsChildEnv) != "" {
		signalsChild(t)
		return
	}
	clean := `import os, signal, sys
for s in signal.valid_signals():
    if s not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(s, signal.SIG_DFL)
signal.pthread_sigmask(signal.SIG_SETMASK, ())
os.execvp('python3', ['python3', '-c', sys.argv[1]])
`
	control, err := exec.Command("python3", "-c", clean, sigLines).Output()
	if err != nil {
		t.Fatalf("control: %v", err)
	}
	// The test binary again, as the daemon under nohup: SIGHUP, SIGUSR1
	// and SIGRTMIN+0 (34) ignored.
	ignore := `import os, signal, sys
for s in (signal.SIGHUP, signal.SIGUSR1, 34):
    signal.signal(s, signal.SIG_IGN)
os.execv(sys.argv[1], sys.argv[1:])
`
	cmd := exec.Command("python3", "-c", ignore, os.Args[0], "-test.run=^TestJailSignalsReset$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), signalsChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the test binary with signals ignored: %v\n%s", err, out)
	}
	// Go installs its handler for SIGUSR1 (which an execve then resets);
	// it keeps SIGHUP and 34 ignored, which an execve passes on.
	own := field(t, out, "own SigIgn:")
	const want = 1<<(1-1) | 1<<(34-1)
	if own&want != want {
		t.Fatalf("the engine's process does not ignore SIGHUP and 34 (SigIgn %#x): the test proves nothing", own)
	}
	// Python cannot reset 32 and 33 (glibc's own signals, not in
	// valid_signals): the control keeps whatever this test process
	// ignores of them (32 in CI), and Python itself ignores neither.
	const glibcOwn = 1<<(32-1) | 1<<(33-1)
	for _, name := range []string{"SigIgn:", "SigBlk:"} {
		if got, ctl := field(t, out, "jail "+name), field(t, control, name)&^glibcOwn; got != ctl {
			t.Errorf("the jail's python3 %s %#x, a clean python3's %#x (the engine's process ignores %#x)", name, got, ctl, own)
		}
	}
}

// signalsChild runs python3 under the image's init in a jail and prints
// its own and the jail's signal lines.
func signalsChild(t *testing.T) {
	st, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(st), "\n") {
		if strings.HasPrefix(l, "SigIgn:") {
			os.Stdout.WriteString("own " + l + "\n")
		}
	}
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
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		os.Stdout.WriteString("jail " + l + "\n")
	}
	if x := j.Exit(); x.Code != 0 {
		t.Fatalf("python3 in the jail: %+v\n%s", x, out.String())
	}
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
