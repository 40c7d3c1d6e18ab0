package bench

import (
	"math"
	"os"
	"testing"
)

func TestMachineBusy(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got, err := machineBusy("cpu  100 20 300 9999 77 4 5 600 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
	if err != nil || got != 4.29 {
		t.Errorf("machineBusy = %v, %v; want 4.29 s (user+nice+system+irq+softirq, not idle, iowait or steal)", got, err)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 3", "cpu 1 2 x 4 5 6 7 8"} {
		if _, err := machineBusy(bad); err == nil {
			t.Errorf("machineBusy(%q): no error", bad)
		}
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	if v, err := machineBusy(string(b)); err != nil || v <= 0 {
		t.Errorf("this machine's /proc/stat: %v, %v", v, err)
	}
}

func TestProcTimes(t *testing.T) {
	// A name with spaces and parentheses: fields count from the last ')'.
	stat := "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 700 30 20 0 1 0 12345 0 0\n"
	self, children, err := procTimes(stat)
	if err != nil || self != 3 || children != 7.3 {
		t.Errorf("procTimes = %v, %v, %v; want 3 s (utime 250 + stime 50) and 7.3 s (cutime 700 + cstime 30)", self, children, err)
	}
	for _, bad := range []string{"", "1 (x S 1", "1 (x) S 1 2 3", "1 (x) S 1 1 1 0 -1 0 0 0 0 0 y 50 700 30 20"} {
		if _, _, err := procTimes(bad); err == nil {
			t.Errorf("procTimes(%q): no error", bad)
		}
	}
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := procTimes(string(b)); err != nil {
		t.Errorf("this process's stat: %v", err)
	}
}

func TestCPUPerRun(t *testing.T) {
	before := cpuSample{machine: 10, starter: 1, started: 2, self: 3}
	after := cpuSample{machine: 12, starter: 1.5, started: 3, self: 3.1}
	c := cpuPerRun(before, after, 100, false)
	want := CPU{Runs: 100, Total: 20, Starter: 5, Started: 10, Client: 1, Rest: 4}
	if !near(c, want) {
		t.Errorf("jaild: %+v, want %+v", c, want)
	}
	// Bare python3: the benchmark itself starts it; no client.
	after = cpuSample{machine: 11, started: 2.5, self: 3.2}
	c = cpuPerRun(before, after, 50, true)
	want = CPU{Runs: 50, Total: 20, Starter: 4, Started: 10, Rest: 6}
	if !near(c, want) {
		t.Errorf("bare: %+v, want %+v", c, want)
	}
}

func near(a, b CPU) bool {
	eq := func(x, y float64) bool { return math.Abs(x-y) < 1e-9 }
	return a.Runs == b.Runs && eq(a.Total, b.Total) && eq(a.Starter, b.Starter) && eq(a.Started, b.Started) && eq(a.Client, b.Client) && eq(a.Rest, b.Rest)
}
