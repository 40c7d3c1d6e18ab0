package seccomp

import (
	"encoding/json"
	"fmt"
)

// ProberScript is Python that runs, from inside a jail, the probes it reads
// as JSON on stdin (ProberInput), each in a forked child (a probe that is
// not filtered could otherwise change the prober), and prints one JSON
// list of ProbeOutcome: the return value and errno a probe got, or the
// signal that killed its child. The jail tests and the hostile suite share
// it.
const ProberScript = `
import ctypes, json, os, sys
probes = json.load(sys.stdin)
libc = ctypes.CDLL(None, use_errno=True)
syscall = libc.syscall
syscall.restype = ctypes.c_long
syscall.argtypes = [ctypes.c_long] + [ctypes.c_ulong] * 6
out = []
for p in probes:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        ctypes.set_errno(0)
        ret = syscall(p['nr'], *p['args'])
        os.write(w, json.dumps([ret, ctypes.get_errno()]).encode())
        os._exit(0)
    os.close(w)
    data = os.read(r, 256)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        out.append({'i': p['i'], 'signal': os.WTERMSIG(status)})
    else:
        ret, err = json.loads(data)
        out.append({'i': p['i'], 'ret': ret, 'errno': err})
print(json.dumps(out))
`

// ProberInput is ProberScript's stdin for probes; outcome I is probes[I].
func ProberInput(probes []Probe) []byte {
	type in struct {
		I    int       `json:"i"`
		Nr   int       `json:"nr"`
		Args [6]uint64 `json:"args"`
	}
	input := make([]in, 0, len(probes))
	for i, p := range probes {
		input = append(input, in{i, p.Nr, p.Args})
	}
	b, _ := json.Marshal(input)
	return b
}

// ProbeOutcome is one element of ProberScript's output.
type ProbeOutcome struct {
	I      int `json:"i"`
	Ret    int `json:"ret"`
	Errno  int `json:"errno"`
	Signal int `json:"signal"`
}

// CheckOutcomes compares ProberScript's outcomes with what the profile
// says of each probe: EPERM-style refusals with the probe's errno, SIGSYS
// where it says so. control returns the signal the same call gets made
// unconfined on this host (0: none); a probe that ends by that same signal
// in the jail was ended by the kernel before any filter saw it, which no
// filter can change, and is excused rather than failed. It returns the
// probes the filter did not refuse as it should, and the excused ones.
func CheckOutcomes(probes []Probe, got []ProbeOutcome, control func(Probe) int) (failed, excused []string) {
	const sigsys = 31
	for _, g := range got {
		if g.I < 0 || g.I >= len(probes) {
			failed = append(failed, fmt.Sprintf("outcome for probe %d of %d", g.I, len(probes)))
			continue
		}
		p := probes[g.I]
		if g.Signal != 0 && g.Signal != sigsys && control(p) == g.Signal {
			excused = append(excused, fmt.Sprintf("%s(%d): signal %d in the jail and unconfined alike: the kernel ends it before the filter", p.Name, p.Nr, g.Signal))
			continue
		}
		switch {
		case p.Sigsys && g.Signal != sigsys:
			failed = append(failed, fmt.Sprintf("%s(%d): signal %d errno %d, want SIGSYS", p.Name, p.Nr, g.Signal, g.Errno))
		case !p.Sigsys && (g.Ret != -1 || g.Errno != p.Errno):
			failed = append(failed, fmt.Sprintf("%s(%d) %s: ret %d errno %d signal %d, want errno %d", p.Name, p.Nr, p.Note, g.Ret, g.Errno, g.Signal, p.Errno))
		}
	}
	return failed, excused
}
