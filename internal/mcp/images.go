package mcp

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/jaild/jaild/internal/api"
)

// maxListedPackages bounds the Python packages an image's line in a
// description names when the daemon serves several images; the rest are
// counted.
const maxListedPackages = 12

// multiImage reports whether the daemon serves more than one image (as its
// info said at start), so that the tools take an image argument. A daemon
// that lists no images (older than the images field) serves one.
func (s *Server) multiImage() bool { return len(s.info.Images) > 1 }

// imageNames lists the names of the daemon's images (those with ruff only,
// if ruff), in the daemon's order (by name).
func (s *Server) imageNames(ruff bool) []string {
	var names []string
	for _, im := range s.info.Images {
		if !ruff || im.Ruff {
			names = append(names, im.Name)
		}
	}
	return names
}

// defaultImage is the name of the daemon's default image, "" if it lists
// none.
func (s *Server) defaultImage() string {
	for _, im := range s.info.Images {
		if im.Default {
			return im.Name
		}
	}
	return ""
}

// imageArgument fits the image argument of a tool's schema to the daemon:
// the names served at start-up (with the default named in the
// description) when there is a choice, else no argument at all. The names
// are examples, not an enum: the SDK refuses arguments that fail the
// schema before the daemon is asked, and the daemon's images change at a
// reload, so an enum frozen at start-up would refuse an image added since
// (with the SDK's message, not the daemon's) and offer one removed. The
// daemon checks the name against what it serves now, and its refusal
// names those.
func (s *Server) imageArgument(schema *jsonschema.Schema, names []string, what string) {
	if len(names) < 2 {
		delete(schema.Properties, "image")
		return
	}
	p := schema.Properties["image"]
	p.Enum, p.Examples = nil, nil
	for _, n := range names {
		p.Examples = append(p.Examples, n)
	}
	p.MinLength = jsonschema.Ptr(1)
	def := s.defaultImage()
	if !slices.Contains(names, def) {
		def = names[0]
	}
	p.Description = fmt.Sprintf("%s: one of %s (default: %s)", what, strings.Join(names, ", "), def)
}

// sortedPackages are an image's Python package names, sorted as a person
// reads them (case aside).
func sortedPackages(pkgs map[string]string) []string {
	return slices.SortedFunc(maps.Keys(pkgs), func(a, b string) int {
		return cmp.Or(cmp.Compare(strings.ToLower(a), strings.ToLower(b)), cmp.Compare(a, b))
	})
}

// packagesList names an image's Python packages for the run
// description: all of them with their versions when it is the only image,
// else the first maxListedPackages names and how many more. wheels names
// the packages installed from its recipe's wheelhouse.
func packagesList(im api.ImageInfo, all bool) (pkgs, wheels string) {
	names := sortedPackages(im.PythonPackages)
	var listed []string
	for i, n := range names {
		if !all && i == maxListedPackages {
			listed[i-1] += fmt.Sprintf(" and %d more", len(names)-i)
			break
		}
		if all {
			n += " " + im.PythonPackages[n]
		}
		listed = append(listed, n)
	}
	var ws []string
	for _, w := range im.Wheels {
		if all {
			ws = append(ws, w.Name+" "+w.Version)
		} else {
			ws = append(ws, w.Name)
		}
	}
	return strings.Join(listed, ", "), strings.Join(ws, ", ")
}

// limitsNote names the default limits of an image that differ from the
// daemon's default image's (d), "" when none do or the daemon does not
// say.
func limitsNote(l, d api.LimitValues) string {
	if l == (api.LimitValues{}) || l == d {
		return ""
	}
	var diff []string
	if l.TimeoutMs != d.TimeoutMs {
		diff = append(diff, seconds(l.TimeoutMs)+" of wall-clock time")
	}
	if l.MemoryMB != d.MemoryMB {
		diff = append(diff, fmt.Sprintf("%d MB of memory", l.MemoryMB))
	}
	if l.Pids != d.Pids {
		diff = append(diff, fmt.Sprintf("%d processes and threads", l.Pids))
	}
	if l.FileSizeMB != d.FileSizeMB {
		diff = append(diff, fmt.Sprintf("%d MB per file written", l.FileSizeMB))
	}
	if l.OutputBytes != d.OutputBytes {
		diff = append(diff, bytesString(l.OutputBytes)+" each of stdout and stderr")
	}
	return " Its default limits: " + strings.Join(diff, ", ") + "."
}

// imagesText is the run description's account of what Python has: one
// line for a daemon with one image, else a line per image.
func (s *Server) imagesText() string {
	images := s.info.Images
	if len(images) == 0 { // an older daemon: its one image is the rootfs
		r := s.info.Rootfs
		images = []api.ImageInfo{{Name: r.Name, Default: true, PythonVersion: r.PythonVersion, PythonPackages: r.PythonPackages}}
	}
	if len(images) == 1 {
		im := images[0]
		pkgs, wheels := packagesList(im, true)
		if wheels != "" {
			pkgs = strings.TrimPrefix(pkgs+", "+wheels+" (installed from wheels)", ", ")
		}
		if pkgs == "" {
			return fmt.Sprintf("- Python %s with the standard library only (nothing else can be installed).\n", im.PythonVersion)
		}
		return fmt.Sprintf("- Python %s with the standard library and these packages (nothing else can be installed): %s.\n", im.PythonVersion, pkgs)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "- The code runs in one of these images, chosen with `image`; nothing else can be installed in any:\n")
	for _, im := range images {
		name := im.Name
		if im.Default {
			name += " (the default)"
		}
		fmt.Fprintf(&b, "  - %s: Python %s", name, im.PythonVersion)
		pkgs, wheels := packagesList(im, false)
		if pkgs == "" && wheels == "" {
			b.WriteString(" with the standard library only.")
		} else {
			b.WriteString(".")
		}
		if pkgs != "" {
			fmt.Fprintf(&b, " Packages: %s.", pkgs)
		}
		if wheels != "" {
			fmt.Fprintf(&b, " Installed from wheels: %s.", wheels)
		}
		fmt.Fprintf(&b, "%s\n", limitsNote(im.Defaults, s.info.Defaults))
	}
	return b.String()
}
