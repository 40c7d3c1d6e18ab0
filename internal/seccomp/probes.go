package seccomp

// x86-64 syscall numbers used by ConditionalProbes. The tests check them
// against libseccomp.
const (
	nrIoctl       = 16
	nrGetpid      = 39
	nrSocket      = 41
	nrSocketpair  = 53
	nrClone       = 56
	nrPersonality = 135
	nrUnshare     = 272

	// x32Bit marks a syscall number as x32 ABI (__X32_SYSCALL_BIT).
	x32Bit = 0x40000000
)

// Constants for the probe arguments (linux/sched.h, linux/socket.h,
// asm-generic/ioctls.h, linux/personality.h).
const (
	cloneThread    = 0x00010000
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000

	afInet      = 2
	afInet6     = 10
	afKey       = 15
	afNetlink   = 16
	afPacket    = 17
	afRDS       = 21
	afCAN       = 29
	afTIPC      = 30
	afBluetooth = 31
	afALG       = 38
	afVsock     = 40
	afSMC       = 43
	afXDP       = 44

	sockStream = 1
	// sockBadType is not a valid socket type (>= SOCK_MAX), so an
	// unfiltered kernel fails socket(2) with EINVAL before creating
	// anything; the filter does not look at the type.
	sockBadType = 15

	netlinkSockDiag = 4
	netlinkAudit    = 9
	netlinkUevent   = 15

	tiocsti   = 0x5412
	tioclinux = 0x541C

	addrNoRandomize = 0x0040000
	readImpliesExec = 0x0400000
	perLinux32      = 0x0008

	// badFD is -1 as a register value: ioctl(2) on it fails with EBADF.
	badFD = ^uint64(0)
)

// ConditionalProbes returns the argument-dependent cases a jail running
// jaild's policy (seccomp-profiles/default.json) must refuse, each with
// concrete arguments and the exact expected outcome. Unlike [Denied] it
// does not read a profile: these are requirements, and this package's
// tests check that the shipped profile meets them.
//
// Arguments are chosen so that, were the filter not in place, the kernel
// would answer differently (EINVAL, EBADF, EFAULT, or success) and do no
// harm where it can: a clone(2) probe adds CLONE_THREAD without
// CLONE_SIGHAND, so an unfiltered kernel refuses it with EINVAL instead of
// creating a process in new namespaces. Only the personality(2) probes
// cannot be made harmless (an unfiltered kernel applies the persona to the
// caller), and the x32 probe has Sigsys set; run probes in a throw-away
// child process. The returned slice is freshly allocated.
//
// It is longer than a function should be because it is a table: one
// entry per argument condition of the profile, which reads best whole.
func ConditionalProbes() []Probe {
	var ps []Probe
	cloneFlags := []struct {
		name string
		flag uint64
	}{
		{"CLONE_NEWNS", cloneNewNS},
		{"CLONE_NEWCGROUP", cloneNewCgroup},
		{"CLONE_NEWUTS", cloneNewUTS},
		{"CLONE_NEWIPC", cloneNewIPC},
		{"CLONE_NEWUSER", cloneNewUser},
		{"CLONE_NEWPID", cloneNewPID},
		{"CLONE_NEWNET", cloneNewNet},
	}
	for _, f := range cloneFlags {
		ps = append(ps, Probe{
			Name: "clone", Nr: nrClone,
			Args:  [6]uint64{f.flag | cloneThread},
			Errno: errnoEPERM,
			Note:  "clone(" + f.name + "|CLONE_THREAD): namespace flags are masked out; unfiltered: EINVAL (CLONE_THREAD without CLONE_SIGHAND)",
		})
	}
	ps = append(ps, Probe{
		Name: "clone", Nr: nrClone,
		Args:  [6]uint64{0xffffffff_00000000 | cloneNewUser | cloneThread},
		Errno: errnoEPERM,
		Note:  "clone(CLONE_NEWUSER|CLONE_THREAD) with the upper 32 bits set; unfiltered: EINVAL",
	})
	ps = append(ps, Probe{
		Name: "unshare", Nr: nrUnshare,
		Args:  [6]uint64{cloneNewUser | 0x1},
		Errno: errnoEPERM,
		Note:  "unshare(CLONE_NEWUSER|0x1): unshare is never allowed; unfiltered: EINVAL (0x1 is not an unshare flag)",
	})

	sockets := []struct {
		name          string
		family, proto uint64
	}{
		{"AF_ALG", afALG, 0},
		{"AF_VSOCK", afVsock, 0},
		{"AF_PACKET", afPacket, 0},
		{"AF_KEY", afKey, 0},
		{"AF_RDS", afRDS, 0},
		{"AF_CAN", afCAN, 0},
		{"AF_TIPC", afTIPC, 0},
		{"AF_BLUETOOTH", afBluetooth, 0},
		{"AF_SMC", afSMC, 0},
		{"AF_XDP", afXDP, 0},
		{"AF_NETLINK/NETLINK_SOCK_DIAG", afNetlink, netlinkSockDiag},
		{"AF_NETLINK/NETLINK_AUDIT", afNetlink, netlinkAudit},
		{"AF_NETLINK/NETLINK_KOBJECT_UEVENT", afNetlink, netlinkUevent},
	}
	for _, s := range sockets {
		ps = append(ps, Probe{
			Name: "socket", Nr: nrSocket,
			Args:  [6]uint64{s.family, sockBadType, s.proto},
			Errno: errnoEPERM,
			Note:  "socket(" + s.name + ", 15, ...): family/protocol not allowed; unfiltered: EINVAL (15 is not a socket type), nothing created",
		})
	}
	for _, s := range []struct {
		name   string
		family uint64
	}{{"AF_INET", afInet}, {"AF_INET6", afInet6}, {"AF_NETLINK", afNetlink}, {"AF_VSOCK", afVsock}} {
		ps = append(ps, Probe{
			Name: "socketpair", Nr: nrSocketpair,
			Args:  [6]uint64{s.family, sockStream, 0, 0},
			Errno: errnoEPERM,
			Note:  "socketpair(" + s.name + ", SOCK_STREAM, 0, NULL): only AF_UNIX pairs are allowed; unfiltered: EFAULT (NULL fd array)",
		})
	}

	for _, c := range []struct {
		name string
		cmd  uint64
	}{
		{"TIOCSTI", tiocsti},
		{"TIOCSTI|1<<32", 1<<32 | tiocsti},
		{"TIOCSTI|0xffffffff<<32", 0xffffffff_00000000 | tiocsti},
		{"TIOCLINUX", tioclinux},
		{"TIOCLINUX|1<<32", 1<<32 | tioclinux},
	} {
		ps = append(ps, Probe{
			Name: "ioctl", Nr: nrIoctl,
			Args:  [6]uint64{badFD, c.cmd, 0},
			Errno: errnoEPERM,
			Note:  "ioctl(-1, " + c.name + ", 0): the kernel truncates cmd to 32 bits, so high bits must not help; unfiltered: EBADF",
		})
	}

	for _, pr := range []struct {
		name    string
		persona uint64
	}{
		{"ADDR_NO_RANDOMIZE", addrNoRandomize},
		{"READ_IMPLIES_EXEC", readImpliesExec},
		{"PER_LINUX32|ADDR_NO_RANDOMIZE", perLinux32 | addrNoRandomize},
		{"ADDR_NO_RANDOMIZE|1<<32", 1<<32 | addrNoRandomize},
	} {
		ps = append(ps, Probe{
			Name: "personality", Nr: nrPersonality,
			Args:  [6]uint64{pr.persona},
			Errno: errnoEPERM,
			Note:  "personality(" + pr.name + "): only 0, 8, 0x20000, 0x20008 and the 0xffffffff query are allowed; unfiltered: succeeds and changes the caller's persona",
		})
	}

	ps = append(ps, Probe{
		Name: "getpid", Nr: x32Bit | nrGetpid,
		Sigsys: true,
		Note:   "x32 ABI getpid (nr|0x40000000): only the x86-64 ABI is allowed, libseccomp's bad-architecture action kills the thread with SIGSYS; unfiltered: the pid, or ENOSYS on kernels without x32",
	})
	return ps
}
