package run

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/workspace"
)

// In-jail paths of the runner's world.
const (
	figuresDir = jail.MetaDir + "/figures" // where the runner saves figures
	pythonPath = "/usr/bin/python3"
)

// started is a jail whose first process runs, with the host's ends of its
// pipes.
type started struct {
	j *jail.Jail
	p *pipes
}

// Destroy destroys the jail and closes the pipes.
func (st *started) Destroy() {
	st.j.Destroy()
	st.p.closeAll()
}

// start creates a jail of the image named image, writes files into its workspace and starts its
// first process: the Python runner, waiting for its job on fd 3, or
// command. A warm runner imports its own lazy modules and preimport, says
// ready, and waits. control gives the jail's init its control and status
// pipes, which a session needs (see session.go). On error nothing is left
// behind.
func (s *Service) start(image string, l jail.Limits, network *jail.Network, files []File, command []string, env map[string]string, warm bool, preimport []string, control bool) (_ *started, retErr error) {
	// The runner's jail has the image's init as its first process, which
	// loads the filter compiled once; a command runs as the first process.
	j, err := s.e.Create(jail.Spec{Image: image, Limits: l, Network: network, InitLoadsFilter: command == nil})
	if err != nil {
		return nil, err
	}
	st := &started{j: j}
	defer func() {
		if retErr != nil {
			j.Destroy()
			if st.p != nil {
				st.p.closeAll()
			}
		}
	}()
	runner := command == nil
	if runner {
		// The jail's tmpfs is fresh and nothing runs in it yet.
		dir := filepath.Join(j.MetaHostDir(), "figures")
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.Lchown(dir, j.HostUID(), j.HostGID()); err != nil {
			return nil, err
		}
	}
	if err := writeFiles(j, files, false); err != nil {
		return nil, err
	}
	if st.p, err = newPipes(runner, runner && control); err != nil {
		return nil, err
	}
	args := command
	envList := environ(l, env)
	if runner {
		m := j.Manifest()
		args = append([]string{m.Init}, runnerArgs(m.Runner)...)
		if warm {
			envList = append(envList, "JAILD_PREIMPORT="+strings.Join(preimport, ","))
		}
	}
	proc := jail.Process{Args: args, Env: envList, Stdin: st.p.stdinR, Stdout: st.p.stdoutW, Stderr: st.p.stderrW}
	if runner {
		proc.ExtraFiles = []*os.File{st.p.jobR, st.p.recW}
		if st.p.ctlR != nil {
			proc.ExtraFiles = append(proc.ExtraFiles, st.p.ctlR, st.p.statW)
		}
	}
	if err := j.Start(proc); err != nil {
		return nil, err
	}
	st.p.closeChildEnds()
	return st, nil
}

// writeFiles writes a request's files into j's workspace, owned by the
// jail's user; replace (a session's later calls) replaces regular files
// already there.
func writeFiles(j *jail.Jail, files []File, replace bool) error {
	if len(files) == 0 {
		return nil
	}
	d, err := workspace.Open(j.WorkDir())
	if err != nil {
		return err
	}
	defer d.Close()
	for _, f := range files {
		put := d.Write
		if replace {
			put = d.Replace
		}
		if err := put(f.Path, f.Reader(), j.HostUID(), j.HostGID()); err != nil {
			return err
		}
	}
	return nil
}

// runnerArgs starts the runner (a clean /dir/name.py, rootfs checks) as a
// module imported from its directory, as a script's directory would be
// sys.path[0]: imported, it runs from the bytecode compiled into the image;
// a script would be compiled at every start (~5 ms).
func runnerArgs(runner string) []string {
	dir, file := filepath.Split(runner)
	mod := strings.TrimSuffix(file, ".py")
	return []string{pythonPath, "-s", "-B", "-c",
		fmt.Sprintf("import sys; sys.path[0] = '%s'; import %s; %s.main()", filepath.Clean(dir), mod, mod)}
}

// environ builds a jail's environment: the allowlist below plus the
// caller's validated variables; nothing of the daemon's own environment.
func environ(l jail.Limits, extra map[string]string) []string {
	threads := min(runtime.NumCPU(), max(1, int(l.Pids/8)), 4)
	n := strconv.Itoa(threads)
	env := map[string]string{
		"PATH":                   "/usr/local/bin:/usr/bin:/bin",
		"HOME":                   "/tmp",
		"LANG":                   "C.UTF-8",
		"LC_ALL":                 "C.UTF-8",
		"TZ":                     "UTC",
		"MPLBACKEND":             "Agg",
		"MPLCONFIGDIR":           "/tmp/.matplotlib",
		"OPENBLAS_NUM_THREADS":   n,
		"OMP_NUM_THREADS":        n,
		"MKL_NUM_THREADS":        n,
		"NUMEXPR_NUM_THREADS":    n,
		"VECLIB_MAXIMUM_THREADS": n,
	}
	for k, v := range extra {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// pipes are the only files a jail's first process inherits: stdio and,
// for the runner, the job (fd 3) and records (fd 4) channels, and for a
// jail that may become a session its init's control (fd 5) and status
// (fd 6) channels.
type pipes struct {
	stdinR, stdinW, stdoutR, stdoutW, stderrR, stderrW *os.File
	jobR, jobW, recR, recW                             *os.File
	ctlR, ctlW, statR, statW                           *os.File
}

func (p *pipes) all() []*os.File {
	return []*os.File{p.stdinR, p.stdinW, p.stdoutR, p.stdoutW, p.stderrR, p.stderrW, p.jobR, p.jobW, p.recR, p.recW, p.ctlR, p.ctlW, p.statR, p.statW}
}

func newPipes(runner, control bool) (_ *pipes, retErr error) {
	p := &pipes{}
	defer func() {
		if retErr != nil {
			p.closeAll()
		}
	}()
	var err error
	mk := func(r, w **os.File) {
		if err == nil {
			*r, *w, err = os.Pipe()
		}
	}
	mk(&p.stdinR, &p.stdinW)
	mk(&p.stdoutR, &p.stdoutW)
	mk(&p.stderrR, &p.stderrW)
	if runner {
		mk(&p.jobR, &p.jobW)
		mk(&p.recR, &p.recW)
	}
	if control {
		mk(&p.ctlR, &p.ctlW)
		mk(&p.statR, &p.statW)
	}
	return p, err
}

// closeChildEnds closes our copies of the ends the jail holds, so that
// readers see EOF when the jail's processes are gone.
func (p *pipes) closeChildEnds() {
	for _, f := range []*os.File{p.stdinR, p.stdoutW, p.stderrW, p.jobR, p.recW, p.ctlR, p.statW} {
		if f != nil {
			f.Close()
		}
	}
}

func (p *pipes) closeAll() {
	for _, f := range p.all() {
		if f != nil {
			f.Close()
		}
	}
}

// feed writes data to w and closes it. A jail that exits without reading
// makes the write fail with EPIPE, which is fine.
func feed(w *os.File, data []byte) {
	if len(data) > 0 {
		_, _ = w.Write(data)
	}
	_ = w.Close()
}
