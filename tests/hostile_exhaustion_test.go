package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

// timedOut checks a wall-clock kill.
func timedOut(t *testing.T, r *api.ExecuteResponse, limitMs int64) string {
	t.Helper()
	wantStatus(t, r, "timeout")
	if !r.TimedOut || r.Signal == nil || *r.Signal != 9 {
		t.Errorf("timed_out %v signal %v, want a SIGKILL at the wall limit", r.TimedOut, deref(r.Signal))
	}
	if r.Usage.DurationMs < limitMs || r.Usage.DurationMs > limitMs+5000 {
		t.Errorf("duration %d ms for a %d ms limit", r.Usage.DurationMs, limitMs)
	}
	return "killed by SIGKILL at the wall limit (timed_out)"
}

func oomKilled(t *testing.T, r *api.ExecuteResponse) string {
	t.Helper()
	wantStatus(t, r, "memory_limit")
	if !r.OOMKilled || r.Signal == nil || *r.Signal != 9 {
		t.Errorf("oom_killed %v signal %v", r.OOMKilled, deref(r.Signal))
	}
	return "OOM-killed by the cgroup (memory_limit, oom_killed, signal 9)"
}

// sampleMax samples a cgroup file's value every 20 ms until stop is
// closed and returns the largest.
func sampleMax(path string, stop <-chan struct{}) *atomic.Int64 {
	var max atomic.Int64
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			b, _ := os.ReadFile(path)
			if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > max.Load() {
				max.Store(v)
			}
		}
	}()
	return &max
}

func exhaustionCases() []hcase {
	return []hcase{
		{id: "E01", cat: catExhaust, title: "fork bomb",
			expect: "EAGAIN at pids.max, then the wall-clock kill; the jails' parent cgroup never holds more tasks than pids.max plus the warm pool's",
			run: func(t *testing.T, h *hostile) string {
				stop := make(chan struct{})
				max := sampleMax(filepath.Join(h.cg.pids, "pids.current"), stop)
				r := h.exec(t, api.ExecuteRequest{Code: "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n", Limits: &api.Limits{TimeoutMs: ptr(int64(3000))}})
				close(stop)
				obs := timedOut(t, r, 3000)
				// 64 for the run, plus the pool's jails (a runner and its BLAS
				// threads each) and a print(1) of the leak checks.
				if m := max.Load(); m == 0 || m > 64+48 {
					t.Errorf("the jails' parent held up to %d tasks", m)
				}
				return obs + "; the parent's pids.current stayed within pids.max (64) plus the pool's"
			}},
		{id: "E02", cat: catExhaust, title: "thread bomb",
			expect: "\"can't start new thread\" near pids.max, then the run ends normally",
			code:   "import threading, time\nn = 0\ntry:\n    while True: threading.Thread(target=time.sleep, args=(600,), daemon=True).start(); n += 1\nexcept RuntimeError as e: print(n, e)\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				var n int
				fmt.Sscan(r.Stdout, &n)
				if !strings.Contains(r.Stdout, "can't start new thread") || n < 32 || n >= 64 {
					t.Errorf("stdout %q: want can't start new thread below 64", r.Stdout)
				}
				return "RuntimeError: can't start new thread below pids.max (64); the run ends ok"
			}},
		{id: "E03", cat: catExhaust, title: "heap bomb (memory_mb 256)",
			expect: "MemoryError, or oom_killed with signal 9; the host is untouched",
			code:   "x = []\nwhile True: x.append(bytearray(50 << 20))\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{MemoryMB: ptr(int64(256))}},
			check:  func(t *testing.T, r *api.ExecuteResponse) string { return oomKilled(t, r) }},
		{id: "E04", cat: catExhaust, title: "a 1 TiB mmap, then touching 8 GiB (memory_mb 256)",
			expect: "ENOMEM for the 1 TiB map (RLIMIT_AS), then an OOM kill while touching",
			code:   "import mmap\ntry: big = mmap.mmap(-1, 1 << 40); print('mapped 1 TiB')\nexcept OSError as e: print('mmap', e.errno, flush=True)\nm = mmap.mmap(-1, 8 << 30)\nfor i in range(0, len(m), 4096): m[i] = 1\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{MemoryMB: ptr(int64(256))}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				if r.Stdout != "mmap 12\n" {
					t.Errorf("stdout %q, want mmap 12 (ENOMEM)", r.Stdout)
				}
				return "1 TiB mmap: ENOMEM; touching 8 GiB: " + oomKilled(t, r)
			}},
		{id: "E05a", cat: catExhaust, title: "numpy allocation of 80 GB",
			expect: "MemoryError: Unable to allocate …, exit 1",
			code:   "import numpy as np\na = np.ones((100_000, 100_000))\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "error")
				if r.Error == nil || !strings.Contains(r.Error.Type, "MemoryError") || !strings.Contains(r.Message, "Unable to allocate") || deref(r.ExitCode) != 1 {
					t.Errorf("error %+v message %q exit %v", r.Error, r.Message, deref(r.ExitCode))
				}
				return "status error, exit 1: " + strings.SplitN(r.Message, " for an array", 2)[0]
			}},
		{id: "E05b", cat: catExhaust, title: "numpy allocation just above memory.max, below RLIMIT_AS (memory_mb 256)",
			expect: "oom_killed with signal 9 (not a MemoryError: the address space limit is not the memory limit)",
			code:   "import numpy as np\na = np.ones((300 << 20) // 8)\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{MemoryMB: ptr(int64(256))}},
			check:  func(t *testing.T, r *api.ExecuteResponse) string { return oomKilled(t, r) }},
		{id: "E06", cat: catExhaust, title: "fill /dev/shm",
			expect: "ENOSPC at the 64 MiB /dev/shm size; the memory is freed after the run",
			// Several files: one file would hit RLIMIT_FSIZE (also 64 MiB) first.
			code: "n = 0\ntry:\n    while True:\n        with open(f'/dev/shm/fill{n // 16}', 'ab') as f: f.write(b'\\0' * (1 << 20))\n        n += 1\nexcept OSError as e: print(n, 'MiB', e.errno)\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				var n, errno int
				var unit string
				if _, err := fmt.Sscan(r.Stdout, &n, &unit, &errno); err != nil || errno != 28 || n < 60 || n > 64 {
					t.Errorf("stdout %q, want ENOSPC (28) at about 64 MiB", r.Stdout)
				}
				return "ENOSPC after about 64 MiB"
			}},
		{id: "E07", cat: catExhaust, title: "fill the workspace, then exhaust its inodes",
			expect: "ENOSPC (28) in both phases",
			code: `i = 0
try:
    while True:
        with open(f'big{i}', 'wb') as f:
            for _ in range(32): f.write(b'\1' * (1 << 20))
        i += 1
except OSError as e: print('space', e.errno)
j = 0
try:
    while True: open(f'i{j}', 'w').close(); j += 1
except OSError as e: print('inodes', e.errno)
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if r.Stdout != "space 28\ninodes 28\n" {
					t.Errorf("stdout %q, want ENOSPC for space and inodes", r.Stdout)
				}
				return "space: ENOSPC; inodes: ENOSPC"
			}},
		{id: "E08", cat: catExhaust, title: "write past RLIMIT_FSIZE (file_size_mb 8)",
			expect: "OSError [Errno 27] File too large, not a silent SIGXFSZ death",
			code:   "with open('f', 'wb') as f: f.write(b'x' * (16 << 20))\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{FileSizeMB: ptr(int64(8))}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "error")
				if !strings.Contains(r.Message, "[Errno 27] File too large") || r.Signal != nil {
					t.Errorf("message %q signal %v", r.Message, deref(r.Signal))
				}
				return "status error: " + r.Message
			}},
		{id: "E09", cat: catExhaust, title: "write past RLIMIT_FSIZE with SIGXFSZ restored to its default action",
			expect: "the process dies by SIGXFSZ and the response says so (status killed, signal 25)",
			code:   "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_DFL)\nwith open('f', 'wb') as f: f.write(b'x' * (16 << 20))\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{FileSizeMB: ptr(int64(8))}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "killed")
				if r.Signal == nil || *r.Signal != 25 || r.ExitCode != nil {
					t.Errorf("signal %v exit %v", deref(r.Signal), deref(r.ExitCode))
				}
				return "status killed: " + r.Message
			}},
		{id: "E10", cat: catExhaust, title: "CPU spin ignoring SIGTERM, SIGXCPU and SIGINT (timeout 2 s)",
			expect: "killed by SIGKILL at the wall limit, timed_out, CPU time close to the limit",
			code:   "import signal\nfor s in (signal.SIGTERM, signal.SIGXCPU, signal.SIGINT): signal.signal(s, signal.SIG_IGN)\nwhile True: pass\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{TimeoutMs: ptr(int64(2000))}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				obs := timedOut(t, r, 2000)
				// Generous: the host is shared, and the warm pool refills on
				// the same two cores.
				if r.Usage.CPUMs < 700 || r.Usage.CPUMs > 2000+1000 {
					t.Errorf("cpu %d ms for a 2 s spin", r.Usage.CPUMs)
				}
				return obs + "; CPU time about the wall limit"
			}},
		{id: "E10b", cat: catExhaust, title: "CPU spin in four processes ignoring the soft-limit signals (timeout 2 s)",
			expect: "killed at the wall limit; CPU time at most the cores times the wall time",
			code:   "import os, signal\nfor s in (signal.SIGTERM, signal.SIGXCPU, signal.SIGINT): signal.signal(s, signal.SIG_IGN)\nfor _ in range(3):\n    if os.fork() == 0: break\nwhile True: pass\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{TimeoutMs: ptr(int64(2000))}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				obs := timedOut(t, r, 2000)
				if max := int64(8) * r.Usage.DurationMs; r.Usage.CPUMs > max+1000 {
					t.Errorf("cpu %d ms in %d ms", r.Usage.CPUMs, r.Usage.DurationMs)
				}
				return obs + "; CPU time bounded by cores × wall time"
			}},
		{id: "E11", cat: catExhaust, title: "sleep forever (timeout 1 s)",
			expect: "killed at the wall limit, timed_out, CPU time ≈ 0",
			code:   "import time; time.sleep(10**6)\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{TimeoutMs: ptr(int64(1000))}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				obs := timedOut(t, r, 1000)
				if r.Usage.CPUMs > 500 {
					t.Errorf("cpu %d ms for a sleeper", r.Usage.CPUMs)
				}
				return obs + "; CPU time ≈ 0"
			}},
		{id: "E12", cat: catExhaust, title: "open fds until it fails",
			expect: "EMFILE (24) at RLIMIT_NOFILE (1024)",
			code:   "fs = []\ntry:\n    while True: fs.append(open('/dev/null'))\nexcept OSError as e: print(len(fs), e.errno)\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				var n, errno int
				if _, err := fmt.Sscan(r.Stdout, &n, &errno); err != nil || errno != 24 || n < 1000 || n > 1024 {
					t.Errorf("stdout %q, want EMFILE near 1024", r.Stdout)
				}
				return "EMFILE after about 1020 opens"
			}},
		{id: "E13", cat: catExhaust, title: "abort in a child (core files), then unbounded Python recursion (memory_mb 256)",
			expect: "wait status 6 (SIGABRT without the core-dump bit); no core file anywhere; the recursion ends in RecursionError, MemoryError, an OOM kill or SIGSEGV, and the daemon says which",
			run: func(t *testing.T, h *hostile) string {
				coredumps := dirNames("/var/lib/systemd/coredump")
				r := h.exec(t, api.ExecuteRequest{Code: "import os, sys\npid = os.fork()\nif pid == 0: os.abort()\nprint('child wait status', os.waitpid(pid, 0)[1], flush=True)\n" +
					"sys.setrecursionlimit(10**8)\ndef f(n): return f(n + 1)\nf(0)\n", ReturnFiles: []string{"**/core*"}, Limits: &api.Limits{MemoryMB: ptr(int64(256)), TimeoutMs: ptr(int64(30000))}})
				if !strings.HasPrefix(r.Stdout, "child wait status 6\n") {
					t.Errorf("stdout %q, want wait status 6", r.Stdout)
				}
				if len(r.Files) != 0 {
					t.Errorf("core files in the workspace: %+v", r.Files)
				}
				if d := diff(coredumps, dirNames("/var/lib/systemd/coredump")); d != "" {
					t.Errorf("host core dumps: %s", d)
				}
				var end string
				switch {
				case r.Status == "memory_limit" && r.OOMKilled:
					end = "an OOM kill (memory_limit)"
				case r.Status == "error" && r.Error != nil && (r.Error.Type == "RecursionError" || r.Error.Type == "MemoryError"):
					end = r.Error.Type
				case r.Status == "killed" && deref(r.Signal) == 11:
					end = "SIGSEGV (killed, signal 11)"
				default:
					t.Errorf("recursion ended with status %s %+v", r.Status, r.Error)
					end = "status " + r.Status
				}
				return "child wait status 6 (no core bit); no core file; the recursion ended in " + end
			}},
		{id: "E14", cat: catExhaust, title: "deep C recursion: repr and json.dumps of a list nested a million deep",
			expect: "RecursionError from CPython's C recursion guard, not a crash of the interpreter or the daemon",
			code:   "import json\nl = []\nfor _ in range(10**6): l = [l]\nfor fn in (repr, json.dumps):\n    try: fn(l); print('no error')\n    except RecursionError: print('RecursionError')\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if r.Stdout != "RecursionError\nRecursionError\n" {
					t.Errorf("stdout %q", r.Stdout)
				}
				return "repr: RecursionError; json.dumps: RecursionError"
			}},
		{id: "E15", cat: catExhaust, title: "one exact 1,000,000-byte line",
			expect: "exactly 1,000,001 bytes returned, exit 0 (the bufio.Scanner 64 KiB regression)",
			code:   "print('a' * 1_000_000)\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if len(r.Stdout) != 1_000_001 || r.StdoutTruncated || strings.Trim(r.Stdout, "a") != "\n" {
					t.Errorf("stdout %d bytes, truncated %v", len(r.Stdout), r.StdoutTruncated)
				}
				return fmt.Sprintf("%d bytes, not truncated", len(r.Stdout))
			}},
		{id: "E16", cat: catExhaust, title: "binary flood without newlines (output_bytes 100000)",
			expect: "killed at the cap (output_limit, stdout_truncated); the bytes kept come back as valid JSON text",
			code:   "import os\nwhile True: os.write(1, os.urandom(65536))\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{OutputBytes: ptr(int64(100000))}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "output_limit")
				if !r.StdoutTruncated || !strings.HasPrefix(r.Message, "Output limit of 100000 bytes exceeded") || len(r.Stdout) > 3*100000 {
					t.Errorf("truncated %v message %q stdout %d bytes", r.StdoutTruncated, r.Message, len(r.Stdout))
				}
				return "output_limit, stdout_truncated; invalid UTF-8 replaced"
			}},
		{id: "E17", cat: catExhaust, title: "stderr flood with a silent stdout (output_bytes 50000)",
			expect: "output_limit with stderr_truncated; stdout empty",
			code:   "import os\nwhile True: os.write(2, b'\\xff' * 4096)\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{OutputBytes: ptr(int64(50000))}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "output_limit")
				if !r.StderrTruncated || r.StdoutTruncated || r.Stdout != "" {
					t.Errorf("stderr_truncated %v stdout %q", r.StderrTruncated, r.Stdout)
				}
				return "output_limit, stderr_truncated, stdout empty"
			}},
		{id: "E18", cat: catExhaust, title: "double fork plus setsid daemon that sleeps an hour",
			expect: "the response arrives promptly once the main process exits; the jail is killed and emptied, no survivor on the host",
			code:   "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(3600)\n    os._exit(0)\nprint('parent done')\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if r.Stdout != "parent done\n" || r.Usage.DurationMs > 5000 {
					t.Errorf("stdout %q after %d ms", r.Stdout, r.Usage.DurationMs)
				}
				return "status ok within seconds; the sleeper died with the jail (leak checks)"
			}},
		{id: "E19", cat: catExhaust, title: "10,000 unreaped zombies",
			expect: "EAGAIN once zombies reach pids.max; everything is reaped at teardown",
			code:   "import os\nfor _ in range(10_000):\n    try:\n        if os.fork() == 0: os._exit(0)\n    except OSError as e: print('fork', e.errno); break\nimport time; time.sleep(1)\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if r.Stdout != "fork 11\n" {
					t.Errorf("stdout %q, want fork 11 (EAGAIN)", r.Stdout)
				}
				return "fork: EAGAIN at pids.max; no zombie survives the run (leak checks)"
			}},
		{id: "E20", cat: catExhaust, title: "kill(-1, SIGKILL), with host processes of the jail's own host uids as canaries",
			expect: "only the jail's processes can be reached; the daemon, the host and same-uid host processes are unaffected. (hostile-cases.md expects signal 9 for the caller, but on Linux kill(-1) spares the caller, and pid 1 is the jail's init, which the kernel protects: the run ends normally)",
			run: func(t *testing.T, h *hostile) string {
				var canaries []*exec.Cmd
				for _, uid := range []uint32{testIDBase + 1000, testIDBase} {
					c := exec.Command("sleep", "60")
					c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
					if err := c.Start(); err != nil {
						t.Fatal(err)
					}
					canaries = append(canaries, c)
				}
				defer func() {
					for _, c := range canaries {
						c.Process.Kill()
						c.Wait()
					}
				}()
				// kill(-1) spares the caller and the pid namespace's init: with
				// nothing else in the jail, nothing is signalled (ESRCH).
				r := h.exec(t, api.ExecuteRequest{Code: "import os, signal\ntry: os.kill(-1, signal.SIGKILL)\nexcept ProcessLookupError: print('ESRCH')\nprint('alive')\n"})
				wantStatus(t, r, "ok")
				if r.Stdout != "ESRCH\nalive\n" {
					t.Errorf("stdout %q", r.Stdout)
				}
				for _, c := range canaries {
					if err := c.Process.Signal(syscall.Signal(0)); err != nil {
						t.Errorf("host canary %d died: %v", c.Process.Pid, err)
					}
				}
				return "ESRCH (nothing in the jail to signal but pid 1 and the caller, which kill(-1) spares); the run ends ok; both host canaries (host uids of jail root and jail user) and the daemon alive"
			}},
		{id: "E20b", cat: catExhaust, title: "kill(-1, SIGKILL) with a forked sibling in the jail",
			expect: "the sibling dies by signal 9; the caller continues",
			code:   "import os, signal, time\nchild = os.fork()\nif child == 0:\n    time.sleep(60)\n    os._exit(0)\nos.kill(-1, signal.SIGKILL)\nprint('child', os.waitpid(child, 0)[1])\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if r.Stdout != "child 9\n" {
					t.Errorf("stdout %q, want child 9", r.Stdout)
				}
				return "sibling killed by 9; caller continues"
			}},
		{id: "E20c", cat: catExhaust, title: "SIGKILL to the jail's pid 1, then to itself",
			expect: "pid 1 (the jail's init) ignores it as the kernel protects a namespace's init; the self-kill is reported as killed by signal 9",
			code:   "import os, signal, time\nos.kill(1, signal.SIGKILL)\ntime.sleep(0.2)\nprint('pid 1', open('/proc/1/status').read().split('\\n')[2].split()[1], flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "killed")
				if !strings.HasPrefix(r.Stdout, "pid 1 ") || r.Signal == nil || *r.Signal != 9 {
					t.Errorf("stdout %q signal %v", r.Stdout, deref(r.Signal))
				}
				return "pid 1 still alive after SIGKILL; self-kill reported: " + r.Message
			}},
		{id: "E21a", cat: catExhaust, title: "read stdin when the request has none",
			expect: "EOF at once: prints 0, never hangs",
			code:   "import sys; d = sys.stdin.buffer.read(); print(len(d))\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if r.Stdout != "0\n" || r.Usage.DurationMs > 5000 {
					t.Errorf("stdout %q after %d ms", r.Stdout, r.Usage.DurationMs)
				}
				return "prints 0 at once"
			}},
		{id: "E21b", cat: catExhaust, title: "read 300,000 bytes of stdin",
			expect: "prints 300000",
			code:   "import sys; d = sys.stdin.buffer.read(); print(len(d))\n",
			req:    api.ExecuteRequest{Stdin: ptr(strings.Repeat("z", 300000))},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if r.Stdout != "300000\n" {
					t.Errorf("stdout %q", r.Stdout)
				}
				return "prints 300000"
			}},
		{id: "E22", cat: catExhaust, title: "close stdin, stdout and stderr, then sleep an hour (timeout 1.5 s)",
			expect: "the response still arrives at the wall limit (closed pipes do not end or hang the run)",
			code:   "import os, time\nos.close(0); os.close(1); os.close(2)\ntime.sleep(3600)\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{TimeoutMs: ptr(int64(1500))}},
			check:  func(t *testing.T, r *api.ExecuteResponse) string { return timedOut(t, r, 1500) }},
		{id: "E23", cat: catExhaust, title: "close stdout and stderr, write to them, exit",
			expect: "a prompt, well-formed response with the process's exit status",
			code:   "import os, sys\nos.close(1); os.close(2)\ntry: print('x', flush=True)\nexcept OSError: pass\nos._exit(3)\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "error")
				if deref(r.ExitCode) != 3 || r.Usage.DurationMs > 5000 {
					t.Errorf("exit %v after %d ms", deref(r.ExitCode), r.Usage.DurationMs)
				}
				return "status error, exit 3, at once"
			}},
		{id: "E24", cat: catExhaust, title: "a 32 MiB SysV shared memory segment left attached and unremoved on purpose",
			expect: "it dies with the jail's IPC namespace: no host IPC object, and its memory is freed (leak checks)",
			code: `import ctypes
L = ctypes.CDLL(None, use_errno=True)
L.shmat.restype = ctypes.c_void_p
sid = L.shmget(0x1234, 32 << 20, 0o1600)
addr = L.shmat(sid, None, 0)
ctypes.memset(addr, 1, 32 << 20)
print(sid >= 0, addr not in (None, 2**64 - 1))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if r.Stdout != "True True\n" {
					t.Errorf("stdout %q: the segment was not created and attached", r.Stdout)
				}
				return "segment created, filled and left; gone with the jail, memory freed"
			}},
		{id: "E25", cat: catExhaust, title: "memfd flood (memory_mb 128)",
			expect: "memfd pages are charged to the jail: an OOM kill, and the memory is freed",
			code:   "import os\nfds = []\nwhile True:\n    fd = os.memfd_create('x'); fds.append(fd)\n    for _ in range(32): os.write(fd, b'\\1' * (1 << 20))\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{MemoryMB: ptr(int64(128))}},
			check:  func(t *testing.T, r *api.ExecuteResponse) string { return oomKilled(t, r) }},
		{id: "E26", cat: catExhaust, title: "one run takes every per-user kernel resource it can (pipe buffer pages, inotify instances), while another run starts (two concurrent runs)",
			expect: "the other run is unaffected: its pipes keep their 64 KiB default and can grow to 1 MiB, and it gets an inotify instance (unless inotify is denied to every run); per-user kernel limits must not be shared between jails",
			run: func(t *testing.T, h *hostile) string {
				hog := h.execAsync(t, api.ExecuteRequest{Code: `import ctypes, errno, fcntl, json, os, time
L = ctypes.CDLL(None, use_errno=True)
n = 0
while L.inotify_init() >= 0: n += 1
inotify = errno.errorcode.get(ctypes.get_errno())
pipes = []
for _ in range(400):
    r, w = os.pipe(); pipes.append((r, w))
    try: fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
    except OSError: break
print(json.dumps({'inotify': n, 'inotify_errno': inotify, 'pipes of 1 MiB': len(pipes) - 1}), flush=True)
open('held', 'w').close()
time.sleep(5)`})
				h.waitMarker(t, "held")
				r := h.exec(t, api.ExecuteRequest{Code: `import ctypes, errno, fcntl, json, os
L = ctypes.CDLL(None, use_errno=True)
res = {'inotify': 'ok' if L.inotify_init() >= 0 else errno.errorcode.get(ctypes.get_errno())}
r, w = os.pipe()
res['default pipe'] = fcntl.fcntl(w, 1032)  # F_GETPIPE_SZ
try: fcntl.fcntl(w, 1031, 1 << 20); res['1 MiB pipe'] = 'ok'
except OSError as e: res['1 MiB pipe'] = errno.errorcode.get(e.errno)
print(json.dumps(res))`})
				hr := <-hog
				wantStatus(t, r, "ok")
				held, got := outJSON(t, hr), outJSON(t, r)
				var parts []string
				switch {
				case got["inotify"] == "ok":
					parts = append(parts, "inotify: the second run still gets an instance")
				case got["inotify"] == "EPERM" && held["inotify_errno"] == "EPERM" && fmt.Sprint(held["inotify"]) == "0":
					parts = append(parts, "inotify: denied to every run (EPERM)")
				default:
					t.Errorf("inotify: the first run holds %v instances (%v); the second gets %v", held["inotify"], held["inotify_errno"], got["inotify"])
					parts = append(parts, fmt.Sprintf("inotify: the first run holds all %v instances, the second gets %v", held["inotify"], got["inotify"]))
				}
				if fmt.Sprint(got["default pipe"]) == "65536" && got["1 MiB pipe"] == "ok" {
					parts = append(parts, "pipes: the second run keeps 64 KiB pipes and can grow one to 1 MiB")
				} else {
					t.Errorf("pipes: the first run holds %v pipes of 1 MiB; the second's new pipe has %v bytes, growing it: %v", held["pipes of 1 MiB"], got["default pipe"], got["1 MiB pipe"])
					parts = append(parts, fmt.Sprintf("pipes: while the first run holds 64 MiB of pipe buffers (fs.pipe-user-pages-soft), the second's new pipes get %v bytes and F_SETPIPE_SZ fails with %v: the limit is per host uid, shared by every jail", got["default pipe"], got["1 MiB pipe"]))
				}
				return strings.Join(parts, "; ")
			}},
		{id: "E27", cat: catExhaust, title: "40 matplotlib figures",
			expect: "16 figures are returned, and stderr says the rest were not saved",
			code:   "import matplotlib.pyplot as plt\nfor i in range(40):\n    plt.figure(); plt.plot([i, i + 1])\nplt.show()\n",
			req:    api.ExecuteRequest{Limits: &api.Limits{TimeoutMs: ptr(int64(60000))}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if len(r.Figures) != 16 || !strings.Contains(r.Stderr, "figure limit (16) reached") {
					t.Errorf("%d figures, stderr %q", len(r.Figures), r.Stderr)
				}
				return fmt.Sprintf("%d figures returned; the limit is noted on stderr", len(r.Figures))
			}},
	}
}
