package workspace

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
)

func TestValidatePath(t *testing.T) {
	ok := []string{"a", "a/b.txt", "dir/sub/file.csv", strings.Repeat("x", 255), "a b/ü.txt", ".env", "a/.hidden/b"}
	bad := []string{"", "/etc/x", "../../etc/cron.d/x", "a/../../b", "a\x00b", "a//b", "./a", "a/.", "a/..",
		strings.Repeat("x", 256), strings.Repeat("a/", 40) + "f", strings.Repeat("x", 10000)}
	for _, p := range ok {
		if err := ValidatePath(p); err != nil {
			t.Errorf("ValidatePath(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range bad {
		if err := ValidatePath(p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ValidatePath(%q) = %v, want an invalid argument", p, err)
		}
	}
	if err := ValidatePattern("a/[x"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ValidatePattern(bad glob) = %v, want an invalid argument", err)
	}
	if err := ValidatePattern("../*"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ValidatePattern(../*) = %v, want an invalid argument", err)
	}
}

func TestMatch(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"out.csv", "out.csv", true},
		{"*.csv", "out.csv", true},
		{"*.csv", "d/out.csv", false},
		{"**/*.csv", "out.csv", true},
		{"**/*.csv", "a/b/out.csv", true},
		{"out/*", "out/a.png", true},
		{"out/*", "out/d/a.png", false},
		{"out/**", "out/d/a.png", true},
		{"a/**/z", "a/z", true},
		{"a/**/z", "a/b/c/z", true},
		{"a/**/z", "a/b/c/y", false},
		{"f?.txt", "f1.txt", true},
		{"[ab].txt", "c.txt", false},
		// Dot files: wildcards skip them, as shells and Python's glob do.
		{"*", ".env", false},
		{"**", ".env", false},
		{"**", "a/.cache/x", false},
		{"**/*.py", ".venv/lib/x.py", false},
		{"out/*", "out/.x", false},
		{"?env", ".env", false},
		{".env", ".env", true},
		{".*", ".env", true},
		{".cache/**", ".cache/a/b", true},
		{".cache/**", ".cache/a/.b", false},
		{"**/.git/*", "src/.git/HEAD", true},
		{"**", "a/b/c", true},
	}
	for _, c := range cases {
		if got := Match(c.pattern, c.name); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
	// 31 "**" against a 12-deep name: exponential with backtracking, so
	// this only finishes because matching is linear in each.
	deep := strings.Repeat("d/", 12) + "f"
	if Match(strings.Repeat("**/", 31)+"nomatch", deep) || !Match(strings.Repeat("**/", 31)+"f", deep) {
		t.Error("many ** matched wrongly")
	}
}

func open(t *testing.T) (*Dir, string) {
	t.Helper()
	root := t.TempDir()
	d, err := Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, root
}

// Files two and more directories deep were refused with EINVAL: opening a
// parent combined O_PATH with O_NOCTTY, which openat2 rejects.
func TestWriteDeep(t *testing.T) {
	d, root := open(t)
	uid, gid := os.Getuid(), os.Getgid()
	for _, p := range []string{"top.txt", "a/one.txt", "a/b/c.txt", "a/b/d/e/f/g.txt", "a/b/c2.txt", ".hidden/x"} {
		if err := d.Write(p, strings.NewReader("data:"+p), uid, gid); err != nil {
			t.Fatalf("Write(%q) = %v", p, err)
		}
		got, err := os.ReadFile(filepath.Join(root, p))
		if err != nil || string(got) != "data:"+p {
			t.Fatalf("%s = %q, %v", p, got, err)
		}
	}
	if err := d.Write("a/b/c.txt", strings.NewReader("again"), uid, gid); err == nil {
		t.Error("Write replaced an existing file")
	}
}

// Replace replaces a regular file, and only that: a directory, a symlink
// (to a file outside) or a FIFO at the path is refused and left as it
// was, and nothing is followed.
func TestReplace(t *testing.T) {
	d, root := open(t)
	uid, gid := os.Getuid(), os.Getgid()
	outside := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(outside, []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, setup string }{{"a/f.txt", "file"}, {"dir", "dir"}, {"link", "link"}, {"fifo", "fifo"}} {
		p := filepath.Join(root, c.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch c.setup {
		case "file":
			err = os.WriteFile(p, []byte("old"), 0o644)
		case "dir":
			err = os.Mkdir(p, 0o755)
		case "link":
			err = os.Symlink(outside, p)
		case "fifo":
			err = unix.Mkfifo(p, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
		err = d.Replace(c.path, strings.NewReader("new"), uid, gid)
		if c.setup == "file" {
			got, _ := os.ReadFile(p)
			if err != nil || string(got) != "new" {
				t.Errorf("replace a file: %v, %q", err, got)
			}
			continue
		}
		if err == nil || !errors.Is(err, unix.EEXIST) {
			t.Errorf("replace a %s: %v, want EEXIST", c.setup, err)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "outside" {
		t.Errorf("the file outside was changed: %q", b)
	}
	if err := d.Write("a/f.txt", strings.NewReader("again"), uid, gid); err == nil {
		t.Error("Write replaced a file")
	}
}

// A symlink on the way, planted where a jail could, is never followed.
func TestWriteRefusesSymlinks(t *testing.T) {
	d, root := open(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "f"), filepath.Join(root, "flink")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"link/x", "link/a/b", "flink"} {
		err := d.Write(p, strings.NewReader("x"), os.Getuid(), os.Getgid())
		if err == nil || errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Write(%q) through a symlink = %v, want a refusal of the host's class", p, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("something was written outside: %v", ents)
	}
}

func TestCollect(t *testing.T) {
	d, root := open(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "out/sub"), 0o755))
	must(os.MkdirAll(filepath.Join(root, ".cache"), 0o755))
	must(os.WriteFile(filepath.Join(root, "out/a.csv"), []byte("a"), 0o644))
	must(os.WriteFile(filepath.Join(root, "out/sub/b.csv"), []byte("bb"), 0o644))
	must(os.WriteFile(filepath.Join(root, "out/.secret"), []byte("s"), 0o644))
	must(os.WriteFile(filepath.Join(root, ".cache/c"), []byte("c"), 0o644))
	must(os.Symlink("/etc/passwd", filepath.Join(root, "out/passwd")))
	got, err := d.Collect([]string{"out/**", "missing.txt", ".cache/*"})
	must(err)
	want := map[string]string{"out/a.csv": "a", "out/sub/b.csv": "bb", ".cache/c": "c"}
	errs := map[string]bool{}
	for _, f := range got {
		if f.Error != "" {
			errs[f.Path] = true
			continue
		}
		if w, ok := want[f.Path]; !ok || string(f.Data) != w || f.Size != int64(len(w)) {
			t.Errorf("returned %s = %q", f.Path, f.Data)
		}
		delete(want, f.Path)
	}
	if len(want) != 0 {
		t.Errorf("not returned: %v", want)
	}
	if !errs["out/passwd"] || !errs["missing.txt"] || len(errs) != 2 {
		t.Errorf("reported as not returned: %v; want the symlink and the missing literal", errs)
	}
}

func TestCollectBounds(t *testing.T) {
	d, root := open(t)
	big := bytes.Repeat([]byte("x"), MaxReturnFileBytes+1)
	if err := os.WriteFile(filepath.Join(root, "big"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(root, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := d.Collect([]string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d entries: %+v", len(got), got)
	}
	for _, f := range got {
		if f.Error == "" || len(f.Data) != 0 {
			t.Errorf("%s: returned %d bytes, error %q; want it refused", f.Path, len(f.Data), f.Error)
		}
	}
}

func TestReadFigures(t *testing.T) {
	dir := t.TempDir()
	png := append(append([]byte{}, pngMagic...), "rest"...)
	for name, data := range map[string][]byte{
		"figure-2.png": png, "figure-1.png": png, "figure-10.png": png,
		"figure-3.png": []byte("not a png"), "figure-01.png": png, "other.png": png,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "figure-1.png"), filepath.Join(dir, "figure-4.png")); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range ReadFigures(dir) {
		names = append(names, f.Name)
	}
	if strings.Join(names, " ") != "figure-1.png figure-2.png figure-10.png" {
		t.Errorf("figures %v", names)
	}
}

// FuzzValidatePath: an accepted path stays beneath the workspace.
func FuzzValidatePath(f *testing.F) {
	for _, s := range []string{"a", "a/b", "../x", "/x", "a/./b", ".env", "a\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if ValidatePath(p) != nil {
			return
		}
		if c := filepath.Clean(p); c != p || filepath.IsAbs(p) || c == ".." || strings.HasPrefix(c, "../") {
			t.Fatalf("accepted %q, which is not clean and beneath", p)
		}
	})
}

// FuzzMatch: matching never panics, and agrees with path.Match on patterns
// and names of one component that do not start with a dot.
func FuzzMatch(f *testing.F) {
	f.Add("**/*.csv", "a/b.csv")
	f.Add("a/**/z", "a/.b/z")
	f.Add("[a-", "a")
	f.Fuzz(func(t *testing.T, pattern, name string) {
		if ValidatePattern(pattern) != nil || ValidatePath(name) != nil {
			return
		}
		got := Match(pattern, name)
		if !strings.Contains(pattern, "/") && !strings.Contains(name, "/") && pattern != "**" && !hidden(name) {
			if want, _ := filepath.Match(pattern, name); got != want {
				t.Fatalf("Match(%q, %q) = %v, path.Match says %v", pattern, name, got, want)
			}
		}
	})
}
