package seccomp

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestProberInput(t *testing.T) {
	var in []struct {
		I    int       `json:"i"`
		Nr   int       `json:"nr"`
		Args [6]uint64 `json:"args"`
	}
	if err := json.Unmarshal(ProberInput([]Probe{{Nr: 165, Args: [6]uint64{1, 2}}, {Nr: 425}}), &in); err != nil || len(in) != 2 || in[1].I != 1 || in[0].Nr != 165 || in[0].Args[1] != 2 {
		t.Fatalf("%+v %v", in, err)
	}
}

func TestCheckOutcomes(t *testing.T) {
	probes := []Probe{
		{Name: "mount", Nr: 165, Errno: 1},
		{Name: "clone3", Nr: 435, Errno: 38},
		{Name: "x32 getpid", Nr: 0x40000000 | 39, Sigsys: true},
		{Name: "uretprobe", Nr: 335, Errno: 1},
		{Name: "io_uring_setup", Nr: 425, Errno: 1},
	}
	got := []ProbeOutcome{
		{I: 0, Ret: -1, Errno: 1},  // refused as it should
		{I: 1, Ret: -1, Errno: 22}, // the kernel saw it: EINVAL, not the filter's ENOSYS
		{I: 2, Signal: 31},         // SIGSYS as it should
		{I: 3, Signal: 4},          // SIGILL, and unconfined too: excused
		{I: 4, Signal: 11},         // SIGSEGV, but unconfined it returns: failed
		{I: 9},                     // no such probe
	}
	control := func(p Probe) int {
		if p.Nr == 335 {
			return 4
		}
		return 0
	}
	failed, excused := CheckOutcomes(probes, got, control)
	joined := strings.Join(failed, "\n")
	if len(failed) != 3 || !strings.Contains(joined, "clone3") || !strings.Contains(joined, "io_uring_setup") || !strings.Contains(joined, "probe 9") {
		t.Errorf("failed:\n%s", joined)
	}
	if len(excused) != 1 || !strings.Contains(excused[0], "uretprobe") {
		t.Errorf("excused: %v", excused)
	}
}
