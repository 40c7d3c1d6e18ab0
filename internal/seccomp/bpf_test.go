//go:build cgo && seccomp

package seccomp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Kernel seccomp constants (linux/seccomp.h, linux/audit.h).
const (
	auditArchX86_64 = 0xc000003e
	auditArchI386   = 0x40000003

	retKillProcess = 0x80000000
	retKillThread  = 0x00000000
	retTrap        = 0x00030000
	retErrno       = 0x00050000
	retLog         = 0x7ffc0000
	retAllow       = 0x7fff0000
	retActionMask  = 0xffff0000
	retDataMask    = 0x0000ffff
)

// verdict is a seccomp filter's return value.
type verdict uint32

func (v verdict) action() uint32 { return uint32(v) & retActionMask }

func (v verdict) allowed() bool { return v.action() == retAllow || v.action() == retLog }

// errno returns the errno of an ERRNO verdict, or -1.
func (v verdict) errno() int {
	if v.action() != retErrno {
		return -1
	}
	return int(uint32(v) & retDataMask)
}

func (v verdict) kills() bool {
	a := v.action()
	return a == retKillThread || a == retKillProcess || a == retTrap
}

// scmpAction converts an OCI action as runc's getAction does.
func scmpAction(t testing.TB, a specs.LinuxSeccompAction, errnoRet *uint) libseccomp.ScmpAction {
	t.Helper()
	switch a {
	case specs.ActKill, specs.ActKillThread:
		return libseccomp.ActKillThread
	case specs.ActKillProcess:
		return libseccomp.ActKillProcess
	case specs.ActErrno:
		if errnoRet != nil {
			return libseccomp.ActErrno.SetReturnCode(int16(*errnoRet))
		}
		return libseccomp.ActErrno.SetReturnCode(int16(unix.EPERM))
	case specs.ActTrap:
		return libseccomp.ActTrap
	case specs.ActAllow:
		return libseccomp.ActAllow
	case specs.ActLog:
		return libseccomp.ActLog
	}
	t.Fatalf("action %q not handled", a)
	return libseccomp.ActInvalid
}

var scmpOps = map[specs.LinuxSeccompOperator]libseccomp.ScmpCompareOp{
	specs.OpNotEqual:     libseccomp.CompareNotEqual,
	specs.OpLessThan:     libseccomp.CompareLess,
	specs.OpLessEqual:    libseccomp.CompareLessOrEqual,
	specs.OpEqualTo:      libseccomp.CompareEqual,
	specs.OpGreaterEqual: libseccomp.CompareGreaterEqual,
	specs.OpGreaterThan:  libseccomp.CompareGreater,
	specs.OpMaskedEqual:  libseccomp.CompareMaskedEqual,
}

// optimizeLikeRunc asks compile to choose the optimisation level as runc
// does (binary tree above 32 syscall entries).
const optimizeLikeRunc = 0

// compile builds p into the BPF program runc v1.5.2 would load, mirroring
// libcontainer/specconv.SetupSeccomp, libcontainer/seccomp.InitSeccomp and
// matchCall, and patchbpf's ENOSYS stub (for the single x86-64 architecture
// jaild allows). optimize selects libseccomp's optimisation level, or
// optimizeLikeRunc.
func compile(t testing.TB, p *specs.LinuxSeccomp, optimize int) []bpf.Instruction {
	t.Helper()
	defAct := scmpAction(t, p.DefaultAction, p.DefaultErrnoRet)
	f, err := libseccomp.NewFilter(defAct)
	if err != nil {
		t.Fatalf("NewFilter: %v", err)
	}
	defer f.Release()
	for _, a := range p.Architectures {
		// specconv maps SCMP_ARCH_X86_64 to "amd64".
		if a != specs.ArchX86_64 {
			t.Fatalf("compile handles only %s, not %s", specs.ArchX86_64, a)
		}
		arch, err := libseccomp.GetArchFromString("amd64")
		if err != nil {
			t.Fatal(err)
		}
		if err := f.AddArch(arch); err != nil {
			t.Fatal(err)
		}
	}
	type call struct {
		name string
		r    specs.LinuxSyscall
	}
	var calls []call
	for _, r := range p.Syscalls {
		for _, n := range r.Names {
			calls = append(calls, call{n, r})
		}
	}
	switch {
	case optimize != optimizeLikeRunc:
		if err := f.SetOptimize(optimize); err != nil {
			t.Fatalf("SetOptimize(%d): %v", optimize, err)
		}
	case len(calls) > 32:
		if err := f.SetOptimize(2); err != nil {
			t.Logf("binary tree optimisation unavailable: %v", err)
		}
	}
	if err := f.SetNoNewPrivsBit(false); err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		act := scmpAction(t, c.r.Action, c.r.ErrnoRet)
		if act == defAct {
			continue // runc skips rules equal to the default action
		}
		nr, err := libseccomp.GetSyscallFromName(c.name)
		if err != nil {
			continue // runc ignores unknown syscalls (Validate does not)
		}
		if len(c.r.Args) == 0 {
			if err := f.AddRule(nr, act); err != nil {
				t.Fatalf("AddRule(%s): %v", c.name, err)
			}
			continue
		}
		var conds []libseccomp.ScmpCondition
		var counts [6]int
		for _, a := range c.r.Args {
			cond, err := libseccomp.MakeCondition(a.Index, scmpOps[a.Op], a.Value, a.ValueTwo)
			if err != nil {
				t.Fatalf("MakeCondition(%s %+v): %v", c.name, a, err)
			}
			counts[a.Index]++
			conds = append(conds, cond)
		}
		if slices.ContainsFunc(counts[:], func(n int) bool { return n > 1 }) {
			for _, cond := range conds {
				if err := f.AddRuleConditional(nr, act, []libseccomp.ScmpCondition{cond}); err != nil {
					t.Fatalf("AddRuleConditional(%s): %v", c.name, err)
				}
			}
		} else if err := f.AddRuleConditional(nr, act, conds); err != nil {
			t.Fatalf("AddRuleConditional(%s): %v", c.name, err)
		}
	}
	prog := exportBPF(t, f)
	return append(enosysStub(t, p), prog...)
}

// exportBPF exports f's program and disassembles it.
func exportBPF(t testing.TB, f *libseccomp.ScmpFilter) []bpf.Instruction {
	t.Helper()
	path := filepath.Join(t.TempDir(), "filter.bpf")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ExportBPF(out); err != nil {
		t.Fatalf("ExportBPF: %v", err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw []bpf.RawInstruction
	r := bytes.NewReader(data)
	for {
		// seccomp_export_bpf writes struct sock_filter in host byte order.
		var in unix.SockFilter
		if err := binary.Read(r, binary.NativeEndian, &in); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("parsing exported BPF: %v", err)
		}
		raw = append(raw, bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K})
	}
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("exported BPF contains instructions x/net/bpf cannot disassemble")
	}
	checkLoads(t, prog)
	return prog
}

// checkLoads makes sure the program only reads struct seccomp_data through
// aligned 32-bit absolute loads, the one access pattern packetFor's
// byte-order trick supports.
func checkLoads(t testing.TB, prog []bpf.Instruction) {
	t.Helper()
	for i, in := range prog {
		switch in := in.(type) {
		case bpf.LoadAbsolute:
			if in.Size != 4 || in.Off%4 != 0 || in.Off+4 > seccompDataSize {
				t.Fatalf("instruction %d: unsupported load %v", i, in)
			}
		case bpf.LoadIndirect, bpf.LoadMemShift, bpf.LoadExtension:
			t.Fatalf("instruction %d: unsupported load %v", i, in)
		}
	}
}

// enosysStub is runc's patchbpf stub for a profile whose only architecture
// is x86-64: native (non-x32) syscall numbers above the highest one the
// profile names get ENOSYS, everything else falls through to libseccomp's
// program.
func enosysStub(t testing.TB, p *specs.LinuxSeccomp) []bpf.Instruction {
	t.Helper()
	if p.DefaultErrnoRet != nil && *p.DefaultErrnoRet == errnoENOSYS {
		return nil
	}
	maxNr := 0
	for _, r := range p.Syscalls {
		for _, n := range r.Names {
			if nr, err := libseccomp.GetSyscallFromNameByArch(n, libseccomp.ArchAMD64); err == nil {
				maxNr = max(maxNr, int(nr))
			}
		}
	}
	if maxNr == 0 {
		return nil
	}
	return []bpf.Instruction{
		/* 0 */ bpf.LoadAbsolute{Off: 4, Size: 4}, // arch
		/* 1 */ bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArchX86_64, SkipFalse: 5},
		/* 2 */ bpf.LoadAbsolute{Off: 0, Size: 4}, // nr
		/* 3 */ bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: x32Bit, SkipTrue: 3},
		/* 4 */ bpf.JumpIf{Cond: bpf.JumpGreaterThan, Val: uint32(maxNr), SkipTrue: 1},
		/* 5 */ bpf.Jump{Skip: 1},
		/* 6 */ bpf.RetConstant{Val: retErrno | errnoENOSYS},
		// 7: libseccomp's program
	}
}

// seccompDataSize is sizeof(struct seccomp_data).
const seccompDataSize = 64

// packetFor lays out struct seccomp_data for x/net/bpf's VM.
//
// The kernel runs seccomp programs over struct seccomp_data { int nr;
// __u32 arch; __u64 instruction_pointer; __u64 args[6]; } in host byte
// order (little-endian here), and libseccomp only reads it with aligned
// 32-bit BPF_LD|BPF_W|BPF_ABS loads (checkLoads enforces this): nr at 0,
// arch at 4, and each 64-bit arg as two words, the low half at 16+8i and
// the high half at 20+8i (little-endian layout). x/net/bpf's LoadAbsolute,
// written for network packets, reads big-endian. So each 32-bit word is
// stored big-endian at the offset where the kernel would find it: every
// load then yields exactly the value the kernel's load would, and the
// program needs no rewriting.
func packetFor(arch uint32, nr uint32, args [6]uint64) []byte {
	pkt := make([]byte, seccompDataSize)
	binary.BigEndian.PutUint32(pkt[0:], nr)
	binary.BigEndian.PutUint32(pkt[4:], arch)
	for i, a := range args {
		binary.BigEndian.PutUint32(pkt[16+8*i:], uint32(a))
		binary.BigEndian.PutUint32(pkt[20+8*i:], uint32(a>>32))
	}
	return pkt
}

// machine runs one compiled profile.
type machine struct {
	vm *bpf.VM
}

func newMachine(t testing.TB, prog []bpf.Instruction) *machine {
	t.Helper()
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatalf("bpf.NewVM: %v", err)
	}
	return &machine{vm: vm}
}

func (m *machine) runArch(t testing.TB, arch uint32, nr uint32, args [6]uint64) verdict {
	t.Helper()
	v, err := m.vm.Run(packetFor(arch, nr, args))
	if err != nil {
		t.Fatalf("VM run (nr %#x): %v", nr, err)
	}
	return verdict(uint32(v))
}

func (m *machine) run(t testing.TB, nr uint32, args ...uint64) verdict {
	t.Helper()
	var a [6]uint64
	copy(a[:], args)
	return m.runArch(t, auditArchX86_64, nr, a)
}

func mustNr(t testing.TB, name string) uint32 {
	t.Helper()
	nr, err := libseccomp.GetSyscallFromNameByArch(name, libseccomp.ArchAMD64)
	if err != nil || nr < 0 {
		t.Fatalf("no x86-64 syscall %q: %v", name, err)
	}
	return uint32(nr)
}

func shippedMachines(t *testing.T) (*specs.LinuxSeccomp, map[string]*machine) {
	t.Helper()
	p := loadShipped(t)
	ms := map[string]*machine{}
	for name, opt := range map[string]int{"runc": optimizeLikeRunc, "opt1": 1, "opt2": 2} {
		ms[name] = newMachine(t, compile(t, p, opt))
	}
	return p, ms
}

func TestShippedProfileDecisions(t *testing.T) {
	_, ms := shippedMachines(t)
	const allow, eperm, enosys = -2, 1, 38
	cases := []struct {
		name string
		nr   string
		args []uint64
		want int // allow, or an errno
	}{
		{"read", "read", nil, allow},
		{"write", "write", nil, allow},
		{"openat", "openat", nil, allow},
		{"mmap", "mmap", nil, allow},
		{"futex", "futex", nil, allow},
		{"execve", "execve", nil, allow},
		{"statx", "statx", nil, allow},
		{"rseq", "rseq", nil, allow},
		{"getrandom", "getrandom", nil, allow},
		{"sendmsg", "sendmsg", nil, allow},
		{"mount", "mount", nil, eperm},
		{"umount2", "umount2", nil, eperm},
		{"ptrace", "ptrace", nil, eperm},
		{"bpf", "bpf", nil, eperm},
		{"keyctl", "keyctl", nil, eperm},
		{"io_uring_setup", "io_uring_setup", nil, eperm},
		{"unshare", "unshare", []uint64{cloneNewUser}, eperm},
		{"setns", "setns", nil, eperm},
		{"userfaultfd", "userfaultfd", nil, eperm},
		{"process_vm_readv", "process_vm_readv", nil, eperm},
		{"name_to_handle_at", "name_to_handle_at", nil, eperm},
		{"modify_ldt", "modify_ldt", nil, eperm},
		{"clone3", "clone3", nil, enosys},
		// glibc pthread_create / fork / posix_spawn flags.
		{"clone thread", "clone", []uint64{0x3d0f00}, allow},
		{"clone fork", "clone", []uint64{0x1200011}, allow},
		{"clone vfork", "clone", []uint64{0x4111}, allow},
		{"clone NEWUSER", "clone", []uint64{cloneNewUser | 0x11}, eperm},
		{"clone NEWNS", "clone", []uint64{cloneNewNS | 0x11}, eperm},
		{"clone NEWNET|thread", "clone", []uint64{cloneNewNet | 0x3d0f00}, eperm},
		{"clone exit signal 0x80", "clone", []uint64{0x80}, eperm},
		{"socket AF_UNIX", "socket", []uint64{1, 1, 0}, allow},
		{"socket AF_INET", "socket", []uint64{afInet, 1, 0}, allow},
		{"socket AF_INET6", "socket", []uint64{afInet6, 2, 17}, allow},
		{"socket AF_NETLINK ROUTE", "socket", []uint64{afNetlink, 3, 0}, allow},
		{"socket AF_NETLINK AUDIT", "socket", []uint64{afNetlink, 3, netlinkAudit}, eperm},
		{"socket AF_ALG", "socket", []uint64{afALG, 5, 0}, eperm},
		{"socket AF_VSOCK", "socket", []uint64{afVsock, 1, 0}, eperm},
		{"socket AF_PACKET", "socket", []uint64{afPacket, 3, 0}, eperm},
		{"socketpair AF_UNIX", "socketpair", []uint64{1, 1, 0}, allow},
		{"socketpair AF_INET", "socketpair", []uint64{afInet, 1, 0}, eperm},
		{"ioctl TCGETS", "ioctl", []uint64{0, 0x5401}, allow},
		{"ioctl FIONREAD", "ioctl", []uint64{3, 0x541B}, allow},
		{"ioctl TIOCGWINSZ", "ioctl", []uint64{1, 0x5413}, allow},
		{"ioctl TCGETS high bits", "ioctl", []uint64{0, 0xffffffff_00005401}, allow},
		{"ioctl TIOCSTI", "ioctl", []uint64{0, tiocsti}, eperm},
		{"ioctl TIOCSTI high bit", "ioctl", []uint64{0, 1<<32 | tiocsti}, eperm},
		{"ioctl TIOCSTI all high", "ioctl", []uint64{0, 0xffffffff_00000000 | tiocsti}, eperm},
		{"ioctl TIOCLINUX", "ioctl", []uint64{0, tioclinux}, eperm},
		{"ioctl TIOCLINUX high", "ioctl", []uint64{0, 1<<40 | tioclinux}, eperm},
		{"personality 0", "personality", []uint64{0}, allow},
		{"personality query", "personality", []uint64{0xffffffff}, allow},
		{"personality PER_LINUX32", "personality", []uint64{perLinux32}, allow},
		{"personality ADDR_NO_RANDOMIZE", "personality", []uint64{addrNoRandomize}, eperm},
		{"personality READ_IMPLIES_EXEC", "personality", []uint64{readImpliesExec}, eperm},
	}
	for mname, m := range ms {
		for _, c := range cases {
			v := m.run(t, mustNr(t, c.nr), c.args...)
			switch {
			case c.want == allow && !v.allowed():
				t.Errorf("%s: %s: got %#x, want ALLOW", mname, c.name, uint32(v))
			case c.want != allow && v.errno() != c.want:
				t.Errorf("%s: %s: got %#x, want ERRNO(%d)", mname, c.name, uint32(v), c.want)
			}
		}
	}
}

func TestShippedProfileForeignABIs(t *testing.T) {
	_, ms := shippedMachines(t)
	for mname, m := range ms {
		// i386 via int 0x80: getpid is 20 there.
		if v := m.runArch(t, auditArchI386, 20, [6]uint64{}); v.allowed() || !v.kills() {
			t.Errorf("%s: i386 getpid: got %#x, want a kill", mname, uint32(v))
		}
		if v := m.runArch(t, auditArchI386, 1, [6]uint64{}); v.allowed() {
			t.Errorf("%s: i386 exit: got %#x, want denied", mname, uint32(v))
		}
		// x32: the x32 bit on an x86-64 arch value.
		for _, nr := range []uint32{x32Bit | nrGetpid, x32Bit | 0, x32Bit | 1, x32Bit | 512} {
			if v := m.run(t, nr); v.allowed() || !v.kills() {
				t.Errorf("%s: x32 nr %#x: got %#x, want a kill", mname, nr, uint32(v))
			}
		}
	}
}

func TestShippedProfileEveryNumber(t *testing.T) {
	p, ms := shippedMachines(t)
	allowedUncond := map[string]bool{}
	for _, r := range p.Syscalls {
		if r.Action == specs.ActAllow && len(r.Args) == 0 {
			for _, n := range r.Names {
				allowedUncond[n] = true
			}
		}
	}
	denied, err := Denied(p)
	if err != nil {
		t.Fatal(err)
	}
	byNr := map[int]Probe{}
	for _, d := range denied {
		byNr[d.Nr] = d
	}
	maxRuleNr := 0
	for _, r := range p.Syscalls {
		for _, n := range r.Names {
			maxRuleNr = max(maxRuleNr, int(mustNr(t, n)))
		}
	}
	for mname, m := range ms {
		for nr := 0; nr <= maxScanNr; nr++ {
			name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(libseccomp.ArchAMD64)
			v := m.run(t, uint32(nr))
			switch {
			case err != nil:
				// A hole in the table: denied like any unlisted number.
				want := errnoEPERM
				if nr > maxRuleNr {
					want = errnoENOSYS
				}
				if v.errno() != want {
					t.Errorf("%s: unnamed nr %d: got %#x, want ERRNO(%d)", mname, nr, uint32(v), want)
				}
			case allowedUncond[name]:
				if !v.allowed() {
					t.Errorf("%s: %s (%d): got %#x, want ALLOW", mname, name, nr, uint32(v))
				}
			default:
				d, ok := byNr[nr]
				if !ok {
					// Conditionally allowed; covered by the other tests.
					continue
				}
				if v2 := m.run(t, uint32(nr), d.Args[:]...); v2.errno() != d.Errno {
					t.Errorf("%s: Denied probe %s (%d): VM says %#x, probe says errno %d", mname, name, nr, uint32(v2), d.Errno)
				}
			}
		}
	}
}

func TestConditionalProbesAgainstShippedProfile(t *testing.T) {
	_, ms := shippedMachines(t)
	probes := ConditionalProbes()
	if len(probes) == 0 {
		t.Fatal("no conditional probes")
	}
	for _, pr := range probes {
		arch := libseccomp.ArchAMD64
		if pr.Nr&x32Bit != 0 {
			arch = libseccomp.ArchX32
		}
		nr, err := libseccomp.GetSyscallFromNameByArch(pr.Name, arch)
		if err != nil || int(nr) != pr.Nr {
			t.Errorf("probe %s: Nr %#x, libseccomp says %#x (%v)", pr.Name, pr.Nr, int(nr), err)
		}
		if (pr.Errno == 0) != pr.Sigsys || pr.Note == "" {
			t.Errorf("probe %+v: want exactly one of Errno and Sigsys, and a Note", pr)
		}
		for mname, m := range ms {
			v := m.runArch(t, auditArchX86_64, uint32(pr.Nr), pr.Args)
			if pr.Sigsys {
				if !v.kills() {
					t.Errorf("%s: %s: got %#x, want a kill", mname, pr.Note, uint32(v))
				}
			} else if v.errno() != pr.Errno {
				t.Errorf("%s: %s: got %#x, want ERRNO(%d)", mname, pr.Note, uint32(v), pr.Errno)
			}
		}
	}
}

// TestConditionalRulesDifferential compares the compiled filter with a
// direct reading of the profile (a syscall runs if any ALLOW rule matches)
// on many argument values for every conditionally allowed syscall.
func TestConditionalRulesDifferential(t *testing.T) {
	p, ms := shippedMachines(t)
	rules := map[string][]specs.LinuxSyscall{}
	for _, r := range p.Syscalls {
		if len(r.Args) > 0 {
			for _, n := range r.Names {
				rules[n] = append(rules[n], r)
			}
		}
	}
	if len(rules) == 0 {
		t.Fatal("no conditional rules")
	}
	// Interesting values: every rule constant, neighbours, single-bit and
	// two-bit flips of TIOCSTI/TIOCLINUX, and high-bit variants.
	var interesting []uint64
	for _, rs := range rules {
		for _, r := range rs {
			for _, a := range r.Args {
				for _, base := range []uint64{a.Value, a.ValueTwo, a.Value &^ a.ValueTwo} {
					interesting = append(interesting, base, base+1, base-1)
				}
			}
		}
	}
	for _, base := range []uint64{tiocsti, tioclinux} {
		for i := range 32 {
			interesting = append(interesting, base^1<<i)
			for j := i + 1; j < 32; j++ {
				interesting = append(interesting, base^1<<i^1<<j)
			}
		}
	}
	for _, v := range slices.Clone(interesting) {
		interesting = append(interesting, v|1<<32, v|0xffffffff_00000000, uint64(int64(int32(v))))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func() uint64 {
		switch rng.IntN(4) {
		case 0:
			return rng.Uint64()
		case 1:
			return uint64(rng.Uint32())
		default:
			return interesting[rng.IntN(len(interesting))]
		}
	}
	for name, rs := range rules {
		nr := mustNr(t, name)
		for i := range 20000 {
			var args [6]uint64
			for j := range args {
				if i%3 != 0 || j < 3 {
					args[j] = pick()
				}
			}
			want := slices.ContainsFunc(rs, func(r specs.LinuxSyscall) bool { return ruleMatches(r, args) })
			for mname, m := range ms {
				v := m.runArch(t, auditArchX86_64, nr, args)
				if v.allowed() != want || (!want && v.errno() != errnoEPERM) {
					t.Fatalf("%s: %s%x: VM %#x, profile says allowed=%v", mname, name, args, uint32(v), want)
				}
			}
		}
	}
	// The ioctl rules must allow every cmd except TIOCSTI and TIOCLINUX
	// in the low 32 bits: check all cmds sharing TIOCSTI's upper 16 bits
	// and a sweep of the rest.
	ioctlNr := mustNr(t, "ioctl")
	m := ms["runc"]
	check := func(cmd uint64) {
		want := uint32(cmd) != tiocsti && uint32(cmd) != tioclinux
		if got := m.run(t, ioctlNr, 0, cmd).allowed(); got != want {
			t.Fatalf("ioctl cmd %#x: allowed=%v, want %v", cmd, got, want)
		}
	}
	for lo := range uint64(1 << 16) {
		check(lo)
		check(0x8004_0000 | lo)
		check(0xdead_0000_0000_0000 | lo)
	}
	for range 200000 {
		check(rng.Uint64())
	}
}

// TestLibseccompPrecedence pins the libseccomp behaviour the package
// documentation describes and the profile is designed around.
func TestLibseccompPrecedence(t *testing.T) {
	ioctl := libseccomp.ScmpSyscall(mustNr(t, "ioctl"))
	stiCond, err := libseccomp.MakeCondition(1, libseccomp.CompareMaskedEqual, 0xffffffff, tiocsti)
	if err != nil {
		t.Fatal(err)
	}
	eacces := libseccomp.ActErrno.SetReturnCode(13)
	for _, allowFirst := range []bool{true, false} {
		f, err := libseccomp.NewFilter(libseccomp.ActErrno.SetReturnCode(1))
		if err != nil {
			t.Fatal(err)
		}
		addAllow := func() error { return f.AddRule(ioctl, libseccomp.ActAllow) }
		addDeny := func() error { return f.AddRuleConditional(ioctl, eacces, []libseccomp.ScmpCondition{stiCond}) }
		steps := []func() error{addAllow, addDeny}
		if !allowFirst {
			steps = []func() error{addDeny, addAllow}
		}
		for _, s := range steps {
			if err := s(); err != nil {
				t.Fatalf("allowFirst=%v: adding rule: %v", allowFirst, err)
			}
		}
		m := newMachine(t, exportBPF(t, f))
		f.Release()
		if v := m.run(t, uint32(ioctl), 0, tiocsti); !v.allowed() {
			t.Errorf("allowFirst=%v: libseccomp now lets the conditional ERRNO rule win (%#x); update the README", allowFirst, uint32(v))
		}
	}

	// And Validate refuses such a mix.
	p := loadShipped(t)
	eaccesRet := uint(13)
	p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{
		Names: []string{"ioctl"}, Action: specs.ActErrno, ErrnoRet: &eaccesRet,
		Args: []specs.LinuxSeccompArg{{Index: 1, Op: specs.OpMaskedEqual, Value: 0xffffffff, ValueTwo: tiocsti}},
	})
	if err := Validate(p); !errors.Is(err, ErrInvalidProfile) {
		t.Errorf("Validate(mixed ioctl actions) = %v, want ErrInvalidProfile", err)
	}
}
