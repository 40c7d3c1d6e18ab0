//go:build cgo && seccomp

package seccomp

import (
	"errors"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
)

// maxScanNr bounds the syscall numbers Denied asks libseccomp about.
// Native x86-64 syscall numbers are below 512; 512..547 are x32-only slots
// that are only reachable with the x32 bit, which libseccomp does not list
// for SCMP_ARCH_X86_64. 1023 leaves room for future syscalls.
const maxScanNr = 1023

// Validate checks that p is a profile jaild may apply. It fails closed,
// returning an error wrapping [ErrInvalidProfile] when:
//   - p is nil;
//   - defaultAction is not SCMP_ACT_ERRNO, SCMP_ACT_KILL,
//     SCMP_ACT_KILL_THREAD, SCMP_ACT_KILL_PROCESS or SCMP_ACT_TRAP (the
//     profile must be an allowlist);
//   - defaultErrnoRet/errnoRet is set for an action other than
//     SCMP_ACT_ERRNO, or is 0 or above 4095;
//   - architectures is not exactly [SCMP_ARCH_X86_64];
//   - flags is absent (runc would then add SECCOMP_FILTER_FLAG_SPEC_ALLOW)
//     or lists SECCOMP_FILTER_FLAG_SPEC_ALLOW or an unknown flag;
//   - listenerPath or listenerMetadata is set;
//   - a rule has no names, an empty or repeated name, an unknown action or
//     SCMP_ACT_TRACE/SCMP_ACT_NOTIFY, an unknown operator, an argument
//     index above 5, two conditions on one argument, a SCMP_CMP_MASKED_EQ
//     that always or never matches, or valueTwo with another operator;
//   - one syscall has rules with different actions (see the package
//     documentation on libseccomp precedence);
//   - any rule lets a [MustDeny] syscall run, or allows clone(2) without
//     masking every CLONE_NEW* flag to zero;
//   - a syscall name is unknown to libseccomp or does not exist in the
//     x86-64 ABI.
//
// Other libseccomp failures are returned wrapped as they are.
func Validate(p *specs.LinuxSeccomp) error {
	if err := validatePolicy(p); err != nil {
		return err
	}
	for i, r := range p.Syscalls {
		for _, name := range r.Names {
			if _, err := resolve(name); err != nil {
				return fmt.Errorf("syscalls[%d]: %w", i, err)
			}
		}
	}
	return nil
}

// resolve returns the x86-64 number of a syscall name.
func resolve(name string) (int, error) {
	nr, err := libseccomp.GetSyscallFromNameByArch(name, libseccomp.ArchAMD64)
	if errors.Is(err, libseccomp.ErrSyscallDoesNotExist) {
		maj, mnr, mic := libseccomp.GetLibraryVersion()
		return 0, invalid("syscall %q is unknown to libseccomp %d.%d.%d", name, maj, mnr, mic)
	}
	if err != nil {
		return 0, fmt.Errorf("resolving syscall %q: %w", name, err)
	}
	if nr < 0 {
		// libseccomp's pseudo-syscall numbers: the name exists on some
		// other architecture only (e.g. "stat64", "socketcall").
		return 0, invalid("syscall %q does not exist in the x86-64 ABI", name)
	}
	return int(nr), nil
}

// deniedArgs overrides the all-zero arguments of a Denied probe where
// zero arguments would have a side effect should the filter fail to block
// the call.
var deniedArgs = map[string]struct {
	args [6]uint64
	note string
}{
	// ptrace(PTRACE_TRACEME) would make the prober a tracee of its
	// parent; PTRACE_ATTACH to pid 0 fails with ESRCH instead.
	"ptrace": {[6]uint64{16}, "ptrace(PTRACE_ATTACH, 0): unfiltered: ESRCH"},
}

// Denied returns one [Probe] for every x86-64 syscall known to libseccomp
// (numbers 0..1023) that p neither allows unconditionally nor allows under
// some condition, in syscall-number order. Nothing is left out; numbers
// libseccomp has no name for (holes in the table) are not syscalls and are
// not listed. Args are zero except where deniedArgs documents otherwise.
//
// The expected outcome mirrors what runc v1.5 loads: the errno of the
// syscall's deny rule if its condition matches Args, else the default
// action; and, as runc prepends a stub returning ENOSYS for syscall numbers
// above the highest one the profile names (unless defaultErrnoRet is
// already ENOSYS), Errno 38 for those. KILL and TRAP outcomes set Sigsys.
//
// Denied returns Validate's error if p is invalid.
func Denied(p *specs.LinuxSeccomp) ([]Probe, error) {
	if err := Validate(p); err != nil {
		return nil, err
	}
	byName := map[string][]specs.LinuxSyscall{}
	maxRuleNr := 0
	for _, r := range p.Syscalls {
		for _, name := range r.Names {
			byName[name] = append(byName[name], r)
			nr, err := resolve(name)
			if err != nil {
				return nil, err
			}
			maxRuleNr = max(maxRuleNr, nr)
		}
	}
	enosysStub := maxRuleNr > 0 &&
		(p.DefaultErrnoRet == nil || *p.DefaultErrnoRet != errnoENOSYS)
	def := effective(p.DefaultAction, p.DefaultErrnoRet)

	var probes []Probe
	for nr := 0; nr <= maxScanNr; nr++ {
		name, err := libseccomp.ScmpSyscall(nr).GetNameByArch(libseccomp.ArchAMD64)
		if errors.Is(err, libseccomp.ErrSyscallDoesNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("resolving x86-64 syscall %d: %w", nr, err)
		}
		rules := byName[name]
		allowed := false
		for _, r := range rules {
			allowed = allowed || runsSyscall(r.Action)
		}
		if allowed {
			continue
		}
		probe := Probe{Name: name, Nr: nr}
		note := ""
		if o, ok := deniedArgs[name]; ok {
			probe.Args, note = o.args, o.note+"; "
		}
		act, why := def, "not allowed: default action"
		if enosysStub && nr > maxRuleNr {
			act = effectiveAction{action: specs.ActErrno, errno: errnoENOSYS}
			why = fmt.Sprintf("above the highest syscall the profile names (%d): runc's ENOSYS stub", maxRuleNr)
		} else {
			for _, r := range rules {
				if ruleMatches(r, probe.Args) {
					act, why = effective(r.Action, r.ErrnoRet), "explicit rule "+effective(r.Action, r.ErrnoRet).String()
					break
				}
			}
		}
		if act.action == specs.ActErrno {
			probe.Errno = int(act.errno)
		} else {
			probe.Sigsys = true
		}
		probe.Note = note + why
		probes = append(probes, probe)
	}
	return probes, nil
}

// ruleMatches reports whether every condition of r holds for args, with
// libseccomp's semantics (unsigned 64-bit comparisons; for
// SCMP_CMP_MASKED_EQ, Value is the mask and ValueTwo the expected value).
// Validate guarantees at most one condition per argument, so runc's
// splitting of same-argument conditions into separate rules never applies.
func ruleMatches(r specs.LinuxSyscall, args [6]uint64) bool {
	for _, a := range r.Args {
		v := args[a.Index]
		var ok bool
		switch a.Op {
		case specs.OpNotEqual:
			ok = v != a.Value
		case specs.OpLessThan:
			ok = v < a.Value
		case specs.OpLessEqual:
			ok = v <= a.Value
		case specs.OpEqualTo:
			ok = v == a.Value
		case specs.OpGreaterEqual:
			ok = v >= a.Value
		case specs.OpGreaterThan:
			ok = v > a.Value
		case specs.OpMaskedEqual:
			ok = v&a.Value == a.ValueTwo
		}
		if !ok {
			return false
		}
	}
	return true
}
