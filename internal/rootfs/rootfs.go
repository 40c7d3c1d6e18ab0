// Package rootfs opens a prebuilt, read-only Python root filesystem image
// (a squashfs file plus its JSON manifest, as built by rootfs/build.sh),
// verifies it against its manifest, mounts it read-only and validates the
// shape of the tree before any jail may use it.
//
// An image is refused, never repaired: a digest mismatch, a missing runner,
// or a /dev, /proc or /sys that is a symlink (cf. runc CVE-2025-31133 and
// CVE-2026-41579) makes Open fail.
package rootfs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/lazyre"
)

// File names inside an image directory.
const (
	ImageFile    = "rootfs.squashfs"
	ManifestFile = "manifest.json"
)

// maxManifestBytes bounds the manifest we are willing to parse.
const maxManifestBytes = 4 << 20

// ErrInvalid marks an image that fails verification or validation.
var ErrInvalid = errors.New("invalid rootfs image")

// Package is one Debian package recorded in the manifest.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Arch    string `json:"arch,omitempty"`
}

// Manifest identifies an image: what it was built from and what it holds.
type Manifest struct {
	Schema         int               `json:"schema"`
	Name           string            `json:"name"`
	RecipeDigest   string            `json:"recipe_digest"`
	ImageDigest    string            `json:"image_digest"`
	ImageSizeBytes int64             `json:"image_size_bytes"`
	PythonVersion  string            `json:"python_version"`
	DebianSuite    string            `json:"debian_suite"`
	Packages       []Package         `json:"packages"`
	PythonPackages map[string]string `json:"python_packages"`
	Wheels         []Wheel           `json:"wheels,omitempty"` // installed from the recipe's wheelhouse
	Runner         string            `json:"runner"`
	// RunnerFeatures are what the runner understands beyond code jobs
	// ("exec": it executes a command in its place); an older image lists
	// none.
	RunnerFeatures []string `json:"runner_features,omitempty"`
	Init           string   `json:"init"` // the jail's pid 1, which starts the runner
	BuiltAt        string   `json:"built_at"`
}

// Wheel is a package installed from a recipe's wheelhouse, pinned by its
// wheels' hashes.
type Wheel struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	SHA256  []string `json:"sha256"`
}

// RunnerCan reports whether the image's runner has the feature.
func (m *Manifest) RunnerCan(feature string) bool { return slices.Contains(m.RunnerFeatures, feature) }

// HasPackage reports whether the image has the Debian package name.
func (m *Manifest) HasPackage(name string) bool {
	for _, p := range m.Packages {
		if p.Name == name {
			return true
		}
	}
	return false
}

// ParseManifest decodes and checks a manifest. It returns an error wrapping
// ErrInvalid when a required field is missing or malformed.
func ParseManifest(data []byte) (*Manifest, error) {
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("%w: manifest larger than %d bytes", ErrInvalid, maxManifestBytes)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrInvalid, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: manifest: trailing data", ErrInvalid)
	}
	switch {
	case m.Schema != 1:
		return nil, fmt.Errorf("%w: manifest schema %d, want 1", ErrInvalid, m.Schema)
	case !ImageName.MatchString(m.Name):
		return nil, fmt.Errorf("%w: manifest name %q is not 1..63 lower-case letters, digits, - and _", ErrInvalid, m.Name)
	case !validDigest(m.ImageDigest):
		return nil, fmt.Errorf("%w: manifest image_digest %q is not sha256:<64 hex>", ErrInvalid, m.ImageDigest)
	case m.ImageSizeBytes <= 0:
		return nil, fmt.Errorf("%w: manifest image_size_bytes must be positive", ErrInvalid)
	case m.PythonVersion == "":
		return nil, fmt.Errorf("%w: manifest python_version is empty", ErrInvalid)
	case !strings.HasPrefix(m.Runner, "/") || filepath.Clean(m.Runner) != m.Runner || !runnerPath.MatchString(m.Runner):
		return nil, fmt.Errorf("%w: manifest runner %q is not a clean absolute path to a Python module (/dir/name.py)", ErrInvalid, m.Runner)
	case !strings.HasPrefix(m.Init, "/") || filepath.Clean(m.Init) != m.Init:
		return nil, fmt.Errorf("%w: manifest init %q is not a clean absolute path", ErrInvalid, m.Init)
	}
	return &m, nil
}

// ImageName is the form of an image's name: a recipe directory of
// rootfs/images, what requests name in their image field.
var ImageName = lazyre.New(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// runnerPath: the daemon imports the runner by name from its directory.
var runnerPath = lazyre.New(`^(/[A-Za-z0-9_.-]+)*/[A-Za-z_][A-Za-z0-9_]*\.py$`)

func validDigest(d string) bool {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return false
	}
	_, err := hex.DecodeString(h)
	return err == nil
}

// Image is a verified image mounted read-only at Root.
type Image struct {
	// Root is the mountpoint of the read-only tree.
	Root string
	// Manifest is the verified manifest.
	Manifest *Manifest
}

// Open verifies the image in dir against its manifest, mounts it read-only
// (nodev, nosuid) at mountpoint, and validates the mounted tree. The digest
// is computed from the same open file that is attached to the loop device,
// so the verified bytes are the mounted bytes. On any failure nothing stays
// mounted.
func Open(dir, mountpoint string) (_ *Image, retErr error) {
	m, img, err := verified(dir, " (build it with `make rootfs`)")
	if err != nil {
		return nil, err
	}
	defer img.Close()
	if err := os.MkdirAll(mountpoint, 0o700); err != nil {
		return nil, fmt.Errorf("rootfs mountpoint: %w", err)
	}
	if err := mountSquashfs(img, mountpoint); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = unix.Unmount(mountpoint, unix.MNT_DETACH)
		}
	}()
	if err := ValidateTree(mountpoint, m.Runner, m.Init); err != nil {
		return nil, err
	}
	return &Image{Root: mountpoint, Manifest: m}, nil
}

// Close unmounts the image. The loop device is released by the kernel
// (LO_FLAGS_AUTOCLEAR) once the mount is gone.
func (im *Image) Close() error {
	if err := unix.Unmount(im.Root, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return &os.PathError{Op: "umount", Path: im.Root, Err: err}
	}
	return nil
}

// Verify checks the image in dir against its manifest (size and sha256
// digest) without mounting it, and returns the manifest.
func Verify(dir string) (*Manifest, error) {
	m, img, err := verified(dir, "")
	if img != nil {
		img.Close()
	}
	return m, err
}

// verified reads dir's manifest and checks its image against it (size and
// sha256 digest). The image is returned open when it verified; on a
// digest mismatch the manifest is returned with the error. hint ends the
// message of a missing manifest.
func verified(dir, hint string) (*Manifest, *os.File, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v%s", ErrInvalid, err, hint)
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, nil, err
	}
	img, err := os.Open(filepath.Join(dir, ImageFile))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := verifyDigest(img, m); err != nil {
		img.Close()
		return m, nil, err
	}
	return m, img, nil
}

func verifyDigest(f *os.File, m *Manifest) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != m.ImageSizeBytes {
		return fmt.Errorf("%w: image is %d bytes, manifest says %d", ErrInvalid, st.Size(), m.ImageSizeBytes)
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, st.Size())); err != nil {
		return fmt.Errorf("hash image: %w", err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != m.ImageDigest {
		return fmt.Errorf("%w: image digest %s does not match manifest %s", ErrInvalid, got, m.ImageDigest)
	}
	return nil
}

// mountSquashfs attaches f to a free loop device, read-only and
// auto-clearing, and mounts it at target.
func mountSquashfs(f *os.File, target string) error {
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loop-control: %w", err)
	}
	defer ctl.Close()
	// Another process may grab the device between GET_FREE and
	// LOOP_CONFIGURE; that shows as EBUSY, so try a few times.
	for attempt := 0; ; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return &os.SyscallError{Syscall: "ioctl(LOOP_CTL_GET_FREE)", Err: err}
		}
		devPath := fmt.Sprintf("/dev/loop%d", n)
		dev, err := os.OpenFile(devPath, os.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open loop device: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_READ_ONLY | unix.LO_FLAGS_AUTOCLEAR
		copy(cfg.Info.File_name[:], ImageFile)
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if errors.Is(err, unix.EBUSY) && attempt < 8 {
			dev.Close()
			continue
		}
		if err != nil {
			dev.Close()
			return &os.SyscallError{Syscall: "ioctl(LOOP_CONFIGURE)", Err: err}
		}
		err = unix.Mount(devPath, target, "squashfs", unix.MS_RDONLY|unix.MS_NODEV|unix.MS_NOSUID, "")
		// Closing the device after the mount (or after a failed mount)
		// lets AUTOCLEAR detach it when it is no longer used.
		dev.Close()
		if err != nil {
			return &os.PathError{Op: "mount squashfs", Path: target, Err: err}
		}
		return nil
	}
}

// ValidateTree checks the shape of a mounted rootfs: the directories the
// jail mounts over must be real directories, the files it relies on must be
// regular files, and none of them may be a symlink. runner and init are the
// absolute in-image paths of the in-jail runner and the jail's pid 1.
func ValidateTree(root, runner, init string) error {
	dirs := []string{"/dev", "/proc", "/sys", "/tmp", "/workspace", "/jaild", "/etc", "/usr/bin"}
	files := []string{"/etc/hostname", "/etc/hosts", "/etc/machine-id", "/etc/passwd", runner, init}
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rootFd)
	check := func(p string, wantDir bool) error {
		how := &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_CLOEXEC | unix.O_NOFOLLOW,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
		}
		fd, err := unix.Openat2(rootFd, strings.TrimPrefix(p, "/"), how)
		if err != nil {
			return openat2Error(p, err)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return &os.PathError{Op: "fstat", Path: p, Err: err}
		}
		switch mode := st.Mode & unix.S_IFMT; {
		case wantDir && mode != unix.S_IFDIR:
			return fmt.Errorf("%w: %s is not a directory", ErrInvalid, p)
		case !wantDir && mode != unix.S_IFREG:
			return fmt.Errorf("%w: %s is not a regular file", ErrInvalid, p)
		}
		return nil
	}
	for _, d := range dirs {
		if err := check(d, true); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := check(f, false); err != nil {
			return err
		}
	}
	// /dev is mounted over by a fresh tmpfs, but an image that ships
	// device nodes or links there is not one we built: refuse it.
	ents, err := os.ReadDir(filepath.Join(root, "dev"))
	if err != nil {
		return fmt.Errorf("read /dev: %w", err)
	}
	if len(ents) != 0 {
		return fmt.Errorf("%w: /dev is not empty (%s, ...)", ErrInvalid, ents[0].Name())
	}
	return nil
}

// openat2Error tells an image at fault (a path missing, a symlink or a
// mount on the way) from a host that refused the call itself: a seccomp
// filter of the service manager answers ENOSYS or EPERM (systemd's
// RestrictSUIDSGID= did, for every openat2), and blaming the image for that
// sends the operator to rebuild an image that is fine.
func openat2Error(p string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV),
		errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EAGAIN):
		return fmt.Errorf("%w: %s: %v (missing, or a symlink or mount on the way)", ErrInvalid, p, err)
	}
	return fmt.Errorf("checking the image: the host refused openat2 on %s (%v): Linux 5.6+ is needed, and no seccomp filter (such as systemd's RestrictSUIDSGID=) may deny it", p, err)
}
