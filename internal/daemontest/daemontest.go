// Package daemontest starts real jaild processes for the root test suites
// (tests/) and the benchmark (internal/bench): a directory of the
// daemon's own, a configuration written from options, the process with its
// output kept, a client on its socket, and a stop that waits for the
// process and checks that nothing stays mounted beneath the directory
// before removing it. Product code other than internal/bench must not
// import it.
package daemontest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ErrExited is the class of Start's error when the process exits before
// it serves.
var ErrExited = errors.New("jaild exited before serving")

// Options describe a daemon to start. Binary, Image and Profile are
// required; everything else has a default.
type Options struct {
	Binary  string // the jaild binary
	Image   string // the configuration's image (an image directory)
	Profile string // the configuration's seccomp_profile

	// Name prefixes the cgroup name, which is Name-<directory's base
	// name>: daemons running at once must not share one (each one's
	// start-up sweep would take the others' jails for leftovers).
	// Default "test".
	Name string
	// DirPrefix names the temporary directory (default "jd"); DirMode is
	// its mode (default 0755: jails and unprivileged callers reach into it).
	DirPrefix string
	DirMode   os.FileMode
	// Config is TOML written after the keys the launcher sets (socket,
	// run_dir, cgroup_name, image, seccomp_profile): top-level keys
	// first, then any tables. The launcher then adds [files] dir (in the
	// daemon's directory) and [pool] size and plain_size = Pool, followed
	// by PoolConfig's keys.
	Config     string
	Pool       int
	PoolConfig string
	// Tune, when set, rewrites the whole configuration last.
	Tune func(cfg string) string

	Flags []string // after --config FILE
	Env   []string // added to the test's environment
	// Wrap is a command the daemon is started under (nsenter ...,
	// systemd-socket-activate ...): the daemon's argv follows it.
	Wrap []string
	// Socket is where clients reach the daemon; default the socket the
	// configuration names (a socket activator listens elsewhere).
	Socket string
	// Ready says whether the daemon serves; default: its socket accepts a
	// connection. ReadyWithin bounds the wait (default 60 s).
	Ready       func(d *Daemon) bool
	ReadyWithin time.Duration
	// Conns is the client's MaxIdleConnsPerHost (0: net/http's default).
	Conns int
}

// Daemon is a jaild process (or one to start) with its own directory.
type Daemon struct {
	Dir    string // its directory: jaild.toml, s.sock, run, files
	Socket string
	Config string // the path of its configuration
	Client *http.Client
	Log    *Log // the output of every start
	Opts   Options

	mu      sync.Mutex
	Cmd     *exec.Cmd // the current process; nil before Start
	exited  chan struct{}
	exitErr error
	stopped bool
}

// Log is a daemon's output, safe to read while it is written.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Tail is the last n bytes of the output, for failure messages.
func (l *Log) Tail(n int) string {
	out := l.String()
	if len(out) > n {
		out = "…" + out[len(out)-n:]
	}
	return out
}

// Prepare makes the daemon's directory and writes its configuration; it
// does not start it.
func Prepare(o Options) (*Daemon, error) {
	if o.Binary == "" || o.Image == "" || o.Profile == "" {
		return nil, errors.New("daemontest: Binary, Image and Profile are required")
	}
	if o.Name == "" {
		o.Name = "test"
	}
	if o.DirPrefix == "" {
		o.DirPrefix = "jd"
	}
	if o.DirMode == 0 {
		o.DirMode = 0o755
	}
	if o.ReadyWithin == 0 {
		o.ReadyWithin = 60 * time.Second
	}
	dir, err := os.MkdirTemp("", o.DirPrefix) // short: a socket path has at most 107 bytes
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, o.DirMode); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	sock := filepath.Join(dir, "s.sock")
	cfg := fmt.Sprintf("socket = %q\nrun_dir = %q\ncgroup_name = %q\nimage = %q\nseccomp_profile = %q\n",
		sock, filepath.Join(dir, "run"), o.Name+"-"+filepath.Base(dir), o.Image, o.Profile) + o.Config +
		fmt.Sprintf("[files]\ndir = %q\n", filepath.Join(dir, "files")) +
		fmt.Sprintf("[pool]\nsize = %d\nplain_size = %d\n", o.Pool, o.Pool) + o.PoolConfig
	if o.Tune != nil {
		cfg = o.Tune(cfg)
	}
	// Each daemon's paused sessions in its own directory (a daemon sweeps
	// its checkpoint directory at start).
	cp := fmt.Sprintf("checkpoint_dir = %q\n", filepath.Join(dir, "checkpoints"))
	switch {
	case strings.Contains(cfg, "\n[sessions]\n"):
		cfg = strings.Replace(cfg, "\n[sessions]\n", "\n[sessions]\n"+cp, 1)
	case strings.Contains(cfg, "\n[files]\n"):
		// Before the [files] table this package writes: not at the end,
		// where a test's [images.*] tables (which it rewrites) may be.
		cfg = strings.Replace(cfg, "\n[files]\n", "\n[sessions]\n"+cp+"[files]\n", 1)
	default:
		cfg += "[sessions]\n" + cp
	}
	d := &Daemon{Dir: dir, Socket: sock, Config: filepath.Join(dir, "jaild.toml"), Log: &Log{}, Opts: o}
	if o.Socket != "" {
		d.Socket = o.Socket
	}
	if err := os.WriteFile(d.Config, []byte(cfg), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	d.Client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
		},
		MaxIdleConnsPerHost: o.Conns,
	}}
	return d, nil
}

// Start prepares a daemon and starts it; the caller stops it.
func Start(o Options) (*Daemon, error) {
	d, err := Prepare(o)
	if err != nil {
		return nil, err
	}
	if err := d.Start(); err != nil {
		_ = d.Remove()
		return nil, err
	}
	return d, nil
}

// New starts a daemon whose stop is t's cleanup: a failed stop or
// anything left mounted beneath its directory fails t.
func New(t testing.TB, o Options) *Daemon {
	t.Helper()
	d, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// EditConfig rewrites the configuration with f; a restart reads it.
func (d *Daemon) EditConfig(f func(string) string) error {
	b, err := os.ReadFile(d.Config)
	if err != nil {
		return err
	}
	return os.WriteFile(d.Config, []byte(f(string(b))), 0o644)
}

// Start runs the daemon on its configuration (again, after a stop or a
// kill) and waits until it serves, or fails with its output if it exits
// first or does not come up in time (then it is killed).
func (d *Daemon) Start() error {
	argv := append(append(append([]string{}, d.Opts.Wrap...), d.Opts.Binary, "--config", d.Config), d.Opts.Flags...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), d.Opts.Env...)
	cmd.Stdout, cmd.Stderr = d.Log, d.Log
	d.Client.CloseIdleConnections() // to a process that has gone
	fmt.Fprintf(d.Log, "--- start %s\n", time.Now().Format(time.RFC3339Nano))
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	d.mu.Lock()
	d.Cmd, d.exited, d.exitErr, d.stopped = cmd, exited, nil, false
	d.mu.Unlock()
	go func() {
		err := cmd.Wait()
		d.mu.Lock()
		d.exitErr = err
		d.mu.Unlock()
		close(exited)
	}()
	ready := d.Opts.Ready
	if ready == nil {
		ready = Dials
	}
	for deadline := time.Now().Add(d.Opts.ReadyWithin); !ready(d); time.Sleep(50 * time.Millisecond) {
		select {
		case <-exited:
			return fmt.Errorf("%w (%v):\n%s", ErrExited, d.ExitErr(), d.Log.Tail(8000))
		default:
		}
		if time.Now().After(deadline) {
			d.Kill()
			return fmt.Errorf("jaild did not come up within %v:\n%s", d.Opts.ReadyWithin, d.Log.Tail(8000))
		}
	}
	return nil
}

// Dials is the default readiness: the socket accepts a connection.
func Dials(d *Daemon) bool {
	c, err := net.Dial("unix", d.Socket)
	if err == nil {
		c.Close()
	}
	return err == nil
}

// SocketExists is readiness for a socket another process listens on (a
// socket activator): the socket is there, nothing has connected.
func SocketExists(d *Daemon) bool {
	_, err := os.Stat(d.Socket)
	return err == nil
}

// Running reports whether the current process has not exited.
func (d *Daemon) Running() bool {
	d.mu.Lock()
	exited := d.exited
	d.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Exited is closed when the current process has exited.
func (d *Daemon) Exited() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.exited
}

// ExitErr is the current process's exit (nil while it runs).
func (d *Daemon) ExitErr() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.exitErr
}

// Pid is the current process's pid.
func (d *Daemon) Pid() int { return d.Cmd.Process.Pid }

// Signal sends sig to the current process.
func (d *Daemon) Signal(sig os.Signal) error { return d.Cmd.Process.Signal(sig) }

// Kill kills the current process and waits for it.
func (d *Daemon) Kill() {
	if d.Running() {
		_ = d.Cmd.Process.Kill()
		<-d.Exited()
	}
}

// WaitExit waits for the current process to exit and returns its exit
// (what exec.Cmd.Wait would).
func (d *Daemon) WaitExit() error {
	<-d.Exited()
	return d.ExitErr()
}

// Wait waits (up to limit) for the current process to exit and returns
// how it exited, with its output; past limit it is killed.
func (d *Daemon) Wait(limit time.Duration) error {
	select {
	case <-d.Exited():
		if err := d.ExitErr(); err != nil {
			return fmt.Errorf("jaild exited with %v:\n%s", err, d.Log.Tail(8000))
		}
		return nil
	case <-time.After(limit):
		d.Kill()
		return fmt.Errorf("jaild did not exit within %v:\n%s", limit, d.Log.Tail(8000))
	}
}

// StopProcess sends sig and waits (a minute at most) for the exit; it
// reports a failed exit only if this signal caused it: a process that
// had already ended was the test's to check.
func (d *Daemon) StopProcess(sig os.Signal) error {
	if !d.Running() {
		return nil
	}
	_ = d.Signal(sig)
	return d.Wait(60 * time.Second)
}

// Stop stops the daemon (SIGINT) and removes its directory; a second
// Stop does nothing. An error if it does not exit cleanly or leaves
// anything mounted beneath its directory (then the directory stays).
func (d *Daemon) Stop() error {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return nil
	}
	d.stopped = true
	d.mu.Unlock()
	return errors.Join(d.StopProcess(os.Interrupt), d.Remove())
}

// Remove removes the daemon's directory, unless something is still
// mounted beneath it (an error then: the daemon left it).
func (d *Daemon) Remove() error {
	if left := MountsUnder("self", d.Dir); len(left) > 0 {
		return fmt.Errorf("mounts left beneath %s: %v", d.Dir, left)
	}
	return os.RemoveAll(d.Dir)
}

// MountsUnder lists the mount points beneath dir in process pid's
// ("self" for the caller's) mount namespace.
func MountsUnder(pid, dir string) []string {
	b, _ := os.ReadFile("/proc/" + pid + "/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			if p := UnescapeMount(f[4]); strings.HasPrefix(p, dir+"/") {
				out = append(out, p)
			}
		}
	}
	return out
}

// UnescapeMount undoes mountinfo's octal escapes (\040 for a space).
func UnescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Get is GET http://jaild<path> on the daemon's socket, its body read.
func (d *Daemon) Get(path string) (int, []byte, error) {
	resp, err := d.Client.Get("http://jaild" + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
