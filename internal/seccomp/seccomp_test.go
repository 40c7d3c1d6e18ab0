//go:build cgo && seccomp

package seccomp

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
)

const shippedPath = "../../seccomp-profiles/default.json"

func loadShipped(t testing.TB) *specs.LinuxSeccomp {
	t.Helper()
	p, err := Load(shippedPath)
	if err != nil {
		t.Fatalf("Load(%s): %v", shippedPath, err)
	}
	return p
}

// minimal is a small valid profile; cases below edit it textually.
const minimal = `{
  "defaultAction": "SCMP_ACT_ERRNO",
  "defaultErrnoRet": 1,
  "architectures": ["SCMP_ARCH_X86_64"],
  "flags": [],
  "syscalls": [
    {"names": ["read", "write", "exit_group"], "action": "SCMP_ACT_ALLOW"},
    {"names": ["clone"], "action": "SCMP_ACT_ALLOW",
     "args": [{"index": 0, "value": 2114060416, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]},
    {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}
  ]
}`

func edit(old, new string) string {
	if !strings.Contains(minimal, old) {
		panic("test edit does not apply: " + old)
	}
	return strings.Replace(minimal, old, new, 1)
}

// withRule appends a rule to minimal's syscalls.
func withRule(rule string) string {
	return edit(`"errnoRet": 38}`, `"errnoRet": 38},`+"\n    "+rule)
}

func TestParse(t *testing.T) {
	cases := []struct {
		name string
		in   string
		ok   bool
	}{
		{"minimal", minimal, true},
		{"trailing whitespace", minimal + "\n\t \n", true},
		{"log flag", edit(`"flags": []`, `"flags": ["SECCOMP_FILTER_FLAG_LOG"]`), true},
		{"kill default", edit(`"SCMP_ACT_ERRNO",
  "defaultErrnoRet": 1`, `"SCMP_ACT_KILL_PROCESS"`), true},
		{"default errnoRet omitted", edit(`  "defaultErrnoRet": 1,
`, ""), true},
		{"conditional deny rule", withRule(`{"names": ["mount"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13, "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]}`), true},

		{"empty input", "", false},
		{"null", "null", false},
		{"not an object", `[]`, false},
		{"syntax error", minimal[:len(minimal)-1], false},
		{"trailing garbage", minimal + "x", false},
		{"trailing document", minimal + "{}", false},
		{"unknown top-level field", edit(`"flags": []`, `"flags": [], "comment": "hi"`), false},
		{"unknown rule field", edit(`"action": "SCMP_ACT_ALLOW"}`, `"action": "SCMP_ACT_ALLOW", "includes": {}}`), false},
		{"unknown arg field", edit(`"valueTwo": 0,`, `"valueTwo": 0, "mask": 1,`), false},
		{"key case variant", edit(`"defaultAction"`, `"DefaultAction"`), false},
		{"duplicate key", edit(`"flags": []`, `"flags": [], "defaultAction": "SCMP_ACT_ALLOW"`), false},
		{"duplicate key in rule", edit(`"action": "SCMP_ACT_ALLOW"}`, `"action": "SCMP_ACT_ALLOW", "action": "SCMP_ACT_ALLOW"}`), false},
		{"default allow", edit(`"SCMP_ACT_ERRNO",
  "defaultErrnoRet": 1`, `"SCMP_ACT_ALLOW"`), false},
		{"default log", edit(`"SCMP_ACT_ERRNO",
  "defaultErrnoRet": 1`, `"SCMP_ACT_LOG"`), false},
		{"default notify", edit(`"SCMP_ACT_ERRNO",
  "defaultErrnoRet": 1`, `"SCMP_ACT_NOTIFY"`), false},
		{"default errnoRet 0", edit(`"defaultErrnoRet": 1`, `"defaultErrnoRet": 0`), false},
		{"default errnoRet too big", edit(`"defaultErrnoRet": 1`, `"defaultErrnoRet": 70000`), false},
		{"default errnoRet with kill", edit(`"SCMP_ACT_ERRNO"`, `"SCMP_ACT_KILL"`), false},
		{"no architectures", edit(`"architectures": ["SCMP_ARCH_X86_64"],`, ``), false},
		{"x86 too", edit(`["SCMP_ARCH_X86_64"]`, `["SCMP_ARCH_X86_64", "SCMP_ARCH_X86"]`), false},
		{"x32 too", edit(`["SCMP_ARCH_X86_64"]`, `["SCMP_ARCH_X86_64", "SCMP_ARCH_X32"]`), false},
		{"wrong arch", edit(`["SCMP_ARCH_X86_64"]`, `["SCMP_ARCH_AARCH64"]`), false},
		{"flags absent", edit(`"flags": [],`, ``), false},
		{"spec allow flag", edit(`"flags": []`, `"flags": ["SECCOMP_FILTER_FLAG_SPEC_ALLOW"]`), false},
		{"unknown flag", edit(`"flags": []`, `"flags": ["SECCOMP_FILTER_FLAG_BOGUS"]`), false},
		{"listener", edit(`"flags": []`, `"flags": [], "listenerPath": "/run/agent.sock"`), false},
		{"unknown syscall", edit(`"read",`, `"read", "no_such_syscall",`), false},
		{"non-x86-64 syscall", edit(`"read",`, `"read", "stat64",`), false},
		{"empty name", edit(`"read",`, `"read", "",`), false},
		{"repeated name", edit(`"read",`, `"read", "read",`), false},
		{"empty names", withRule(`{"names": [], "action": "SCMP_ACT_ALLOW"}`), false},
		{"unknown action", edit(`"SCMP_ACT_ALLOW"}`, `"SCMP_ACT_PERMIT"}`), false},
		{"trace action", edit(`"SCMP_ACT_ALLOW"}`, `"SCMP_ACT_TRACE"}`), false},
		{"notify action", edit(`"SCMP_ACT_ALLOW"}`, `"SCMP_ACT_NOTIFY"}`), false},
		{"errnoRet on allow", edit(`"SCMP_ACT_ALLOW"}`, `"SCMP_ACT_ALLOW", "errnoRet": 1}`), false},
		{"errnoRet 0", edit(`"errnoRet": 38`, `"errnoRet": 0`), false},
		{"unknown op", edit(`"SCMP_CMP_MASKED_EQ"`, `"SCMP_CMP_BITS_SET"`), false},
		{"arg index 6", edit(`"index": 0`, `"index": 6`), false},
		{"masked eq mask 0", withRule(`{"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 0, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}`), false},
		{"masked eq never matches", withRule(`{"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 1, "valueTwo": 2, "op": "SCMP_CMP_MASKED_EQ"}]}`), false},
		{"valueTwo with EQ", withRule(`{"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 1, "valueTwo": 2, "op": "SCMP_CMP_EQ"}]}`), false},
		{"two conditions on one arg", withRule(`{"names": ["ioctl"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 21522, "op": "SCMP_CMP_NE"}, {"index": 1, "value": 21532, "op": "SCMP_CMP_NE"}]}`), false},
		{"mixed actions", withRule(`{"names": ["read"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13, "args": [{"index": 0, "value": 3, "op": "SCMP_CMP_EQ"}]}`), false},
		{"mixed errnos", withRule(`{"names": ["clone3"], "action": "SCMP_ACT_ERRNO"}`), false},
		{"ptrace allowed", edit(`"read",`, `"read", "ptrace",`), false},
		{"mount allowed conditionally", withRule(`{"names": ["mount"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 3, "value": 0, "op": "SCMP_CMP_EQ"}]}`), false},
		{"unshare logged", withRule(`{"names": ["unshare"], "action": "SCMP_ACT_LOG"}`), false},
		{"io_uring allowed", edit(`"read",`, `"read", "io_uring_setup",`), false},
		{"clone3 allowed", edit(`"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38`, `"names": ["clone3"], "action": "SCMP_ACT_ALLOW"`), false},
		{"clone unconditional", edit(`"read",`, `"read", "clone",`), false},
		{"clone partial mask", edit(`"value": 2114060416`, `"value": 2113929216`), false},
		{"clone allows a namespace", edit(`"valueTwo": 0,`, `"valueTwo": 268435456,`), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Parse([]byte(c.in))
			if c.ok {
				if err != nil || p == nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse accepted %s", c.in)
			}
			if !errors.Is(err, ErrInvalidProfile) {
				t.Errorf("error %q does not wrap ErrInvalidProfile", err)
			}
			if p != nil {
				t.Error("non-nil profile with an error")
			}
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	big := minimal + strings.Repeat(" ", MaxProfileSize)
	if _, err := Parse([]byte(big)); !errors.Is(err, ErrInvalidProfile) {
		t.Fatalf("Parse(%d bytes) = %v, want ErrInvalidProfile", len(big), err)
	}
	path := filepath.Join(t.TempDir(), "big.json")
	if err := os.WriteFile(path, []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); !errors.Is(err, ErrInvalidProfile) {
		t.Fatalf("Load(big) = %v, want ErrInvalidProfile", err)
	}
}

func TestLoad(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want fs.ErrNotExist", err)
	}
	if _, err := Load(t.TempDir()); !errors.Is(err, ErrInvalidProfile) {
		t.Errorf("Load(dir) = %v, want ErrInvalidProfile", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(edit(`"flags": [],`, ``)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); !errors.Is(err, ErrInvalidProfile) || !strings.Contains(err.Error(), bad) {
		t.Errorf("Load(bad) = %v, want ErrInvalidProfile naming the file", err)
	}
}

func TestValidateNil(t *testing.T) {
	if err := Validate(nil); !errors.Is(err, ErrInvalidProfile) {
		t.Errorf("Validate(nil) = %v", err)
	}
	if _, err := Denied(nil); !errors.Is(err, ErrInvalidProfile) {
		t.Errorf("Denied(nil) = %v", err)
	}
}

func TestShippedProfile(t *testing.T) {
	p := loadShipped(t)
	if p.Flags == nil {
		t.Error("flags decoded as nil: runc would add SECCOMP_FILTER_FLAG_SPEC_ALLOW")
	}
	if p.DefaultAction != specs.ActErrno || p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != errnoEPERM {
		t.Errorf("default action %s/%v, want SCMP_ACT_ERRNO/EPERM", p.DefaultAction, p.DefaultErrnoRet)
	}
	// Everything Docker's default profile denies to a container without
	// capabilities, plus jaild's own additions, must stay denied.
	allowed := map[string]bool{}
	for _, r := range p.Syscalls {
		if runsSyscall(r.Action) {
			for _, n := range r.Names {
				allowed[n] = true
			}
		}
	}
	for _, n := range append(MustDeny(),
		"adjtimex", "clock_adjtime", "memfd_secret", "fanotify_mark", "mbind",
		"get_mempolicy", "set_mempolicy", "set_mempolicy_home_node", "migrate_pages",
		"move_pages", "epoll_ctl_old", "epoll_wait_old", "_sysctl", "ustat", "sysfs",
		"tuxcall", "security", "vserver", "afs_syscall", "putpmsg", "getpmsg",
		"get_kernel_syms", "query_module") {
		mustNr(t, n)
		if allowed[n] {
			t.Errorf("shipped profile allows %s", n)
		}
	}
	// What Python, numpy & co. and ruff need.
	for _, n := range []string{
		"read", "write", "openat", "close", "mmap", "munmap", "mprotect", "brk",
		"futex", "clone", "execve", "wait4", "pipe2", "socketpair", "sendmsg", "recvmsg",
		"getrandom", "rseq", "statx", "newfstatat", "sched_getaffinity", "epoll_wait",
		"epoll_pwait", "eventfd2", "set_robust_list", "prlimit64", "arch_prctl",
		"ioctl", "socket", "connect", "bind", "listen", "accept4", "madvise",
		"memfd_create", "vfork", "fork", "kill", "tgkill", "rt_sigaction", "sigaltstack",
		"pidfd_open", "close_range", "faccessat2", "copy_file_range", "sendfile",
		"personality", "mremap", "ftruncate", "fchmodat2", "getdents64", "prctl",
	} {
		if !allowed[n] {
			t.Errorf("shipped profile does not allow %s", n)
		}
	}
}

func TestMustDeny(t *testing.T) {
	md := MustDeny()
	if !slices.IsSorted(md) {
		t.Error("MustDeny is not sorted")
	}
	if len(slices.Compact(slices.Clone(md))) != len(md) {
		t.Error("MustDeny has duplicates")
	}
	for _, n := range md {
		mustNr(t, n)
	}
	md[0] = "changed"
	if MustDeny()[0] == "changed" {
		t.Error("MustDeny returns shared storage")
	}
}

func TestDenied(t *testing.T) {
	p := loadShipped(t)
	probes, err := Denied(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d denied-syscall probes", len(probes))
	byName := map[string]Probe{}
	lastNr := -1
	for _, pr := range probes {
		if pr.Nr <= lastNr {
			t.Errorf("probes not in number order at %s", pr.Name)
		}
		lastNr = pr.Nr
		if _, dup := byName[pr.Name]; dup {
			t.Errorf("duplicate probe %s", pr.Name)
		}
		byName[pr.Name] = pr
		if pr.Sigsys || (pr.Errno != errnoEPERM && pr.Errno != errnoENOSYS) || pr.Note == "" {
			t.Errorf("probe %+v: want EPERM or ENOSYS and a note", pr)
		}
		if nr := mustNr(t, pr.Name); int(nr) != pr.Nr {
			t.Errorf("probe %s: Nr %d, libseccomp says %d", pr.Name, pr.Nr, nr)
		}
	}
	for _, n := range MustDeny() {
		if _, ok := byName[n]; !ok {
			t.Errorf("no probe for must-deny syscall %s", n)
		}
	}
	for _, n := range []string{"read", "clone", "socket", "socketpair", "ioctl", "personality"} {
		if _, ok := byName[n]; ok {
			t.Errorf("%s is (conditionally) allowed but has a Denied probe", n)
		}
	}
	if pr := byName["clone3"]; pr.Errno != errnoENOSYS {
		t.Errorf("clone3 probe %+v, want ENOSYS", pr)
	}
	if pr := byName["ptrace"]; pr.Args[0] != 16 || pr.Errno != errnoEPERM {
		t.Errorf("ptrace probe %+v, want PTRACE_ATTACH and EPERM", pr)
	}
	if pr := byName["mount"]; pr.Args != [6]uint64{} || pr.Errno != errnoEPERM {
		t.Errorf("mount probe %+v", pr)
	}
	// Every named x86-64 syscall is either allowed somehow or probed.
	allowed := map[string]bool{}
	for _, r := range p.Syscalls {
		if runsSyscall(r.Action) {
			for _, n := range r.Names {
				allowed[n] = true
			}
		}
	}
	named := 0
	for nr := 0; nr <= maxScanNr; nr++ {
		name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(libseccomp.ArchAMD64)
		if err != nil {
			continue
		}
		named++
		if _, probed := byName[name]; probed == allowed[name] {
			t.Errorf("%s: allowed=%v probed=%v", name, allowed[name], probed)
		}
	}
	if named != len(probes)+len(allowed) {
		t.Errorf("%d named syscalls, %d probes + %d allowed", named, len(probes), len(allowed))
	}
}

func TestDeniedEnosysStub(t *testing.T) {
	// A profile naming nothing above read/write: every higher syscall
	// gets runc's ENOSYS stub.
	p, err := Parse([]byte(`{"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_X86_64"], "flags": [],
	  "syscalls": [{"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	probes, err := Denied(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range probes {
		want := errnoEPERM
		if pr.Nr > 1 {
			want = errnoENOSYS
		}
		if pr.Errno != want {
			t.Errorf("%s (%d): errno %d, want %d", pr.Name, pr.Nr, pr.Errno, want)
		}
	}
	m := newMachine(t, compile(t, p, optimizeLikeRunc))
	for _, pr := range probes {
		if v := m.run(t, uint32(pr.Nr), pr.Args[:]...); v.errno() != pr.Errno {
			t.Errorf("%s: VM %#x, probe errno %d", pr.Name, uint32(v), pr.Errno)
		}
	}
	// A KILL default gives Sigsys probes below the stub, ENOSYS above.
	p, err = Parse([]byte(`{"defaultAction": "SCMP_ACT_KILL_PROCESS", "architectures": ["SCMP_ARCH_X86_64"], "flags": [],
	  "syscalls": [{"names": ["read", "exit_group"], "action": "SCMP_ACT_ALLOW"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	probes, err = Denied(p)
	if err != nil {
		t.Fatal(err)
	}
	m = newMachine(t, compile(t, p, optimizeLikeRunc))
	for _, pr := range probes {
		v := m.run(t, uint32(pr.Nr), pr.Args[:]...)
		if pr.Nr < 231 {
			if !pr.Sigsys || pr.Errno != 0 || v.action() != retKillProcess {
				t.Errorf("%s: probe %+v, VM %#x; want Sigsys and KILL_PROCESS", pr.Name, pr, uint32(v))
			}
		} else if pr.Sigsys || pr.Errno != errnoENOSYS || v.errno() != errnoENOSYS {
			t.Errorf("%s: probe %+v, VM %#x; want ENOSYS", pr.Name, pr, uint32(v))
		}
	}
}

func FuzzParse(f *testing.F) {
	shipped, err := os.ReadFile(shippedPath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(shipped)
	f.Add([]byte(minimal))
	f.Add([]byte(withRule(`{"names": ["mount"], "action": "SCMP_ACT_ALLOW"}`)))
	f.Add([]byte(edit(`"defaultAction"`, `"DefaultAction"`)))
	f.Add([]byte(minimal + "{}"))
	f.Add([]byte(`{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],"flags":[],"syscalls":[{"names":["ioctl"],"action":"SCMP_ACT_ALLOW","args":[{"index":1,"value":255,"valueTwo":18,"op":"SCMP_CMP_MASKED_EQ"}]}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if p != nil {
				t.Fatal("profile returned with an error")
			}
			if !errors.Is(err, ErrInvalidProfile) {
				t.Fatalf("error does not wrap ErrInvalidProfile: %v", err)
			}
			return
		}
		if err := Validate(p); err != nil {
			t.Fatalf("accepted profile no longer validates: %v", err)
		}
		// The accepted profile means the same after a JSON round trip
		// (flags re-added: omitempty drops an empty list).
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var q specs.LinuxSeccomp
		if err := json.Unmarshal(out, &q); err != nil {
			t.Fatal(err)
		}
		if q.Flags == nil {
			q.Flags = []specs.LinuxSeccompFlag{}
		}
		if err := Validate(&q); err != nil {
			t.Fatalf("round-tripped profile fails: %v", err)
		}
	})
}
