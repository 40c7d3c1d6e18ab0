package tests

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

// imagesRoot is the cache directory the images were built into
// (JAILD_IMAGES_DIR, make's ROOTFS_CACHE): each image in
// <root>/<name>/current.
func imagesRoot() string {
	if d := os.Getenv("JAILD_IMAGES_DIR"); d != "" {
		return d
	}
	return "/var/cache/jaild/rootfs"
}

// builtImage is the directory of a shipped image, which make test-host
// builds before the tests; a missing one fails the test.
func builtImage(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(imagesRoot(), name, "current")
	if _, err := os.Stat(filepath.Join(dir, "rootfs.squashfs")); err != nil {
		t.Fatalf("image %s is not built (make rootfs-images builds every recipe in rootfs/images): %v", name, err)
	}
	return dir
}

type imageManifest struct {
	Name           string            `json:"name"`
	RecipeDigest   string            `json:"recipe_digest"`
	ImageDigest    string            `json:"image_digest"`
	ImageSize      int64             `json:"image_size_bytes"`
	PythonVersion  string            `json:"python_version"`
	PythonPackages map[string]string `json:"python_packages"`
	Wheels         []struct {
		Name    string   `json:"name"`
		Version string   `json:"version"`
		SHA256  []string `json:"sha256"`
	} `json:"wheels"`
}

func readManifest(t *testing.T, dir string) imageManifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m imageManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("manifest of %s: %v", dir, err)
	}
	return m
}

// imageDaemon is a daemon serving the image in dir, with a warm pool of
// pool jails of each kind that preload nothing.
func imageDaemon(t *testing.T, dir string, pool int) *daemon {
	t.Helper()
	return startDaemon(t, daemontest.Options{Pool: pool, Tune: func(c string) string {
		c = strings.Replace(c, "[pool]\n", "[pool]\npreimport = []\n", 1)
		return setKeys(c, map[string]string{"image": strconv.Quote(dir)})
	}})
}

func execIn(t *testing.T, d *daemon, code string, limits *api.Limits) *api.ExecuteResponse {
	t.Helper()
	body := api.ExecuteRequest{Code: code, Limits: limits}
	var r api.ExecuteResponse
	if status, _ := d.call(t, "POST", "/v1/execute", body, &r); status != 200 {
		t.Fatalf("execute: HTTP %d", status)
	}
	return &r
}

// TestImagesShipped: each image of rootfs/images builds (make
// rootfs-images), is verified by a daemon at start and runs its own
// snippet in a jail; what an image lacks fails with a clear
// ModuleNotFoundError.
func TestImagesShipped(t *testing.T) {
	def := readManifest(t, builtImage(t, "python"))

	t.Run("python", func(t *testing.T) {
		d := imageDaemon(t, builtImage(t, "python"), 0)
		r := execIn(t, d, "import pandas as pd\nprint(pd.DataFrame({'a': [1, 2, 3]}).a.sum())", nil)
		if r.Status != "ok" || r.Stdout != "6\n" {
			t.Errorf("pandas: %s %q %q", r.Status, r.Stdout, r.Stderr)
		}
		r = execIn(t, d, "import torch", nil)
		if r.Status != "error" || r.Error == nil || r.Error.Type != "ModuleNotFoundError" || r.Error.Message != "No module named 'torch'" {
			t.Errorf("import torch in the default image: %s %+v, want ModuleNotFoundError: No module named 'torch'", r.Status, r.Error)
		}
	})

	t.Run("python-minimal", func(t *testing.T) {
		dir := builtImage(t, "python-minimal")
		m := readManifest(t, dir)
		if m.Name != "python-minimal" || len(m.PythonPackages) != 0 || m.PythonVersion != def.PythonVersion {
			t.Errorf("manifest: name %q, python packages %v, Python %s (default's %s)", m.Name, m.PythonPackages, m.PythonVersion, def.PythonVersion)
		}
		if m.ImageSize*4 > def.ImageSize {
			t.Errorf("python-minimal is %d bytes, more than a quarter of the default's %d", m.ImageSize, def.ImageSize)
		}
		t.Logf("sizes: python-minimal %d bytes, python %d bytes", m.ImageSize, def.ImageSize)
		// With a warm pool that preloads nothing: the run is warm.
		d := imageDaemon(t, dir, 1)
		waitFor(t, 60*time.Second, "the warm pool", func() bool {
			var info api.Info
			d.call(t, "GET", "/v1/info", nil, &info)
			return info.Pool.Ready == 1
		})
		r := execIn(t, d, `import hashlib, json, sqlite3, statistics
db = sqlite3.connect(':memory:')
db.execute('create table t (x)'); db.executemany('insert into t values (?)', [(1,), (2,), (6,)])
print(json.dumps([statistics.mean(r[0] for r in db.execute('select x from t')), hashlib.sha256(b'jaild').hexdigest()[:8]]))`, nil)
		if r.Status != "ok" || r.Stdout != `[3, "`+hex.EncodeToString(sha256Sum([]byte("jaild")))[:8]+`"]`+"\n" || !r.Usage.Warm {
			t.Errorf("stdlib snippet: %s %q %q warm %v", r.Status, r.Stdout, r.Stderr, r.Usage.Warm)
		}
		for _, mod := range []string{"numpy", "matplotlib"} {
			r = execIn(t, d, "import "+mod, nil)
			if r.Error == nil || r.Error.Type != "ModuleNotFoundError" || r.Error.Message != "No module named '"+mod+"'" {
				t.Errorf("import %s in python-minimal: %s %+v", mod, r.Status, r.Error)
			}
		}
	})

	t.Run("python-ml", func(t *testing.T) {
		dir := builtImage(t, "python-ml")
		m := readManifest(t, dir)
		if m.Name != "python-ml" || m.PythonPackages["torch"] == "" || m.PythonPackages["pandas"] == "" {
			t.Errorf("manifest: name %q, torch %q, pandas %q", m.Name, m.PythonPackages["torch"], m.PythonPackages["pandas"])
		}
		d := imageDaemon(t, dir, 0)
		// A tensor op, then a few steps of training a small network on a
		// fixed synthetic task: the loss must fall. Within the default
		// memory limit and a 60 s timeout.
		r := execIn(t, d, `import torch
torch.manual_seed(0)
a = torch.arange(6.0).reshape(2, 3)
print(a.sum().item(), (a @ a.T).tolist())
x = torch.randn(256, 4)
y = (x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1)
model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
losses = []
for step in range(50):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    losses.append(loss.item())
print(losses[-1] < losses[0] / 10, len(losses))`, &api.Limits{TimeoutMs: ptr(int64(60000))})
		want := "15.0 [[5.0, 14.0], [14.0, 50.0]]\nTrue 50\n"
		if r.Status != "ok" || r.Stdout != want {
			t.Errorf("torch: %s %q, stderr %q, error %+v; want %q", r.Status, r.Stdout, r.Stderr, r.Error, want)
		}
		t.Logf("torch training: %d ms, peak memory %d MiB", r.Usage.DurationMs, r.Usage.PeakMemoryBytes>>20)
	})
}

func sha256Sum(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

// testWheel is a pure-Python wheel made here (no index needed): the
// module jaildhello; fixed timestamps, so it is the same file every time.
func testWheel(t *testing.T) (name string, content []byte) {
	t.Helper()
	files := []struct{ name, body string }{
		{"jaildhello/__init__.py", "def hello():\n    return 'hello from a wheel'\n"},
		{"jaildhello-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: jaildhello\nVersion: 1.0\n"},
		{"jaildhello-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: jaild-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var record strings.Builder
	for _, f := range files {
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sha256Sum([]byte(f.body))), len(f.body))
	}
	record.WriteString("jaildhello-1.0.dist-info/RECORD,,\n")
	files = append(files, struct{ name, body string }{"jaildhello-1.0.dist-info/RECORD", record.String()})
	var buf bytes.Buffer
	z := zip.NewWriter(&buf)
	for _, f := range files {
		w, err := z.CreateHeader(&zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return "jaildhello-1.0-py3-none-any.whl", buf.Bytes()
}

// buildRecipe runs rootfs/build.sh for image in the recipes directory
// rdir, into cache: its output and whether it succeeded.
func buildRecipe(t *testing.T, cache, rdir, image string) (string, bool) {
	t.Helper()
	cmd := exec.Command("bash", "../rootfs/build.sh", "--cache-dir", cache, "--recipes", rdir, image)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// TestImageWheelhouse: a recipe with a local wheelhouse installs its
// pinned, hashed wheel into the image, the manifest lists it, and a run
// imports it; a wheel that is missing, changed or unpinned fails the
// build with a message naming it, before anything is downloaded.
func TestImageWheelhouse(t *testing.T) {
	rdir := t.TempDir()
	if out, err := exec.Command("cp", "-r", "../rootfs/images/python-minimal", rdir+"/").CombinedOutput(); err != nil {
		t.Fatalf("copy the python-minimal recipe: %v %s", err, out)
	}
	recipe := filepath.Join(rdir, "wheeltest")
	house := filepath.Join(recipe, "house")
	if err := os.MkdirAll(house, 0o755); err != nil {
		t.Fatal(err)
	}
	wname, wheel := testWheel(t)
	sum := hex.EncodeToString(sha256Sum(wheel))
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(recipe, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("recipe", "# a test recipe\nbase = python-minimal\nwheelhouse = house\n")
	write("requirements.txt", "jaildhello==1.0 \\\n    --hash=sha256:"+sum+"\n")
	if err := os.WriteFile(filepath.Join(house, wname), wheel, 0o644); err != nil {
		t.Fatal(err)
	}
	// build.sh names the wheelhouse by its real path.
	realHouse, err := filepath.EvalSymlinks(house)
	if err != nil {
		t.Fatal(err)
	}
	// Images of this test are kept apart from the shipped ones, and
	// keyed by their recipe like them: a rerun is a no-op.
	cache := filepath.Join(imagesRoot() + "-tests")

	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct{ name, req, want string }{
			{"changed", "jaildhello==1.0 --hash=sha256:" + strings.Repeat("ab", 32) + "\n", "no wheel in " + realHouse + " has the sha256 requirements.txt gives for jaildhello==1.0"},
			{"another's hash", "other-pkg==1.0 --hash=sha256:" + sum + "\n", "the wheel with the hash given for other-pkg==1.0 is " + wname + ", another distribution's"},
			{"unpinned", "jaildhello --hash=sha256:" + sum + "\n", "requirements.txt: 'jaildhello' is not pinned as NAME==VERSION"},
			{"no hash", "jaildhello==1.0\n", "requirements.txt: jaildhello==1.0 has no --hash=sha256:"},
		} {
			write("requirements.txt", c.req)
			start := time.Now()
			out, ok := buildRecipe(t, cache, rdir, "wheeltest")
			if ok || !strings.Contains(out, "build.sh: error: recipe wheeltest: "+c.want) {
				t.Errorf("%s: build ok=%v, output:\n%s\nwant an error containing %q", c.name, ok, out, c.want)
			}
			if strings.Contains(out, "building image") || time.Since(start) > 30*time.Second {
				t.Errorf("%s: refused only after %v of building", c.name, time.Since(start))
			}
		}
		// The wheel gone from the wheelhouse (a recipe never built: a
		// built one is a no-op that reads no wheel).
		write("requirements.txt", "# "+randHex(8)+"\njaildhello==1.0 \\\n    --hash=sha256:"+sum+"\n")
		if err := os.Rename(filepath.Join(house, wname), filepath.Join(rdir, wname)); err != nil {
			t.Fatal(err)
		}
		out, ok := buildRecipe(t, cache, rdir, "wheeltest")
		if ok || strings.Contains(out, "building image") || !strings.Contains(out, "no wheel in "+realHouse+" has the sha256 requirements.txt gives for jaildhello==1.0 (missing, or a different file)") {
			t.Errorf("missing wheel: build ok=%v, output:\n%s", ok, out)
		}
		if err := os.Rename(filepath.Join(rdir, wname), filepath.Join(house, wname)); err != nil {
			t.Fatal(err)
		}
	})
	write("requirements.txt", "jaildhello==1.0 \\\n    --hash=sha256:"+sum+"\n")

	out, ok := buildRecipe(t, cache, rdir, "wheeltest")
	if !ok {
		t.Fatalf("build the wheelhouse recipe:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	dir := lines[len(lines)-1]
	if cur, err := filepath.EvalSymlinks(filepath.Join(cache, "wheeltest", "current")); err != nil || cur != dir {
		t.Errorf("wheeltest/current is %q (%v), want %s", cur, err, dir)
	}
	m := readManifest(t, dir)
	if m.Name != "wheeltest" || len(m.Wheels) != 1 || m.Wheels[0].Name != "jaildhello" || m.Wheels[0].Version != "1.0" ||
		len(m.Wheels[0].SHA256) != 1 || m.Wheels[0].SHA256[0] != "sha256:"+sum {
		t.Errorf("manifest: name %q, wheels %+v; want jaildhello 1.0 sha256:%s", m.Name, m.Wheels, sum)
	}
	d := imageDaemon(t, dir, 0)
	r := execIn(t, d, "import jaildhello\nprint(jaildhello.hello(), jaildhello.__file__)\nimport importlib.util\nprint(importlib.util.find_spec('pip'))", nil)
	if want := "hello from a wheel /usr/local/lib/python3.13/dist-packages/jaildhello/__init__.py\nNone\n"; r.Status != "ok" || r.Stdout != want {
		t.Errorf("import the wheel's module: %s %q %q; want %q (pip purged after the build)", r.Status, r.Stdout, r.Stderr, want)
	}
	// A rebuild of the same recipe is a no-op naming the same directory.
	if out, ok := buildRecipe(t, cache, rdir, "wheeltest"); !ok || !strings.Contains(out, "rootfs wheeltest up to date: "+dir) {
		t.Errorf("rebuild: ok=%v\n%s", ok, out)
	}
}
