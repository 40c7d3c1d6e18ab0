package daemontest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary stands in for jaild when JAILD_FAKE says how: "serve"
// answers on the configuration's socket until SIGINT or SIGTERM, "fail"
// exits at once, "hang" never listens.
func TestMain(m *testing.M) {
	switch os.Getenv("JAILD_FAKE") {
	case "":
		os.Exit(m.Run())
	case "fail":
		fmt.Println("jaild: no image here")
		os.Exit(1)
	case "hang":
		time.Sleep(time.Hour)
	case "serve":
		os.Exit(fakeServe(os.Args[2]))
	}
}

func fakeServe(config string) int {
	b, err := os.ReadFile(config)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	m := regexp.MustCompile(`(?m)^socket = "(.*)"$`).FindSubmatch(b)
	if m == nil {
		fmt.Println("no socket in", config)
		return 1
	}
	_ = os.Remove(string(m[1])) // a stale one, as jaild replaces it
	ln, err := net.Listen("unix", string(m[1]))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"status":"ok"}`)
	}))
	fmt.Println("serving", os.Getenv("FAKE_MARK"))
	<-stop
	ln.Close()
	return 0
}

func fake(t *testing.T, mode string) Options {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Options{Binary: exe, Image: "/nonexistent/image", Profile: "/nonexistent/profile.json",
		Env: []string{"JAILD_FAKE=" + mode}, ReadyWithin: 10 * time.Second}
}

func TestStartServeStop(t *testing.T) {
	o := fake(t, "serve")
	o.Config, o.Pool, o.PoolConfig = "socket_group = \"\"\n[admission]\nqueue_size = 2\n", 3, "preimport = []\n"
	o.Env = append(o.Env, "FAKE_MARK=first")
	o.Tune = func(cfg string) string { return strings.Replace(cfg, "queue_size = 2", "queue_size = 5", 1) }
	d := New(t, o)
	cfg, err := os.ReadFile(d.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		fmt.Sprintf("socket = %q\n", filepath.Join(d.Dir, "s.sock")), fmt.Sprintf("cgroup_name = %q\n", "test-"+filepath.Base(d.Dir)),
		"image = \"/nonexistent/image\"\n", "socket_group = \"\"\n[admission]\nqueue_size = 5\n",
		fmt.Sprintf("[files]\ndir = %q\n", filepath.Join(d.Dir, "files")), "[pool]\nsize = 3\nplain_size = 3\npreimport = []\n",
	} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("configuration lacks %q:\n%s", want, cfg)
		}
	}
	if fi, err := os.Stat(d.Dir); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("directory %v (%v), want mode 0755", fi.Mode(), err)
	}
	if status, body, err := d.Get("/v1/health"); err != nil || status != 200 || string(body) != `{"status":"ok"}` {
		t.Errorf("GET /v1/health: %d %s %v", status, body, err)
	}
	if !d.Running() || !strings.Contains(d.Log.String(), "serving first") {
		t.Errorf("running %v, log %q", d.Running(), d.Log.String())
	}

	// A kill, then a restart on the same directory and an edited
	// configuration; the client reaches the new process.
	d.Kill()
	if d.Running() || d.ExitErr() == nil {
		t.Errorf("after a kill: running %v, exit %v", d.Running(), d.ExitErr())
	}
	if err := d.EditConfig(func(c string) string { return c + "# edited\n" }); err != nil {
		t.Fatal(err)
	}
	d.Opts.Env = append(d.Opts.Env, "FAKE_MARK=second")
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if status, _, err := d.Get("/v1/health"); err != nil || status != 200 || strings.Count(d.Log.String(), "--- start") != 2 || !strings.Contains(d.Log.String(), "serving second") {
		t.Errorf("after the restart: %d %v\n%s", status, err, d.Log.String())
	}
	if err := d.StopProcess(syscall.SIGTERM); err != nil || d.Running() {
		t.Errorf("SIGTERM: %v", err)
	}
	if err := d.Stop(); err != nil {
		t.Errorf("stop after the process ended: %v", err)
	}
	if _, err := os.Stat(d.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("directory left: %v", err)
	}
	if err := d.Stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

func TestStartFails(t *testing.T) {
	_, err := Start(fake(t, "fail"))
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "jaild: no image here") {
		t.Errorf("a daemon that exits: %v", err)
	}
	o := fake(t, "hang")
	o.ReadyWithin = 300 * time.Millisecond
	d, err := Prepare(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err == nil || errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "did not come up within 300ms") || d.Running() {
		t.Errorf("a daemon that never serves: %v (running %v)", err, d.Running())
	}
	if err := d.Remove(); err != nil {
		t.Error(err)
	}
	if _, err := Prepare(Options{Binary: "x"}); err == nil {
		t.Error("Prepare without an image and a profile")
	}
}

func TestSocketExistsAndWrap(t *testing.T) {
	o := fake(t, "serve")
	o.Wrap = []string{"env", "FAKE_MARK=wrapped"}
	o.Ready = SocketExists
	d := New(t, o)
	if !strings.Contains(d.Log.String(), "serving wrapped") && !waitLog(d, "serving wrapped") {
		t.Errorf("log %q: the wrapper did not run the daemon", d.Log.String())
	}
}

func waitLog(d *Daemon, s string) bool {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(d.Log.String(), s) {
			return true
		}
	}
	return false
}

func TestMountsUnder(t *testing.T) {
	if got := UnescapeMount(`/a\040b\134c`); got != `/a b\c` {
		t.Errorf("UnescapeMount: %q", got)
	}
	if got := MountsUnder("self", "/proc"); len(got) != 0 && !strings.HasPrefix(got[0], "/proc/") {
		t.Errorf("MountsUnder(/proc): %v", got)
	}
}
