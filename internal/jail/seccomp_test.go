package jail

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/seccomp"
)

// probeScript runs every probe in a forked child (a probe that is not
// filtered could otherwise change the prober) and prints, per probe, the
// errno it got or the signal that killed the child.
const probeScript = `
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
	type in struct {
		I    int       `json:"i"`
		Nr   int       `json:"nr"`
		Args [6]uint64 `json:"args"`
	}
	var input []in
	for i, p := range probes {
		input = append(input, in{i, p.Nr, p.Args})
	}
	stdin, _ := json.Marshal(input)
	res := run(t, probeScript, func(r *Request) { r.Stdin = stdin; r.Limits.Pids = 16 })
	if res.Status != StatusOK {
		t.Fatalf("prober: status %s\nstderr %s", res.Status, res.Stderr)
	}
	var got []struct {
		I      int `json:"i"`
		Ret    int `json:"ret"`
		Errno  int `json:"errno"`
		Signal int `json:"signal"`
	}
	if err := json.Unmarshal(res.Stdout, &got); err != nil || len(got) != len(probes) {
		t.Fatalf("prober output (%d of %d probes): %v", len(got), len(probes), err)
	}
	var failed []string
	for _, g := range got {
		p := probes[g.I]
		switch {
		case p.Sigsys && g.Signal != 31:
			failed = append(failed, fmt.Sprintf("%s(%d): signal %d errno %d, want SIGSYS", p.Name, p.Nr, g.Signal, g.Errno))
		case !p.Sigsys && (g.Ret != -1 || g.Errno != p.Errno):
			failed = append(failed, fmt.Sprintf("%s(%d) %s: ret %d errno %d signal %d, want errno %d", p.Name, p.Nr, p.Note, g.Ret, g.Errno, g.Signal, p.Errno))
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d probes not refused by the filter:\n%s", len(failed), len(probes), strings.Join(failed, "\n"))
	}
	t.Logf("%d denied syscalls and %d conditional cases refused by the filter", len(denied), len(probes)-len(denied))
}
