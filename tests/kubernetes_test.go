package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

// TestKubernetesManifests runs the tests of deploy/kubernetes/test, a
// module of its own (Helm's SDK and k8s.io/api stay out of jaild's go.mod;
// its go.sum pins them, and the first run fetches them through the Go
// module proxy): the chart renders and lints, every object of the chart
// and of deploy/kubernetes decodes strictly, and jaild's loader reads the
// rendered jaild.toml. Then it runs the DaemonSet's probe commands, as that
// module reads them from the manifests, against a real daemon: readiness
// and liveness pass on a daemon that can take runs; readiness fails, with
// the reason, while every run slot and queue place is taken and liveness
// still passes; readiness passes again once the runs end, and fails once
// SIGTERM starts the drain.
func TestKubernetesManifests(t *testing.T) {
	probesFile := filepath.Join(t.TempDir(), "probes.json")
	start := time.Now()
	cmd := exec.Command("go", "test", "-count=1", "-v", "./...")
	cmd.Dir = filepath.Join("..", "deploy", "kubernetes", "test")
	// The module's go.sum pins every module: nothing may change it.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0", "JAILD_K8S_PROBES_OUT="+probesFile)
	// Its API server test runs etcd, kube-apiserver and kubectl from the
	// cache `make kube-tools` fills (test-host's prerequisite); the
	// directory is the script's to name. A directory without them fails
	// that test, saying to run `make kube-tools`.
	if os.Getenv("JAILD_KUBE_TOOLS") == "" {
		dir, err := exec.Command("bash", filepath.Join("..", "deploy", "kubernetes", "test", "kube", "fetch.sh"), "--print-dir").Output()
		if err != nil {
			t.Fatalf("deploy/kubernetes/test/kube/fetch.sh --print-dir: %v", err)
		}
		cmd.Env = append(cmd.Env, "JAILD_KUBE_TOOLS="+strings.TrimSpace(string(dir)))
	}
	out, err := cmd.CombinedOutput()
	t.Logf("go test in deploy/kubernetes/test: %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("go test in deploy/kubernetes/test: %v\n%s", err, out)
	}
	passed := regexp.MustCompile(`(?m)^--- PASS: `).FindAll(out, -1)
	if len(passed) < 8 || bytes.Contains(out, []byte("--- SKIP")) || bytes.Contains(out, []byte("--- FAIL")) {
		t.Fatalf("deploy/kubernetes/test: %d tests passed (want 8 or more, none skipped):\n%s", len(passed), out)
	}
	t.Logf("deploy/kubernetes/test: %d tests passed", len(passed))

	var probes struct {
		Socket                       string
		Startup, Liveness, Readiness []string
	}
	b, err := os.ReadFile(probesFile)
	if err != nil {
		t.Fatalf("the module wrote no probe commands: %v", err)
	}
	if err := json.Unmarshal(b, &probes); err != nil || len(probes.Readiness) == 0 || len(probes.Liveness) == 0 || len(probes.Startup) == 0 {
		t.Fatalf("probe commands %s: %v", b, err)
	}

	// A daemon with two run slots and one queue place that a run may hold
	// for long (the test daemons' queue_wait is 1 s).
	d := startProbeDaemon(t)
	probe := func(argv []string) (string, int) {
		t.Helper()
		a := append([]string(nil), argv...)
		for i := range a {
			if a[i] == probes.Socket {
				a[i] = d.Socket
			}
		}
		out, err := exec.Command(a[0], a[1:]...).CombinedOutput()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			return string(out), ee.ExitCode()
		case err != nil:
			t.Fatalf("%q: %v", a, err)
		}
		return string(out), 0
	}
	for name, argv := range map[string][]string{"startup": probes.Startup, "liveness": probes.Liveness, "readiness": probes.Readiness} {
		if out, code := probe(argv); code != 0 {
			t.Errorf("%s probe of a daemon that can take runs: exit %d %s", name, code, out)
		}
	}

	// Fill both slots and the queue place.
	post := func(code string) {
		resp, err := d.Client.Post("http://jaild/v1/execute", "application/json", strings.NewReader(code))
		if err == nil {
			resp.Body.Close()
		}
	}
	for range 3 {
		go post(`{"code":"import time\ntime.sleep(6)"}`)
	}
	full := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, code := probe(probes.Readiness)
		if code == 0 {
			continue
		}
		if code != 22 || !strings.Contains(out, "full: 2 runs in progress and 1 queued") {
			t.Fatalf("readiness probe of a full daemon: exit %d %q, want 22 and the reason", code, out)
		}
		full = true
		if out, code := probe(probes.Liveness); code != 0 {
			t.Errorf("liveness probe of a full daemon: exit %d %s", code, out)
		}
		break
	}
	if !full {
		t.Fatalf("the readiness probe never failed while three runs filled two slots and the queue\n%s", d.Log.String())
	}
	ready := false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && !ready; time.Sleep(200 * time.Millisecond) {
		_, code := probe(probes.Readiness)
		ready = code == 0
	}
	if !ready {
		t.Fatalf("the readiness probe still fails after the runs ended\n%s", d.Log.String())
	}

	// SIGTERM (the kubelet's, after preStop) with a run in flight: the
	// socket stops accepting at once, so readiness fails at once.
	capacity := func() api.Capacity {
		var info api.Info
		if status, _ := d.call(t, "GET", "/v1/info", nil, &info); status != 200 {
			t.Fatalf("GET /v1/info: %d", status)
		}
		return info.Capacity
	}
	waitFor(t, 20*time.Second, "the earlier runs to end", func() bool { c := capacity(); return c.Running == 0 && c.Queued == 0 })
	done := make(chan struct{})
	go func() { post(`{"code":"import time\ntime.sleep(3)"}`); close(done) }()
	waitFor(t, 10*time.Second, "the run to start", func() bool { return capacity().Running > 0 })
	if err := d.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the readiness probe to fail after SIGTERM", func() bool {
		_, code := probe(probes.Readiness)
		return code != 0
	})
	<-done
	if err := d.WaitExit(); err != nil {
		t.Errorf("jaild after SIGTERM: %v\n%s", err, d.Log.String())
	}
}

// startProbeDaemon starts a daemon of the test configuration with one
// queue place that a request may hold for 30 s.
func startProbeDaemon(t *testing.T) *daemon {
	t.Helper()
	return startDaemon(t, daemontest.Options{Tune: func(cfg string) string {
		c := strings.Replace(strings.Replace(cfg, "queue_size = 2\n", "queue_size = 1\n", 1), `queue_wait = "1s"`, `queue_wait = "30s"`, 1)
		if c == cfg || !strings.Contains(c, `queue_wait = "30s"`) || !strings.Contains(c, "queue_size = 1\n") {
			panic("the test configuration has no queue_size = 2 and queue_wait = \"1s\" to change")
		}
		return c
	}})
}
