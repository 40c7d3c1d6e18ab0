package jail

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// Further processes in a live jail (Exec): a session's commands. Each may
// have a cgroup of its own beneath the jail's (Process.Group), which holds
// it and everything it starts, whatever they do with their parents or
// sessions; KillGroup ends them all and removes the cgroup. The jail's
// limits (memory, pids) are the parent cgroup's and bind the groups too.

// Proc is a further process started in a live jail by Exec.
type Proc struct {
	pid     int  // on the host: the program's, or its wrapper's
	wrapped bool // pid is the image's init, the program its child
	done    chan struct{}
	exit    Exit
}

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exit is how the process ended; valid once Done is closed.
func (p *Proc) Exit() Exit {
	<-p.done
	return p.exit
}

// Signal sends sig to the program (not to a wrapper of it).
func (p *Proc) Signal(sig unix.Signal) error {
	select {
	case <-p.done:
		return errors.New("the process has ended")
	default:
	}
	pid := p.pid
	if p.wrapped {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.pid, p.pid))
		if err != nil {
			return errors.New("the process has ended")
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return errors.New("the process has ended")
		}
		if pid, err = strconv.Atoi(f[0]); err != nil {
			return errors.New("the process has ended")
		}
	}
	return unix.Kill(pid, sig)
}

// JailPid is the program's pid inside the jail (its pid namespace's), or
// 0 once it has ended.
func (p *Proc) JailPid() int {
	pid := p.pid
	if p.wrapped {
		// The wrapper forks the program at once.
		for i := 0; ; i++ {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p.pid, p.pid))
			f := strings.Fields(string(b))
			if err == nil && len(f) > 0 {
				pid, _ = strconv.Atoi(f[0])
				break
			}
			if err != nil || i == 200 {
				return 0
			}
			time.Sleep(time.Millisecond)
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				return 0
			}
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
}

// groupName is what Process.Group may be.
var groupName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Exec starts a further process in the started jail, as runc exec does:
// in the jail's namespaces and cgroups (or its Group beneath them), as
// UID:GID in its Cwd, with the jail's rlimits, and (like the first
// process) no capabilities and no_new_privs. It ends with the jail at the
// latest.
//
// In a jail whose init loaded the seccomp filter (Spec.InitLoadsFilter)
// libcontainer would load none, so the process is the image's init once
// more, given the filter on fd 3: it loads it and runs p.Args as its
// child, ending as that child does; its exit record (on fd 4, which the
// child inherits) says which signal killed it. Such a process takes no
// ExtraFiles, and its Args[0] must be a path.
func (j *Jail) Exec(p Process) (_ *Proc, retErr error) {
	j.mu.Lock()
	started, l := j.started, j.limits
	j.mu.Unlock()
	if !started {
		return nil, fmt.Errorf("jail %s: Exec before Start", j.id)
	}
	select {
	case <-j.done:
		return nil, fmt.Errorf("jail %s: its first process has ended", j.id)
	default:
	}
	if p.Group != "" && !groupName.MatchString(p.Group) {
		return nil, fmt.Errorf("jail %s: bad group name %q", j.id, p.Group)
	}
	var records *os.File // the wrapper's exit record, read end
	if j.filterByInit {
		if len(p.ExtraFiles) > 0 || len(p.Args) == 0 || !strings.HasPrefix(p.Args[0], "/") {
			return nil, fmt.Errorf("jail %s: Exec of %q in a jail whose init loads its filter", j.id, p.Args)
		}
		f, err := j.e.filterFile()
		if err != nil {
			return nil, fmt.Errorf("exec in jail: %w", err)
		}
		defer f.Close()
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		defer w.Close()
		defer func() {
			if retErr != nil {
				r.Close()
			}
		}()
		records = r
		p.ExtraFiles = []*os.File{f, w}
		p.Args = append([]string{j.Manifest().Init, "--seccomp-fd", "3"}, p.Args...)
	}
	proc := p.process(l)
	proc.NoNewPrivileges = ptr(true)
	proc.Capabilities = &configs.Capabilities{}
	if p.Group != "" {
		if err := j.makeGroup(p.Group); err != nil {
			return nil, fmt.Errorf("exec in jail: %w", err)
		}
		proc.SubCgroupPaths = map[string]string{"": p.Group}
	}
	if err := j.c.Run(proc); err != nil {
		if p.Group != "" {
			j.removeGroup(p.Group)
		}
		return nil, fmt.Errorf("exec in jail: %w", err)
	}
	pr := &Proc{done: make(chan struct{}), wrapped: records != nil}
	pr.pid, _ = proc.Pid()
	var tail *tailBuf
	var tailDone chan struct{}
	if records != nil {
		tail, tailDone = &tailBuf{max: 256}, make(chan struct{})
		go func() {
			defer close(tailDone)
			buf := make([]byte, 512)
			for {
				n, err := records.Read(buf)
				tail.Write(buf[:n])
				if err != nil {
					return
				}
			}
		}()
	}
	go func() {
		ps, err := proc.Wait()
		pr.exit = exitOf(ps, err)
		if records != nil {
			// What the wrapper wrote before it ended is in the pipe; a
			// descendant may hold the pipe open, so not waited for EOF.
			_ = records.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			<-tailDone
			records.Close()
			if sig := wrapperSignal(pr.exit, tail.Bytes()); sig > 0 {
				pr.exit = Exit{Code: -1, Signal: sig}
			}
		}
		close(pr.done)
	}()
	return pr, nil
}

// wrapperSignal is the signal that killed a wrapped program: the wrapper
// ended with 128+N and its last line is its exit record for N. The bytes
// are the jail's (the program could write there too): parsed strictly.
func wrapperSignal(x Exit, b []byte) int {
	if x.Code <= 128 || x.Code > 128+64 {
		return 0
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	want := fmt.Sprintf(`{"type": "exit", "signal": %d}`, x.Code-128)
	if string(lines[len(lines)-1]) != want {
		return 0
	}
	return x.Code - 128
}

// tailBuf keeps the last max bytes written to it.
type tailBuf struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuf) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuf) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.b...)
}

// groupPaths are the group's directories: one per hierarchy on cgroup
// v1, one on v2.
func (j *Jail) groupPaths(name string) map[string]string {
	j.mu.Lock()
	paths := j.cgroups
	j.mu.Unlock()
	out := map[string]string{}
	if cgroups.IsCgroup2UnifiedMode() {
		if d := paths[""]; d != "" {
			out[""] = filepath.Join(d, name)
		}
		return out
	}
	for ctrl, d := range paths {
		if d != "" {
			out[ctrl] = filepath.Join(d, name)
		}
	}
	return out
}

func (j *Jail) makeGroup(name string) error {
	paths := j.groupPaths(name)
	if len(paths) == 0 {
		return errors.New("the jail has no cgroup")
	}
	for ctrl, d := range paths {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			j.removeGroup(name)
			return err
		}
		if ctrl == "cpuset" {
			// A v1 cpuset starts empty: no task can join it until it has
			// its parent's CPUs and memory nodes.
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(filepath.Dir(d), f))
				if err == nil {
					err = cgroups.WriteFile(d, f, strings.TrimSpace(string(v)))
				}
				if err != nil {
					j.removeGroup(name)
					return err
				}
			}
		}
	}
	return nil
}

// removeGroup removes the group's directories; each must be empty of
// processes.
func (j *Jail) removeGroup(name string) {
	for _, d := range j.groupPaths(name) {
		for i := 0; ; i++ {
			err := unix.Rmdir(d)
			if err == nil || errors.Is(err, unix.ENOENT) || i == 20 {
				break
			}
			time.Sleep(5 * time.Millisecond) // EBUSY: a task is still exiting
		}
	}
}

// GroupPids are the host pids of the group's processes.
func (j *Jail) GroupPids(name string) ([]int, error) {
	paths := j.groupPaths(name)
	d := paths["pids"]
	if cgroups.IsCgroup2UnifiedMode() {
		d = paths[""]
	}
	if d == "" {
		return nil, errors.New("the jail has no cgroup")
	}
	return cgroups.GetPids(d)
}

// GroupCPU is the CPU time the group's processes used.
func (j *Jail) GroupCPU(name string) time.Duration {
	paths := j.groupPaths(name)
	if cgroups.IsCgroup2UnifiedMode() {
		b, err := os.ReadFile(filepath.Join(paths[""], "cpu.stat"))
		if err != nil {
			return 0
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return time.Duration(n) * time.Microsecond
			}
		}
		return 0
	}
	b, err := os.ReadFile(filepath.Join(paths["cpuacct"], "cpuacct.usage"))
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(n)
}

// EndGroup kills every process of the group, waits until they are gone
// (a few seconds at most), removes it and returns the CPU time its
// processes used. On cgroup v2 cgroup.kill does it
// at once; on v1 the group is frozen first, so that nothing forks between
// the listing and the kill. The jail must not be frozen (a frozen task
// cannot die).
func (j *Jail) EndGroup(name string) time.Duration {
	paths := j.groupPaths(name)
	if cgroups.IsCgroup2UnifiedMode() {
		d := paths[""]
		j.e.waitEmptyIn(j.id, d, func() ([]int, error) { return cgroups.GetPids(d) })
	} else {
		frozen := paths["freezer"] != "" && freezeCgroup(map[string]string{"freezer": paths["freezer"]}, true) == nil
		if pids, err := j.GroupPids(name); err == nil {
			for _, pid := range pids {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		if frozen {
			_ = freezeCgroup(map[string]string{"freezer": paths["freezer"]}, false)
		}
		j.e.waitEmptyIn(j.id, "", func() ([]int, error) { return j.GroupPids(name) })
	}
	cpu := j.GroupCPU(name)
	j.removeGroup(name)
	return cpu
}

// DialLoopback connects to 127.0.0.1:port inside the jail's own network
// namespace: the socket is made there (on a thread that enters the
// namespace for that alone), so it reaches only what listens in the jail,
// never the host's loopback or another jail's. The jail gets no new
// network. A port nobody listens on is ECONNREFUSED at once.
func (j *Jail) DialLoopback(port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d out of range", port)
	}
	st, err := j.c.State()
	if err != nil || st.InitProcessPid <= 0 {
		return nil, errors.New("the jail is not running")
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", st.InitProcessPid))
	if err != nil {
		return nil, errors.New("the jail is not running")
	}
	defer ns.Close()
	type result struct {
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, err}
			return
		}
		defer self.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{-1, err}
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err == nil {
			// Loopback: the handshake is the kernel's, done or refused at once.
			if err = unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
				unix.Close(fd)
				fd = -1
			}
		}
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else the thread stays locked and ends with this goroutine
		ch <- result{fd, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, r.err
	}
	f := os.NewFile(uintptr(r.fd), "jail-loopback")
	defer f.Close()
	return net.FileConn(f)
}
