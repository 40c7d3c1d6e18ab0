// Package tests drives real jaild processes (built from this tree) over
// their Unix socket: the API contract, errors, admission, systemd socket
// activation, shutdown, and the README's examples. They need root and a
// built rootfs (`make rootfs`); without them they fail, never skip.
package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var (
	binDir   string // built jaild and jailctl
	imageDir string
	profile  string
	shared   *daemon // one daemon most tests share
)

func TestMain(m *testing.M) { os.Exit(setup(m)) }

func setup(m *testing.M) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "tests/ start real jaild daemons and need root (run `make test` as root)")
		return 1
	}
	imageDir = os.Getenv("JAILD_IMAGE_DIR")
	if imageDir == "" {
		imageDir = "/var/cache/jaild/rootfs/current"
	}
	profile, _ = filepath.Abs("../seccomp-profiles/default.json")
	var err error
	if binDir, err = os.MkdirTemp("", "jaild-bin-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(binDir)
	build := exec.Command("go", "build", "-trimpath", "-tags", "seccomp", "-o", binDir+"/", "../cmd/jaild", "../cmd/jailctl")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		return 1
	}
	shared, err = startDaemon("", "socket_mode = \"0666\"\n") // unprivileged callers too
	if err != nil {
		fmt.Fprintln(os.Stderr, "start jaild:", err)
		return 1
	}
	code := m.Run()
	if err := shared.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop jaild:", err)
		code = 1
	}
	return code
}

// daemon is a jaild process on a temporary socket.
type daemon struct {
	dir    string
	socket string
	cmd    *exec.Cmd
	log    *bytes.Buffer
	client *http.Client
	// inject adds its fields to every execute request sent by call with a
	// map body (the hostile suite with egress: "network": "internet").
	inject map[string]any
}

// baseConfig is the test daemons' configuration; extra is appended.
const baseConfig = `
socket_group = ""
host_id_base = 1300000000
max_body_bytes = 4194304
read_timeout = "5s"
shutdown_grace = "20s"
[admission]
max_concurrent = 2
queue_size = 2
queue_wait = "1s"
rate_per_minute = 6000
burst = 1000
daily_quota = 3
`

func writeConfig(dir, extra string) (string, error) { return writeConfigPool(dir, extra, 0) }

func writeConfigPool(dir, extra string, pool int) (string, error) {
	// extra holds top-level keys, so it goes before baseConfig's sections.
	// Daemons running at once must not share a cgroup name: each one's
	// start-up sweep would take the others' jails for leftovers.
	// Nor may they flip the host's favordynmods under each other (each
	// clears what it set when it stops); internal/jail's tests and the VM
	// suite cover it.
	cfg := fmt.Sprintf("socket = %q\nrun_dir = %q\ncgroup_name = %q\nimage = %q\nseccomp_profile = %q\ncgroup_favordynmods = false\n",
		filepath.Join(dir, "s.sock"), filepath.Join(dir, "run"), "test-"+filepath.Base(dir), imageDir, profile) + extra + baseConfig +
		// The daemon's file store lives in its directory, never in
		// /var/lib/jaild; a test that tunes [files] edits this section.
		fmt.Sprintf("[files]\ndir = %q\n", filepath.Join(dir, "files")) +
		fmt.Sprintf("[pool]\nsize = %d\nplain_size = %d\n", pool, pool)
	p := filepath.Join(dir, "jaild.toml")
	return p, os.WriteFile(p, []byte(cfg), 0o644)
}

// startDaemon starts jaild with the test config (plus extra top-level
// TOML keys) and waits for its socket. activator, if set, starts it under
// systemd-socket-activate on that socket instead: jaild then starts on the
// first connection.
func startDaemon(activator string, extra string) (*daemon, error) {
	return startDaemonPool(activator, extra, 0)
}

// startDaemonPool is startDaemon with a warm pool of pool preloaded and
// pool plain jails (the other test daemons have none, so that their jails
// are exactly their runs').
func startDaemonPool(activator string, extra string, pool int) (*daemon, error) {
	dir, err := os.MkdirTemp("", "jd")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil { // unprivileged test callers reach the socket
		return nil, err
	}
	cfgPath, err := writeConfigPool(dir, extra, pool)
	if err != nil {
		return nil, err
	}
	d := &daemon{dir: dir, socket: filepath.Join(dir, "s.sock"), log: &bytes.Buffer{}}
	argv := []string{filepath.Join(binDir, "jaild"), "--config", cfgPath}
	if activator != "" {
		argv = append([]string{"systemd-socket-activate", "-l", activator}, argv...)
		d.socket = activator
	}
	d.cmd = exec.Command(argv[0], argv[1:]...)
	d.cmd.Stderr = d.log
	d.cmd.Stdout = d.log
	if err := d.cmd.Start(); err != nil {
		return nil, err
	}
	d.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", d.socket)
		},
	}}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(d.socket); err == nil {
			return d, nil
		}
		if d.cmd.ProcessState != nil || time.Now().After(deadline) {
			d.cmd.Process.Kill()
			return nil, fmt.Errorf("daemon did not come up: %s", d.log.String())
		}
	}
}

func (d *daemon) stop() error {
	_ = d.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		os.RemoveAll(d.dir)
		if err != nil {
			return fmt.Errorf("%v\n%s", err, d.log.String())
		}
		return nil
	case <-time.After(60 * time.Second):
		d.cmd.Process.Kill()
		return fmt.Errorf("daemon did not stop\n%s", d.log.String())
	}
}

// call sends a request and decodes the JSON answer into out (if non-nil).
func (d *daemon) call(t *testing.T, method, path string, body any, out any) (int, http.Header) {
	t.Helper()
	if m, ok := body.(map[string]any); ok && d.inject != nil && path == "/v1/execute" {
		withNet := map[string]any{}
		for k, v := range d.inject {
			withNet[k] = v
		}
		for k, v := range m {
			withNet[k] = v
		}
		body = withNet
	}
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, "http://jaild"+path, rd)
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: status %d, body is not JSON: %v\n%s", method, path, resp.StatusCode, err, data)
		}
	}
	return resp.StatusCode, resp.Header
}
