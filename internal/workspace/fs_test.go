package workspace

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
)

// fsTree is a directory with a file, a subdirectory, a link out of it,
// a link in it and a FIFO, opened as a Dir.
func fsTree(t *testing.T) (*Dir, string) {
	t.Helper()
	root := t.TempDir()
	outside := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(outside, "secret"), []byte("host"), 0o600))
	must(os.WriteFile(filepath.Join(root, "a.txt"), []byte("alpha"), 0o644))
	must(os.Mkdir(filepath.Join(root, "sub"), 0o755))
	must(os.WriteFile(filepath.Join(root, "sub", "b.txt"), []byte("beta"), 0o644))
	must(os.Symlink(outside, filepath.Join(root, "out")))
	must(os.Symlink("a.txt", filepath.Join(root, "in")))
	must(unix.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	d, err := Open(root)
	must(err)
	t.Cleanup(func() { d.Close() })
	return d, root
}

func wantClass(t *testing.T, what string, err, class error, field string) {
	t.Helper()
	var fe *errdefs.FieldError
	if !errors.Is(err, class) || !errors.As(err, &fe) || fe.Field != field {
		t.Errorf("%s: %v, want %v naming %s", what, err, class, field)
	}
}

func TestFSListAndRead(t *testing.T) {
	d, _ := fsTree(t)
	list, truncated, err := d.List("", 100)
	if err != nil || truncated {
		t.Fatal(err, truncated)
	}
	var got []string
	for _, e := range list {
		got = append(got, e.Name+":"+e.Type)
	}
	if want := "a.txt:file fifo:other in:symlink out:symlink sub:dir"; strings.Join(got, " ") != want {
		t.Errorf("listing %q, want %q", strings.Join(got, " "), want)
	}
	if list, truncated, _ := d.List("", 2); len(list) != 2 || !truncated {
		t.Errorf("a listing of 2: %d entries, truncated %v", len(list), truncated)
	}
	f, e, err := d.OpenFile("sub/b.txt")
	if err != nil || e.Size != 4 || e.Type != spec.FSFile {
		t.Fatalf("open sub/b.txt: %+v %v", e, err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "beta" {
		t.Errorf("read %q", b)
	}
	for _, tc := range []struct {
		rel   string
		class error
	}{
		{"out/secret", errdefs.ErrConflict}, // through a link out
		{"in", errdefs.ErrConflict},         // a link, even one inside
		{"fifo", errdefs.ErrConflict},       // not a regular file, and not blocked on
		{"sub", errdefs.ErrConflict},        // a directory
		{"missing", errdefs.ErrNotFound},
	} {
		_, _, err := d.OpenFile(tc.rel)
		wantClass(t, "open "+tc.rel, err, tc.class, "path")
	}
	if _, _, err := d.List("out", 10); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("list through a link: %v", err)
	}
}

func TestFSPut(t *testing.T) {
	d, root := fsTree(t)
	e, created, err := d.Put("a.txt", strings.NewReader("new"), 100, false, -1, -1)
	if err != nil || created || e.Size != 3 {
		t.Fatalf("replace a.txt: %+v %v %v", e, created, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(b) != "new" {
		t.Errorf("a.txt %q", b)
	}
	if _, created, err := d.Put("x/y/z.txt", strings.NewReader("deep"), 100, true, -1, -1); err != nil || !created {
		t.Errorf("with parents: %v %v", created, err)
	}
	_, _, err = d.Put("p/q.txt", strings.NewReader("no"), 100, false, -1, -1)
	wantClass(t, "without parents", err, errdefs.ErrNotFound, "path")
	_, _, err = d.Put("big", strings.NewReader(strings.Repeat("x", 101)), 100, false, -1, -1)
	wantClass(t, "past the limit", err, errdefs.ErrTooLarge, "path")
	for _, rel := range []string{"in", "sub", "fifo", "out/secret", "out/new"} {
		_, _, err := d.Put(rel, strings.NewReader("w"), 100, false, -1, -1)
		wantClass(t, "put "+rel, err, errdefs.ErrConflict, "path")
	}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".jaild-put-") {
			t.Errorf("a temporary file left: %s", e.Name())
		}
	}
	if _, err := os.Lstat(filepath.Join(root, "big")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused put left its file: %v", err)
	}
}

func TestFSRemoveMkdirMove(t *testing.T) {
	d, root := fsTree(t)
	wantClass(t, "remove a full directory", d.Remove("sub"), errdefs.ErrConflict, "path")
	if err := d.Remove("out"); err != nil {
		t.Errorf("remove a link: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "out")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the link is still there")
	}
	if e, err := d.Mkdir("m", false, -1, -1); err != nil || e.Type != spec.FSDir {
		t.Errorf("mkdir: %+v %v", e, err)
	}
	_, err := d.Mkdir("m", false, -1, -1)
	wantClass(t, "mkdir again", err, errdefs.ErrConflict, "path")
	if _, err := d.Mkdir("n/o/p", true, -1, -1); err != nil {
		t.Errorf("mkdir with parents: %v", err)
	}
	if _, err := d.Mkdir("n/o/p", true, -1, -1); err != nil {
		t.Errorf("mkdir with parents of one that exists: %v", err)
	}
	if e, err := d.Move("a.txt", "m/a.txt"); err != nil || e.Name != "a.txt" || e.Size != 5 {
		t.Errorf("move: %+v %v", e, err)
	}
	_, err = d.Move("sub/b.txt", "m/a.txt")
	wantClass(t, "move over a file", err, errdefs.ErrConflict, "to")
	_, err = d.Move("gone", "m/gone")
	wantClass(t, "move of nothing", err, errdefs.ErrNotFound, "path")
	_, err = d.Move("m", "m/inner")
	wantClass(t, "move into itself", err, errdefs.ErrConflict, "to")
	_, err = d.Move("sub/b.txt", "in/b.txt")
	wantClass(t, "move through a link", err, errdefs.ErrConflict, "to")
	if err := d.Remove("sub/b.txt"); err != nil {
		t.Errorf("remove a file: %v", err)
	}
	if err := d.Remove("sub"); err != nil {
		t.Errorf("remove an empty directory: %v", err)
	}
	wantClass(t, "remove of nothing", d.Remove("sub"), errdefs.ErrNotFound, "path")
}
