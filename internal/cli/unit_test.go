package cli

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/api"
)

func TestExitCode(t *testing.T) {
	for _, tt := range []struct {
		status       string
		exit, signal *int
		want         int
	}{
		{"ok", intp(0), nil, 0},
		{"ok", nil, nil, 0},
		{"error", intp(1), nil, 1},
		{"error", intp(3), nil, 3},
		{"error", intp(255), nil, 255},
		{"error", intp(256), nil, 1},
		{"error", intp(-1), nil, 1},
		{"timeout", nil, intp(9), 124},
		{"timeout", intp(0), nil, 124},
		{"killed", nil, intp(9), 137},
		{"killed", nil, intp(15), 143},
		{"killed", nil, nil, 1},
		{"memory_limit", nil, nil, 137},
		{"memory_limit", nil, intp(9), 137},
		{"memory_limit", intp(1), nil, 137},
		{"cpu_limit", nil, intp(24), 152},
		{"output_limit", intp(0), nil, 1},
		{"output_limit", intp(2), nil, 2},
		{"something_new", nil, nil, 1},
	} {
		r := &api.ExecuteResponse{Status: tt.status, ExitCode: tt.exit, Signal: tt.signal}
		if got := exitCode(r); got != tt.want {
			t.Errorf("exitCode(%s, exit %v, signal %v) = %d; want %d", tt.status, deref(tt.exit), deref(tt.signal), got, tt.want)
		}
	}
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestParseTimeout(t *testing.T) {
	for in, want := range map[string]int64{"5s": 5000, "1500ms": 1500, "2m": 120000, "1us": 1, "1.5": 1500, "3": 3000} {
		if got, err := parseTimeout(in); err != nil || got != want {
			t.Errorf("parseTimeout(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1s", "soon", "NaN", "Inf", "1e300"} {
		if got, err := parseTimeout(in); err == nil {
			t.Errorf("parseTimeout(%q) = %d; want an error", in, got)
		}
	}
}

func TestSplitArgs(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("select", "", "")
	fs.String("c", "", "")
	fs.Bool("json", false, "")
	for _, tt := range []struct{ in, flags, pos string }{
		{"a.py --select F --json", "--select F --json", "a.py"},
		{"--select=F a.py", "--select=F", "a.py"},
		{"-c - -", "-c -", "-"},
		{"-c -x", "-c -x", ""},
		{"--json a.py -- --select b", "--json", "a.py --select b"},
		{"a.py --select", "--select", "a.py"},
		{"--unknown a.py", "--unknown", "a.py"},
	} {
		flags, pos := splitArgs(fs, strings.Fields(tt.in))
		if strings.Join(flags, " ") != tt.flags || strings.Join(pos, " ") != tt.pos {
			t.Errorf("splitArgs(%q) = %q, %q; want %q, %q", tt.in, flags, pos, tt.flags, tt.pos)
		}
	}
}

func TestSafeRelPath(t *testing.T) {
	for p, want := range map[string]bool{
		"a.txt": true, "out/x.png": true, "a/./b": true, "a\nb.txt": true, ".hidden": true, "..a": true,
		"": false, ".": true, "..": false, "../x": false, "a/../b": false, "a/../../b": false,
		"/etc/x": false, "a\x00b": false,
	} {
		if got := safeRelPath(p); got != want {
			t.Errorf("safeRelPath(%q) = %v; want %v", p, got, want)
		}
	}
}

func TestQuoteName(t *testing.T) {
	for in, want := range map[string]string{
		"out/x.png":    "out/x.png",
		"":             `""`,
		"a b.txt":      "a b.txt",
		"héllo.txt":    "héllo.txt",
		"a\nb.txt":     `"a\nb.txt"`,
		"\x1b[31mred":  `"\x1b[31mred"`,
		"..\u202e.txt": `"..\u202e.txt"`,
		"\xc3.txt":     `"\xc3.txt"`,
	} {
		if got := quoteName(in); got != want {
			t.Errorf("quoteName(%q) = %s; want %s", in, got, want)
		}
	}
}

// FuzzOutDirWrite checks that a name from a jail either is refused or
// lands, as a regular file, exactly where it says beneath the directory.
func FuzzOutDirWrite(f *testing.F) {
	for _, s := range []string{"a.txt", "out/x.png", "../x", "/etc/x", "a/../../b", "", ".", "a//b", "a/./b/", "x\x00y", "..\u202e.txt"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		dir := t.TempDir()
		d, err := openOutDir(filepath.Join(dir, "out"))
		if err != nil {
			t.Fatal(err)
		}
		defer d.close()
		if err := d.write(name, []byte("data")); err != nil {
			return
		}
		if !safeRelPath(name) {
			t.Fatalf("wrote unsafe name %q", name)
		}
		fi, err := os.Lstat(filepath.Join(dir, "out", filepath.Clean(name)))
		if err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("write(%q) succeeded but left %v, %v", name, fi, err)
		}
		entries, _ := os.ReadDir(dir)
		if len(entries) != 1 {
			t.Fatalf("write(%q) created %v beside the directory", name, entries)
		}
	})
}
