package run

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/pool"
	"github.com/jaild/jaild/internal/rootfs"
	"github.com/jaild/jaild/internal/run/spec"
)

// ImagePool is one image's warm pool: Size preloaded jails (which imported
// Preimport) and PlainSize plain ones. See PoolConfig.
type ImagePool struct {
	Size      int
	Preimport []string
	PlainSize int
}

// servedImage is an image the service runs requests in, as SetImages last
// saw it in the engine.
type servedImage struct {
	name     string
	manifest *rootfs.Manifest // the engine's, one per mount of the image
	gen      int              // counts the mounts the service has seen
	pool     ImagePool
	tops     map[string]bool // top-level packages of pool.Preimport
}

// key is the pool's key of the image's warm jails of a kind: a new mount
// of the image (even of the same digest) is a new key, so that no warm
// jail keeps a replaced mount alive.
func (im *servedImage) key(kind string) pool.Key {
	return pool.Key{Image: im.name + "@" + im.manifest.ImageDigest + "#" + strconv.Itoa(im.gen), Kind: kind}
}

// ImageStats describes one image the service serves.
type ImageStats = spec.ImageStats

// SetImages makes the service serve the images pools names (those its
// engine has: call it after the engine's AddImage, and before its
// RemoveImage, so that no request names an image on its way out), each
// with its warm pool, and the engine's default image always. Warm jails
// of an image removed or replaced since are destroyed; runs in progress
// keep their jails.
func (s *Service) SetImages(pools map[string]ImagePool) {
	s.mu.Lock()
	prev := s.images
	s.mu.Unlock()
	served := map[string]*servedImage{}
	var sizes []pool.Size
	names := slices.Sorted(maps.Keys(pools))
	if def := s.e.DefaultImage(); !slices.Contains(names, def) {
		names = append(names, def)
	}
	for _, name := range names {
		m := s.e.ImageManifest(name)
		if m == nil {
			continue // not (or no longer) the engine's
		}
		im := &servedImage{name: name, manifest: m, pool: pools[name], tops: map[string]bool{}}
		if old := prev[name]; old != nil && old.manifest == m {
			im.gen = old.gen
		} else {
			im.gen = int(s.gens.Add(1))
		}
		for _, mod := range im.pool.Preimport {
			top, _, _ := strings.Cut(mod, ".")
			im.tops[top] = true
		}
		served[name] = im
		// Plain first: on a tie it is the cheaper to refill.
		sizes = append(sizes, pool.Size{Key: im.key(plain), N: im.pool.PlainSize}, pool.Size{Key: im.key(preloaded), N: im.pool.Size})
	}
	s.mu.Lock()
	s.images = served
	s.mu.Unlock()
	s.pool.SetSizes(sizes)
}

// image resolves a request's image: "" is the default. An image the
// service does not serve is the caller's error, naming those it does.
func (s *Service) image(name string) (*servedImage, error) {
	if name == "" {
		name = s.e.DefaultImage()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if im := s.images[name]; im != nil {
		return im, nil
	}
	names := make([]string, 0, len(s.images))
	for n := range s.images {
		names = append(names, n)
	}
	slices.Sort(names)
	return nil, errdefs.Field("image", "no image %q on this daemon; it serves %s", name, strings.Join(names, ", "))
}

// imageOfKey is the served image of a pool key, or nil when that image
// went (removed or replaced).
func (s *Service) imageOfKey(key pool.Key) *servedImage {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, im := range s.images {
		if im.key(key.Kind) == key {
			return im
		}
	}
	return nil
}

// Images describes the images the service serves, sorted by name, as
// SetImages last set them (an image the engine replaced meanwhile is
// listed with the manifest of the build it had until the service takes
// the new one; a request for it gets the new one). Pool is left zero:
// see PoolsByImage. It takes only the service's lock: every request
// resolves its image with it.
func (s *Service) Images() []ImageStats {
	def := s.e.DefaultImage()
	s.mu.Lock()
	out := make([]ImageStats, 0, len(s.images))
	for _, im := range s.images {
		out = append(out, ImageStats{Name: im.name, Default: im.name == def, Manifest: im.manifest})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b ImageStats) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// PoolsByImage are the warm pools of the images served, by name.
func (s *Service) PoolsByImage() map[string]PoolStats {
	s.mu.Lock()
	list := make([]*servedImage, 0, len(s.images))
	for _, im := range s.images {
		list = append(list, im)
	}
	s.mu.Unlock()
	st := s.pool.Stats()
	out := make(map[string]PoolStats, len(list))
	for _, im := range list {
		out[im.name] = im.stats(st)
	}
	return out
}

func (im *servedImage) stats(st pool.Stats) PoolStats {
	pre, pl := im.key(preloaded), im.key(plain)
	return PoolStats{
		Size: st.Size[pre], Ready: st.Ready[pre], PlainSize: st.Size[pl], PlainReady: st.Ready[pl],
		Preimport: im.pool.Preimport, Paused: st.Paused, Refill: st.Refills[pre], PlainRefill: st.Refills[pl],
	}
}

// checkImage refuses a started jail whose image is not the one im names
// (the image was replaced between the lookup and the jail's creation).
func checkImage(st *started, im *servedImage) error {
	if st.j.Manifest() != im.manifest {
		return fmt.Errorf("image %s was replaced while a jail of it started", im.name)
	}
	return nil
}
