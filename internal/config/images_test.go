package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestImagesLoad: an [images.NAME] table loads with its defaults merged
// over [defaults] key by key, and plain_pool_size defaults to 1 while an
// explicit 0 stays 0.
func TestImagesLoad(t *testing.T) {
	c, err := Load(write(t, `
[defaults]
timeout_ms = 5000
[images.python-minimal]
dir = "/var/lib/jaild/rootfs/python-minimal/current"
[images.python-minimal.defaults]
memory_mb = 256
pids = 32
[images.python_ml]
dir = "/var/lib/jaild/rootfs/python-ml/current"
plain_pool_size = 0
pool_size = 2
preimport = ["torch", "numpy.linalg"]
`), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Images) != 2 {
		t.Fatalf("images %+v, want python-minimal and python_ml", c.Images)
	}
	mini, ml := c.Images["python-minimal"], c.Images["python_ml"]
	if mini.Dir != "/var/lib/jaild/rootfs/python-minimal/current" || mini.PoolSize != 0 || mini.PlainPoolSize != nil || mini.PlainPool() != DefaultPlainPoolSize {
		t.Errorf("python-minimal %+v (plain pool %d), want its dir and a plain pool of %d", mini, mini.PlainPool(), DefaultPlainPoolSize)
	}
	if ml.PlainPoolSize == nil || ml.PlainPool() != 0 || ml.PoolSize != 2 || !slices.Equal(ml.Preimport, []string{"torch", "numpy.linalg"}) {
		t.Errorf("python_ml %+v (plain pool %d), want an explicit plain pool of 0 and 2 preloaded", ml, ml.PlainPool())
	}
	want := Default().Defaults
	want.TimeoutMs = 5000 // [defaults]', which the image does not set
	want.MemoryMB, want.Pids = 256, 32
	if got := c.ImageDefaults("python-minimal"); got != want {
		t.Errorf("ImageDefaults(python-minimal) = %+v, want %+v", got, want)
	}
	for _, name := range []string{"python_ml", "python", ""} {
		if got := c.ImageDefaults(name); got != c.Defaults {
			t.Errorf("ImageDefaults(%q) = %+v, want [defaults] %+v", name, got, c.Defaults)
		}
	}
}

// TestImagesRefused: each bad [images] setting stops the load with an
// error that names its key.
func TestImagesRefused(t *testing.T) {
	const dir = "dir = \"/srv/x\"\n"
	many := ""
	for i := range MaxImages + 1 {
		many += fmt.Sprintf("[images.i%d]\ndir = \"/srv/i%d\"\n", i, i)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"upper case", "[images.Python]\n" + dir, "images.Python: an image's name is"},
		{"slash", "[images.\"a/b\"]\n" + dir, "images.a/b: an image's name is"},
		{"leading dash", "[images.-x]\n" + dir, "images.-x: an image's name is"},
		{"too long", "[images." + strings.Repeat("a", 64) + "]\n" + dir, "images." + strings.Repeat("a", 64) + ": an image's name is"},
		{"no dir", "[images.x]\npool_size = 0\n", `images.x.dir: must be an absolute path, got ""`},
		{"relative dir", "[images.x]\ndir = \"rootfs/x\"\n", `images.x.dir: must be an absolute path, got "rootfs/x"`},
		{"same dir twice", "[images.x]\ndir = \"/srv/x\"\n[images.y]\ndir = \"/srv/x/\"\n", "images.y.dir: is also images.x.dir's"},
		{"the default's dir", "image = \"/srv/python/current\"\n[images.x]\ndir = \"/srv/python/current\"\n", "images.x.dir: is also image's"},
		{"default above the ceiling", "[images.x]\n" + dir + "[images.x.defaults]\npids = 5000\n", "images.x.defaults.pids: must be in 1..4096"},
		{"negative default", "[images.x]\n" + dir + "[images.x.defaults]\ntimeout_ms = -1\n", "images.x.defaults.timeout_ms: must be in 1.."},
		{"negative pool", "[images.x]\n" + dir + "pool_size = -1\n", "images.x.pool_size: must be in 0..64"},
		{"pool above 64", "[images.x]\n" + dir + "pool_size = 65\npreimport = [\"numpy\"]\n", "images.x.pool_size: must be in 0..64"},
		{"plain pool above 64", "[images.x]\n" + dir + "plain_pool_size = 65\n", "images.x.plain_pool_size: must be in 0..64"},
		{"negative plain pool", "[images.x]\n" + dir + "plain_pool_size = -1\n", "images.x.plain_pool_size: must be in 0..64"},
		{"pool without preimport", "[images.x]\n" + dir + "pool_size = 1\n", "images.x.pool_size: preloaded jails need modules to preload"},
		{"bad module", "[images.x]\n" + dir + "pool_size = 1\npreimport = [\"numpy\", \"os; rm\"]\n", `images.x.preimport[1]: "os; rm" is not a Python module name`},
		{"too many", many, fmt.Sprintf("images: at most %d images beside the default, got %d", MaxImages, MaxImages+1)},
		{"unknown key", "[images.x]\n" + dir + "size = 2\n", "unknown key images.x.size"},
		{"unknown default", "[images.x]\n" + dir + "[images.x.defaults]\nmemory = 2\n", "unknown key images.x.defaults.memory"},
	} {
		_, err := Load(write(t, tc.body), true)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one with %q", tc.name, err, tc.want)
		}
	}
	// A default within the ceilings but above [maxima] names both keys
	// and both values.
	_, err := Load(write(t, "[images.x]\n"+dir+"[images.x.defaults]\nmemory_mb = 4096\n"), true)
	if err == nil || !strings.Contains(err.Error(), "images.x.defaults.memory_mb") || !strings.Contains(err.Error(), "(4096) is above maxima.memory_mb (2048)") {
		t.Errorf("default above maxima: error %v, want images.x.defaults.memory_mb (4096) is above maxima.memory_mb (2048)", err)
	}
	// MaxImages of them are fine.
	at := ""
	for i := range MaxImages {
		at += fmt.Sprintf("[images.i%d]\ndir = \"/srv/i%d\"\n", i, i)
	}
	if _, err := Load(write(t, at), true); err != nil {
		t.Errorf("%d images: %v", MaxImages, err)
	}
}

// TestNeedRestart: a reload applies image and [images]; a change to any
// other key is listed, by its key or section.
func TestNeedRestart(t *testing.T) {
	const base = `
image = "/srv/python/a"
[images.small]
dir = "/srv/small/a"
`
	cur, err := Load(write(t, base), true)
	if err != nil {
		t.Fatal(err)
	}
	same, err := Load(write(t, base), true)
	if err != nil {
		t.Fatal(err)
	}
	if keys := cur.NeedRestart(same); len(keys) != 0 {
		t.Errorf("the same file: %v, want none", keys)
	}
	images, err := Load(write(t, `
image = "/srv/python/b"
[images.small]
dir = "/srv/small/b"
plain_pool_size = 3
[images.small.defaults]
memory_mb = 256
[images.ml]
dir = "/srv/ml/a"
`), true)
	if err != nil {
		t.Fatal(err)
	}
	if keys := cur.NeedRestart(images); len(keys) != 0 {
		t.Errorf("only image and [images] changed: %v, want none", keys)
	}
	if keys := images.NeedRestart(Default()); len(keys) != 0 {
		t.Errorf("[images] removed and image back to its default: %v, want none", keys)
	}
	others, err := Load(write(t, `socket = "/run/jaild/other.sock"`+base+`
[pool]
size = 0
[defaults]
memory_mb = 256
`), true)
	if err != nil {
		t.Fatal(err)
	}
	keys := cur.NeedRestart(others)
	slices.Sort(keys)
	if want := []string{"defaults", "pool", "socket"}; !slices.Equal(keys, want) {
		t.Errorf("NeedRestart = %v, want %v", keys, want)
	}
}
