package server

import (
	"strings"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/rootfs"
	"github.com/jaild/jaild/internal/run/spec"
)

// SetImages applies a reloaded configuration's images: each image's
// default limits (the engine's own images change through run.Service's
// SetImages). Requests already admitted keep what they resolved.
func (s *Server) SetImages(cfg config.Config) {
	c := cfg
	s.imgCfg.Store(&c)
}

// reloadState is the outcome of the last reload, for the metrics.
type reloadState struct {
	ok bool
	at time.Time // when the configuration was last applied
}

// NoteReload records a reload's outcome: applied (ok) or refused.
func (s *Server) NoteReload(ok bool) {
	at := s.reload.Load().at
	if ok {
		at = time.Now()
	}
	s.reload.Store(&reloadState{ok: ok, at: at})
}

// image resolves a request's image field ("" is the default image) to an
// image the engine serves; another name is the caller's error, naming
// the field and the images there are.
func (s *Server) image(name string) (spec.ImageStats, error) {
	if name != "" && !rootfs.ImageName.MatchString(name) {
		return spec.ImageStats{}, errdefs.Field("image", "must be an image's name: 1..63 lower-case letters, digits, - and _ (GET /v1/info lists the images this daemon serves)")
	}
	list := s.engine.Images()
	for _, im := range list {
		if (name == "" && im.Default) || (name != "" && im.Name == name) {
			return im, nil
		}
	}
	if name == "" { // the engine serves no default: its fault, not the caller's
		return spec.ImageStats{}, errdefs.New(errdefs.ErrUnavailable, "the daemon has no default image now; try again")
	}
	return spec.ImageStats{}, errdefs.Field("image", "no image %q on this daemon; it serves %s", name, imageNames(list, false))
}

// ruffImage resolves the image field of lint and format: an image with
// ruff, by default the default image or else the first that has it.
func (s *Server) ruffImage(name string) (string, error) {
	list := s.engine.Images()
	if name != "" {
		im, err := s.image(name)
		if err != nil {
			return "", err
		}
		if !im.Manifest.HasPackage("ruff") {
			return "", errdefs.Field("image", "image %q has no ruff; lint and format run in %s", name, imageNames(list, true))
		}
		return im.Name, nil
	}
	for _, im := range list {
		if im.Default && im.Manifest.HasPackage("ruff") {
			return im.Name, nil
		}
	}
	for _, im := range list {
		if im.Manifest.HasPackage("ruff") {
			return im.Name, nil
		}
	}
	return "", errdefs.New(errdefs.ErrUnavailable, "no image on this daemon has ruff, which lint and format need (its operator can serve one that has: the python image)")
}

// imageNames lists the images (those with ruff only, if ruff) for an
// error message.
func imageNames(list []spec.ImageStats, ruff bool) string {
	var names []string
	for _, im := range list {
		if !ruff || im.Manifest.HasPackage("ruff") {
			names = append(names, im.Name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// imagesInfo describes the served images for /v1/info.
func (s *Server) imagesInfo() []api.ImageInfo {
	cfg := s.imgCfg.Load()
	out := []api.ImageInfo{}
	pools := s.engine.PoolsByImage()
	for _, im := range s.engine.Images() {
		m := im.Manifest
		info := api.ImageInfo{
			Name: im.Name, Default: im.Default, ImageDigest: m.ImageDigest, SizeBytes: m.ImageSizeBytes,
			PythonVersion: m.PythonVersion, DebianSuite: m.DebianSuite, PythonPackages: m.PythonPackages,
			Wheels: []api.WheelInfo{}, Packages: len(m.Packages), BuiltAt: m.BuiltAt, Ruff: m.HasPackage("ruff"),
			Defaults: wireLimits(cfg.ImageDefaults(im.Name)), Pool: poolInfo(pools[im.Name]),
		}
		if info.PythonPackages == nil {
			info.PythonPackages = map[string]string{}
		}
		for _, w := range m.Wheels {
			info.Wheels = append(info.Wheels, api.WheelInfo{Name: w.Name, Version: w.Version, SHA256: w.SHA256})
		}
		out = append(out, info)
	}
	return out
}

func poolInfo(ps spec.PoolStats) api.PoolInfo {
	p := api.PoolInfo{Size: ps.Size, Ready: ps.Ready, Preimport: ps.Preimport, PlainSize: ps.PlainSize, PlainReady: ps.PlainReady, Paused: ps.Paused}
	if p.Preimport == nil {
		p.Preimport = []string{}
	}
	return p
}
