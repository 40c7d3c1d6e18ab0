//go:build !unit

package run

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
)

const isolationProbe = `
import errno, json, os, socket
def readlen(p):
    try: return len(open(p, 'rb').read(64))
    except OSError: return 0
def fd_targets():
    out = {}
    for f in os.listdir('/proc/self/fd'):
        try: out[f] = os.readlink('/proc/self/fd/' + f)
        except OSError: pass  # the directory fd listdir used, already closed
    return out
st = {l.split(':')[0]: l.split(':', 1)[1].strip() for l in open('/proc/self/status')}
try:
    open('/usr/jaild-probe', 'w')
    rofs = 'WRITABLE'
except OSError as e:
    rofs = errno.errorcode.get(e.errno, str(e.errno))
out = {
    'status': {k: st[k] for k in ('Seccomp', 'NoNewPrivs', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')},
    'uid_map': open('/proc/self/uid_map').read().split(),
    'gid_map': open('/proc/self/gid_map').read().split(),
    'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(),
    'ifaces': [n for _, n in socket.if_nameindex()],
    'pid': os.getpid(),
    'pid1': open('/proc/1/cmdline', 'rb').read().split(b'\0')[0].decode(),
    'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
    'rofs': rofs,
    'hostname': socket.gethostname(),
    'machine_id': open('/etc/machine-id').read().strip(),
    'env': sorted(os.environ),
    'cwd': os.getcwd(),
    'fds': sorted(int(f) for f in os.listdir('/proc/self/fd')),
    'fd_targets': fd_targets(),
    'cgroup': open('/proc/self/cgroup').read().strip(),
    'sysv_shm_rmid_forced': open('/proc/sys/kernel/shm_rmid_forced').read().strip(),
    'kcore': readlen('/proc/kcore') + readlen('/proc/timer_list') + readlen('/proc/keys') + readlen('/proc/sched_debug'),
}
try:
    socket.create_connection(('1.1.1.1', 53), timeout=2); out['egress'] = 'CONNECTED'
except OSError as e:
    out['egress'] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
`

func TestJailIsolation(t *testing.T) {
	res := run(t, isolationProbe)
	if res.Status != spec.StatusOK {
		t.Fatalf("probe failed: status %s exit %d\nstderr: %s", res.Status, res.ExitCode, res.Stderr)
	}
	var got struct {
		Status            map[string]string `json:"status"`
		UIDMap            []string          `json:"uid_map"`
		GIDMap            []string          `json:"gid_map"`
		UID, EUID, GID    int
		Ifaces            []string
		Pid               int
		Pid1              string
		Pids              []int
		Rofs              string
		Hostname          string
		MachineID         string `json:"machine_id"`
		Env               []string
		Cwd               string
		Fds               []int
		FdTargets         map[string]string `json:"fd_targets"`
		Cgroup            string
		SysvShmRmidForced string `json:"sysv_shm_rmid_forced"`
		Kcore             int
		Egress            string
	}
	if err := json.Unmarshal(res.Stdout, &got); err != nil {
		t.Fatalf("probe output: %v\n%s", err, res.Stdout)
	}
	if got.Status["Seccomp"] != "2" {
		t.Errorf("Seccomp = %q, want 2 (filter mode)", got.Status["Seccomp"])
	}
	if got.Status["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs = %q, want 1", got.Status["NoNewPrivs"])
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if got.Status[k] != "0000000000000000" {
			t.Errorf("%s = %s, want all zero", k, got.Status[k])
		}
	}
	if !oneJailRange(got.UIDMap, 1_200_000_000) || strings.Join(got.GIDMap, " ") != strings.Join(got.UIDMap, " ") {
		t.Errorf("uid_map %v gid_map %v, want the same one non-root host range of 65536 ids at 1200000000+slot*65536", got.UIDMap, got.GIDMap)
	}
	if got.UID != jail.UID || got.EUID != jail.UID || got.GID != jail.GID {
		t.Errorf("uid/euid/gid = %d/%d/%d, want %d (non-root)", got.UID, got.EUID, got.GID, jail.UID)
	}
	if strings.Join(got.Ifaces, ",") != "lo" {
		t.Errorf("interfaces = %v, want only lo", got.Ifaces)
	}
	if got.Egress != "ENETUNREACH" {
		t.Errorf("connect to 1.1.1.1:53 = %s, want ENETUNREACH", got.Egress)
	}
	// pid 1 is the jail's init from the image; the user's code runs in
	// the runner, its child.
	if got.Pid == 1 || got.Pid1 != "/opt/jaild/init" || len(got.Pids) != 2 || got.Pids[0] != 1 || got.Pids[1] != got.Pid {
		t.Errorf("pid %d, pid 1 is %q, pids %v: want the jail's init as pid 1 and the runner, its child, alone", got.Pid, got.Pid1, got.Pids)
	}
	if got.Rofs != "EROFS" {
		t.Errorf("write to the rootfs: %s, want EROFS", got.Rofs)
	}
	hostName, _ := os.Hostname()
	if got.Hostname != "jail" || got.Hostname == hostName {
		t.Errorf("hostname %q, want jail (host is %q)", got.Hostname, hostName)
	}
	hostMID, _ := os.ReadFile("/etc/machine-id")
	if got.MachineID == "" || got.MachineID == strings.TrimSpace(string(hostMID)) {
		t.Errorf("machine-id %q must be the image's, not the host's", got.MachineID)
	}
	allowed := map[string]bool{}
	for _, kv := range environ(jail.DefaultLimits(), nil) {
		allowed[strings.SplitN(kv, "=", 2)[0]] = true
	}
	for _, k := range got.Env {
		if !allowed[k] {
			t.Errorf("environment holds %s, which is not allowlisted", k)
		}
	}
	if got.Cwd != jail.WorkspaceDir {
		t.Errorf("cwd %q, want %s", got.Cwd, jail.WorkspaceDir)
	}
	// 0-2 are stdio, 3 the job pipe (closed by the runner after reading, so
	// usually absent), 4 the records pipe; listdir adds one fd of its own.
	for f, target := range got.FdTargets {
		if !strings.HasPrefix(target, "pipe:") && !strings.HasPrefix(target, "/proc/") {
			t.Errorf("fd %s -> %s: only pipes may be inherited", f, target)
		}
	}
	if len(got.Fds) > 6 {
		t.Errorf("fds %v: more than stdio, the runner's pipes and listdir's own", got.Fds)
	}
	for _, line := range strings.Split(got.Cgroup, "\n") {
		if !strings.HasSuffix(line, ":/") {
			t.Errorf("/proc/self/cgroup line %q: want the root of the jail's own cgroup namespace", line)
		}
	}
	if got.SysvShmRmidForced != "1" {
		t.Errorf("kernel.shm_rmid_forced = %s, want 1", got.SysvShmRmidForced)
	}
	if got.Kcore != 0 {
		t.Errorf("masked /proc files readable (%d bytes), want empty or absent", got.Kcore)
	}
}
