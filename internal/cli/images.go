package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/jaild/jaild/internal/api"
)

const imagesHelp = `One line per image: its name, * for the default image (the one a request
that names none runs in), the first 12 hex digits of its digest, its Python
version, the number of its Python packages (and of its wheels), the size of
its image file, and its warm pool (ready/size, plain and preloaded).

exec, session new, repl, lint and format take --image NAME. "jailctl images
--json" prints the daemon's list as JSON (the images of "jailctl info
--json"), with every package and version.`

func runImages(e *env, args []string) int {
	a, rc, ok := e.ask("images", "print the daemon's list of images as JSON", nil, args, 0, 0)
	if !ok {
		return rc
	}
	var info struct {
		Images json.RawMessage `json:"images"`
	}
	if rc, ok := e.fetch(a.c, http.MethodGet, "/v1/info", nil, &info, false); !ok {
		return rc
	}
	var images []api.ImageInfo
	if info.Images == nil || string(info.Images) == "null" {
		return e.errorf("the daemon lists no images (a jaild older than this jailctl?)")
	}
	if err := json.Unmarshal(info.Images, &images); err != nil {
		return e.errorf("malformed response: images: %v", err)
	}
	if a.json {
		e.printJSON(info.Images)
		return exitOK
	}
	writeImagesTable(e.stdout, images)
	return exitOK
}

// writeImagesTable writes the images as a table, in the daemon's order
// (by name).
func writeImagesTable(w io.Writer, images []api.ImageInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDEFAULT\tDIGEST\tPYTHON\tPACKAGES\tSIZE\tPOOL")
	for _, im := range images {
		def := ""
		if im.Default {
			def = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", quoteName(im.Name), def, shortDigest(im.ImageDigest),
			orDash(im.PythonVersion), packageCount(&im), humanSize(im.SizeBytes), poolString(im.Pool))
	}
	tw.Flush()
}

// writeImageLines writes one line per image for "jailctl info", the
// first after label.
func writeImageLines(tw io.Writer, label string, images []api.ImageInfo) {
	for _, im := range images {
		name := quoteName(im.Name)
		if im.Default {
			name += " (default)"
		}
		pkgs := plural(len(im.PythonPackages), "package")
		if n := len(im.Wheels); n > 0 {
			pkgs += " + " + plural(n, "wheel")
		}
		fmt.Fprintf(tw, "%s\t%s: python %s, %s, %s, pool %s\n", label, name, orDash(im.PythonVersion),
			pkgs, humanSize(im.SizeBytes), poolString(im.Pool))
		label = ""
	}
}

// shortDigest is the first 12 hex digits of a "sha256:..." digest.
func shortDigest(d string) string {
	h := strings.TrimPrefix(d, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return orDash(h)
}

// packageCount is an image's Python packages, and its wheels if it has
// any: "22", "3 + 1 wheel".
func packageCount(im *api.ImageInfo) string {
	s := fmt.Sprint(len(im.PythonPackages))
	if n := len(im.Wheels); n > 0 {
		s += " + " + plural(n, "wheel")
	}
	return s
}

// plural is "1 wheel", "2 wheels".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// poolString is a warm pool's ready/size, plain and preloaded.
func poolString(p api.PoolInfo) string {
	s := fmt.Sprintf("%d/%d plain, %d/%d preloaded", p.PlainReady, p.PlainSize, p.Ready, p.Size)
	if p.Paused {
		s += " (paused)"
	}
	return s
}

// orDash is a daemon's string for a table: quoted if it needs to be, "-"
// when empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return quoteName(s)
}
