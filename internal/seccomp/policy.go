package seccomp

import (
	"fmt"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// defaultActions are the default actions an allowlist may use. Allow, log,
// trace and notify would make the profile a denylist (or hand decisions to
// an agent jaild does not run).
var defaultActions = map[specs.LinuxSeccompAction]bool{
	specs.ActErrno:       true,
	specs.ActKill:        true,
	specs.ActKillThread:  true,
	specs.ActKillProcess: true,
	specs.ActTrap:        true,
}

// ruleActions are the actions a rule may use. SCMP_ACT_TRACE and
// SCMP_ACT_NOTIFY are refused: a jail has neither a ptrace tracer nor a
// seccomp notify agent.
var ruleActions = map[specs.LinuxSeccompAction]bool{
	specs.ActAllow:       true,
	specs.ActLog:         true,
	specs.ActErrno:       true,
	specs.ActKill:        true,
	specs.ActKillThread:  true,
	specs.ActKillProcess: true,
	specs.ActTrap:        true,
}

// ops are the comparison operators runc understands.
var ops = map[specs.LinuxSeccompOperator]bool{
	specs.OpNotEqual:     true,
	specs.OpLessThan:     true,
	specs.OpLessEqual:    true,
	specs.OpEqualTo:      true,
	specs.OpGreaterEqual: true,
	specs.OpGreaterThan:  true,
	specs.OpMaskedEqual:  true,
}

// allowedFlags are the filter flags a profile may request.
// SECCOMP_FILTER_FLAG_SPEC_ALLOW is refused: it turns off the Speculative
// Store Bypass mitigation for the untrusted code.
var allowedFlags = map[specs.LinuxSeccompFlag]bool{
	"SECCOMP_FILTER_FLAG_TSYNC":            true,
	specs.LinuxSeccompFlagLog:              true,
	specs.LinuxSeccompFlagWaitKillableRecv: true,
}

// runsSyscall reports whether a rule action lets the syscall execute.
func runsSyscall(a specs.LinuxSeccompAction) bool {
	return a == specs.ActAllow || a == specs.ActLog
}

// effectiveAction is an action together with the errno it returns, in the
// form runc hands to libseccomp (ERRNO without errnoRet means EPERM, KILL
// means KILL_THREAD).
type effectiveAction struct {
	action specs.LinuxSeccompAction
	errno  uint
}

func effective(a specs.LinuxSeccompAction, errnoRet *uint) effectiveAction {
	switch a {
	case specs.ActErrno:
		e := uint(errnoEPERM)
		if errnoRet != nil {
			e = *errnoRet
		}
		return effectiveAction{action: a, errno: e}
	case specs.ActKill:
		return effectiveAction{action: specs.ActKillThread}
	}
	return effectiveAction{action: a}
}

func (e effectiveAction) String() string {
	if e.action == specs.ActErrno {
		return fmt.Sprintf("%s(%d)", e.action, e.errno)
	}
	return string(e.action)
}

// invalid returns an error wrapping ErrInvalidProfile.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidProfile, fmt.Sprintf(format, args...))
}

// validatePolicy checks everything Validate checks except what needs
// libseccomp. Errors wrap ErrInvalidProfile.
func validatePolicy(p *specs.LinuxSeccomp) error {
	if p == nil {
		return invalid("no profile")
	}
	if !defaultActions[p.DefaultAction] {
		return invalid("defaultAction %q is not allowed: an allowlist needs SCMP_ACT_ERRNO, SCMP_ACT_KILL* or SCMP_ACT_TRAP", p.DefaultAction)
	}
	if err := checkErrnoRet("defaultErrnoRet", p.DefaultAction, p.DefaultErrnoRet); err != nil {
		return err
	}
	if len(p.Architectures) != 1 || p.Architectures[0] != specs.ArchX86_64 {
		return invalid("architectures must be exactly [%s] (no x86 or x32 ABI), got %v", specs.ArchX86_64, p.Architectures)
	}
	if p.Flags == nil {
		// runc treats an absent flags list as [SECCOMP_FILTER_FLAG_SPEC_ALLOW].
		return invalid(`flags must be present (use "flags": []): without it runc adds SECCOMP_FILTER_FLAG_SPEC_ALLOW, disabling the Speculative Store Bypass mitigation`)
	}
	for _, f := range p.Flags {
		if !allowedFlags[f] {
			return invalid("flag %q is not allowed", f)
		}
	}
	if p.ListenerPath != "" || p.ListenerMetadata != "" {
		return invalid("listenerPath/listenerMetadata are not supported: jails have no seccomp notify agent")
	}

	actions := map[string]effectiveAction{}
	for i, r := range p.Syscalls {
		if err := checkRule(r); err != nil {
			return fmt.Errorf("syscalls[%d]: %w", i, err)
		}
		act := effective(r.Action, r.ErrnoRet)
		for _, name := range r.Names {
			prev, seen := actions[name]
			if seen && prev != act {
				// See the package documentation: libseccomp's choice
				// between them is not the one a reader expects.
				return invalid("syscalls[%d]: syscall %q has rules with different actions (%s and %s); libseccomp resolves such mixes surprisingly (an unconditional rule silently wins), so give each syscall one action and let the default action deny the rest", i, name, prev, act)
			}
			actions[name] = act
		}
		if runsSyscall(r.Action) {
			for _, name := range r.Names {
				if slices.Contains(mustDeny, name) {
					return invalid("syscalls[%d]: syscall %q must always be denied, but the rule allows it", i, name)
				}
				if name == "clone" {
					if err := checkCloneRule(r); err != nil {
						return fmt.Errorf("syscalls[%d]: %w", i, err)
					}
				}
			}
		}
	}
	return nil
}

// checkErrnoRet checks an errnoRet/defaultErrnoRet field against its
// action.
func checkErrnoRet(field string, a specs.LinuxSeccompAction, v *uint) error {
	if v == nil {
		return nil
	}
	if a != specs.ActErrno {
		return invalid("%s is only meaningful with SCMP_ACT_ERRNO, not %s", field, a)
	}
	if *v == 0 {
		return invalid("%s 0 would make denied syscalls appear to succeed", field)
	}
	if *v > maxErrno {
		return invalid("%s %d is above the largest errno %d", field, *v, maxErrno)
	}
	return nil
}

// checkRule checks one rule on its own.
func checkRule(r specs.LinuxSyscall) error {
	if len(r.Names) == 0 {
		return invalid("rule has no syscall names")
	}
	seen := make(map[string]bool, len(r.Names))
	for _, name := range r.Names {
		if name == "" {
			return invalid("empty syscall name")
		}
		if seen[name] {
			return invalid("syscall %q listed twice in one rule", name)
		}
		seen[name] = true
	}
	if !ruleActions[r.Action] {
		switch r.Action {
		case specs.ActTrace, specs.ActNotify:
			return invalid("action %q is not allowed: jails have no tracer or notify agent", r.Action)
		}
		return invalid("unknown or unsupported action %q", r.Action)
	}
	if err := checkErrnoRet("errnoRet", r.Action, r.ErrnoRet); err != nil {
		return err
	}
	var argSeen [6]bool
	for _, a := range r.Args {
		if a.Index > 5 {
			return invalid("argument index %d out of range 0..5", a.Index)
		}
		if argSeen[a.Index] {
			// runc splits such a rule into one rule per condition (OR),
			// while a reader would expect AND.
			return invalid("two conditions on argument %d in one rule (runc would OR them); write separate rules", a.Index)
		}
		argSeen[a.Index] = true
		if !ops[a.Op] {
			return invalid("unknown comparison operator %q", a.Op)
		}
		if a.Op == specs.OpMaskedEqual {
			if a.Value == 0 {
				return invalid("SCMP_CMP_MASKED_EQ with mask 0 always matches (libseccomp turns the rule unconditional)")
			}
			if a.ValueTwo&^a.Value != 0 {
				return invalid("SCMP_CMP_MASKED_EQ value %#x has bits outside mask %#x and can never match", a.ValueTwo, a.Value)
			}
		} else if a.ValueTwo != 0 {
			return invalid("valueTwo is only used by SCMP_CMP_MASKED_EQ, not %s", a.Op)
		}
	}
	return nil
}

// checkCloneRule requires a rule allowing clone(2) to forbid every
// namespace flag: an arg0 SCMP_CMP_MASKED_EQ whose mask covers all of
// CLONE_NEW* and whose expected value has none of them.
func checkCloneRule(r specs.LinuxSyscall) error {
	for _, a := range r.Args {
		if a.Index == 0 && a.Op == specs.OpMaskedEqual &&
			a.Value&nsCloneFlags == nsCloneFlags && a.ValueTwo&nsCloneFlags == 0 {
			return nil
		}
	}
	return invalid("clone may only be allowed with an arg0 SCMP_CMP_MASKED_EQ condition that masks all CLONE_NEW* flags (%#x) to 0", nsCloneFlags)
}
