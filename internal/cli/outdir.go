package cli

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
)

// outDir writes files that came back from a jail beneath one directory.
// Their names are the jail's choice, so each is checked to be a plain
// relative path; writes go through an os.Root, which cannot leave the
// directory, and never through a symlink: a file is written to a fresh
// temporary name and renamed into place.
type outDir struct {
	root *os.Root
}

func openOutDir(dir string) (*outDir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &outDir{root: root}, nil
}

func (d *outDir) close() { d.root.Close() }

// errUnsafePath is a returned name that would leave the output directory.
var errUnsafePath = errors.New("refusing an unsafe path (absolute, empty, or with a \"..\" component)")

// write writes data to name beneath the directory, replacing a regular
// file of that name.
func (d *outDir) write(name string, data []byte) (retErr error) {
	if !safeRelPath(name) {
		return errUnsafePath
	}
	name = filepath.Clean(name)
	dir := filepath.Dir(name)
	if err := d.mkdirs(dir); err != nil {
		return err
	}
	if fi, err := d.root.Lstat(name); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("refusing to replace a %s", fileKind(fi.Mode()))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}

	tmp := filepath.Join(dir, ".jailctl-"+randomHex()+".tmp")
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			d.root.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// Rename replaces a symlink that appeared since the Lstat rather than
	// writing through it.
	return d.root.Rename(tmp, name)
}

// mkdirs creates dir and its parents, refusing to pass through a symlink
// even one that stays inside the directory.
func (d *outDir) mkdirs(dir string) error {
	if dir == "." {
		return nil
	}
	parts := strings.Split(dir, string(filepath.Separator))
	for i := range parts {
		p := filepath.Join(parts[:i+1]...)
		fi, err := d.root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("refusing to write beneath %s, which is a %s", quoteName(p), fileKind(fi.Mode()))
		}
	}
	return d.root.MkdirAll(dir, 0o755)
}

// safeRelPath reports whether name is a non-empty relative path with no
// ".." component and no NUL.
func safeRelPath(name string) bool {
	if !filepath.IsLocal(name) || strings.IndexByte(name, 0) >= 0 {
		return false
	}
	for _, part := range strings.Split(name, string(filepath.Separator)) {
		if part == ".." {
			return false
		}
	}
	return true
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	}
	return "special file"
}

func randomHex() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// quoteName returns a name from a jail fit to print on a terminal: as is
// when it is plain text, else Go-quoted so control characters and bidi
// overrides show as escapes.
func quoteName(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}
