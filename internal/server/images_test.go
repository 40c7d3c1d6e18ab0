package server

import (
	"errors"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/rootfs"
	"github.com/jaild/jaild/internal/run/spec"
)

// fieldError returns err's FieldError, failing the test when it is none
// or names another field.
func fieldError(t *testing.T, what string, err error, field string) *errdefs.FieldError {
	t.Helper()
	var fe *errdefs.FieldError
	if !errors.As(err, &fe) || fe.Field != field || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("%s: %v, want an invalid argument in field %s", what, err, field)
	}
	return fe
}

// TestExecuteImage: a request's image field names the image it runs in;
// left out or empty it is the default image; another name is refused in
// the field image with the names of the images there are.
func TestExecuteImage(t *testing.T) {
	s := testServer()
	user := peer.Caller{UID: 1000}
	for body, want := range map[string]string{
		`{"code":"1","image":"small"}`:  "small",
		`{"code":"1","image":"python"}`: "python",
		`{"code":"1","image":""}`:       "python",
		`{"code":"1"}`:                  "python",
	} {
		jr, err := decodeExecute(s, body, user)
		if err != nil || jr.Image != want {
			t.Errorf("%s: %+v %v, want image %q", body, jr, err, want)
		}
	}
	for _, name := range []string{"nope", "python2"} {
		_, err := decodeExecute(s, `{"code":"1","image":"`+name+`"}`, user)
		fe := fieldError(t, name, err, "image")
		if !strings.Contains(fe.Reason, `no image "`+name+`"`) || !strings.Contains(fe.Reason, "python, small") {
			t.Errorf("%s: %q, want the name asked and the images served (python, small)", name, fe.Reason)
		}
	}
	// What cannot be an image's name is refused by its form, and not
	// echoed (it may be megabytes long).
	for _, name := range []string{"Python", "small/../python", strings.Repeat("a", 64), "-x"} {
		_, err := decodeExecute(s, `{"code":"1","image":"`+name+`"}`, user)
		fe := fieldError(t, name, err, "image")
		if !strings.Contains(fe.Reason, "must be an image's name") || strings.Contains(fe.Reason, name) {
			t.Errorf("%.20s: %q, want the form of a name, without the value", name, fe.Reason)
		}
	}
}

// TestImageDefaults: a run that names no limits gets its image's
// defaults ([images.NAME.defaults] over [defaults]); a limit it names
// overrides them within the caller's maxima.
func TestImageDefaults(t *testing.T) {
	s := testServer()
	cfg := config.Default()
	cfg.Images = map[string]config.Image{"small": {Dir: "/srv/small", Defaults: config.Limits{MemoryMB: 256}}}
	s.SetImages(cfg)
	user := peer.Caller{UID: 1000}
	for _, c := range []struct {
		body     string
		memoryMB int64
	}{
		{`{"code":"1","image":"small"}`, 256},
		{`{"code":"1","image":"python"}`, 512},
		{`{"code":"1"}`, 512},
		{`{"code":"1","image":"small","limits":{"memory_mb":1024}}`, 1024},
	} {
		jr, err := decodeExecute(s, c.body, user)
		if err != nil || jr.Limits.MemoryBytes != c.memoryMB<<20 {
			t.Errorf("%s: %+v %v, want %d MiB", c.body, jr, err, c.memoryMB)
			continue
		}
		if jr.Limits.Timeout.Milliseconds() != cfg.Defaults.TimeoutMs || jr.Limits.Pids != cfg.Defaults.Pids {
			t.Errorf("%s: limits %+v, want [defaults]' for what the image does not set", c.body, jr.Limits)
		}
	}
	if _, err := decodeExecute(s, `{"code":"1","image":"small","limits":{"memory_mb":4096}}`, user); err == nil {
		t.Error("an image's defaults raised the caller's maxima")
	}
	// A reload that drops the image's defaults brings [defaults] back.
	s.SetImages(config.Default())
	if jr, err := decodeExecute(s, `{"code":"1","image":"small"}`, user); err != nil || jr.Limits.MemoryBytes != 512<<20 {
		t.Errorf("after SetImages without [images]: %+v %v, want 512 MiB", jr, err)
	}
}

// listEngine serves the images in its list.
type listEngine struct {
	Engine
	list []spec.ImageStats
}

func (e listEngine) Images() []spec.ImageStats { return e.list }

func withRuff(name string, def, ruff bool) spec.ImageStats {
	m := &rootfs.Manifest{Name: name}
	if ruff {
		m.Packages = []rootfs.Package{{Name: "python3"}, {Name: "ruff"}}
	}
	return spec.ImageStats{Name: name, Default: def, Manifest: m}
}

// TestRuffImage: lint and format run in an image with ruff: the one
// named, else the default, else the first by name that has ruff.
func TestRuffImage(t *testing.T) {
	s := testServer()
	for name, want := range map[string]string{"": "python", "python": "python"} {
		if got, err := s.ruffImage(name); err != nil || got != want {
			t.Errorf("ruffImage(%q) = %q %v, want %q", name, got, err, want)
		}
	}
	_, err := s.ruffImage("small")
	fe := fieldError(t, "small", err, "image")
	if !strings.Contains(fe.Reason, `image "small" has no ruff`) || !strings.Contains(fe.Reason, "run in python") || strings.Contains(fe.Reason, "small,") {
		t.Errorf("small: %q, want it to name python (and only the images with ruff)", fe.Reason)
	}
	_, err = s.ruffImage("nope")
	if fe := fieldError(t, "nope", err, "image"); !strings.Contains(fe.Reason, "python, small") {
		t.Errorf("nope: %q, want the images served", fe.Reason)
	}

	// A default without ruff: the first image by name that has it.
	s.engine = listEngine{list: []spec.ImageStats{withRuff("a-min", false, false), withRuff("b", false, true), withRuff("c", true, false), withRuff("d", false, true)}}
	if got, err := s.ruffImage(""); err != nil || got != "b" {
		t.Errorf("default without ruff: %q %v, want b", got, err)
	}
	_, err = s.ruffImage("c")
	if fe := fieldError(t, "c", err, "image"); !strings.Contains(fe.Reason, "run in b, d") {
		t.Errorf("c: %q, want b, d", fe.Reason)
	}
	// No image with ruff: the daemon cannot lint now.
	s.engine = listEngine{list: []spec.ImageStats{withRuff("c", true, false)}}
	if _, err := s.ruffImage(""); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("no ruff anywhere: %v, want unavailable", err)
	}
	// No default image: the daemon's fault, not the caller's.
	s.engine = listEngine{list: []spec.ImageStats{withRuff("b", false, true)}}
	if _, err := s.image(""); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("no default image: %v, want unavailable", err)
	}
}
