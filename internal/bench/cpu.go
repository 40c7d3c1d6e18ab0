package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on every Linux
// architecture's user ABI).
const userHZ = 100

// CPU is the CPU time, user and system, that one print(1) costs in a mode,
// in milliseconds per run, measured over a series of runs (enough for
// /proc's 10 ms ticks to matter little) and split by who spent it.
type CPU struct {
	Runs int `json:"runs"`
	// Total is the whole machine's busy time (/proc/stat: every CPU's
	// user, nice, system, irq and softirq time), from the first request
	// until the daemon is back at rest (its jails torn down, its pool
	// refilled): the benchmark, the daemon, the jails and the kernel's
	// work on their behalf (network namespace cleanup, RCU callbacks,
	// workqueues), and whatever else ran (an idle machine keeps that
	// small).
	Total float64 `json:"total_ms"`
	// Starter is the process that starts python3: the daemon itself, or,
	// for bare python3, the benchmark (fork, exec, wait).
	Starter float64 `json:"starter_ms"`
	// Started is what the starter's children used, counted when they are
	// reaped: python3, or each jail's init and everything in it.
	Started float64 `json:"started_ms"`
	// Client is the benchmark's own HTTP client (jaild modes only).
	Client float64 `json:"client_ms"`
	// Rest is Total less the other three: the kernel's threads, and
	// children not yet reaped when the series ended against those reaped
	// that started before it (a warm pool's jails), which even out over a
	// series.
	Rest float64 `json:"rest_ms"`
}

// CPUs are the CPU costs of print(1) in each mode.
type CPUs struct {
	Bare CPU `json:"bare_python3"`
	Cold CPU `json:"jaild_cold"`
	Warm CPU `json:"jaild_warm"`
}

// cpuSample is a snapshot of the counters CPU is made of, in seconds.
type cpuSample struct {
	machine, starter, started, self float64
}

// machineBusy is the busy time of every CPU in /proc/stat's "cpu" line.
func machineBusy(procStat string) (float64, error) {
	line, _, _ := strings.Cut(procStat, "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks uint64
	// user nice system idle iowait irq softirq [steal ...]: not idle, not
	// iowait (time waiting with nothing to run); steal is another guest's.
	for _, i := range []int{1, 2, 3, 6, 7} {
		v, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: field %d of %q: %w", i, line, err)
		}
		ticks += v
	}
	return float64(ticks) / userHZ, nil
}

// procTimes reads utime+stime and cutime+cstime from /proc/PID/stat's text.
func procTimes(stat string) (self, children float64, err error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/PID/stat: no ')' in %q", stat)
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime, stime, cutime, cstime are 14-17.
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/PID/stat: %d fields after the name", len(f))
	}
	var v [4]float64
	for j := range v {
		n, err := strconv.ParseInt(f[11+j], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/PID/stat: field %d: %w", 14+j, err)
		}
		v[j] = float64(n) / userHZ
	}
	return v[0] + v[1], v[2] + v[3], nil
}

func rusageSeconds(who int) float64 {
	var ru unix.Rusage
	if unix.Getrusage(who, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// sampleCPU snapshots the counters; pid 0 is bare python3 (the benchmark
// starts it), else the daemon's pid.
func sampleCPU(pid int) (cpuSample, error) {
	var s cpuSample
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return s, err
	}
	if s.machine, err = machineBusy(string(b)); err != nil {
		return s, err
	}
	s.self = rusageSeconds(unix.RUSAGE_SELF)
	if pid == 0 {
		s.started = rusageSeconds(unix.RUSAGE_CHILDREN)
		return s, nil
	}
	b, err = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return s, err
	}
	s.starter, s.started, err = procTimes(string(b))
	return s, err
}

// cpuPerRun converts two snapshots around n runs into milliseconds per run.
func cpuPerRun(before, after cpuSample, n int, bare bool) CPU {
	per := func(d float64) float64 { return d * 1000 / float64(n) }
	c := CPU{Runs: n, Total: per(after.machine - before.machine), Started: per(after.started - before.started)}
	if bare {
		c.Starter = per(after.self - before.self)
	} else {
		c.Starter = per(after.starter - before.starter)
		c.Client = per(after.self - before.self)
	}
	c.Rest = c.Total - c.Starter - c.Started - c.Client
	return c
}

// measureCPU runs print(1) n times back to back in one mode (d nil: bare
// python3), then waits until the daemon is at rest again (no jail but its
// pool's, the pool full) and a moment more for the kernel's deferred
// cleanup, so that every run's set-up and teardown falls in the series.
func measureCPU(ctx context.Context, n int, bare *chroot, d *daemon) (CPU, error) {
	run := func() error { return bare.python("print(1)") }
	pid := 0
	if d != nil {
		run = func() error { return d.call(workloads()[0]) }
		pid = d.Pid()
		if err := d.atRest(ctx); err != nil {
			return CPU{}, err
		}
	}
	time.Sleep(300 * time.Millisecond)
	before, err := sampleCPU(pid)
	if err != nil {
		return CPU{}, err
	}
	for range n {
		if err := run(); err != nil {
			return CPU{}, err
		}
	}
	if d != nil {
		if err := d.atRest(ctx); err != nil {
			return CPU{}, err
		}
	}
	time.Sleep(300 * time.Millisecond)
	after, err := sampleCPU(pid)
	if err != nil {
		return CPU{}, err
	}
	return cpuPerRun(before, after, n, d == nil), nil
}

// atRest waits until the daemon holds exactly its full pool's jails (no
// run's jail still being torn down), polling its cgroups, not its API.
func (d *daemon) atRest(ctx context.Context) error {
	name := "bench-" + filepath.Base(d.Dir)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if len(warmJailMemory(name)) == 2*d.pool && d.poolFull() {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New("the daemon did not come to rest (its pool full, no other jail) within a minute")
		}
	}
}

// poolFull says whether the warm pool holds all its jails (true without
// a pool).
func (d *daemon) poolFull() bool {
	full, _ := d.poolState()
	return full
}

// poolState asks the daemon whether its warm pool holds all its jails.
func (d *daemon) poolState() (bool, error) {
	if d.pool == 0 {
		return true, nil
	}
	resp, err := d.Client.Get("http://jaild/v1/info")
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var info struct {
		Pool struct {
			Ready      int `json:"ready"`
			PlainReady int `json:"plain_ready"`
		} `json:"pool"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return false, nil // not an answer of the pool's: ask again
	}
	return info.Pool.Ready >= d.pool && info.Pool.PlainReady >= d.pool, nil
}
