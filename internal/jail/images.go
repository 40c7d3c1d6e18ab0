package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/rootfs"
)

// An engine serves several images: the default one (Config.ImageDir,
// mounted when the engine starts) and any added with AddImage. A jail
// takes the image its Spec names for its whole life; an image removed or
// replaced stays mounted until the last jail using it is destroyed.

// imagesDir, in RunDir, holds the mountpoints of the images added later.
const imagesDir = "images"

// validImageName is the form of an image's name (rootfs/build.sh's).
var validImageName = rootfs.ImageName

// image is one mounted image and the jails that use it.
type image struct {
	name string
	img  *rootfs.Image
	refs int  // jails created and not yet torn down (under Engine.mu)
	gone bool // removed or replaced: unmounted when refs drops to 0
}

// ImageNames lists the images new jails can use, sorted; the default is
// among them.
func (e *Engine) ImageNames() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	names := make([]string, 0, len(e.images))
	for n := range e.images {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// DefaultImage is the name of the image a Spec without one gets.
func (e *Engine) DefaultImage() string { return e.defaultImage }

// ImageManifest is the verified manifest of the image named name, or nil
// when the engine has none of that name.
func (e *Engine) ImageManifest(name string) *rootfs.Manifest {
	e.mu.Lock()
	defer e.mu.Unlock()
	if im := e.images[name]; im != nil {
		return im.img.Manifest
	}
	return nil
}

// AddImage verifies and mounts the image in dir under name, for the jails
// created from now on. An image of that name already there is replaced:
// jails using it keep it until they are destroyed. The default image can
// be replaced only by an image of the same name (a new build of it).
func (e *Engine) AddImage(name, dir string) (*rootfs.Manifest, error) {
	p, err := e.PrepareImage(name, dir)
	if err != nil {
		return nil, err
	}
	if err := p.Commit(); err != nil {
		return nil, err
	}
	return p.Manifest(), nil
}

// PreparedImage is an image verified and mounted by PrepareImage, which
// no jail can use until Commit; Discard unmounts it instead. Preparing
// every image of a change first makes the change all or nothing.
type PreparedImage struct {
	e    *Engine
	name string
	img  *rootfs.Image
	done bool
}

// Manifest is the prepared image's verified manifest.
func (p *PreparedImage) Manifest() *rootfs.Manifest { return p.img.Manifest }

// PrepareImage verifies the image in dir (its digest, once, from the file
// it mounts), mounts it and validates its tree, for AddImage's name; it
// fails for a default image of another name.
func (e *Engine) PrepareImage(name, dir string) (*PreparedImage, error) {
	if !validImageName.MatchString(name) {
		return nil, fmt.Errorf("image name %q: want lower-case letters, digits, - and _ (at most 63)", name)
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	e.imageSeq++
	mnt := filepath.Join(e.cfg.RunDir, imagesDir, strconv.Itoa(e.imageSeq))
	e.mu.Unlock()
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	img, err := rootfs.Open(dir, mnt)
	if err != nil {
		_ = os.Remove(mnt)
		return nil, err
	}
	if name == e.defaultImage && img.Manifest.Name != name {
		_ = e.closeImage(&image{name: name, img: img})
		return nil, fmt.Errorf("image %q is the default image; the image in %s is named %q (the default's name changes with a restart)", name, dir, img.Manifest.Name)
	}
	return &PreparedImage{e: e, name: name, img: img}, nil
}

// Discard unmounts a prepared image that was not committed.
func (p *PreparedImage) Discard() {
	if !p.done {
		p.done = true
		_ = p.e.closeImage(&image{name: p.name, img: p.img})
	}
}

// Commit makes the prepared image the one new jails of its name get.
func (p *PreparedImage) Commit() error {
	if p.done {
		return errors.New("image already committed or discarded")
	}
	e := p.e
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		p.Discard()
		return ErrClosed
	}
	p.done = true
	old := e.images[p.name]
	e.images[p.name] = &image{name: p.name, img: p.img}
	if p.name == e.defaultImage {
		e.defaultManifest = p.img.Manifest
	}
	var drop *image
	if old != nil {
		old.gone = true
		if old.refs == 0 {
			drop = old
		}
	}
	e.mu.Unlock()
	if drop != nil {
		_ = e.closeImage(drop)
	}
	return nil
}

// RemoveImage takes the image named name away from new jails; it is
// unmounted once no jail uses it. The default image cannot be removed.
func (e *Engine) RemoveImage(name string) error {
	if name == e.defaultImage {
		return fmt.Errorf("image %q is the default image", name)
	}
	e.mu.Lock()
	im := e.images[name]
	if im == nil {
		e.mu.Unlock()
		return fmt.Errorf("no image %q", name)
	}
	delete(e.images, name)
	im.gone = true
	drop := im.refs == 0
	e.mu.Unlock()
	if drop {
		_ = e.closeImage(im)
	}
	return nil
}

// takeImage, under e.mu, is the image a new jail of spec uses.
func (e *Engine) takeImage(name string) (*image, error) {
	if name == "" {
		name = e.defaultImage
	}
	im := e.images[name]
	if im == nil {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "no image %q", name)
	}
	im.refs++
	return im, nil
}

// releaseImage ends a jail's use of im: the last jail of an image that
// is gone unmounts it.
func (e *Engine) releaseImage(im *image) {
	if im == nil {
		return
	}
	e.mu.Lock()
	im.refs--
	drop := im.gone && im.refs == 0
	e.mu.Unlock()
	if drop {
		_ = e.closeImage(im)
	}
}

// closeImage unmounts an image no jail uses and removes its mountpoint
// (but the default's, which is RunDir/rootfs).
func (e *Engine) closeImage(im *image) error {
	if err := im.img.Close(); err != nil {
		e.log.Warn("unmount an image", "image", im.name, "err", err)
		return err
	}
	if filepath.Dir(im.img.Root) == filepath.Join(e.cfg.RunDir, imagesDir) {
		if err := os.Remove(im.img.Root); err != nil && !errors.Is(err, os.ErrNotExist) {
			e.log.Warn("remove an image's mountpoint", "image", im.name, "err", err)
		}
	}
	return nil
}

// sweepImages unmounts and removes what a predecessor left in imagesDir.
func (e *Engine) sweepImages() error {
	dir := filepath.Join(e.cfg.RunDir, imagesDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, ent := range ents {
		p := filepath.Join(dir, ent.Name())
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount a predecessor's image %s: %w", p, err)
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
