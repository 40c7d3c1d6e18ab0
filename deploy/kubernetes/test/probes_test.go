package k8stest

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// ProbesEnv names a file this module's tests write the probes' commands
// to, as JSON (ProbeCommands), when set: tests/kubernetes_test.go runs them
// against a real daemon.
const ProbesEnv = "JAILD_K8S_PROBES_OUT"

// ProbeCommands are the DaemonSet's probe commands and the socket they name.
type ProbeCommands struct {
	Socket                       string
	Startup, Liveness, Readiness []string
}

// The probes' commands, run by the real curl against a stand-in for the
// daemon's socket, pass and fail as the kubelet must see them: readiness
// passes on 200 and fails on 503 (with the reason in its output), both fail
// with no daemon on the socket and when the daemon hangs (within the
// probe's timeout), liveness passes whenever the daemon answers.
func TestProbeCommands(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatalf("the probes run curl, which this host lacks (make deps installs it): %v", err)
	}
	o := plainManifests(t)
	c := o.daemonSet.Spec.Template.Spec.Containers[0]
	cmds := ProbeCommands{Socket: o.cfg.Socket, Startup: c.StartupProbe.Exec.Command,
		Liveness: c.LivenessProbe.Exec.Command, Readiness: c.ReadinessProbe.Exec.Command}
	if out := os.Getenv(ProbesEnv); out != "" {
		b, _ := json.Marshal(cmds)
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A stand-in answering as jaild's /v1/health and /v1/ready do.
	sock := filepath.Join(t.TempDir(), "jaild.sock")
	var state atomic.Value // "ready", "draining", "hang"
	state.Store("ready")
	hang := make(chan struct{})
	defer close(hang)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if state.Load() == "hang" {
			<-hang
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/health":
			_, _ = w.Write([]byte(`{"status":"ok"}`))
		case r.URL.Path == "/v1/ready" && state.Load() == "ready":
			_, _ = w.Write([]byte(`{"ready":true}`))
		case r.URL.Path == "/v1/ready":
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"ready":false,"reason":"draining: the daemon is stopping"}`))
		default:
			http.NotFound(w, r)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	run := func(cmd []string) (string, error) {
		t.Helper()
		argv := append([]string(nil), cmd...)
		n := 0
		for i := range argv {
			if argv[i] == cmds.Socket {
				argv[i] = sock
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%q names the socket %s %d times", cmd, cmds.Socket, n)
		}
		out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
		return string(out), err
	}
	exitCode := func(err error) int {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("probe did not run: %v", err)
		}
		return 0
	}

	for _, c := range [][]string{cmds.Startup, cmds.Liveness, cmds.Readiness} {
		if out, err := run(c); err != nil {
			t.Errorf("%q against a ready daemon: %v: %s", c, err, out)
		}
	}
	state.Store("draining")
	if out, err := run(cmds.Readiness); exitCode(err) != 22 || !strings.Contains(out, "draining: the daemon is stopping") {
		t.Errorf("readiness against a 503: exit %d, output %q: want exit 22 and the reason", exitCode(err), out)
	}
	if out, err := run(cmds.Liveness); err != nil {
		t.Errorf("liveness of a draining daemon that answers: %v: %s", err, out)
	}
	state.Store("hang")
	start := time.Now()
	if out, err := run(cmds.Liveness); exitCode(err) != 28 {
		t.Errorf("liveness against a hung daemon: exit %d, output %q: want 28 (curl's timeout)", exitCode(err), out)
	}
	if took := time.Since(start); took > time.Duration(o.daemonSet.Spec.Template.Spec.Containers[0].LivenessProbe.TimeoutSeconds)*time.Second {
		t.Errorf("a hung daemon's liveness probe took %v, beyond the probe's timeout: the kubelet would count a timeout, not curl's answer", took)
	}
	srv.Close()
	os.Remove(sock)
	for _, c := range [][]string{cmds.Liveness, cmds.Readiness} {
		if out, err := run(c); exitCode(err) != 7 {
			t.Errorf("%q with no daemon on the socket: exit %d %q, want 7 (could not connect)", c, exitCode(err), out)
		}
	}
}

// The container image has what the manifests run and name: curl (the
// probes), sleep (preStop), tini as PID 1 before jaild, the groups the
// config names, and the Debian packages' paths that jaild.toml gives for
// the image and the seccomp profile.
func TestContainerRecipe(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoDir, "deploy/container/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	o := plainManifests(t)
	install := regexp.MustCompile(`(?s)apt-get install [^&]*`).FindString(df)
	for _, pkg := range []string{"curl", "tini", "/tmp/debs/jaild_*_amd64.deb", "/tmp/debs/jaild-rootfs_*_amd64.deb"} {
		if !strings.Contains(install, " "+pkg) {
			t.Errorf("the Dockerfile's apt-get install has no %s: %q", pkg, install)
		}
	}
	c := o.daemonSet.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe.Exec.Command[0] != "curl" || c.Lifecycle.PreStop.Exec.Command[0] != "sleep" {
		t.Errorf("probes and preStop run %q and %q", c.ReadinessProbe.Exec.Command[0], c.Lifecycle.PreStop.Exec.Command[0])
	}
	if !strings.Contains(df, `ENTRYPOINT ["/usr/bin/tini", "--", "/usr/bin/jaild"]`) {
		t.Error(`the Dockerfile's ENTRYPOINT is not ["/usr/bin/tini", "--", "/usr/bin/jaild"]`)
	}
	if !strings.Contains(df, `CMD ["`+strings.Join(c.Args, `", "`)+`"]`) {
		t.Errorf("the Dockerfile's CMD is not the DaemonSet's args %q", c.Args)
	}
	for _, g := range []string{o.cfg.SocketGroup, o.cfg.AdminGroup, o.cfg.Network.AllowGroup} {
		if !regexp.MustCompile(`groupadd --system --gid "\$[A-Z_]+" ` + regexp.QuoteMeta(g) + `\b`).MatchString(df) {
			t.Errorf("the Dockerfile makes no group %s with a fixed gid", g)
		}
	}
	if !regexp.MustCompile(`ARG JAILD_GID=10701\b`).MatchString(df) || !strings.Contains(o.configMap.Data["jaild.toml"], "gid 10701") {
		t.Error("the socket group's gid, 10701, is not the Dockerfile's JAILD_GID or not the one jaild.toml's comment gives agent pods")
	}
	build, err := os.ReadFile(filepath.Join(repoDir, "deploy/debian/build.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for key, p := range map[string]string{"image": o.cfg.Image, "seccomp_profile": o.cfg.SeccompProfile} {
		if !strings.Contains(string(build), p) || !strings.Contains(df, p) {
			t.Errorf("%s = %s: not a path the Debian package installs (deploy/debian/build.sh) and the Dockerfile checks", key, p)
		}
	}
}
