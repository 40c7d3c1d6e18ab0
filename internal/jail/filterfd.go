package jail

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/opencontainers/runc/libcontainer/configs"
	lcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"golang.org/x/sys/unix"
)

// A jail's seccomp filter compiled once.
//
// libcontainer compiles the profile with libseccomp in every jail's init
// (~1.6 ms of CPU, and libseccomp's Go side). Where the jail's first
// process is the image's init (/opt/jaild/init, which runs Python), the
// engine instead hands that init the program libcontainer would have
// loaded, on an fd, and the init loads it before it starts anything
// (rootfs/runner/init.c, --seccomp-fd). The program is not rebuilt here:
// at start the engine has libcontainer load the profile into a helper
// process of its own and reads the loaded program back from the kernel
// (PTRACE_SECCOMP_GET_FILTER), so it is exactly libcontainer's (libseccomp's
// output with libcontainer's ENOSYS patch). Where that cannot be done, or
// for a jail whose first process is not the image's init, libcontainer
// loads the filter itself, as before.

// filterExportArg makes the daemon's binary the helper that loads the
// filter (see exportFilter).
const filterExportArg = "jaild-seccomp-export"

// maxFilterInsns is the kernel's bound on a filter's length (BPF_MAXINSNS).
const maxFilterInsns = 4096

// filterExportTimeout bounds the helper's whole life (it takes ~7 ms).
const filterExportTimeout = 10 * time.Second

// exportFilter is the helper: it reads a libcontainer seccomp config
// (JSON) on stdin, loads it on its own thread as libcontainer loads it in a
// jail, writes that thread's id on stdout and waits for stdin to close.
// It never returns.
func exportFilter() {
	runtime.LockOSThread()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "seccomp export:", err)
		os.Exit(1)
	}
	var cfg configs.Seccomp
	dec := json.NewDecoder(io.LimitReader(os.Stdin, 1<<20))
	if err := dec.Decode(&cfg); err != nil {
		fail(err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail(err)
	}
	if _, err := lcseccomp.InitSeccomp(&cfg); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stdout, "%d\n", unix.Gettid())
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// filterProgram returns the program libcontainer loads for cfg, as the
// kernel holds it: 8 bytes per instruction (struct sock_filter). It fails
// where the profile asks for filter flags the image's init does not pass
// (libcontainer would load with them), or where the helper cannot be
// traced.
func filterProgram(cfg *configs.Seccomp) ([]byte, error) {
	if len(cfg.Flags) > 0 || cfg.ListenerPath != "" {
		return nil, errors.New("the profile has flags or a listener")
	}
	for _, call := range cfg.Syscalls {
		if call.Action == configs.Notify || call.Action == configs.Log {
			return nil, errors.New("the profile notifies or logs")
		}
	}
	if cfg.DefaultAction == configs.Notify || cfg.DefaultAction == configs.Log {
		return nil, errors.New("the profile notifies or logs")
	}
	in, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	// ptrace requests must come from the thread that attached.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command("/proc/self/exe", filterExportArg)
	cmd.Env = []string{}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// A helper that stalls must not hold the daemon's start: killed, it
	// fails the reads and waits below, and libcontainer loads the filter.
	stall := time.AfterFunc(filterExportTimeout, func() { _ = cmd.Process.Kill() })
	defer stall.Stop()
	waited := false
	defer func() {
		_ = cmd.Process.Kill()
		stdin.Close()
		if !waited {
			_ = cmd.Wait()
		}
	}()
	if _, err := stdin.Write(in); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(io.LimitReader(stdout, 32)).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait() // stderr is whole only then
		waited = true
		return nil, fmt.Errorf("helper: %v %s", err, strings.TrimSpace(stderr.String()))
	}
	tid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || tid <= 0 {
		return nil, fmt.Errorf("helper said %q", line)
	}
	return tracedFilter(tid)
}

// tracedFilter attaches to thread tid (which must be stopped or stoppable
// by the caller's thread, and not traced by another), reads its only
// seccomp filter and detaches. It fails unless the thread has exactly one
// filter.
func tracedFilter(tid int) ([]byte, error) {
	if err := unix.PtraceSeize(tid); err != nil {
		return nil, fmt.Errorf("ptrace seize: %w", err)
	}
	defer func() { _ = unix.PtraceDetach(tid) }()
	if err := unix.PtraceInterrupt(tid); err != nil {
		return nil, fmt.Errorf("ptrace interrupt: %w", err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
		return nil, fmt.Errorf("wait for the traced thread: %w", err)
	}
	if !ws.Stopped() {
		return nil, fmt.Errorf("traced thread not stopped: %v", ws)
	}
	getFilter := func(index int, buf []byte) (int, error) {
		var p unsafe.Pointer
		if len(buf) > 0 {
			p = unsafe.Pointer(&buf[0])
		}
		n, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(tid), uintptr(index), uintptr(p), 0, 0)
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	}
	n, err := getFilter(0, nil)
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	if n <= 0 || n > maxFilterInsns {
		return nil, fmt.Errorf("seccomp filter of %d instructions", n)
	}
	if _, err := getFilter(1, nil); !errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("more than one seccomp filter (%v)", err)
	}
	prog := make([]byte, n*8)
	m, err := getFilter(0, prog)
	if err != nil || m != n {
		return nil, fmt.Errorf("seccomp filter read: %d of %d instructions: %v", m, n, err)
	}
	return prog, nil
}

// FeatureSeccompFD is the runner feature (rootfs.Manifest.RunnerFeatures)
// of an image whose init loads a filter given with --seccomp-fd.
const FeatureSeccompFD = "seccomp_fd"

// filterFile returns the engine's program in a sealed memfd, for a jail's
// init to read: nothing in the jail can change it.
func (e *Engine) filterFile() (*os.File, error) {
	fd, err := unix.MemfdCreate("jaild-seccomp", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("seccomp program: %w", err)
	}
	f := os.NewFile(uintptr(fd), "jaild-seccomp")
	if _, err := f.Write(e.filterProg); err != nil {
		f.Close()
		return nil, fmt.Errorf("seccomp program: %w", err)
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, seals); err != nil {
		f.Close()
		return nil, fmt.Errorf("seccomp program: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, fmt.Errorf("seccomp program: %w", err)
	}
	return f, nil
}
