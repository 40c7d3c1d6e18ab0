package filestore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
)

// clock is a fake clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var quiet = slog.New(slog.DiscardHandler)

func testConfig(dir string, c *clock) Config {
	return Config{
		Dir: dir, MaxFileBytes: 1 << 20, MaxBytesPerUID: 4 << 20, MaxFilesPerUID: 10, MaxTotalBytes: 16 << 20,
		TTL: time.Hour, Now: c.Now,
	}
}

func newStore(t *testing.T, mod func(*Config)) (*Store, *clock) {
	t.Helper()
	c := &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)}
	cfg := testConfig(filepath.Join(t.TempDir(), "files"), c)
	if mod != nil {
		mod(&cfg)
	}
	s, err := Open(cfg, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, c
}

func put(t *testing.T, s *Store, owner uint32, name, content string) Meta {
	t.Helper()
	m, err := s.Put(owner, name, strings.NewReader(content))
	if err != nil {
		t.Fatalf("put %s: %v", name, err)
	}
	return m
}

func read(t *testing.T, s *Store, owner uint32, admin bool, id string) string {
	t.Helper()
	f, _, err := s.Open(owner, admin, id)
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// entries lists the store directory's names.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func sum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestPutOpenListDelete(t *testing.T) {
	s, c := newStore(t, nil)
	m := put(t, s, 1000, "data.csv", "a,b\n1,2\n")
	if !ValidID(m.ID) || m.Name != "data.csv" || m.Size != 8 || m.SHA256 != sum("a,b\n1,2\n") || m.Owner != 1000 ||
		!m.Created.Equal(c.Now()) || !m.Expires.Equal(c.Now().Add(time.Hour)) {
		t.Fatalf("meta %+v", m)
	}
	if got := read(t, s, 1000, false, m.ID); got != "a,b\n1,2\n" {
		t.Errorf("content %q", got)
	}
	st, err := s.Stat(1000, false, m.ID)
	if err != nil || st != m {
		t.Errorf("stat %+v %v", st, err)
	}
	c.Add(time.Second)
	m2 := put(t, s, 1000, "empty", "")
	if m2.Size != 0 || m2.SHA256 != sum("") || m2.ID == m.ID {
		t.Errorf("empty file %+v", m2)
	}
	if l := s.List(1000, false); len(l) != 2 || l[0].ID != m.ID || l[1].ID != m2.ID {
		t.Errorf("list %+v", l)
	}
	if b, n, total := s.Usage(1000); b != 8 || n != 2 || total != 8 {
		t.Errorf("usage %d %d %d", b, n, total)
	}
	d, err := s.Delete(1000, false, m.ID)
	if err != nil || d != m {
		t.Fatalf("delete %+v %v", d, err)
	}
	if _, err := s.Stat(1000, false, m.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("stat after delete: %v", err)
	}
	if _, err := s.Delete(1000, false, m.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if b, n, total := s.Usage(1000); b != 0 || n != 1 || total != 0 {
		t.Errorf("usage after delete %d %d %d", b, n, total)
	}
	if got := entries(t, s.cfg.Dir); !slices.Equal(got, []string{m2.ID + ".data", m2.ID + ".meta"}) {
		t.Errorf("directory %v", got)
	}
}

// A file opened before its deletion reads whole.
func TestOpenThenDelete(t *testing.T) {
	s, _ := newStore(t, nil)
	m := put(t, s, 1, "x", "content")
	f, _, err := s.Open(1, false, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := s.Delete(1, false, m.ID); err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(f); string(b) != "content" {
		t.Errorf("read %q", b)
	}
	if _, _, err := s.Open(1, false, m.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("open after delete: %v", err)
	}
}

func TestOwnerIsolation(t *testing.T) {
	s, _ := newStore(t, nil)
	a := put(t, s, 1000, "a", "A")
	b := put(t, s, 1001, "b", "B")
	for _, op := range []struct {
		name string
		f    func() error
	}{
		{"stat", func() error { _, err := s.Stat(1001, false, a.ID); return err }},
		{"open", func() error { _, _, err := s.Open(1001, false, a.ID); return err }},
		{"delete", func() error { _, err := s.Delete(1001, false, a.ID); return err }},
	} {
		err := op.f()
		if !errors.Is(err, errdefs.ErrNotFound) || err.Error() != "no file "+a.ID {
			t.Errorf("%s of another uid's file: %v", op.name, err)
		}
	}
	if l := s.List(1000, false); len(l) != 1 || l[0].ID != a.ID {
		t.Errorf("uid 1000 lists %+v", l)
	}
	// An admin sees, reads and deletes everyone's.
	if l := s.List(0, true); len(l) != 2 {
		t.Errorf("admin lists %+v", l)
	}
	if got := read(t, s, 0, true, b.ID); got != "B" {
		t.Errorf("admin read %q", got)
	}
	if _, err := s.Delete(0, true, a.ID); err != nil {
		t.Errorf("admin delete: %v", err)
	}
	if bytes, n, _ := s.Usage(1000); bytes != 0 || n != 0 {
		t.Errorf("owner's usage after an admin's delete: %d %d", bytes, n)
	}
}

func TestBadIDs(t *testing.T) {
	s, _ := newStore(t, nil)
	m := put(t, s, 1, "x", "x")
	for _, id := range []string{"", "f-", "../" + m.ID, m.ID + ".meta", strings.ToUpper(m.ID), m.ID[:len(m.ID)-1], m.ID + "0", "g" + m.ID[1:], ".tmp-0123456789abcdef", "f-0123456789abcdef0123456789abcdeg"} {
		if _, err := s.Stat(1, false, id); !errors.Is(err, errdefs.ErrNotFound) || err.Error() != "no such file (a file id is f- and 32 hex digits)" {
			t.Errorf("stat %q: %v", id, err)
		}
		if _, _, err := s.Open(1, true, id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("open %q: %v", id, err)
		}
		if _, err := s.Delete(1, true, id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("delete %q: %v", id, err)
		}
	}
}

func TestBounds(t *testing.T) {
	s, _ := newStore(t, func(c *Config) {
		c.MaxFileBytes, c.MaxBytesPerUID, c.MaxFilesPerUID, c.MaxTotalBytes = 100, 250, 3, 500
	})
	ok := func(owner uint32, size int) Meta {
		t.Helper()
		return put(t, s, owner, "f", strings.Repeat("x", size))
	}
	fail := func(owner uint32, size int, class error, words ...string) {
		t.Helper()
		before := entries(t, s.cfg.Dir)
		b0, n0, total0 := s.Usage(owner)
		_, err := s.Put(owner, "f", strings.NewReader(strings.Repeat("x", size)))
		if !errors.Is(err, class) {
			t.Fatalf("put %d bytes for %d: %v, want %v", size, owner, err, class)
		}
		for _, w := range words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q does not name %q", err, w)
			}
		}
		if after := entries(t, s.cfg.Dir); !slices.Equal(before, after) {
			t.Errorf("a refused put changed the directory: %v -> %v", before, after)
		}
		if b, n, total := s.Usage(owner); b != b0 || n != n0 || total != total0 {
			t.Errorf("a refused put changed the usage")
		}
	}
	ok(1, 100) // exactly the per-file bound
	fail(1, 101, errdefs.ErrTooLarge, "max_file_bytes (100 bytes)")
	var fe *errdefs.FieldError
	if _, err := s.Put(1, "f", strings.NewReader(strings.Repeat("x", 101))); !errors.As(err, &fe) || fe.Field != "body" {
		t.Errorf("per-file error %v has no field body", err)
	}
	ok(1, 100)
	fail(1, 51, errdefs.ErrTooLarge, "max_bytes_per_uid (250 bytes")
	ok(1, 50) // exactly the per-uid bound
	fail(1, 0, errdefs.ErrTooLarge, "max_files_per_uid (3)")
	ok(2, 100)
	ok(2, 100)
	fail(3, 51, errdefs.ErrInsufficientStorage, "max_total_bytes (500 bytes)")
	ok(3, 50)
	if _, _, total := s.Usage(0); total != 500 {
		t.Errorf("total %d", total)
	}
}

func TestMinFree(t *testing.T) {
	s, _ := newStore(t, func(c *Config) { c.MinFreeBytes = 1 << 62 })
	_, err := s.Put(1, "f", strings.NewReader("x"))
	if !errors.Is(err, errdefs.ErrInsufficientStorage) || !strings.Contains(err.Error(), "min_free_mb") {
		t.Fatalf("put on a disk below min free: %v", err)
	}
	if e := entries(t, s.cfg.Dir); len(e) != 0 {
		t.Errorf("left %v", e)
	}
}

// The disk's errors: out of space is 507, anything else the host's, with
// a message that names no path.
func TestStorageErrors(t *testing.T) {
	s, _ := newStore(t, nil)
	for _, errno := range []unix.Errno{unix.ENOSPC, unix.EDQUOT} {
		err := s.storageErr("write a file", &os.PathError{Op: "write", Path: filepath.Join(s.cfg.Dir, "x"), Err: errno})
		if status, _ := errdefs.Classify(err); status != 507 || strings.Contains(err.Error(), s.cfg.Dir) {
			t.Errorf("%v: %d %v", errno, status, err)
		}
	}
	err := s.storageErr("write a file", &os.PathError{Op: "write", Path: filepath.Join(s.cfg.Dir, "x"), Err: unix.EIO})
	if status, _ := errdefs.Classify(err); status != 500 || strings.Contains(err.Error(), s.cfg.Dir) || strings.Contains(err.Error(), "/") {
		t.Errorf("EIO: %d %v", status, err)
	}
}

// slowReader gives its content in small pieces, pausing between them.
type slowReader struct {
	left int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	time.Sleep(100 * time.Microsecond)
	n := min(len(p), r.left, 4096)
	for i := range n {
		p[i] = 'x'
	}
	r.left -= n
	return n, nil
}

// Concurrent uploads reserve as they go: together they never pass a bound.
func TestConcurrentPutsStayWithinQuota(t *testing.T) {
	s, _ := newStore(t, func(c *Config) {
		c.MaxFileBytes, c.MaxBytesPerUID, c.MaxFilesPerUID, c.MaxTotalBytes = 1<<20, 3<<20+1000, 5, 8<<20
	})
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = s.Put(7, fmt.Sprint("f", i), &slowReader{left: 1 << 20}) })
	}
	wg.Wait()
	stored := 0
	for _, err := range errs {
		switch {
		case err == nil:
			stored++
		case !errors.Is(err, errdefs.ErrTooLarge):
			t.Errorf("put: %v", err)
		}
	}
	// Uploads reserve as they go, so which (and how many) of them win
	// depends on the timing; the bound holds whatever it is.
	b, n, total := s.Usage(7)
	if stored < 1 || stored > 3 || n != stored || b != int64(stored)<<20 || total != b || s.reserved != 0 {
		t.Errorf("%d stored; usage %d bytes %d files, total %d, reserved %d", stored, b, n, total, s.reserved)
	}
	if e := entries(t, s.cfg.Dir); len(e) != 2*stored {
		t.Errorf("directory %v", e)
	}
	// The count bound too: 5 files at most, with 8 uploads at once.
	s2, _ := newStore(t, func(c *Config) { c.MaxFilesPerUID = 5 })
	for i := range errs {
		wg.Go(func() { _, errs[i] = s2.Put(7, "f", &slowReader{left: 100 << 10}) })
	}
	wg.Wait()
	if _, n, _ := s2.Usage(7); n != 5 {
		t.Errorf("%d files stored with max_files_per_uid 5", n)
	}
}

// A reader's error fails the Put, keeps its class, and leaves nothing.
func TestReaderError(t *testing.T) {
	s, _ := newStore(t, nil)
	cut := errdefs.New(errdefs.ErrInvalidArgument, "body: the client went away")
	_, err := s.Put(1, "f", io.MultiReader(strings.NewReader(strings.Repeat("x", 100000)), iotest.ErrReader(cut)))
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "client went away") {
		t.Errorf("put: %v", err)
	}
	if e := entries(t, s.cfg.Dir); len(e) != 0 {
		t.Errorf("left %v", e)
	}
	if b, n, total := s.Usage(1); b != 0 || n != 0 || total != 0 || s.reserved != 0 || len(s.uids) != 0 {
		t.Errorf("usage %d %d %d, reserved %d", b, n, total, s.reserved)
	}
}

func TestTTL(t *testing.T) {
	s, c := newStore(t, nil)
	old := put(t, s, 1, "old", "old")
	c.Add(30 * time.Minute)
	young := put(t, s, 1, "young", "young")
	c.Add(30 * time.Minute) // old's TTL is over: invisible at once
	if _, err := s.Stat(1, false, old.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("stat of an expired file: %v", err)
	}
	if l := s.List(1, true); len(l) != 1 || l[0].ID != young.ID {
		t.Errorf("list %+v", l)
	}
	if n := s.Collect(); n != 1 {
		t.Errorf("collected %d", n)
	}
	if e := entries(t, s.cfg.Dir); !slices.Equal(e, []string{young.ID + ".data", young.ID + ".meta"}) {
		t.Errorf("directory %v", e)
	}
	if b, n, _ := s.Usage(1); b != 5 || n != 1 {
		t.Errorf("usage %d %d", b, n)
	}
	c.Add(time.Hour)
	if n := s.Collect(); n != 1 || len(entries(t, s.cfg.Dir)) != 0 || len(s.uids) != 0 {
		t.Errorf("collected %d, left %v", n, entries(t, s.cfg.Dir))
	}
}

// The collector goroutine runs by itself.
func TestCollector(t *testing.T) {
	s, c := newStore(t, func(c *Config) { c.TTL = 2 * time.Second }) // collector every second
	put(t, s, 1, "f", "x")
	c.Add(2 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for len(entries(t, s.cfg.Dir)) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the collector did not remove an expired file")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A full quota is freed of expired files before an upload is refused.
func TestQuotaCollectsExpired(t *testing.T) {
	s, c := newStore(t, func(c *Config) { c.MaxFilesPerUID = 1 })
	put(t, s, 1, "a", "a")
	c.Add(2 * time.Hour)
	put(t, s, 1, "b", "b")
}

// TestRecovery leaves what a kill -9 may leave at each step of a Put or a
// Delete, and what a corrupt disk may hold, and reopens.
func TestRecovery(t *testing.T) {
	s, c := newStore(t, nil)
	dir := s.cfg.Dir
	keep := put(t, s, 1000, "keep.csv", "kept content")
	keep2 := put(t, s, 1001, "other", "other content")
	victim := func(name string) Meta { return put(t, s, 1000, name, "victim "+name) }
	dataOnly := victim("data-only")  // killed after the data's rename
	metaOnly := victim("meta-only")  // data lost
	corrupt := victim("corrupt")     // garbage record
	truncated := victim("truncated") // half a record
	resized := victim("resized")     // data of another size
	expired := victim("expired")     // TTL over while the daemon was down
	huge := victim("huge")           // record over 4 KiB
	otherID := victim("other-id")    // record naming another id
	linked := victim("linked")       // data replaced by a symlink
	s.Close()

	w := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rm := func(name string) {
		t.Helper()
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	w(".tmp-0123456789abcdef", "an upload in progress")
	w(".tmp-fedcba9876543210", `{"v":1`)
	rm(dataOnly.ID + ".meta")
	rm(metaOnly.ID + ".data")
	w(corrupt.ID+".meta", "\x00\xff garbage")
	b, _ := encodeMeta(truncated)
	w(truncated.ID+".meta", string(b[:len(b)/2]))
	w(resized.ID+".data", "other size")
	e := expired
	e.Expires = c.Now().Add(-time.Second)
	b, _ = encodeMeta(e)
	w(expired.ID+".meta", string(b))
	h := huge
	b, _ = encodeMeta(h)
	w(huge.ID+".meta", string(b[:len(b)-1])+strings.Repeat(" ", maxMetaBytes)+"}")
	o := otherID
	o.ID = newID()
	b, _ = encodeMeta(o)
	w(otherID.ID+".meta", string(b))
	rm(linked.ID + ".data")
	if err := os.Symlink(filepath.Join(dir, keep.ID+".data"), filepath.Join(dir, linked.ID+".data")); err != nil {
		t.Fatal(err)
	}
	w("README", "not the store's") // left alone
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	s2, err := Open(testConfig(dir, c), quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	want := []string{"README", keep.ID + ".data", keep.ID + ".meta", keep2.ID + ".data", keep2.ID + ".meta"}
	slices.Sort(want)
	if got := entries(t, dir); !slices.Equal(got, want) {
		t.Errorf("after recovery:\n%v\nwant\n%v", got, want)
	}
	if got := read(t, s2, 1000, false, keep.ID); got != "kept content" {
		t.Errorf("content %q", got)
	}
	if m, err := s2.Stat(1000, false, keep.ID); err != nil || m != keep {
		t.Errorf("recovered %+v %v, want %+v", m, err, keep)
	}
	if b, n, total := s2.Usage(1000); b != int64(len("kept content")) || n != 1 || total != int64(len("kept content")+len("other content")) {
		t.Errorf("usage %d %d %d", b, n, total)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("store directory mode %v %v", fi.Mode(), err)
	}
}

func TestOpenRefusesAnotherOwnersDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	dir := t.TempDir()
	if err := os.Chown(dir, 12345, 12345); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(testConfig(dir, &clock{}), quiet); err == nil || !strings.Contains(err.Error(), "uid 12345") {
		t.Errorf("open: %v", err)
	}
}

func TestOpenRefusesASymlink(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(t.TempDir(), filepath.Join(dir, "files")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(testConfig(filepath.Join(dir, "files"), &clock{}), quiet); err == nil {
		t.Error("opened a store through a symlink")
	}
}

func TestClosed(t *testing.T) {
	s, _ := newStore(t, nil)
	m := put(t, s, 1, "f", "x")
	f, _, err := s.Open(1, false, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	if _, err := s.Put(1, "g", strings.NewReader("y")); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("put after close: %v", err)
	}
	if _, err := s.Delete(1, false, m.ID); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("delete after close: %v", err)
	}
	// A file opened before still reads.
	if b, _ := io.ReadAll(f); string(b) != "x" {
		t.Errorf("read %q", b)
	}
	f.Close()
}

func TestNames(t *testing.T) {
	for _, name := range []string{"data.csv", "a b", "données.csv", "日本語.txt", "..a", "a..", ".hidden", "-rf", `back\slash`, "emoji 🙂", strings.Repeat("x", 255), strings.Repeat("é", 127)} {
		if err := ValidName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, name := range []string{"", ".", "..", "a/b", "/", "../x", "a\x00b", "a\nb", "a\rb", "\t", "a\x7fb", "a\u0085b", "a\u2028b", "evil\u202etxt.exe", "a\u2066b", "\xff", "a\xc3", strings.Repeat("x", 256), strings.Repeat("é", 128)} {
		err := ValidName(name)
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) || fe.Field != "name" || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: %v, want a field error for name", name, err)
		}
	}
	s, _ := newStore(t, nil)
	if _, err := s.Put(1, "../x", strings.NewReader("x")); !errors.Is(err, errdefs.ErrInvalidArgument) || len(entries(t, s.cfg.Dir)) != 0 {
		t.Errorf("put ../x: %v", err)
	}
}

func TestMetaRoundTrip(t *testing.T) {
	m := Meta{ID: newID(), Name: "a \"quoted\" name\u00e9", Size: 12, SHA256: sum("x"), Created: time.Date(2030, 1, 1, 0, 0, 0, 5, time.UTC), Owner: 4294967295}
	m.Expires = m.Created.Add(time.Hour)
	b, err := encodeMeta(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeMeta(b)
	if err != nil || got != m {
		t.Fatalf("decoded %+v %v from %s", got, err, b)
	}
	for _, bad := range []string{
		"", "{}", "null", "[]", string(b) + "{}", strings.Replace(string(b), `"v":1`, `"v":2`, 1),
		strings.Replace(string(b), `"size":12`, `"size":-1`, 1), strings.Replace(string(b), `"owner":`, `"extra":1,"owner":`, 1),
		strings.Replace(string(b), m.SHA256, strings.ToUpper(m.SHA256), 1), strings.Replace(string(b), m.ID, "f-x", 1),
		strings.Replace(string(b), `"name":"a`, `"name":"a/`, 1), strings.Replace(string(b), "2030-01-01T01", "2029-01-01T01", 1),
		strings.Replace(string(b), `"owner":4294967295`, `"owner":4294967296`, 1),
	} {
		if _, err := decodeMeta([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func FuzzMeta(f *testing.F) {
	m := Meta{ID: "f-0123456789abcdef0123456789abcdef", Name: "data.csv", Size: 3, SHA256: sum("abc"), Created: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Owner: 1000}
	m.Expires = m.Created.Add(24 * time.Hour)
	b, _ := encodeMeta(m)
	f.Add(b)
	f.Add([]byte(`{"v":1,"id":"f-0123456789abcdef0123456789abcdef","name":"\u00e9","size":0,"sha256":"` + sum("") + `","created":"2030-01-01T00:00:00+02:00","expires":"2030-01-01T00:00:00+02:00","owner":0}`))
	f.Add([]byte(`{"v":1,"name":"x","created":"0000-01-01T00:00:00Z"}`))
	f.Add([]byte("{\"v\":1}garbage"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		if ValidName(m.Name) != nil || !ValidID(m.ID) || m.Size < 0 || m.Expires.Before(m.Created) {
			t.Fatalf("accepted an invalid record %+v", m)
		}
		enc, err := encodeMeta(m)
		if err != nil {
			t.Fatalf("an accepted record does not encode: %v", err)
		}
		if len(enc) > maxMetaBytes {
			t.Fatalf("an accepted record encodes to %d bytes", len(enc))
		}
		m2, err := decodeMeta(enc)
		if err != nil || m2 != m {
			t.Fatalf("round trip: %+v %v, want %+v", m2, err, m)
		}
	})
}

func FuzzName(f *testing.F) {
	for _, s := range []string{"data.csv", "..", "a/b", "\u202e", "\xff", "é", strings.Repeat("x", 255)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidName(name)
		if err != nil {
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || fe.Field != "name" {
				t.Fatalf("%q: error %v is not a field error for name", name, err)
			}
			return
		}
		if len(name) == 0 || len(name) > MaxNameBytes || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") || !utf8.ValidString(name) {
			t.Fatalf("accepted %q", name)
		}
		for _, r := range name {
			if r < 0x20 || (r >= 0x7f && r < 0xa0) {
				t.Fatalf("accepted %q with a control character", name)
			}
		}
		if filepath.Base(name) != name {
			t.Fatalf("accepted %q, which is not a plain file name", name)
		}
	})
}
