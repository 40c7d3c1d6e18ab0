// Package tests drives real jaild processes (built from this tree) over
// their Unix socket: the API contract, errors, admission, systemd socket
// activation, shutdown, and the README's examples. They need root and a
// built rootfs (`make rootfs`); without them they fail, never skip.
package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
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
	shared, err = newDaemon(daemontest.Options{Config: "socket_mode = \"0666\"\n"}) // unprivileged callers too
	if err != nil {
		fmt.Fprintln(os.Stderr, "start jaild:", err)
		return 1
	}
	code := m.Run()
	if err := shared.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop jaild:", err)
		code = 1
	}
	return code
}

// daemon is a jaild process on a temporary socket.
type daemon struct {
	*daemontest.Daemon
	// inject adds its fields to every execute request sent by call (the
	// hostile suite with egress: "network": "internet"); see withInject.
	inject map[string]any
}

// baseConfig is the test daemons' configuration, after a test's own
// top-level keys.
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

// testOptions completes o for a test daemon: this tree's jaild, the test
// image and profile, and the test configuration with o.Config's top-level
// keys before its sections (daemontest gives each daemon its own cgroup
// name, and its file store in its directory, never /var/lib/jaild).
// Daemons running at once must not flip the host's favordynmods under
// each other (each clears what it set when it stops): internal/jail's
// tests and the VM suite cover it.
func testOptions(o daemontest.Options) daemontest.Options {
	o.Binary, o.Image, o.Profile, o.Conns = filepath.Join(binDir, "jaild"), imageDir, profile, 64
	o.Config = "cgroup_favordynmods = false\n" + o.Config + baseConfig
	return o
}

// newDaemon starts a test daemon of o; the caller stops it.
func newDaemon(o daemontest.Options) (*daemon, error) {
	d, err := daemontest.Start(testOptions(o))
	if err != nil {
		return nil, err
	}
	return &daemon{Daemon: d}, nil
}

// prepareDaemon makes a test daemon's directory and configuration
// without starting it.
func prepareDaemon(o daemontest.Options) (*daemon, error) {
	d, err := daemontest.Prepare(testOptions(o))
	if err != nil {
		return nil, err
	}
	return &daemon{Daemon: d}, nil
}

// startDaemon starts a test daemon of o (o.Config: top-level keys; a
// warm pool of o.Pool preloaded and o.Pool plain jails, none by default
// so that a daemon's jails are exactly its runs'); t's cleanup stops it
// and fails t if it does not stop cleanly or leaves mounts behind.
func startDaemon(t testing.TB, o daemontest.Options) *daemon {
	t.Helper()
	return &daemon{Daemon: daemontest.New(t, testOptions(o))}
}

// activated starts a test daemon under systemd-socket-activate on socket:
// jaild starts on the first connection.
func activated(t testing.TB, socket string) *daemon {
	t.Helper()
	return startDaemon(t, daemontest.Options{Wrap: []string{"systemd-socket-activate", "-l", socket}, Socket: socket, Ready: daemontest.SocketExists})
}

// withInject adds the daemon's injected fields to a request (a map; an
// api.ExecuteRequest or api.SessionCreateRequest gets only "network")
// where the request does not set them; other bodies are sent as they are.
func (d *daemon) withInject(body any) any {
	if d.inject == nil {
		return body
	}
	network, _ := d.inject["network"].(string)
	switch b := body.(type) {
	case map[string]any:
		out := maps.Clone(d.inject)
		maps.Copy(out, b)
		return out
	case api.ExecuteRequest:
		if b.Network == "" {
			b.Network = network
		}
		return b
	case *api.ExecuteRequest:
		c := *b
		return d.withInject(c)
	case api.SessionCreateRequest:
		if b.Network == "" {
			b.Network = network
		}
		return b
	}
	return body
}

// call sends a request and decodes the JSON answer into out (if non-nil).
func (d *daemon) call(t *testing.T, method, path string, body any, out any) (int, http.Header) {
	t.Helper()
	if path == "/v1/execute" {
		body = d.withInject(body)
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
	resp, err := d.Client.Do(req)
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
