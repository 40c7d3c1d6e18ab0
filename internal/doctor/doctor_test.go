package doctor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/rootfs"
)

// host builds a fixture root from path -> content ("" makes a directory).
func host(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if c == "" && !strings.Contains(filepath.Base(p), ".") && !strings.HasPrefix(p, "/proc") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	mountV2     = "30 1 0:27 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
	mountHybrid = "30 1 0:27 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n31 30 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
)

func TestKernelVersion(t *testing.T) {
	for _, tc := range []struct {
		rel          string
		major, minor int
		ok           bool
	}{
		{"6.12.17-amd64", 6, 12, true}, {"5.6.0", 5, 6, true}, {"6.1", 6, 1, true},
		{"6.18.44-fc-v657", 6, 18, true}, {"6", 0, 0, false}, {"x.y", 0, 0, false},
	} {
		major, minor, ok := kernelVersion(tc.rel)
		if major != tc.major || minor != tc.minor || ok != tc.ok {
			t.Errorf("%q: %d.%d %v", tc.rel, major, minor, ok)
		}
	}
	for rel, want := range map[string]Status{"5.4.0": Fail, "5.15.0": Warn, "6.1.0": OK} {
		o := Options{Root: host(t, map[string]string{"/proc/sys/kernel/osrelease": rel + "\n"})}
		if c := o.kernel(); c.Status != want || (want != OK && c.Fix == "") {
			t.Errorf("kernel %s: %+v, want %s with a fix", rel, c, want)
		}
	}
}

func TestCgroups(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  Status
		in    string
	}{
		{"v2, the unit's cgroup delegated", map[string]string{
			"/proc/self/mountinfo": mountV2,
			"/sys/fs/cgroup/system.slice/jaild.service/cgroup.controllers": "cpu memory pids\n",
		}, OK, "system.slice/jaild.service"},
		{"v2, not started yet: the root's controllers", map[string]string{
			"/proc/self/mountinfo": mountV2, "/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory pids\n",
		}, OK, "cgroup v2"},
		{"v2 without pids", map[string]string{
			"/proc/self/mountinfo": mountV2, "/sys/fs/cgroup/cgroup.controllers": "cpu memory\n",
		}, Fail, "missing pids"},
		{"hybrid", map[string]string{
			"/proc/self/mountinfo": mountHybrid, "/sys/fs/cgroup/memory": "", "/sys/fs/cgroup/pids": "",
		}, Warn, "hybrid"},
		{"v1 without memory", map[string]string{
			"/proc/self/mountinfo": mountHybrid, "/sys/fs/cgroup/pids": "",
		}, Fail, "memory"},
		{"nothing mounted", map[string]string{"/proc/self/mountinfo": "1 0 0:1 / / rw - ext4 /dev/vda rw\n"}, Fail, "no cgroup"},
	} {
		c := Options{Root: host(t, tc.files), Unit: "jaild.service"}.cgroups()
		if c.Status != tc.want || !strings.Contains(c.Detail, tc.in) || (tc.want != OK && c.Fix == "") {
			t.Errorf("%s: %+v, want %s mentioning %q, with a fix unless ok", tc.name, c, tc.want, tc.in)
		}
	}
}

func TestUserNamespaces(t *testing.T) {
	for _, tc := range []struct {
		files map[string]string
		want  Status
		in    string
	}{
		{map[string]string{"/proc/sys/user/max_user_namespaces": "63000"}, OK, "63000"},
		{map[string]string{"/proc/sys/user/max_user_namespaces": "0"}, Fail, "= 0"},
		{map[string]string{"/proc/sys/kernel/osrelease": "6.1"}, Fail, "no user namespaces"},
		{map[string]string{"/proc/sys/user/max_user_namespaces": "63000", "/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1"}, OK, "not affected"},
	} {
		c := Options{Root: host(t, tc.files)}.userns()
		if c.Status != tc.want || !strings.Contains(c.Detail, tc.in) {
			t.Errorf("%v: %+v, want %s mentioning %q", tc.files, c, tc.want, tc.in)
		}
	}
}

func TestFilesystemsAndLoop(t *testing.T) {
	all := "nodev\ttmpfs\n\tsquashfs\nnodev\toverlay\n"
	for _, tc := range []struct {
		files map[string]string
		want  Status
	}{
		{map[string]string{"/proc/filesystems": all}, OK},
		{map[string]string{"/proc/filesystems": "nodev\ttmpfs\n", "/proc/sys/kernel/osrelease": "6.1.0", "/lib/modules/6.1.0/kernel/fs/squashfs": ""}, Warn},
		{map[string]string{"/proc/filesystems": "nodev\ttmpfs\n", "/proc/sys/kernel/osrelease": "6.1.0"}, Fail},
		{map[string]string{"/proc/filesystems": "\tsquashfs\n"}, Fail},
	} {
		if c := (Options{Root: host(t, tc.files)}).filesystems(); c.Status != tc.want {
			t.Errorf("%v: %+v, want %s", tc.files, c, tc.want)
		}
	}
	if c := (Options{Root: host(t, map[string]string{"/dev/loop-control": "x"})}).loop(); c.Status != OK {
		t.Errorf("loop-control present: %+v", c)
	}
	if c := (Options{Root: host(t, nil)}).loop(); c.Status != Fail || c.Fix == "" {
		t.Errorf("no loop-control: %+v", c)
	}
}

func TestSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for mode, want := range map[os.FileMode]Status{0o660: OK, 0o666: Fail, 0o600: OK} {
		if err := os.Chmod(sock, mode); err != nil {
			t.Fatal(err)
		}
		if c := (Options{Socket: sock}).socket(); c.Status != want || !strings.Contains(c.Detail, "mode") {
			t.Errorf("mode %04o: %+v, want %s", mode, c, want)
		}
	}
	if c := (Options{Socket: filepath.Join(dir, "missing")}).socket(); c.Status != Fail || !strings.Contains(c.Fix, "jaild.socket") {
		t.Errorf("missing socket: %+v", c)
	}
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, nil, 0o600)
	if c := (Options{Socket: plain}).socket(); c.Status != Fail || !strings.Contains(c.Detail, "not a socket") {
		t.Errorf("a regular file: %+v", c)
	}
}

func TestImage(t *testing.T) {
	dir := t.TempDir()
	data := []byte("not really a squashfs, but its digest is what is checked")
	sum := sha256.Sum256(data)
	m, _ := json.Marshal(rootfs.Manifest{Schema: 1, Name: "python", ImageDigest: "sha256:" + hex.EncodeToString(sum[:]),
		ImageSizeBytes: int64(len(data)), PythonVersion: "3.13.5", Runner: "/opt/jaild/runner.py", Init: "/opt/jaild/init"})
	os.WriteFile(filepath.Join(dir, rootfs.ManifestFile), m, 0o644)
	os.WriteFile(filepath.Join(dir, rootfs.ImageFile), data, 0o644)
	if c := (Options{Image: dir}).image(nil); c.Status != OK || !strings.Contains(c.Detail, "digest verified") {
		t.Errorf("good image: %+v", c)
	}
	data[0] ^= 1
	os.WriteFile(filepath.Join(dir, rootfs.ImageFile), data, 0o644)
	if c := (Options{Image: dir}).image(nil); c.Status != Fail || !strings.Contains(c.Detail, "does not match") || c.Fix == "" {
		t.Errorf("corrupt image: %+v", c)
	}
	if c := (Options{Image: t.TempDir()}).image(nil); c.Status != Fail {
		t.Errorf("empty directory: %+v", c)
	}

	// The other images: verified, and named as their tables.
	data[0] ^= 1
	os.WriteFile(filepath.Join(dir, rootfs.ImageFile), data, 0o644)
	checks := (Options{Images: map[string]string{"python": dir, "small": dir, "gone": t.TempDir()}}).images(nil)
	if len(checks) != 3 {
		t.Fatalf("%d checks for 3 images: %+v", len(checks), checks)
	}
	for _, c := range checks { // sorted by name
		switch c.Name {
		case "image gone":
			if c.Status != Fail || c.Fix == "" {
				t.Errorf("a missing image: %+v", c)
			}
		case "image python":
			if c.Status != OK || !strings.Contains(c.Detail, "digest verified") {
				t.Errorf("a good image: %+v", c)
			}
		case "image small":
			if c.Status != Fail || !strings.Contains(c.Detail, `holds the image "python"`) || !strings.Contains(c.Fix, "[images.python]") {
				t.Errorf("a misnamed image: %+v", c)
			}
		default:
			t.Errorf("unexpected check %+v", c)
		}
	}
}

func TestRunReport(t *testing.T) {
	root := host(t, map[string]string{
		"/proc/sys/kernel/osrelease": "6.12.0", "/proc/self/mountinfo": mountV2,
		"/sys/fs/cgroup/cgroup.controllers": "memory pids", "/proc/sys/user/max_user_namespaces": "1000",
		"/proc/filesystems": "nodev\ttmpfs\n\tsquashfs\n", "/dev/loop-control": "x",
		"/proc/self/status": "Name:\tx\nSeccomp:\t0\n",
	})
	info := &api.Info{Version: "v-test", CgroupMode: "v2"}
	o := Options{Root: root, Socket: filepath.Join(root, "none.sock"),
		Daemon: func(context.Context) (*api.Info, error) { return info, nil }}
	r := Run(context.Background(), o)
	byName := map[string]Check{}
	for _, c := range r.Checks {
		byName[c.Name] = c
	}
	if len(r.Checks) != 11 || r.OK {
		t.Fatalf("%d checks, ok %v: the missing socket must fail the report", len(r.Checks), r.OK)
	}
	if c := byName["daemon"]; c.Status != OK || !strings.Contains(c.Detail, "v-test") {
		t.Errorf("daemon: %+v", c)
	}
	if c := byName[CheckPause]; c.Status != Skip || !strings.Contains(c.Detail, "disabled") {
		t.Errorf("pause with sessions disabled: %+v", c)
	}
	for _, name := range []string{"kernel", "cgroups", "user namespaces", "file systems", "loop devices"} {
		if byName[name].Status != OK {
			t.Errorf("%s: %+v", name, byName[name])
		}
	}
	o.Daemon = func(context.Context) (*api.Info, error) { return nil, errors.New("connection refused") }
	if c := Run(context.Background(), o).Checks[9]; c.Status != Fail || c.Fix == "" {
		t.Errorf("daemon down: %+v", c)
	}
}

// A daemon that answers is what is checked: its images and profile, not
// the configuration's files (here none exist).
func TestServedByDaemon(t *testing.T) {
	root := host(t, map[string]string{"/proc/self/status": "Name:\tx\nSeccomp:\t0\n", "/proc/sys/kernel/seccomp/actions_avail": "kill_process errno allow"})
	info := &api.Info{
		Seccomp: api.SeccompInfo{Profile: "/srv/default.json", DefaultAction: "SCMP_ACT_ERRNO", Rules: 42},
		Images: []api.ImageInfo{
			{Name: "python", Default: true, ImageDigest: "sha256:aaa", PythonVersion: "3.13.5"},
			{Name: "small", ImageDigest: "sha256:bbb", PythonVersion: "3.13.5"},
		},
	}
	o := Options{Root: root, Image: "/nonexistent/image", Images: map[string]string{"gone": "/nonexistent/gone"},
		SeccompProfile: "/nonexistent/profile.json", Socket: filepath.Join(root, "none.sock"), Elsewhere: "run jaild doctor as root",
		Daemon: func(context.Context) (*api.Info, error) { return info, nil }}
	byName := map[string]Check{}
	for _, c := range Run(context.Background(), o).Checks {
		byName[c.Name] = c
	}
	for name, want := range map[string]string{
		"rootfs image": "the daemon serves python: sha256:aaa",
		"image small":  "the daemon serves small: sha256:bbb",
		CheckSeccomp:   "the daemon's profile /srv/default.json, loaded at its start: default action SCMP_ACT_ERRNO, 42 rules",
		CheckNftables:  "egress disabled",
		"daemon":       "answers",
	} {
		if c := byName[name]; c.Status != OK && c.Status != Skip || !strings.Contains(c.Detail, want) {
			t.Errorf("%s: %+v; want ok (or skip) and %q", name, c, want)
		}
	}
	if c, ok := byName["image gone"]; ok {
		t.Errorf("a configured image the daemon does not serve was checked: %+v", c)
	}
	// With egress on, nf_tables is not asked here: a warning naming where.
	info.Network.Available = true
	if c := Run(context.Background(), o).Checks[6]; c.Name != CheckNftables || c.Status != Warn || c.Fix != o.Elsewhere {
		t.Errorf("nftables with egress on: %+v", c)
	}
}

// The profile is loaded by Options.Seccomp when there is one (jaild's);
// without one and with no daemon, the check warns with Elsewhere's fix.
func TestSeccompProbe(t *testing.T) {
	root := host(t, map[string]string{"/proc/self/status": "Name:\tx\nSeccomp:\t0\n"})
	o := Options{Root: root, SeccompProfile: "/p.json"}
	for _, tc := range []struct {
		probe     func(string) (api.SeccompInfo, error)
		elsewhere string
		status    Status
		detail    string
	}{
		{func(string) (api.SeccompInfo, error) {
			return api.SeccompInfo{DefaultAction: "SCMP_ACT_ERRNO", Rules: 7}, nil
		}, "", OK, "profile /p.json: default action SCMP_ACT_ERRNO, 7 rules"},
		{func(string) (api.SeccompInfo, error) {
			return api.SeccompInfo{}, fmt.Errorf("load: %w", ErrNoSeccompSupport)
		}, "", Fail, "no seccomp support"},
		{func(string) (api.SeccompInfo, error) {
			return api.SeccompInfo{}, errors.New("seccomp profile: no such file")
		}, "", Fail, "no such file"},
		{nil, "run jaild doctor as root", Warn, "the profile /p.json is not loaded here"},
		{nil, "", Skip, "not asked"},
	} {
		o.Seccomp, o.Elsewhere = tc.probe, tc.elsewhere
		if c := o.seccomp(nil); c.Status != tc.status || !strings.Contains(c.Detail, tc.detail) || (c.Status == Warn || c.Status == Fail) && c.Fix == "" {
			t.Errorf("got %+v; want %s and %q", c, tc.status, tc.detail)
		}
	}
}

func TestReplaceAndText(t *testing.T) {
	mine := newReport([]Check{{Name: "kernel", Status: OK}, {Name: CheckSeccomp, Status: Warn, Fix: "run jaild doctor"}, {Name: CheckNftables, Status: Warn, Fix: "x"}})
	jaild := newReport([]Check{{Name: "kernel", Status: Fail}, {Name: CheckSeccomp, Status: Fail, Detail: "bad profile", Fix: "reinstall"}})
	r := mine.Replace(jaild, CheckSeccomp, CheckNftables)
	if r.OK || r.Checks[0].Status != OK || r.Checks[1].Detail != "bad profile" || r.Checks[2].Status != Warn {
		t.Errorf("replaced: %+v", r)
	}
	var b strings.Builder
	r.WriteText(&b)
	for _, want := range []string{"OK    kernel", "FAIL  seccomp", "fix: reinstall", "cannot run here"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

func TestConfigure(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "jaild.toml")
	os.WriteFile(cfg, []byte("image = \"/srv/image\"\nsocket = \"/srv/jaild.sock\"\n[images.small]\ndir = \"/srv/small\"\n"), 0o644)
	o, err := Configure(cfg, "", "/flag/profile.json", "")
	if err != nil || o.Image != "/srv/image" || o.Socket != "/srv/jaild.sock" || o.SeccompProfile != "/flag/profile.json" || o.Images["small"] != "/srv/small" {
		t.Errorf("%+v %v", o, err)
	}
	os.WriteFile(cfg, []byte("image = ["), 0o644)
	if o, err := Configure(cfg, "", "", "/flag.sock"); err == nil || o.Socket != "/flag.sock" || o.Image == "" {
		t.Errorf("a bad file: %+v %v; want the error and the defaults", o, err)
	}
}

// The paused-sessions check says what the daemon's probe found.
func TestPauseCheck(t *testing.T) {
	var o Options
	if c := o.pause(nil); c.Status != Skip {
		t.Errorf("not asked: %+v", c)
	}
	on := &api.Info{Sessions: api.SessionInfo{Enabled: true, Pause: api.PauseInfo{Available: true, OnIdle: "pause"}}}
	if c := o.pause(on); c.Status != OK || !strings.Contains(c.Detail, "pauses them") {
		t.Errorf("available: %+v", c)
	}
	off := &api.Info{Sessions: api.SessionInfo{Enabled: true, Pause: api.PauseInfo{Reason: "no CRIU is configured (sessions.criu)", OnIdle: "end"}}}
	if c := o.pause(off); c.Status != Warn || !strings.Contains(c.Detail, "no CRIU is configured") || c.Fix == "" {
		t.Errorf("unavailable: %+v", c)
	}
}
