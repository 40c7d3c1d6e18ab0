//go:build !unit

package run

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
)

func TestJailMemoryLimit(t *testing.T) {
	res := run(t, "x = []\nwhile True: x.append(bytearray(16 << 20))\n", withLimits(func(l *jail.Limits) { l.MemoryBytes = 128 << 20 }))
	if res.Status != spec.StatusMemoryLimit || !res.OOMKilled {
		t.Errorf("status %s oom_killed %v signal %d, want memory_limit with the OOM flag\nstderr: %s", res.Status, res.OOMKilled, res.Signal, res.Stderr)
	}
	if res.PeakMemoryBytes < 100<<20 || res.PeakMemoryBytes > 129<<20 {
		t.Errorf("peak memory %d, want close to the 128 MiB limit", res.PeakMemoryBytes)
	}
}

func TestJailForkBomb(t *testing.T) {
	code := `
import os, time
n = 0
err = None
for _ in range(10000):
    try:
        if os.fork() == 0:
            time.sleep(30); os._exit(0)
        n += 1
    except OSError as e:
        err = e.errno; break
print(n, err, flush=True)
`
	res := run(t, code, withLimits(func(l *jail.Limits) { l.Pids = 32; l.Timeout = 20 * time.Second }))
	var n, errno int
	if _, err := sscan(res.Stdout, &n, &errno); err != nil {
		t.Fatalf("output %q: %v\nstderr: %s", res.Stdout, err, res.Stderr)
	}
	if errno != 11 || n >= 32 || n < 16 {
		t.Errorf("forked %d children then errno %d; want EAGAIN (11) just under the pids limit of 32", n, errno)
	}
	if res.Status != spec.StatusOK {
		t.Errorf("status %s, want ok once the parent exits (children die with the jail)", res.Status)
	}
}

func TestJailTimeoutBusyLoop(t *testing.T) {
	res := run(t, "import signal\nfor s in (signal.SIGTERM, signal.SIGXCPU, signal.SIGINT): signal.signal(s, signal.SIG_IGN)\nwhile True: pass\n",
		withLimits(func(l *jail.Limits) { l.Timeout = 1500 * time.Millisecond }))
	if res.Status != spec.StatusTimeout || !res.TimedOut || res.Signal != 9 {
		t.Errorf("status %s timed_out %v signal %d, want timeout by SIGKILL", res.Status, res.TimedOut, res.Signal)
	}
	if !near(res.Duration, 1500*time.Millisecond, 700*time.Millisecond) {
		t.Errorf("duration %v, want near 1.5s", res.Duration)
	}
	if res.CPUTime < 800*time.Millisecond {
		t.Errorf("cpu time %v, want close to the wall time of a busy loop", res.CPUTime)
	}
}

func TestJailTimeoutSleep(t *testing.T) {
	res := run(t, "import time\ntime.sleep(10**6)\n", withLimits(func(l *jail.Limits) { l.Timeout = time.Second }))
	if res.Status != spec.StatusTimeout || !res.TimedOut {
		t.Errorf("status %s timed_out %v, want timeout", res.Status, res.TimedOut)
	}
	if !near(res.Duration, time.Second, 700*time.Millisecond) {
		t.Errorf("duration %v, want near 1s", res.Duration)
	}
	if res.CPUTime > 500*time.Millisecond {
		t.Errorf("cpu time %v for a sleeper", res.CPUTime)
	}
}

func TestJailOutputFlood(t *testing.T) {
	res := run(t, "import sys\nwhile True: sys.stdout.write('x' * 65536)\n", withLimits(func(l *jail.Limits) { l.OutputBytes = 100000 }))
	if res.Status != spec.StatusOutputLimit || !res.StdoutTruncated || len(res.Stdout) != 100000 {
		t.Errorf("status %s truncated %v len %d, want output_limit with exactly 100000 bytes kept", res.Status, res.StdoutTruncated, len(res.Stdout))
	}
	// One exact 1,000,000-byte line under the cap comes back whole.
	res = run(t, "print('a' * 1_000_000)\n", withLimits(func(l *jail.Limits) { l.OutputBytes = 2 << 20 }))
	if res.Status != spec.StatusOK || len(res.Stdout) != 1_000_001 || res.StdoutTruncated {
		t.Errorf("1 MB line: status %s, %d bytes, truncated %v", res.Status, len(res.Stdout), res.StdoutTruncated)
	}
	// A stderr flood with a silent stdout is capped the same way.
	res = run(t, "import os\nwhile True: os.write(2, b'\\xff' * 4096)\n", withLimits(func(l *jail.Limits) { l.OutputBytes = 50000 }))
	if res.Status != spec.StatusOutputLimit || !res.StderrTruncated || len(res.Stderr) != 50000 || len(res.Stdout) != 0 {
		t.Errorf("stderr flood: status %s truncated %v stderr %d stdout %d", res.Status, res.StderrTruncated, len(res.Stderr), len(res.Stdout))
	}
}

func TestJailWorkspaceFull(t *testing.T) {
	code := `
import os
try:
    with open('big', 'wb') as f:
        while True: f.write(b'\0' * (1 << 20))
except OSError as e: print('space', e.errno)
os.remove('big')
i = 0
try:
    while True: open(f'i{i}', 'w').close(); i += 1
except OSError as e: print('inodes', e.errno)
`
	res := run(t, code, withLimits(func(l *jail.Limits) { l.WorkspaceBytes = 8 << 20; l.WorkspaceInodes = 500 }))
	if got := string(res.Stdout); got != "space 28\ninodes 28\n" {
		t.Errorf("output %q, want ENOSPC (28) for both space and inodes\nstderr: %s", got, res.Stderr)
	}
}

func TestJailFileSizeLimit(t *testing.T) {
	res := run(t, "try:\n    open('f', 'wb').write(b'x' * (3 << 20))\nexcept OSError as e: print(e.errno)\n",
		withLimits(func(l *jail.Limits) { l.FileSizeBytes = 1 << 20 }))
	if strings.TrimSpace(string(res.Stdout)) != "27" || res.Status != spec.StatusOK {
		t.Errorf("output %q status %s, want EFBIG (27) raised, not a SIGXFSZ death\nstderr: %s", res.Stdout, res.Status, res.Stderr)
	}
}

func TestJailDoubleForkDies(t *testing.T) {
	code := `
import os, time, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.close(1); os.close(2)
        time.sleep(3600)
    os._exit(0)
time.sleep(0.2)
print('parent done')
`
	start := time.Now()
	res := run(t, code) // run checks that no process is left in the jails' uid range
	if res.Status != spec.StatusOK || string(res.Stdout) != "parent done\n" {
		t.Errorf("status %s stdout %q", res.Status, res.Stdout)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("run took %v: the detached sleeper held it up", time.Since(start))
	}
}

func TestJailCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	start := time.Now()
	res, err := testEngine.Run(ctx, &Request{Code: "import time\ntime.sleep(60)\n", Limits: jail.DefaultLimits()})
	if err != nil {
		t.Fatal(err)
	}
	checkNoLeaks(t, res.ID)
	if !res.Cancelled || res.Status != spec.StatusKilled || time.Since(start) > 3*time.Second {
		t.Errorf("cancelled %v status %s after %v, want killed within about a second", res.Cancelled, res.Status, time.Since(start))
	}
}

func TestJailStdin(t *testing.T) {
	code := "import sys\nd = sys.stdin.buffer.read()\nprint(len(d))\n"
	if res := run(t, code); string(res.Stdout) != "0\n" {
		t.Errorf("no stdin: %q", res.Stdout)
	}
	in := bytes.Repeat([]byte("z"), 300000)
	if res := run(t, code, func(r *Request) { r.Stdin = in }); string(res.Stdout) != "300000\n" {
		t.Errorf("stdin of 300000 bytes: %q", res.Stdout)
	}
}

func TestJailKillAll(t *testing.T) {
	// kill(-1) reaches every process of the jail but pid 1 and (on Linux)
	// the caller itself, and nothing outside the jail.
	res := run(t, "import os, signal, time\nchild = os.fork()\nif child == 0:\n    time.sleep(60)\n    os._exit(0)\n"+
		"os.kill(-1, signal.SIGKILL)\nprint('child', os.waitpid(child, 0)[1])\n")
	if res.Status != spec.StatusOK || string(res.Stdout) != "child 9\n" {
		t.Errorf("kill(-1, SIGKILL): status %s stdout %q stderr %s, want the forked child killed by 9", res.Status, res.Stdout, res.Stderr)
	}
	res = run(t, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
	if res.Status != spec.StatusKilled || res.Signal != 9 {
		t.Errorf("self SIGKILL: status %s signal %d, want killed by 9", res.Status, res.Signal)
	}
}

func sscan(b []byte, args ...any) (int, error) {
	return fmt.Sscan(strings.ReplaceAll(string(b), "None", "0"), args...)
}
