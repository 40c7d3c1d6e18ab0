// Package seccomp loads, validates and describes the seccomp profile that
// jaild applies to every jail.
//
// A profile is an OCI runtime-spec LinuxSeccomp document (the linux.seccomp
// object of config.json), normally seccomp-profiles/default.json. This
// package never installs a filter itself: runc's libcontainer converts the
// returned *specs.LinuxSeccomp into a libseccomp filter when the jail
// starts. What this package adds is a fail-closed gate in front of that:
//
//   - [Parse] and [Load] decode strictly (unknown or duplicate keys,
//     trailing data and oversized input are errors) and then [Validate].
//   - [Validate] refuses anything that is not an allowlist for the x86-64
//     ABI only, anything that allows a syscall on the [MustDeny] list, rule
//     shapes whose libseccomp meaning is surprising (see below) and syscall
//     names libseccomp does not know.
//   - [Denied] and [ConditionalProbes] describe, as concrete [Probe]s, the
//     calls a jail must refuse, for the jail's integration tests.
//
// # libseccomp rule precedence
//
// libseccomp (verified with 2.5.4 by this package's tests) does not give a
// syscall's conditional rules precedence over an unconditional rule for the
// same syscall: with "ALLOW ioctl" plus "ERRNO ioctl if cmd == TIOCSTI" the
// conditional rule is silently dropped, in either insertion order, and
// TIOCSTI is allowed. Between two conditional rules with different actions
// the winner depends on libseccomp's internal ordering of the comparison
// nodes (sometimes on insertion order, sometimes not, even differently for
// the high and low 32-bit halves of one argument). Validate therefore
// requires every syscall's rules to share one action: a profile is a union
// of ALLOW rules, everything else falls to the default action, and no
// precedence question ever arises.
//
// # Build tags
//
// Checking syscall names and enumerating syscalls needs libseccomp, so the
// full implementation is built only with cgo and the "seccomp" build tag
// (the same tag runc's libcontainer uses). Without them, [Validate],
// [Parse], [Load] and [Denied] always fail with [ErrNoSeccompSupport], so a
// daemon built without seccomp refuses to start jails.
package seccomp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// MaxProfileSize is the largest profile, in bytes, that [Parse] and [Load]
// accept.
const MaxProfileSize = 1 << 20

// ErrInvalidProfile is wrapped by every error that [Parse], [Load] and
// [Validate] return because the profile itself is malformed or breaks
// jaild's seccomp policy.
var ErrInvalidProfile = errors.New("invalid seccomp profile")

// ErrNoSeccompSupport is wrapped by the errors that [Parse], [Load],
// [Validate] and [Denied] return when the binary was built without cgo or
// without the "seccomp" build tag.
var ErrNoSeccompSupport = errors.New("built without seccomp support (needs cgo and -tags seccomp)")

// Probe is one system call that a jail running the profile must refuse, in
// a form an integration test can issue verbatim with syscall(2), for
// instance through Python's ctypes: syscall(Nr, Args[0], ..., Args[5]).
type Probe struct {
	// Name is libseccomp's name for the syscall in the x86-64 ABI.
	Name string
	// Nr is the number to pass in rax. It includes the x32 bit
	// (0x40000000) for x32 probes.
	Nr int
	// Args are the six syscall arguments, as raw 64-bit register values.
	Args [6]uint64
	// Errno is the errno the call must fail with (-1 return); 0 when
	// Sigsys is set.
	Errno int
	// Sigsys is set when the call must not return at all: the filter kills
	// the calling thread with SIGSYS (bad architecture, or a KILL/TRAP
	// rule). Such probes must run in a throw-away child process.
	Sigsys bool
	// Note says why these arguments were chosen and what an unfiltered
	// kernel would answer, so that a matching errno proves the decision
	// was the filter's.
	Note string
}

// Errno values used by the shipped profile.
const (
	errnoEPERM  = 1
	errnoENOSYS = 38
)

// maxErrno is the largest errno a seccomp ERRNO action can return
// (the kernel clamps SECCOMP_RET_DATA to MAX_ERRNO).
const maxErrno = 4095

// nsCloneFlags is every CLONE_NEW* flag that clone(2) accepts:
// CLONE_NEWNS|CLONE_NEWCGROUP|CLONE_NEWUTS|CLONE_NEWIPC|CLONE_NEWUSER|
// CLONE_NEWPID|CLONE_NEWNET. A rule allowing clone must mask all of them to
// zero. CLONE_NEWTIME (0x80) is not required: in clone(2) that bit is part
// of the exit-signal byte and cannot request a time namespace (the shipped
// profile masks it anyway, which only forbids exit signals >= 128).
const nsCloneFlags = 0x7E020000

// mustDeny lists syscalls that no profile may allow, whatever its
// conditions: each one either breaks out of or reconfigures the jail, or
// is a large kernel attack surface that untrusted Python never needs.
// Every name exists in the x86-64 ABI (checked by the tests).
var mustDeny = []string{
	"acct", "add_key", "bpf", "chroot", "clock_settime", "clone3",
	"create_module", "delete_module", "fanotify_init", "finit_module",
	"fsconfig", "fsmount", "fsopen", "fspick", "init_module", "io_uring_enter",
	"io_uring_register", "io_uring_setup", "ioperm", "iopl", "kcmp",
	"kexec_file_load", "kexec_load", "keyctl", "lookup_dcookie", "modify_ldt",
	"mount", "mount_setattr", "move_mount", "name_to_handle_at", "nfsservctl",
	"open_by_handle_at", "open_tree", "perf_event_open", "pidfd_getfd",
	"pivot_root", "process_madvise", "process_vm_readv", "process_vm_writev",
	"ptrace", "quotactl", "quotactl_fd", "reboot", "request_key",
	"setdomainname", "sethostname", "setns", "settimeofday", "swapoff",
	"swapon", "syslog", "umount2", "unshare", "uselib", "userfaultfd",
	"vhangup",
}

// MustDeny returns, sorted, the syscalls that [Validate] refuses to see
// allowed by any rule. The caller owns the returned slice.
func MustDeny() []string {
	return slices.Clone(mustDeny)
}

// Load reads the profile at path and returns it parsed and validated, as
// [Parse] does. Errors opening or reading the file are returned wrapped
// (errors.Is(err, fs.ErrNotExist) works); a path that is not a regular
// file, or a file larger than [MaxProfileSize], yields an error wrapping
// [ErrInvalidProfile]; otherwise see [Parse].
func Load(path string) (*specs.LinuxSeccomp, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("seccomp profile %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrInvalidProfile, path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxProfileSize+1))
	if err != nil {
		return nil, fmt.Errorf("seccomp profile %s: %w", path, err)
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile %s: %w", path, err)
	}
	return p, nil
}

// Parse decodes a LinuxSeccomp JSON document and validates it with
// [Validate]. Decoding is strict: input over [MaxProfileSize], unknown
// keys, keys differing from the OCI spelling only by case, duplicate keys,
// and anything but whitespace after the document are all errors wrapping
// [ErrInvalidProfile]. A decoded profile that fails validation yields
// Validate's error (which wraps [ErrInvalidProfile], or
// [ErrNoSeccompSupport] in a build without seccomp support). On error the
// returned profile is nil.
func Parse(data []byte) (*specs.LinuxSeccomp, error) {
	if len(data) > MaxProfileSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidProfile, MaxProfileSize)
	}
	if err := checkKeys(data); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidProfile, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p specs.LinuxSeccomp
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("%w: decoding JSON: %w", ErrInvalidProfile, err)
	}
	if tok, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("%w: trailing data after the JSON document: %w", ErrInvalidProfile, err)
		}
		return nil, fmt.Errorf("%w: trailing data after the JSON document (%v)", ErrInvalidProfile, tok)
	}
	if err := Validate(&p); err != nil {
		return nil, err
	}
	return &p, nil
}

// knownKeys is every object key of the OCI LinuxSeccomp document, spelt
// exactly. encoding/json matches keys case-insensitively and keeps the last
// of duplicated keys; checkKeys closes both gaps so that what a reviewer
// reads in the file is what gets enforced.
var knownKeys = map[string]bool{
	// LinuxSeccomp
	"defaultAction": true, "defaultErrnoRet": true, "architectures": true,
	"flags": true, "listenerPath": true, "listenerMetadata": true,
	"syscalls": true,
	// LinuxSyscall
	"names": true, "action": true, "errnoRet": true, "args": true,
	// LinuxSeccompArg
	"index": true, "value": true, "valueTwo": true, "op": true,
}

// keyFrame is one open JSON object or array while checkKeys walks a
// document.
type keyFrame struct {
	object    bool
	expectKey bool
	seen      map[string]bool
}

// checkKeys walks the JSON tokens of data and rejects duplicate keys within
// an object and keys not spelt exactly as in the OCI spec. Syntax errors
// are left to the decoder, which reports them with better positions.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var stack []*keyFrame
	// valueDone records that the value of the innermost object's current
	// key is complete, so the next token there is a key again.
	valueDone := func() {
		if n := len(stack); n > 0 && stack[n-1].object {
			stack[n-1].expectKey = true
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			// io.EOF, or a syntax error the real decode reports.
			return nil
		}
		if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expectKey {
			top := stack[n-1]
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:n-1]
				valueDone()
			} else {
				key, ok := tok.(string)
				if !ok {
					return nil
				}
				if !knownKeys[key] {
					return fmt.Errorf("unknown key %q (keys are case-sensitive)", key)
				}
				if top.seen[key] {
					return fmt.Errorf("duplicate key %q", key)
				}
				top.seen[key] = true
				top.expectKey = false
				continue
			}
		} else {
			switch tok {
			case json.Delim('{'):
				stack = append(stack, &keyFrame{object: true, expectKey: true, seen: map[string]bool{}})
			case json.Delim('['):
				stack = append(stack, &keyFrame{})
			case json.Delim(']'):
				if len(stack) > 0 {
					stack = stack[:len(stack)-1]
				}
				valueDone()
			default:
				valueDone()
			}
		}
		if len(stack) == 0 {
			// First complete document; trailing data is the decoder's job.
			return nil
		}
	}
}
