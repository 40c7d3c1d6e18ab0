package doctor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
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
	if c := (Options{Image: dir}).image(); c.Status != OK || !strings.Contains(c.Detail, "digest verified") {
		t.Errorf("good image: %+v", c)
	}
	data[0] ^= 1
	os.WriteFile(filepath.Join(dir, rootfs.ImageFile), data, 0o644)
	if c := (Options{Image: dir}).image(); c.Status != Fail || !strings.Contains(c.Detail, "does not match") || c.Fix == "" {
		t.Errorf("corrupt image: %+v", c)
	}
	if c := (Options{Image: t.TempDir()}).image(); c.Status != Fail {
		t.Errorf("empty directory: %+v", c)
	}

	// The other images: verified, and named as their tables.
	data[0] ^= 1
	os.WriteFile(filepath.Join(dir, rootfs.ImageFile), data, 0o644)
	checks := (Options{Images: map[string]string{"python": dir, "small": dir, "gone": t.TempDir()}}).images()
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
	if len(r.Checks) != 10 || r.OK {
		t.Fatalf("%d checks, ok %v: the missing socket must fail the report", len(r.Checks), r.OK)
	}
	if c := byName["daemon"]; c.Status != OK || !strings.Contains(c.Detail, "v-test") {
		t.Errorf("daemon: %+v", c)
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
