package jail

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

	"github.com/jaild/jaild/internal/errdefs"

	"golang.org/x/sys/unix"
)

// Bounds on what is read back from a workspace.
const (
	MaxReturnFiles      = 256
	MaxReturnFileBytes  = 16 << 20
	MaxReturnTotalBytes = 64 << 20
	maxWalkEntries      = 20000
	maxWalkDepth        = 64
	collectTimeout      = 5 * time.Second
	MaxFigures          = 16
	MaxFigureBytes      = 8 << 20
)

// resolveBeneath is how every path inside a run directory is resolved: no
// escape, no symlink at any component, no magic link, no crossing mounts.
const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

func openBeneath(dirfd int, rel string, flags int, mode uint32) (int, error) {
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW | unix.O_NOCTTY),
		Mode:    uint64(mode),
		Resolve: resolveBeneath,
	})
	if err != nil {
		return -1, &os.PathError{Op: "openat2", Path: rel, Err: err}
	}
	return fd, nil
}

// ValidatePattern checks a return_files pattern: the path rules of
// ValidatePath, plus well-formed glob syntax in every component.
func ValidatePattern(p string) error {
	if err := ValidatePath(p); err != nil {
		return err
	}
	for _, c := range strings.Split(p, "/") {
		if c == "**" {
			continue
		}
		if _, err := path.Match(c, ""); err != nil {
			return errdefs.New(errdefs.ErrInvalidArgument, "pattern %q: bad glob component %q", p, c)
		}
	}
	return nil
}

// matchGlob reports whether the slash-separated name matches pattern, where
// each component is a path.Match pattern and "**" matches any number of
// components (zero included). It runs in O(len(pattern) × len(name)): the
// naive backtracking is exponential in the number of "**", and patterns
// come from callers.
func matchGlob(pattern, name []string) bool {
	// can[j] reports whether pattern[i:] matches name[j:], for the current
	// i, computed from the last pattern component backwards.
	can := make([]bool, len(name)+1)
	can[len(name)] = true
	for i := len(pattern) - 1; i >= 0; i-- {
		next := make([]bool, len(name)+1)
		if pattern[i] == "**" {
			// ** matches name[j:k] for any k >= j: true if any suffix matches.
			any := false
			for j := len(name); j >= 0; j-- {
				any = any || can[j]
				next[j] = any
			}
		} else {
			for j := 0; j < len(name); j++ {
				if can[j+1] {
					next[j], _ = path.Match(pattern[i], name[j])
				}
			}
		}
		can = next
	}
	return can[0]
}

func isLiteral(p string) bool { return !strings.ContainsAny(p, "*?[\\") }

// writeFiles creates files beneath the directory root, creating parent
// directories as needed, all owned by uid:gid. The directory is fresh, but
// every open still refuses symlinks and escapes.
func writeFiles(root string, files []File, uid, gid int) error {
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rootFd)
	for _, f := range files {
		if err := writeFile(rootFd, f, uid, gid); err != nil {
			return fmt.Errorf("write %q: %w", f.Path, err)
		}
	}
	return nil
}

func writeFile(rootFd int, f File, uid, gid int) error {
	parts := strings.Split(f.Path, "/")
	for i := 1; i < len(parts); i++ {
		dir := strings.Join(parts[:i], "/")
		parent, name := path.Split(dir)
		pfd := rootFd
		if parent != "" {
			var err error
			if pfd, err = openBeneath(rootFd, strings.TrimSuffix(parent, "/"), unix.O_PATH|unix.O_DIRECTORY, 0); err != nil {
				return err
			}
		}
		err := unix.Mkdirat(pfd, name, 0o755)
		if err == nil {
			err = unix.Fchownat(pfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		} else if errors.Is(err, unix.EEXIST) {
			err = nil
		}
		if pfd != rootFd {
			unix.Close(pfd)
		}
		if err != nil {
			return &os.PathError{Op: "mkdir", Path: dir, Err: err}
		}
	}
	fd, err := openBeneath(rootFd, f.Path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	file := os.NewFile(uintptr(fd), f.Path)
	defer file.Close()
	if err := file.Chown(uid, gid); err != nil {
		return err
	}
	_, err = file.Write(f.Data)
	return err
}

// collectFiles reads back the regular files beneath root that match
// patterns. It must only be called once every process of the run is dead.
// Matches that are not returned (links, FIFOs, devices, sparse or too large
// files, past the count or total caps) are reported with an Error, never
// dropped silently; a literal pattern that matches nothing is reported too.
func collectFiles(root string, patterns []string) ([]OutFile, error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rootFd)

	split := make([][]string, len(patterns))
	for i, p := range patterns {
		split[i] = strings.Split(p, "/")
	}
	matched := make([]bool, len(patterns))
	c := collector{rootFd: rootFd, deadline: time.Now().Add(collectTimeout)}
	var visit func(dirRel string, depth int) error
	visit = func(dirRel string, depth int) error {
		dfd, err := openBeneath(rootFd, orDot(dirRel), unix.O_RDONLY|unix.O_DIRECTORY, 0)
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
					if matchGlob(sp, relParts) {
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
	out        []OutFile
	returned   int
	total      int64
	visited    int
	incomplete bool
}

func (c *collector) skip(rel string, size int64, why string) {
	c.out = append(c.out, OutFile{Path: rel, Size: size, Error: why})
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
	case st.Size > MaxReturnFileBytes:
		c.skip(rel, st.Size, fmt.Sprintf("larger than %d bytes", MaxReturnFileBytes))
		return
	case st.Blocks*512 < st.Size:
		c.skip(rel, st.Size, "sparse file")
		return
	case c.total+st.Size > MaxReturnTotalBytes:
		c.skip(rel, st.Size, fmt.Sprintf("returned files would exceed %d bytes in total", MaxReturnTotalBytes))
		return
	}
	data, err := io.ReadAll(io.LimitReader(f, st.Size))
	if err != nil {
		c.skip(rel, st.Size, "read failed")
		return
	}
	c.returned++
	c.total += int64(len(data))
	c.out = append(c.out, OutFile{Path: rel, Size: int64(len(data)), Data: data})
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

var pngMagic = []byte("\x89PNG\r\n\x1a\n")

// readFigures reads figure-N.png files from dir (the runner's figures
// directory), in N order, at most MaxFigures of at most MaxFigureBytes each,
// keeping only files that start with the PNG signature.
func readFigures(dir string) []Figure {
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
		if unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Size <= MaxFigureBytes {
			data, err := io.ReadAll(io.LimitReader(f, MaxFigureBytes))
			if err == nil && len(data) > len(pngMagic) && string(data[:len(pngMagic)]) == string(pngMagic) {
				out = append(out, Figure{Name: fg.name, Data: data})
			}
		}
		f.Close()
	}
	return out
}
