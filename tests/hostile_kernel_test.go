package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/seccomp"
)

// probePrelude defines probe(nr, *args): the syscall runs in a throw-away
// child (an unfiltered call must not change the prober), which reports the
// errno name ("EPERM"), "ok" for a return other than -1, or "SIG<n>" when
// it was killed. Arguments are ints (raw register values, -1 included),
// bytes (a pointer to them) or None (NULL). Deliberately bad arguments make
// an unfiltered kernel answer EFAULT, EBADF or EINVAL, so EPERM proves the
// seccomp filter refused the call. int80() makes an i386 getpid through
// int 0x80 in a child; allow_all() stacks an allow-everything filter in a
// child and after_allow_all(nr, ...) probes under it.
const probePrelude = `
import ctypes, errno, json, os, sys
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def _arg(a):
    if a is None: return ctypes.c_void_p(0)
    if isinstance(a, int): return ctypes.c_ulong(a & 0xFFFFFFFFFFFFFFFF)
    return a
def probe(nr, *args):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        ctypes.set_errno(0)
        ret = _libc.syscall(ctypes.c_long(nr), *[_arg(a) for a in args])
        e = ctypes.get_errno()
        os.write(w, ('ok' if ret != -1 else errno.errorcode.get(e, str(e))).encode())
        os._exit(0)
    os.close(w)
    out = os.read(r, 64).decode()
    os.close(r)
    _, st = os.waitpid(pid, 0)
    return 'SIG%d' % os.WTERMSIG(st) if os.WIFSIGNALED(st) else out
import mmap
def int80():
    # mov eax, 20 (getpid, i386 numbering); int 0x80; ret -- in a child.
    buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3]))
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
    pid = os.fork()
    if pid == 0:
        fn(); os._exit(0)
    _, st = os.waitpid(pid, 0)
    return 'SIG%d' % os.WTERMSIG(st) if os.WIFSIGNALED(st) else 'returned'
class _Filter(ctypes.Structure):
    _fields_ = [('code', ctypes.c_ushort), ('jt', ctypes.c_ubyte), ('jf', ctypes.c_ubyte), ('k', ctypes.c_uint)]
class _Prog(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.POINTER(_Filter))]
def _install_allow_all():
    ins = (_Filter * 1)(_Filter(0x06, 0, 0, 0x7fff0000))  # BPF_RET|BPF_K SECCOMP_RET_ALLOW
    prog = _Prog(1, ins)
    ctypes.set_errno(0)
    if _libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        return errno.errorcode.get(ctypes.get_errno(), 'E?')
    return 'ok'
def allow_all():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(w, _install_allow_all().encode()); os._exit(0)
    os.close(w); out = os.read(r, 64).decode(); os.waitpid(pid, 0)
    return out
def after_allow_all(nr, *args):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _install_allow_all()
        os.write(w, probe(nr, *args).encode()); os._exit(0)
    os.close(w); out = os.read(r, 64).decode(); os.waitpid(pid, 0)
    return out
`

// sysProbe is one probe(...) call of a syscall case and its expected result.
type sysProbe struct{ label, call, want string }

// probeCase builds a case that runs probes in one jail and expects each
// result.
func probeCase(id, cat, title, expect string, probes []sysProbe) hcase {
	var b strings.Builder
	b.WriteString(probePrelude)
	b.WriteString("res = {}\n")
	for _, p := range probes {
		fmt.Fprintf(&b, "res[%q] = %s\n", p.label, p.call)
	}
	b.WriteString("print(json.dumps(res))\n")
	return hcase{id: id, cat: cat, title: title, expect: expect, code: b.String(),
		check: func(t *testing.T, r *api.ExecuteResponse) string {
			wantStatus(t, r, "ok")
			got := outJSON(t, r)
			// Group labels by result for a compact observed line.
			var parts []string
			byWant := map[string][]string{}
			var order []string
			for _, p := range probes {
				v := fmt.Sprint(got[p.label])
				if !slices.Contains(strings.Split(p.want, "|"), v) {
					t.Errorf("%s: %s, want %s", p.label, v, p.want)
				} else if note, ok := hostDependent[p.label]; ok {
					// The report must read the same on every host.
					t.Logf("%s: %s (control: %s)", p.label, v, int80Control())
					v = note
				}
				if _, ok := byWant[v]; !ok {
					order = append(order, v)
				}
				byWant[v] = append(byWant[v], p.label)
			}
			for _, v := range order {
				parts = append(parts, strings.Join(byWant[v], ", ")+": "+v)
			}
			return strings.Join(parts, "; ")
		}}
}

func kernelCases() []hcase {
	const eperm = "EPERM"
	return []hcase{
		{id: "B00", cat: catKernel, title: "every syscall the profile denies, and every argument-dependent refusal, probed from a jail through the daemon",
			expect: "each denied syscall fails with the filter's errno (EPERM; ENOSYS for clone3 and numbers past the table; SIGSYS for the x32 ABI), never the kernel's EFAULT/EBADF/EINVAL",
			run:    runDeniedSweep},

		probeCase("B01", catKernel, "io_uring", "EPERM (EFAULT would mean io_uring is reachable)", []sysProbe{
			{"io_uring_setup(1, NULL)", "probe(425, 1, None)", eperm},
			{"io_uring_enter(-1, ...)", "probe(426, -1, 1, 0, 0, None, 0)", eperm},
			{"io_uring_register(-1, ...)", "probe(427, -1, 0, None, 0)", eperm},
		}),
		probeCase("B02", catKernel, "userfaultfd", "EPERM from the filter; no /dev/userfaultfd", []sysProbe{
			{"userfaultfd(O_CLOEXEC)", "probe(323, os.O_CLOEXEC)", eperm},
			{"open /dev/userfaultfd", "(lambda: (os.open('/dev/userfaultfd', os.O_RDWR), 'ok')[1])() if os.path.exists('/dev/userfaultfd') else 'absent'", "absent"},
		}),
		probeCase("B03", catKernel, "keyrings (a cross-run channel)", "add_key, keyctl and request_key fail with EPERM, so nothing can persist between runs", []sysProbe{
			{"add_key(user, sbx, secret, @u)", "probe(248, b'user', b'sbx', b'secret', 6, -4)", eperm},
			{"keyctl(GET_KEYRING_ID, @s)", "probe(250, 0, -3, 1)", eperm},
			{"request_key(user, sbx)", "probe(249, b'user', b'sbx', None, 0)", eperm},
		}),
		probeCase("B04", catKernel, "ptrace, process_vm_readv/writev, kcmp, pidfd_getfd", "EPERM for every call", []sysProbe{
			{"ptrace(TRACEME)", "probe(101, 0, 0, 0, 0)", eperm},
			{"ptrace(ATTACH, 1)", "probe(101, 16, 1, 0, 0)", eperm},
			{"process_vm_readv(1, NULL)", "probe(310, 1, None, 1, None, 1, 0)", eperm},
			{"process_vm_writev(1, NULL)", "probe(311, 1, None, 1, None, 1, 0)", eperm},
			{"kcmp(1, 1, 0)", "probe(312, 1, 1, 0, 0, 0)", eperm},
			{"pidfd_getfd(-1, 0)", "probe(438, -1, 0, 0)", eperm},
		}),
		probeCase("B05", catKernel, "perf_event_open and bpf", "EPERM for both (EFAULT or EINVAL would mean the call reached the kernel)", []sysProbe{
			{"perf_event_open(NULL)", "probe(298, None, 0, -1, -1, 0)", eperm},
			{"bpf(MAP_CREATE, NULL)", "probe(321, 0, None, 0)", eperm},
		}),
		probeCase("B06", catKernel, "nested namespaces: unshare, clone with namespace flags, clone3", "EPERM for unshare and namespace clones, ENOSYS for clone3 (its flags are invisible to seccomp)", []sysProbe{
			{"unshare(CLONE_NEWUSER)", "probe(272, 0x10000000)", eperm},
			{"unshare(CLONE_NEWUSER|CLONE_NEWNET)", "probe(272, 0x10000000 | 0x40000000)", eperm},
			{"unshare(CLONE_NEWNS)", "probe(272, 0x20000)", eperm},
			{"clone(CLONE_NEWUSER|CLONE_THREAD)", "probe(56, 0x10000000 | 0x10000, 0, None, None, 0)", eperm},
			{"clone(CLONE_NEWPID|CLONE_THREAD)", "probe(56, 0x20000000 | 0x10000, 0, None, None, 0)", eperm},
			{"clone3(NULL, 0)", "probe(435, None, 0)", "ENOSYS"},
		}),
		probeCase("B07", catKernel, "mount, the new mount API, pivot_root, chroot, setns", "EPERM for every call", []sysProbe{
			{"mount(tmpfs on /tmp)", "probe(165, b'none', b'/tmp', b'tmpfs', 0, None)", eperm},
			{"umount2(/proc)", "probe(166, b'/proc', 0)", eperm},
			{"open_tree(/)", "probe(428, -100, b'/', 0)", eperm},
			{"move_mount(-1)", "probe(429, -1, b'', -1, b'', 0)", eperm},
			{"fsopen(tmpfs)", "probe(430, b'tmpfs', 0)", eperm},
			{"fsconfig(-1)", "probe(431, -1, 0, None, None, 0)", eperm},
			{"fsmount(-1)", "probe(432, -1, 0, 0)", eperm},
			{"fspick(/)", "probe(433, -100, b'/', 0)", eperm},
			{"mount_setattr(/)", "probe(442, -100, b'/', 0, None, 0)", eperm},
			{"pivot_root(/tmp, /tmp)", "probe(155, b'/tmp', b'/tmp')", eperm},
			{"chroot(/tmp)", "probe(161, b'/tmp')", eperm},
			{"setns(-1, 0)", "probe(308, -1, 0)", eperm},
		}),
		probeCase("B08", catKernel, "\"shocker\" file handles, module loading, kexec, reboot", "EPERM for every call (EBADF or EFAULT would mean it was not filtered)", []sysProbe{
			{"open_by_handle_at(AT_FDCWD, NULL)", "probe(304, -100, None, 0)", eperm},
			{"name_to_handle_at(/)", "probe(303, -100, b'/', None, None, 0)", eperm},
			{"init_module(NULL)", "probe(175, None, 0, b'')", eperm},
			{"finit_module(-1)", "probe(313, -1, b'', 0)", eperm},
			{"delete_module(x)", "probe(176, b'x', 0)", eperm},
			{"kexec_load(NULL)", "probe(246, 0, 0, None, 0)", eperm},
			{"kexec_file_load(-1)", "probe(320, -1, -1, 0, None, 0)", eperm},
			{"reboot(bad magic)", "probe(169, 0, 0, 0, None)", eperm},
		}),
		{id: "B09", cat: catKernel, title: "AF_ALG (\"Copy Fail\"), AF_VSOCK, AF_PACKET, AF_KEY and non-route netlink sockets",
			expect: "socket() fails with EPERM for every family, never OPEN",
			code: `import json, socket
res = {}
for name, fam, typ, proto in (('AF_ALG', socket.AF_ALG, socket.SOCK_SEQPACKET, 0),
                              ('AF_VSOCK', socket.AF_VSOCK, socket.SOCK_STREAM, 0),
                              ('AF_PACKET', socket.AF_PACKET, socket.SOCK_RAW, 0),
                              ('AF_KEY', 15, socket.SOCK_RAW, 2),
                              ('NETLINK_AUDIT', socket.AF_NETLINK, socket.SOCK_RAW, 9),
                              ('NETLINK_SOCK_DIAG', socket.AF_NETLINK, socket.SOCK_RAW, 4),
                              ('NETLINK_KOBJECT_UEVENT', socket.AF_NETLINK, socket.SOCK_RAW, 15)):
    try: socket.socket(fam, typ, proto); res[name] = 'OPEN'
    except OSError as e: res[name] = e.errno
try: socket.socketpair(socket.AF_INET); res['socketpair(AF_INET)'] = 'OPEN'
except OSError as e: res['socketpair(AF_INET)'] = e.errno
print(json.dumps(res))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				return sameValues(t, got, sortedKeys(got), "1") + " (EPERM)"
			}},
		probeCase("B10", catKernel, "the 32-bit int 0x80 entry and the x32 ABI", "the thread is killed with SIGSYS (the profile allows only the x86-64 ABI); on a kernel without the 32-bit entry (int 0x80 dies with SIGSEGV unconfined on the same host, the control) SIGSEGV, before any filter", []sysProbe{
			{"int 0x80 getpid", "int80()", int80Want()},
			{"x32 getpid (39|0x40000000)", "probe(0x40000000 | 39)", "SIG31"},
		}),
		probeCase("B11", catKernel, "TIOCSTI (incl. the high-bits variant) and TIOCLINUX", "EPERM (the kernel truncates cmd to 32 bits, so high bits must not help); other ioctls still reach the kernel", []sysProbe{
			{"ioctl(-1, TIOCSTI)", "probe(16, -1, 0x5412, 0)", eperm},
			{"ioctl(-1, TIOCSTI|1<<32)", "probe(16, -1, (1 << 32) | 0x5412, 0)", eperm},
			{"ioctl(-1, TIOCSTI|0xffffffff<<32)", "probe(16, -1, 0xffffffff00000000 | 0x5412, 0)", eperm},
			{"ioctl(0, TIOCSTI, \"x\")", "probe(16, 0, 0x5412, b'x')", eperm},
			{"ioctl(-1, TIOCLINUX)", "probe(16, -1, 0x541C, 0)", eperm},
			{"ioctl(-1, TIOCLINUX|1<<32)", "probe(16, -1, (1 << 32) | 0x541C, 0)", eperm},
			{"control: ioctl(-1, FIONREAD)", "probe(16, -1, 0x541B, 0)", "EBADF"},
		}),
		probeCase("B12", catKernel, "personality flags", "EPERM for ADDR_NO_RANDOMIZE and READ_IMPLIES_EXEC; the query still works", []sysProbe{
			{"personality(ADDR_NO_RANDOMIZE)", "probe(135, 0x0040000)", eperm},
			{"personality(READ_IMPLIES_EXEC)", "probe(135, 0x0400000)", eperm},
			{"personality(PER_LINUX32|ADDR_NO_RANDOMIZE)", "probe(135, 0x0040008)", eperm},
			{"control: personality(0xffffffff) query", "probe(135, 0xffffffff)", "ok"},
		}),
		probeCase("B13", catKernel, "kernel log and the host clock", "EPERM for syslog and every clock setter; no /dev/kmsg", []sysProbe{
			{"syslog(READ_ALL, NULL, 4096)", "probe(103, 3, None, 4096)", eperm},
			{"clock_settime(REALTIME, NULL)", "probe(227, 0, None)", eperm},
			{"settimeofday(bad pointer)", "probe(164, 1, 0)", eperm},
			{"adjtimex(NULL)", "probe(159, None)", eperm},
			{"clock_adjtime(REALTIME, NULL)", "probe(305, 0, None)", eperm},
			{"/dev/kmsg", "'present' if os.path.exists('/dev/kmsg') else 'absent'", "absent"},
		}),
		{id: "B14", cat: catKernel, title: "CVE-2024-21626 style: leaked fds and cwd",
			expect: "cwd is /workspace, never (unreachable); only stdio and the runner's pipes are open, no host path, cgroup directory or socket",
			code: `import json, os
fds = {}
for fd in os.listdir('/proc/self/fd'):
    try: fds[fd] = os.readlink(f'/proc/self/fd/{fd}')
    except OSError as e: fds[fd] = 'gone'
print(json.dumps({'cwd': os.getcwd(), 'fds': fds}))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				if got["cwd"] != "/workspace" {
					t.Errorf("cwd %v", got["cwd"])
				}
				fds, _ := got["fds"].(map[string]any)
				var bad []string
				for fd, target := range fds {
					s := fmt.Sprint(target)
					if !strings.HasPrefix(s, "pipe:") && !strings.HasPrefix(s, "/proc/") && s != "gone" && s != "/dev/null" {
						bad = append(bad, fd+"->"+s)
					}
				}
				if len(bad) > 0 || len(fds) > 7 {
					t.Errorf("unexpected fds %v (all: %v)", bad, fds)
				}
				return fmt.Sprintf("cwd %v; fds are pipes and /dev/null only", got["cwd"])
			}},
		probeCase("B15", catKernel, "legacy hardware and administration calls", "EPERM for every call", []sysProbe{
			{"modify_ldt(0, NULL)", "probe(154, 0, None, 0)", eperm},
			{"iopl(3)", "probe(172, 3)", eperm},
			{"ioperm(0, 1024, 1)", "probe(173, 0, 1024, 1)", eperm},
			{"vhangup()", "probe(153)", eperm},
			{"acct(NULL)", "probe(163, None)", eperm},
			{"swapon(/x)", "probe(167, b'/x', 0)", eperm},
			{"quotactl(0, NULL)", "probe(179, 0, None, 0, None)", eperm},
			{"sethostname(NULL, 1)", "probe(170, None, 1)", eperm},
		}),
		probeCase("B16", catKernel, "memory-policy, secret-memory and notification calls", "EPERM for every call", []sysProbe{
			{"memfd_secret(0)", "probe(447, 0)", eperm},
			{"fanotify_init(0, 0)", "probe(300, 0, 0)", eperm},
			{"process_madvise(-1)", "probe(440, -1, None, 0, 0, 0)", eperm},
			{"set_mempolicy(0, NULL)", "probe(238, 0, None, 0)", eperm},
			{"mbind(NULL)", "probe(237, None, 0, 0, None, 0, 0)", eperm},
			{"migrate_pages(0)", "probe(256, 0, 0, None, None)", eperm},
			{"move_pages(0)", "probe(279, 0, 1, None, None, None, 0)", eperm},
			{"lookup_dcookie(0)", "probe(212, 0, None, 0)", eperm},
		}),
		probeCase("B17", catKernel, "syscall numbers the profile does not name", "ENOSYS past the highest named syscall (libc falls back), EPERM for unnamed numbers below it", []sysProbe{
			{"statmount (457)", "probe(457, None, None, 0, 0)", "ENOSYS"},
			{"listmount (458)", "probe(458, None, None, 0, 0)", "ENOSYS"},
			{"mseal (462)", "probe(462, 0, 0, 0)", "ENOSYS"},
			{"500", "probe(500)", "ENOSYS"},
			{"380 (unnamed)", "probe(380)", eperm},
			{"400 (unnamed)", "probe(400)", eperm},
		}),
		probeCase("B18", catKernel, "stacking a permissive seccomp filter does not lift the jail's", "installing an allow-all filter succeeds, and io_uring and mount still fail with EPERM", []sysProbe{
			{"prctl(PR_SET_SECCOMP, allow-all)", "allow_all()", "ok"},
			{"io_uring_setup after it", "after_allow_all(425, 1, None)", eperm},
			{"mount after it", "after_allow_all(165, b'none', b'/tmp', b'tmpfs', 0, None)", eperm},
		}),
	}
}

// runDeniedSweep probes every syscall the shipped profile denies
// (seccomp.Denied) and every argument-dependent case
// (seccomp.ConditionalProbes) from one jail of the daemon.
func runDeniedSweep(t *testing.T, h *hostile) string {
	prof, err := seccomp.Load(filepath.Join("..", "seccomp-profiles", "default.json"))
	if err != nil {
		t.Fatal(err)
	}
	denied, err := seccomp.Denied(prof)
	if err != nil {
		t.Fatal(err)
	}
	probes := append(denied, seccomp.ConditionalProbes()...)
	stdin := seccomp.ProberInput(probes)
	r := h.exec(t, api.ExecuteRequest{Code: seccomp.ProberScript, Stdin: ptr(string(stdin)), Limits: &api.Limits{TimeoutMs: ptr(int64(60000))}})
	wantStatus(t, r, "ok")
	var got []seccomp.ProbeOutcome
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil || len(got) != len(probes) {
		t.Fatalf("prober output (%d of %d probes): %v\n%.2000s", len(got), len(probes), err, r.Stderr)
	}
	failed, excused := seccomp.CheckOutcomes(probes, got, func(p seccomp.Probe) int { return unconfinedSignal(p.Nr, p.Args) })
	for _, e := range excused {
		t.Log(e)
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d probes not refused by the filter:\n%s", len(failed), len(probes), strings.Join(failed, "\n"))
		return fmt.Sprintf("%d of %d probes NOT refused: %s", len(failed), len(probes), strings.Join(failed, "; "))
	}
	return fmt.Sprintf("all %d denied syscalls and %d argument-dependent cases refused as expected", len(denied), len(probes)-len(denied))
}

// int80Control makes an i386 getpid through int 0x80 on this host, outside
// any jail, in a program built with the host's gcc: "returned" where the
// kernel has the 32-bit entry, "SIG11" where it has none (IA32 emulation
// compiled out or disabled with ia32_emulation=0: the CPU faults before
// any system call, so no seccomp filter is ever asked). Seen on machines
// of the same kind with different kernels.
var int80Control = sync.OnceValue(func() string {
	dir, err := os.MkdirTemp("", "int80-control")
	if err != nil {
		return "error: " + err.Error()
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "int80.c")
	prog := `int main(void) { long r; __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory"); return r > 0 ? 0 : 3; }`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		return "error: " + err.Error()
	}
	if out, err := exec.Command("gcc", "-O0", "-o", filepath.Join(dir, "int80"), src).CombinedOutput(); err != nil {
		return fmt.Sprintf("error: gcc: %v %s", err, out)
	}
	err = exec.Command(filepath.Join(dir, "int80")).Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("SIG%d", int(ws.Signal()))
		}
	}
	return "returned"
})

// hostDependent are probes whose result depends on the host's kernel (as
// its control shows); the report gives what was accepted, not the value.
var hostDependent = map[string]string{
	"int 0x80 getpid": "SIGSYS, or SIGSEGV where the control shows no 32-bit entry",
}

// int80Want is what int 0x80 may give in a jail on this host: SIGSYS from
// the filter; SIGSEGV too only where the control shows the kernel has no
// 32-bit entry. An unknown control keeps the strict expectation.
func int80Want() string {
	if int80Control() == "SIG11" {
		return "SIG31|SIG11"
	}
	return "SIG31"
}

// unconfinedSignal makes system call nr on this host, outside any jail, in
// a program built with the host's gcc, and returns the signal that killed
// it (0: none, or the control could not run).
func unconfinedSignal(nr int, args [6]uint64) int {
	dir, err := os.MkdirTemp("", "syscall-control")
	if err != nil {
		return 0
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "probe.c")
	prog := fmt.Sprintf("#include <unistd.h>\nint main(void) { syscall(%d, %dUL, %dUL, %dUL, %dUL, %dUL, %dUL); return 0; }\n",
		nr, args[0], args[1], args[2], args[3], args[4], args[5])
	if os.WriteFile(src, []byte(prog), 0o644) != nil || exec.Command("gcc", "-O0", "-o", filepath.Join(dir, "probe"), src).Run() != nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(exec.Command(filepath.Join(dir, "probe")).Run(), &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return int(ws.Signal())
		}
	}
	return 0
}
