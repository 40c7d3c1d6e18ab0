// Package workspace is I/O beneath a run's workspace directory, a directory
// that a jail's processes could write: validation of callers' paths and
// return_files patterns, writing files in, and collecting files and figures
// out. Every open resolves beneath the directory with openat2 and follows
// no symlink, magic link or mount; everything read back is bounded. It
// needs no root and knows nothing of jails.
//
// Patterns: each slash-separated component is a path.Match pattern, and
// "**" matches any number of components (zero included). As in shells and
// Python's glob, a wildcard never matches a name that starts with a dot
// unless the pattern's component starts with a dot too: "**" and "*" skip
// ".cache/x" and ".env", ".env" and ".*/x" match them.
package workspace

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
)

// Bounds on callers' paths and patterns.
const (
	MaxPathBytes = spec.MaxPathBytes
	MaxNameBytes = spec.MaxNameBytes
	MaxPathDepth = spec.MaxPathDepth
)

// Bounds on what is read back.
const (
	MaxReturnFiles       = spec.MaxReturnFiles
	MaxReturnFileBytes   = spec.MaxReturnFileBytes
	MaxReturnTotalBytes  = spec.MaxReturnTotalBytes
	MaxFigures           = spec.MaxFigures
	MaxFigureBytes       = spec.MaxFigureBytes
	MaxFiguresTotalBytes = spec.MaxFiguresTotalBytes
	maxWalkEntries       = 20000
	maxWalkDepth         = 64
	collectTimeout       = 5 * time.Second
)

// ValidatePath checks a workspace-relative path from a caller (see
// spec.ValidatePath).
func ValidatePath(p string) error { return spec.ValidatePath(p) }

// ValidatePattern checks a return_files pattern (see spec.ValidatePattern).
func ValidatePattern(p string) error { return spec.ValidatePattern(p) }

// Match reports whether the slash-separated name matches pattern (see the
// package doc). The pattern must have passed ValidatePattern.
func Match(pattern, name string) bool {
	return match(strings.Split(pattern, "/"), strings.Split(name, "/"))
}

// match runs in O(len(pattern) × len(name)): the naive backtracking is
// exponential in the number of "**", and patterns come from callers.
func match(pattern, name []string) bool {
	// can[j] reports whether pattern[i:] matches name[j:], for the current
	// i, computed from the last pattern component backwards.
	can := make([]bool, len(name)+1)
	can[len(name)] = true
	for i := len(pattern) - 1; i >= 0; i-- {
		next := make([]bool, len(name)+1)
		if pattern[i] == "**" {
			// ** matches name[j:k] for any k >= j whose components
			// are all unhidden.
			acc := can[len(name)]
			next[len(name)] = acc
			for j := len(name) - 1; j >= 0; j-- {
				acc = can[j] || (!hidden(name[j]) && acc)
				next[j] = acc
			}
		} else {
			for j := 0; j < len(name); j++ {
				if can[j+1] && (!hidden(name[j]) || hidden(pattern[i])) {
					next[j], _ = path.Match(pattern[i], name[j])
				}
			}
		}
		can = next
	}
	return can[0]
}

func hidden(name string) bool { return strings.HasPrefix(name, ".") }

func isLiteral(p string) bool { return !strings.ContainsAny(p, "*?[\\") }

// resolveBeneath is how every path inside a workspace is resolved: no
// escape, no symlink at any component, no magic link, no crossing mounts.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openBeneath opens rel beneath dirfd. openat2 refuses O_PATH with any
// flag but O_DIRECTORY, O_NOFOLLOW and O_CLOEXEC (EINVAL), so O_NOCTTY is
// added only to real opens.
func openBeneath(dirfd int, rel string, flags int, mode uint32) (int, error) {
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	if flags&unix.O_PATH == 0 {
		flags |= unix.O_NOCTTY
	}
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: resolveBeneath})
	if err != nil {
		return -1, &os.PathError{Op: "openat2", Path: rel, Err: err}
	}
	return fd, nil
}

// Dir is an open workspace directory. Close it when done.
type Dir struct {
	fd   int
	root string
	// Names, when set, is how errors name a path beneath the directory
	// (the caller's name for it); else as it is.
	Names func(rel string) string
}

// Open opens the workspace directory root (which must not be a symlink).
func Open(root string) (*Dir, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	return &Dir{fd: fd, root: root}, nil
}

// Close closes the directory.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Write creates the file rel (a path that passed ValidatePath) with the
// bytes of r, creating missing parent directories; every directory and
// file it creates is owned by uid:gid. It refuses to replace anything. A
// workspace that is full gives an error of class ErrInvalidArgument (the
// caller's files do not fit); other errors are the host's.
func (d *Dir) Write(rel string, r io.Reader, uid, gid int) error {
	return d.put(rel, r, uid, gid, false)
}

// Replace is Write for a workspace that has been used (a session's): a
// regular file already at rel is replaced; a directory, link or anything
// else there is refused (EEXIST), and nothing is followed. Only call it
// while no process can change the directory (a frozen session).
func (d *Dir) Replace(rel string, r io.Reader, uid, gid int) error {
	return d.put(rel, r, uid, gid, true)
}

func (d *Dir) put(rel string, r io.Reader, uid, gid int, replace bool) error {
	if err := d.write(rel, r, uid, gid, replace); err != nil {
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
			return errdefs.New(errdefs.ErrInvalidArgument, "%s: the files do not fit the workspace (its size or inode limit)", rel)
		}
		return fmt.Errorf("write %q: %w", rel, err)
	}
	return nil
}

func (d *Dir) write(rel string, r io.Reader, uid, gid int, replace bool) error {
	parts := strings.Split(rel, "/")
	for i := 1; i < len(parts); i++ {
		parent, name := strings.Join(parts[:i-1], "/"), parts[i-1]
		pfd := d.fd
		if parent != "" {
			var err error
			if pfd, err = openBeneath(d.fd, parent, unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
				return err
			}
		}
		err := unix.Mkdirat(pfd, name, 0o755)
		if err == nil {
			err = unix.Fchownat(pfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		} else if errors.Is(err, unix.EEXIST) {
			err = nil
		}
		if pfd != d.fd {
			unix.Close(pfd)
		}
		if err != nil {
			return &os.PathError{Op: "mkdir", Path: strings.Join(parts[:i], "/"), Err: err}
		}
	}
	fd, err := openBeneath(d.fd, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	if err != nil && replace && errors.Is(err, unix.EEXIST) {
		if err = d.unlinkRegular(parts); err == nil {
			fd, err = openBeneath(d.fd, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
		}
	}
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	if err := f.Chown(uid, gid); err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		return err
	}
	return f.Close()
}

// unlinkRegular removes the regular file at the path parts, beneath the
// directory and without following a link; anything else stays (EEXIST).
func (d *Dir) unlinkRegular(parts []string) error {
	pfd, name := d.fd, parts[len(parts)-1]
	if len(parts) > 1 {
		var err error
		if pfd, err = openBeneath(d.fd, strings.Join(parts[:len(parts)-1], "/"), unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
			return err
		}
		defer unix.Close(pfd)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return &os.PathError{Op: "replace", Path: strings.Join(parts, "/"), Err: unix.EEXIST}
	}
	return unix.Unlinkat(pfd, name, 0)
}

// File is a file read back from the workspace. Error is set (and Data
// empty) when the file matched but was not returned, e.g. a symlink.
type File = spec.ReturnedFile

// Collect reads back the regular files beneath the directory that match
// patterns (each of which passed ValidatePattern). Only call it once no
// process can change the directory any more. Matches that are not
// returned (links, FIFOs, devices, sparse or too large files, past the
// count or total caps) are reported with an Error, never dropped silently;
// a literal pattern that matches nothing is reported too. An error means
// the directory could not be searched completely; the files found so far
// are returned with it.
func (d *Dir) Collect(patterns []string) ([]File, error) {
	return d.CollectWith(patterns, Taker{MaxFileBytes: MaxReturnFileBytes, MaxTotalBytes: MaxReturnTotalBytes, Take: readFile})
}

// Taker decides what becomes of one matched regular file: f is open
// read-only on it (never through a link), size its size when opened; it
// returns the File to report (with Error set to say why it was not
// taken). Limits bound what it is given.
type Taker struct {
	MaxFileBytes  int64 // larger files are reported, not taken
	MaxTotalBytes int64 // the total of the files taken
	Take          func(rel string, f *os.File, size int64) File
}

// readFile is Collect's Take: the file is read into memory.
func readFile(rel string, f *os.File, size int64) File {
	data, err := readExactly(f, size)
	if err != nil {
		return File{Path: rel, Size: size, Error: "read failed"}
	}
	return File{Path: rel, Size: int64(len(data)), Data: data}
}

// readExactly reads the size bytes of a file of that size into one
// allocation (io.ReadAll would grow its buffer by copies, garbage that
// the daemon's memory would carry until collected); a file that shrank
// gives what it has.
func readExactly(f *os.File, size int64) ([]byte, error) {
	data := make([]byte, size)
	n, err := io.ReadFull(f, data)
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = nil
	}
	return data[:n], err
}

// CollectWith is Collect with t deciding what becomes of each matched
// regular file.
func (d *Dir) CollectWith(patterns []string, t Taker) ([]File, error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	split := make([][]string, len(patterns))
	for i, p := range patterns {
		split[i] = strings.Split(p, "/")
	}
	matched := make([]bool, len(patterns))
	c := collector{rootFd: d.fd, deadline: time.Now().Add(collectTimeout), t: t}
	var visit func(dirRel string, depth int) error
	visit = func(dirRel string, depth int) error {
		dfd, err := openBeneath(d.fd, orDot(dirRel), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		dir := os.NewFile(uintptr(dfd), dirRel)
		defer dir.Close()
		for {
			if time.Now().After(c.deadline) {
				c.incomplete = true
				return nil
			}
			ents, err := dir.ReadDir(256)
			sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
			for _, ent := range ents {
				if c.visited++; c.visited > maxWalkEntries {
					c.incomplete = true
					return nil
				}
				rel := path.Join(dirRel, ent.Name())
				relParts := strings.Split(rel, "/")
				hit := false
				for i, sp := range split {
					if match(sp, relParts) {
						matched[i], hit = true, true
					}
				}
				typ := ent.Type()
				switch {
				case typ.IsDir():
					if depth < maxWalkDepth {
						if err := visit(rel, depth+1); err != nil {
							return err
						}
					} else {
						c.skip(rel, 0, fmt.Sprintf("directory not searched: deeper than %d levels", maxWalkDepth))
					}
				case hit:
					c.take(rel, typ)
				}
			}
			if err == io.EOF || len(ents) == 0 {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
	if err := visit("", 0); err != nil {
		return c.out, err
	}
	for i, p := range patterns {
		if !matched[i] && isLiteral(p) {
			c.skip(p, 0, "no such file")
		}
	}
	if c.incomplete {
		c.skip(".", 0, fmt.Sprintf("workspace has more than %d entries, or searching it took longer than %v; the rest was not searched", maxWalkEntries, collectTimeout))
	}
	return c.out, nil
}

func orDot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

type collector struct {
	rootFd     int
	deadline   time.Time
	out        []File
	returned   int
	total      int64
	visited    int
	incomplete bool
	t          Taker
}

func (c *collector) skip(rel string, size int64, why string) {
	c.out = append(c.out, File{Path: rel, Size: size, Error: why})
}

func (c *collector) take(rel string, typ os.FileMode) {
	if !typ.IsRegular() {
		c.skip(rel, 0, "not a regular file ("+fileKind(typ)+")")
		return
	}
	if c.returned >= MaxReturnFiles {
		c.skip(rel, 0, fmt.Sprintf("more than %d files matched", MaxReturnFiles))
		return
	}
	fd, err := openBeneath(c.rootFd, rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		c.skip(rel, 0, "cannot open: "+errors.Unwrap(err).Error())
		return
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		c.skip(rel, 0, "not a regular file")
		return
	}
	switch {
	case st.Size > c.t.MaxFileBytes:
		c.skip(rel, st.Size, fmt.Sprintf("larger than %d bytes", c.t.MaxFileBytes))
		return
	case st.Blocks*512 < st.Size:
		c.skip(rel, st.Size, "sparse file")
		return
	case c.total+st.Size > c.t.MaxTotalBytes:
		c.skip(rel, st.Size, fmt.Sprintf("returned files would exceed %d bytes in total", c.t.MaxTotalBytes))
		return
	}
	// The walk's deadline bounds the search, not what a Taker does with
	// a file (the store's write and fsync).
	began := time.Now()
	out := c.t.Take(rel, f, st.Size)
	c.deadline = c.deadline.Add(time.Since(began))
	out.Path = rel
	if out.Error == "" {
		c.returned++
		c.total += out.Size
	}
	c.out = append(c.out, out)
}

func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeSymlink != 0:
		return "symlink"
	case m&os.ModeNamedPipe != 0:
		return "fifo"
	case m&os.ModeSocket != 0:
		return "socket"
	case m&os.ModeDevice != 0:
		return "device"
	}
	return "special"
}

// Figure is a PNG read back from a figures directory.
type Figure = spec.Figure

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// ReadFigures reads figure-N.png files from dir, in N order, at most
// MaxFigures of at most MaxFigureBytes each, keeping only regular files
// that start with the PNG signature. A directory that cannot be opened has
// no figures.
func ReadFigures(dir string) []Figure {
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil
	}
	d := os.NewFile(uintptr(dfd), dir)
	defer d.Close()
	names, _ := d.Readdirnames(4 * MaxFigures)
	type fig struct {
		n    int
		name string
	}
	var figs []fig
	for _, name := range names {
		num, ok := strings.CutPrefix(name, "figure-")
		num, ok2 := strings.CutSuffix(num, ".png")
		n, err := strconv.Atoi(num)
		if ok && ok2 && err == nil && n > 0 && strconv.Itoa(n) == num {
			figs = append(figs, fig{n, name})
		}
	}
	sort.Slice(figs, func(i, j int) bool { return figs[i].n < figs[j].n })
	var out []Figure
	var total int64
	for _, fg := range figs {
		if len(out) == MaxFigures {
			break
		}
		fd, err := openBeneath(dfd, fg.name, unix.O_RDONLY|unix.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		f := os.NewFile(uintptr(fd), fg.name)
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size <= MaxFigureBytes && total+st.Size <= MaxFiguresTotalBytes {
			data, err := readExactly(f, st.Size)
			if err == nil && len(data) > len(pngMagic) && string(data[:len(pngMagic)]) == string(pngMagic) {
				out = append(out, Figure{Name: fg.name, Data: data})
				total += int64(len(data))
			}
		}
		f.Close()
	}
	return out
}
