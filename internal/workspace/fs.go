package workspace

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
)

// A session's files from the host's side (issue 29): listings, reads,
// streamed writes, removals, directories and moves beneath one directory
// (the jail's tmpfs), every path resolved by openat2 beneath it with no
// link followed and no mount crossed. rel "" is the directory itself.
// Errors name the field (path, to) and are of the caller's classes (404,
// 400, 409, 507) when the tree is why; others are the host's.

// Entry describes one file of the tree.
type Entry = spec.FSEntry

// entryOf describes st, named name.
func entryOf(name string, st *unix.Stat_t) Entry {
	e := Entry{Name: name, Size: st.Size, Mode: st.Mode & 0o7777, MTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC()}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = spec.FSFile
	case unix.S_IFDIR:
		e.Type, e.Size = spec.FSDir, 0
	case unix.S_IFLNK:
		e.Type = spec.FSSymlink
	default:
		e.Type, e.Size = spec.FSOther, 0
	}
	return e
}

// fsError turns an error of an operation on field's path into the
// caller's class when the tree is why.
func (d *Dir) fsError(field, rel string, err error) error {
	var fe *errdefs.FieldError
	if errors.As(err, &fe) {
		return err
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		return errdefs.FieldOfClass(errdefs.ErrNotFound, field, "%s does not exist", d.show(rel))
	case errors.Is(err, unix.ELOOP):
		return errdefs.FieldOfClass(errdefs.ErrConflict, field, "%s is or passes through a symbolic link: links are not followed", d.show(rel))
	case errors.Is(err, unix.EXDEV):
		return errdefs.FieldOfClass(errdefs.ErrConflict, field, "%s crosses a mount: only the session's own files are reached", d.show(rel))
	case errors.Is(err, unix.ENOTDIR):
		return errdefs.FieldOfClass(errdefs.ErrConflict, field, "a component of %s is not a directory", d.show(rel))
	case errors.Is(err, unix.EISDIR):
		return errdefs.FieldOfClass(errdefs.ErrConflict, field, "%s is a directory", d.show(rel))
	case errors.Is(err, unix.ENOTEMPTY):
		return errdefs.FieldOfClass(errdefs.ErrConflict, field, "%s is a directory that is not empty", d.show(rel))
	case errors.Is(err, unix.EEXIST):
		return errdefs.FieldOfClass(errdefs.ErrConflict, field, "%s exists already", d.show(rel))
	case errors.Is(err, unix.ENAMETOOLONG):
		return errdefs.Field(field, "%s is too long", d.show(rel))
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return errdefs.FieldOfClass(errdefs.ErrInsufficientStorage, field, "%s does not fit: /workspace and /tmp share one tmpfs of max(128 MiB, limits.file_size_mb) and 16384 inodes, and it is full", d.show(rel))
	}
	return fmt.Errorf("%s: %w", d.show(rel), err)
}

// show is how an error names rel: its name for the caller (Dir.Names),
// quoted.
func (d *Dir) show(rel string) string {
	if rel == "" {
		return "the directory"
	}
	if d.Names != nil {
		rel = d.Names(rel)
	}
	return fmt.Sprintf("%q", rel)
}

// parent opens the directory that holds rel and returns it with rel's
// last name; close the fd when it is not d's.
func (d *Dir) parent(rel string) (int, string, error) {
	dir, name := "", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, name = rel[:i], rel[i+1:]
	}
	if dir == "" {
		return d.fd, name, nil
	}
	fd, err := openBeneath(d.fd, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	return fd, name, err
}

func (d *Dir) closeFd(fd int) {
	if fd != d.fd {
		unix.Close(fd)
	}
}

// Stat describes rel, a link itself rather than what it names.
func (d *Dir) Stat(rel string) (Entry, error) {
	var st unix.Stat_t
	if rel == "" {
		if err := unix.Fstat(d.fd, &st); err != nil {
			return Entry{}, err
		}
		return entryOf("", &st), nil
	}
	pfd, name, err := d.parent(rel)
	if err != nil {
		return Entry{}, d.fsError("path", rel, err)
	}
	defer d.closeFd(pfd)
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Entry{}, d.fsError("path", rel, err)
	}
	return entryOf(name, &st), nil
}

// List returns the entries of the directory rel sorted by name, at most
// max of them (more: truncated). A link is listed as one, not followed.
func (d *Dir) List(rel string, max int) (_ []Entry, truncated bool, _ error) {
	fd, err := d.fd, error(nil)
	if rel != "" {
		if fd, err = openBeneath(d.fd, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
			return nil, false, d.fsError("path", rel, err)
		}
	} else if fd, err = unix.Openat(d.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, false, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	names, err := f.Readdirnames(max + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, d.fsError("path", rel, err)
	}
	if len(names) > max {
		names, truncated = names[:max], true
	}
	slices.Sort(names)
	out := make([]Entry, 0, len(names))
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone meanwhile
		}
		out = append(out, entryOf(n, &st))
	}
	return out, truncated, nil
}

// OpenFile opens the regular file rel to read; anything else is refused.
func (d *Dir) OpenFile(rel string) (*os.File, Entry, error) {
	fd, err := openBeneath(d.fd, rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, Entry{}, d.fsError("path", rel, err)
	}
	f := os.NewFile(uintptr(fd), rel)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, Entry{}, err
	}
	e := entryOf(rel[strings.LastIndexByte(rel, '/')+1:], &st)
	if e.Type != spec.FSFile {
		f.Close()
		return nil, Entry{}, errdefs.FieldOfClass(errdefs.ErrConflict, "path", "%s is a %s, not a regular file", d.show(rel), e.Type)
	}
	return f, e, nil
}

// Put writes the bytes of r, at most limit of them, to the regular file
// rel: to a temporary file beside it, then renamed over it, so that a
// reader sees the old file or the new one, never a part. A directory or
// anything but a regular file at rel is refused; with parents, missing
// directories are made. What it makes is owned by uid:gid (-1: as is).
// created says whether rel is new.
func (d *Dir) Put(rel string, r io.Reader, limit int64, parents bool, uid, gid int) (_ Entry, created bool, _ error) {
	if parents {
		if err := d.mkdirs(rel, uid, gid); err != nil {
			return Entry{}, false, err
		}
	}
	pfd, name, err := d.parent(rel)
	if err != nil {
		return Entry{}, false, d.fsError("path", rel, err)
	}
	defer d.closeFd(pfd)
	var st unix.Stat_t
	switch err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case errors.Is(err, unix.ENOENT):
		created = true
	case err != nil:
		return Entry{}, false, d.fsError("path", rel, err)
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return Entry{}, false, errdefs.FieldOfClass(errdefs.ErrConflict, "path", "%s is a %s: only a regular file is replaced", d.show(rel), entryOf(name, &st).Type)
	}
	tmp := ".jaild-put-" + randName()
	fd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return Entry{}, false, d.fsError("path", rel, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	done := false
	defer func() {
		f.Close()
		if !done {
			_ = unix.Unlinkat(pfd, tmp, 0)
		}
	}()
	if uid >= 0 {
		if err := f.Chown(uid, gid); err != nil {
			return Entry{}, false, err
		}
	}
	if err := f.Chmod(0o644); err != nil { // whatever the daemon's umask
		return Entry{}, false, err
	}
	n, err := io.Copy(f, io.LimitReader(r, limit+1))
	switch {
	case err != nil:
		return Entry{}, false, d.fsError("path", rel, err)
	case n > limit:
		return Entry{}, false, errdefs.FieldOfClass(errdefs.ErrTooLarge, "path", "the body is more than %d bytes, the most /workspace and /tmp hold (their tmpfs: max(128 MiB, limits.file_size_mb))", limit)
	}
	if err := unix.Renameat(pfd, tmp, pfd, name); err != nil {
		return Entry{}, false, d.fsError("path", rel, err)
	}
	done = true
	if err := unix.Fstat(fd, &st); err != nil {
		return Entry{}, false, err
	}
	return entryOf(name, &st), created, nil
}

// Mkdir makes the directory rel (with parents, its missing parents too,
// and no error when it exists), owned by uid:gid.
func (d *Dir) Mkdir(rel string, parents bool, uid, gid int) (Entry, error) {
	if parents {
		if err := d.mkdirs(rel+"/x", uid, gid); err != nil {
			return Entry{}, err
		}
		return d.Stat(rel)
	}
	pfd, name, err := d.parent(rel)
	if err != nil {
		return Entry{}, d.fsError("path", rel, err)
	}
	defer d.closeFd(pfd)
	if err := d.mkdirAt(pfd, name, uid, gid); err != nil {
		return Entry{}, d.fsError("path", rel, err)
	}
	return d.Stat(rel)
}

func (d *Dir) mkdirAt(pfd int, name string, uid, gid int) error {
	if err := unix.Mkdirat(pfd, name, 0o755); err != nil {
		return err
	}
	// 0755 whatever the daemon's umask, through the directory itself
	// (opened without following a link).
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, 0o755); err != nil {
		return err
	}
	if uid >= 0 {
		return unix.Fchown(fd, uid, gid)
	}
	return nil
}

// mkdirs makes the missing directories above rel's last name.
func (d *Dir) mkdirs(rel string, uid, gid int) error {
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		pfd, name, err := d.parent(strings.Join(parts[:i], "/"))
		if err != nil {
			return d.fsError("path", rel, err)
		}
		err = d.mkdirAt(pfd, name, uid, gid)
		d.closeFd(pfd)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return d.fsError("path", rel, err)
		}
	}
	return nil
}

// Remove removes rel: a file of any kind (a link itself) or an empty
// directory.
func (d *Dir) Remove(rel string) error {
	pfd, name, err := d.parent(rel)
	if err != nil {
		return d.fsError("path", rel, err)
	}
	defer d.closeFd(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return d.fsError("path", rel, err)
	}
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(pfd, name, flags); err != nil {
		return d.fsError("path", rel, err)
	}
	return nil
}

// Move renames rel to to (both beneath the directory); what is at to is
// not replaced.
func (d *Dir) Move(rel, to string) (Entry, error) {
	pfd, name, err := d.parent(rel)
	if err != nil {
		return Entry{}, d.fsError("path", rel, err)
	}
	defer d.closeFd(pfd)
	tfd, tname, err := d.parent(to)
	if err != nil {
		return Entry{}, d.fsError("to", to, err)
	}
	defer d.closeFd(tfd)
	if err := unix.Renameat2(pfd, name, tfd, tname, unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, unix.ENOENT) {
			var st unix.Stat_t
			if unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				return Entry{}, d.fsError("path", rel, err)
			}
		}
		if errors.Is(err, unix.EINVAL) {
			return Entry{}, errdefs.FieldOfClass(errdefs.ErrConflict, "to", "%s is beneath %s itself", d.show(to), d.show(rel))
		}
		return Entry{}, d.fsError("to", to, err)
	}
	return d.Stat(to)
}

func randName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
