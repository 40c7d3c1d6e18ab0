package jail

import (
	"archive/tar"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The jail's tmpfs in a checkpoint: CRIU leaves the workspace, /tmp and
// MetaDir alone (bind mounts from the host's side of the jail), so the
// checkpoint keeps them itself, as a tar of the three directories with
// the jail's own ids (host id minus the jail's base). The files are the
// jail's: walked beneath the run directory through directory fds, no link
// followed, while no process of the jail runs (frozen, then dumped);
// bounded by the jail's workspace size, in apparent bytes, so that a
// sparse file cannot make a checkpoint larger than the tmpfs could hold.

// treeDirs are the directories of a jail's tmpfs a checkpoint keeps.
var treeDirs = []string{"work", "tmp", "meta"}

// maxTreeDepth bounds the nesting a checkpoint walks.
const maxTreeDepth = 64

type treeSaver struct {
	tw     *tar.Writer
	idBase uint32
	left   int64 // apparent bytes the files may still have
}

// saveTree writes runDir's treeDirs to the tar file out; it returns the
// files' bytes. Errors of what the jail made wrap ErrCheckpointRefused.
func saveTree(runDir, out string, idBase uint32, limit int64) (int64, error) {
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := &treeSaver{tw: tar.NewWriter(f), idBase: idBase, left: limit}
	root, err := unix.Open(runDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(root)
	for _, d := range treeDirs {
		if err := s.entry(root, d, d, 0); err != nil {
			return 0, err
		}
	}
	if err := s.tw.Close(); err != nil {
		return 0, err
	}
	return limit - s.left, nil
}

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCheckpointRefused, fmt.Sprintf(format, args...))
}

// inJail is the jail's own path of a tree name.
func inJail(name string) string {
	dir, rest, _ := strings.Cut(name, "/")
	base := map[string]string{"work": WorkspaceDir, "tmp": "/tmp", "meta": MetaDir}[dir]
	if rest == "" {
		return base
	}
	return base + "/" + rest
}

func (s *treeSaver) entry(dirfd int, name, rel string, depth int) error {
	if depth > maxTreeDepth {
		return refused("%s nests deeper than %d directories", inJail(rel), maxTreeDepth)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	uid, gid := int64(st.Uid)-int64(s.idBase), int64(st.Gid)-int64(s.idBase)
	if uid < 0 || uid >= idMapSize || gid < 0 || gid >= idMapSize {
		return refused("%s is owned by an id outside the jail", inJail(rel))
	}
	hdr := &tar.Header{
		Name: rel, Mode: int64(st.Mode & 0o7777), Uid: int(uid), Gid: int(gid),
		ModTime: time.Unix(st.Mtim.Unix()), Format: tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		hdr.Typeflag = tar.TypeDir
		if err := s.tw.WriteHeader(hdr); err != nil {
			return err
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		d := os.NewFile(uintptr(fd), rel)
		defer d.Close()
		names, err := d.Readdirnames(-1)
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := s.entry(fd, n, rel+"/"+n, depth+1); err != nil {
				return err
			}
		}
		return nil
	case unix.S_IFREG:
		if st.Size > st.Blocks*512+1<<16 {
			return refused("%s is a sparse file (%d bytes, %d on disk)", inJail(rel), st.Size, st.Blocks*512)
		}
		if st.Size > s.left {
			return refused("the files exceed the workspace's %d bytes", s.left)
		}
		s.left -= st.Size
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), rel)
		defer f.Close()
		if err := s.tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.Copy(s.tw, io.LimitReader(f, st.Size))
		if err == nil && n != st.Size {
			err = refused("%s changed while it was saved", inJail(rel))
		}
		return err
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, string(buf[:n])
		return s.tw.WriteHeader(hdr)
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		return s.tw.WriteHeader(hdr)
	case unix.S_IFSOCK:
		// A bound socket's file: CRIU binds the socket anew on restore.
		return nil
	}
	return refused("%s is a device node", inJail(rel))
}

// restoreTree unpacks the tar file in (saveTree's) into runDir's fresh
// treeDirs, owned by the jail whose uid 0 is idBase.
func restoreTree(in, runDir string, idBase uint32, limit int64) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(runDir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	type dirTime struct {
		name string
		t    time.Time
	}
	var dirs []dirTime
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCheckpointTampered, err)
		}
		name := hdr.Name
		top, _, _ := strings.Cut(name, "/")
		if path.Clean(name) != name || !validTop(top) || hdr.Uid < 0 || hdr.Uid >= idMapSize || hdr.Gid < 0 || hdr.Gid >= idMapSize {
			return fmt.Errorf("%w: entry %q", ErrCheckpointTampered, name)
		}
		uid, gid := int(idBase)+hdr.Uid, int(idBase)+hdr.Gid
		mode := os.FileMode(hdr.Mode & 0o777)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if name != top {
				if err := root.Mkdir(name, 0o700); err != nil {
					return err
				}
			}
			dirs = append(dirs, dirTime{name, hdr.ModTime})
		case tar.TypeReg:
			if hdr.Size > limit {
				return fmt.Errorf("%w: entry %q too large", ErrCheckpointTampered, name)
			}
			limit -= hdr.Size
			w, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, io.LimitReader(tr, hdr.Size))
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		case tar.TypeFifo:
			parent, err := root.Open(filepath.Dir(name))
			if err != nil {
				return err
			}
			err = unix.Mkfifoat(int(parent.Fd()), filepath.Base(name), 0o600)
			parent.Close()
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: entry %q of type %c", ErrCheckpointTampered, name, hdr.Typeflag)
		}
		if err := root.Lchown(name, uid, gid); err != nil {
			return err
		}
		if hdr.Typeflag != tar.TypeSymlink {
			// After the chown, which clears set-id bits.
			if err := root.Chmod(name, mode|stickyOf(hdr.Mode)); err != nil {
				return err
			}
			if hdr.Typeflag != tar.TypeDir {
				if err := root.Chtimes(name, hdr.ModTime, hdr.ModTime); err != nil {
					return err
				}
			}
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = root.Chtimes(dirs[i].name, dirs[i].t, dirs[i].t)
	}
	return nil
}

func stickyOf(mode int64) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}

func validTop(top string) bool {
	for _, d := range treeDirs {
		if top == d {
			return true
		}
	}
	return false
}

// CRIU's image magics (criu/include/magic.h) of a user namespace image.
const (
	criuImgCommon = 0x54564319
	criuUsernsImg = 0x55474906
)

// remapUserns rewrites a CRIU userns image (two magics, then one
// length-prefixed userns_entry: repeated uid_gid_extent uid_map = 1,
// gid_map = 2; extent: first = 1, lower_first = 2, count = 3) so that
// each extent within [oldBase, oldBase+idMapSize) starts at newBase
// instead. Any other shape is refused.
func remapUserns(b []byte, oldBase, newBase uint32) ([]byte, error) {
	bad := func(why string) error { return fmt.Errorf("%w: user namespace image: %s", ErrCheckpointTampered, why) }
	if len(b) < 12 || binary.LittleEndian.Uint32(b) != criuImgCommon || binary.LittleEndian.Uint32(b[4:]) != criuUsernsImg {
		return nil, bad("no userns magic")
	}
	size := binary.LittleEndian.Uint32(b[8:])
	if uint64(size) != uint64(len(b)-12) {
		return nil, bad("not one entry")
	}
	entry := b[12:]
	var out []byte
	for len(entry) > 0 {
		key, n := binary.Uvarint(entry)
		if n <= 0 || (key != 1<<3|2 && key != 2<<3|2) {
			return nil, bad("unexpected field")
		}
		entry = entry[n:]
		l, n := binary.Uvarint(entry)
		if n <= 0 || l > uint64(len(entry)-n) {
			return nil, bad("short extent")
		}
		ext := entry[n : n+int(l)]
		entry = entry[n+int(l):]
		var first, lower, count uint64
		var seen [4]bool
		for len(ext) > 0 {
			k, m := binary.Uvarint(ext)
			if m <= 0 || k&7 != 0 || k>>3 < 1 || k>>3 > 3 {
				return nil, bad("unexpected extent field")
			}
			ext = ext[m:]
			v, m := binary.Uvarint(ext)
			if m <= 0 {
				return nil, bad("short varint")
			}
			ext = ext[m:]
			seen[k>>3] = true
			switch k >> 3 {
			case 1:
				first = v
			case 2:
				lower = v
			case 3:
				count = v
			}
		}
		if !seen[1] || !seen[2] || !seen[3] || lower < uint64(oldBase) || lower+count > uint64(oldBase)+idMapSize || first+count > idMapSize {
			return nil, bad("an extent outside the jail's range")
		}
		lower = lower - uint64(oldBase) + uint64(newBase)
		var e []byte
		e = binary.AppendUvarint(e, 1<<3)
		e = binary.AppendUvarint(e, first)
		e = binary.AppendUvarint(e, 2<<3)
		e = binary.AppendUvarint(e, lower)
		e = binary.AppendUvarint(e, 3<<3)
		e = binary.AppendUvarint(e, count)
		out = binary.AppendUvarint(out, key)
		out = binary.AppendUvarint(out, uint64(len(e)))
		out = append(out, e...)
	}
	res := make([]byte, 12, 12+len(out))
	binary.LittleEndian.PutUint32(res, criuImgCommon)
	binary.LittleEndian.PutUint32(res[4:], criuUsernsImg)
	binary.LittleEndian.PutUint32(res[8:], uint32(len(out)))
	return append(res, out...), nil
}
