package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/rootfs"
	"github.com/jaild/jaild/internal/run"
)

// images keeps the jail engine's images in step with the configuration:
// at start, and at each reload (SIGHUP), where an image is added,
// replaced by a new build, or removed without dropping the runs in
// flight (a jail keeps its image until its teardown ends).
type images struct {
	jails *jail.Engine
	log   *slog.Logger
	// served is what the engine has mounted, by name: the resolved
	// directory and the digest of each.
	served map[string]servedImage
}

type servedImage struct{ dir, digest string }

// newImages records the default image the engine started with.
func newImages(jails *jail.Engine, dir string, log *slog.Logger) *images {
	m := jails.Manifest()
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		resolved = dir
	}
	return &images{jails: jails, log: log, served: map[string]servedImage{m.Name: {resolved, m.ImageDigest}}}
}

// apply serves cfg's images. It verifies and mounts every image that is
// new or whose build changed before it changes what is served, so that a
// reload with one bad image (missing, misnamed, tampered, or whose tree or
// mount fails) changes nothing; then it makes those the images new jails
// get, calls serve (the server's per-image settings), gives the service
// its new pools (from then on requests can name the new images and no
// longer the removed ones), and removes the images no longer configured,
// which stay mounted for the jails still using them. changed reports
// whether it changed anything (an error with nothing changed is a
// refusal: everything stays as it was).
func (s *images) apply(cfg config.Config, svc *run.Service, serve func()) (changed bool, _ error) {
	def := s.jails.DefaultImage()
	want := map[string]string{def: cfg.Image}
	for name, im := range cfg.Images {
		if name == def {
			return false, fmt.Errorf("images.%s: %q is the default image (`image`); its limits are [defaults] and its pool [pool]", name, name)
		}
		want[name] = im.Dir
	}
	type change struct {
		name, dir string
		prepared  *jail.PreparedImage
		replace   bool
	}
	var changes []change
	discard := func() {
		for _, c := range changes {
			c.prepared.Discard()
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		key := "images." + name
		if name == def {
			key = "image"
		}
		resolved, err := filepath.EvalSymlinks(want[name])
		if err != nil {
			discard()
			return false, fmt.Errorf("%s: %w (build it with rootfs/build.sh)", key, err)
		}
		m, err := readManifest(resolved)
		if err != nil {
			discard()
			return false, fmt.Errorf("%s: %w", key, err)
		}
		if m.Name != name {
			discard()
			if name == def {
				return false, fmt.Errorf("image: the image in %s is %q, not %q: the default image's name changes only with a restart", want[name], m.Name, name)
			}
			return false, fmt.Errorf("%s: the image in %s is named %q; name its table [images.%s] or point dir at a build of %s", key, want[name], m.Name, m.Name, name)
		}
		old, ok := s.served[name]
		if ok && old.dir == resolved && old.digest == m.ImageDigest {
			continue // unchanged
		}
		p, err := s.jails.PrepareImage(name, resolved)
		if err == nil && p.Manifest().Name != name {
			p.Discard()
			err = fmt.Errorf("the image is named %q", p.Manifest().Name)
		}
		if err != nil {
			discard()
			return false, fmt.Errorf("%s: image in %s refused: %w", key, want[name], err)
		}
		changes = append(changes, change{name: name, dir: resolved, prepared: p, replace: ok})
	}
	var errs []error
	for _, c := range changes {
		if err := c.prepared.Commit(); err != nil {
			errs = append(errs, fmt.Errorf("image %s: %w", c.name, err))
			continue
		}
		m := c.prepared.Manifest()
		s.served[c.name] = servedImage{c.dir, m.ImageDigest}
		verb := "added"
		if c.replace {
			verb = "replaced"
		}
		s.log.Info("image "+verb, "image", c.name, "digest", m.ImageDigest, "dir", c.dir, "python", m.PythonVersion)
	}
	if serve != nil {
		serve()
	}
	if svc != nil {
		svc.SetImages(pools(cfg, def)) // pool sizes may have changed too
	}
	for _, name := range slices.Sorted(maps.Keys(s.served)) {
		if _, ok := want[name]; ok {
			continue
		}
		if err := s.jails.RemoveImage(name); err != nil {
			errs = append(errs, fmt.Errorf("image %s: %w", name, err))
			continue
		}
		delete(s.served, name)
		s.log.Info("image removed; it stays mounted until its last jail ends", "image", name)
	}
	return true, errors.Join(errs...)
}

// pools are the warm pools of cfg's images, the default's from [pool].
func pools(cfg config.Config, def string) map[string]run.ImagePool {
	out := map[string]run.ImagePool{def: {Size: cfg.Pool.Size, Preimport: cfg.Pool.Preimport, PlainSize: cfg.Pool.PlainSize}}
	for name, im := range cfg.Images {
		out[name] = run.ImagePool{Size: im.PoolSize, Preimport: im.Preimport, PlainSize: im.PlainPool()}
	}
	return out
}

// names lists the served images for the log.
func (s *images) names() string { return strings.Join(slices.Sorted(maps.Keys(s.served)), ",") }

// readManifest reads an image's manifest without verifying the image.
func readManifest(dir string) (*rootfs.Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, rootfs.ManifestFile))
	if err != nil {
		return nil, err
	}
	return rootfs.ParseManifest(data)
}
