//go:build !unit

package run

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/workspace"
)

func TestJailFilesRoundTrip(t *testing.T) {
	bin := make([]byte, 1<<20)
	_, _ = rand.Read(bin)
	files := []File{
		{Path: "data/in.bin", Data: bin},
		{Path: "notes.txt", Data: []byte("héllo\n")},
		{Path: "empty", Data: nil},
	}
	code := `
import os, shutil
shutil.copy('data/in.bin', 'out.bin')
os.makedirs('out/sub', exist_ok=True)
open('out/sub/r.csv', 'w').write('a,b\n1,2\n')
open('out/x.txt', 'w').write(open('notes.txt').read().upper())
print(os.path.getsize('empty'))
`
	res := run(t, code, func(r *Request) {
		r.Files = files
		r.ReturnFiles = []string{"out.bin", "out/**", "notes.txt", "missing.txt", "*.nothing"}
	})
	if res.Status != spec.StatusOK || string(res.Stdout) != "0\n" {
		t.Fatalf("status %s stdout %q stderr %s", res.Status, res.Stdout, res.Stderr)
	}
	got := map[string]workspace.File{}
	for _, f := range res.Files {
		got[f.Path] = f
	}
	if f := got["out.bin"]; !bytes.Equal(f.Data, bin) || f.Size != int64(len(bin)) {
		t.Errorf("out.bin: %d bytes, error %q; want the 1 MiB input back byte for byte", len(f.Data), f.Error)
	}
	if f := got["notes.txt"]; string(f.Data) != "héllo\n" {
		t.Errorf("notes.txt = %q", f.Data)
	}
	if f := got["out/sub/r.csv"]; string(f.Data) != "a,b\n1,2\n" {
		t.Errorf("out/sub/r.csv = %q (%s)", f.Data, f.Error)
	}
	if f := got["out/x.txt"]; string(f.Data) != "HÉLLO\n" {
		t.Errorf("out/x.txt = %q", f.Data)
	}
	if f, ok := got["missing.txt"]; !ok || f.Error == "" {
		t.Errorf("a literal path that does not exist must be reported, got %+v", f)
	}
	if len(res.Files) != 5 {
		t.Errorf("files: %+v", res.Files)
	}
}

func TestJailHostileOutputs(t *testing.T) {
	code := `
import os, socket, stat
os.makedirs('out/d', exist_ok=True)
os.symlink('/etc/shadow', 'out/shadow.txt')
os.symlink('/proc/self/environ', 'out/env.txt')
os.symlink('../../../../../../etc/passwd', 'out/d/p')
os.symlink('/', 'out/root')
os.mkfifo('out/fifo')
socket.socket(socket.AF_UNIX).bind('out/sock')
try: os.mknod('out/null', stat.S_IFCHR | 0o666, os.makedev(1, 3))
except OSError as e: print('mknod', e.errno)
try: os.link('/usr/bin/python3', 'py'); print('LINKED')
except OSError as e: print('link', e.errno)
open('out/sparse', 'w').close(); os.truncate('out/sparse', 60 << 20)  # sparse: under RLIMIT_FSIZE, no blocks
open('out/ok.txt', 'w').write('fine')
`
	res := run(t, code, func(r *Request) { r.ReturnFiles = []string{"out/**", "py"} })
	if res.Status != spec.StatusOK {
		t.Fatalf("status %s stderr %s", res.Status, res.Stderr)
	}
	if out := string(res.Stdout); !strings.Contains(out, "mknod 1\n") || strings.Contains(out, "LINKED") {
		t.Errorf("stdout %q: want mknod EPERM and no hardlink out of the workspace", out)
	}
	var returned []string
	for _, f := range res.Files {
		if f.Error == "" {
			returned = append(returned, f.Path)
		}
		if strings.Contains(string(f.Data), "root:") || strings.Contains(string(f.Data), "PATH=") {
			t.Errorf("%s returned host content", f.Path)
		}
	}
	if strings.Join(returned, ",") != "out/ok.txt" {
		t.Errorf("returned %v, want only out/ok.txt; all: %+v", returned, res.Files)
	}
	reported := map[string]string{}
	for _, f := range res.Files {
		reported[f.Path] = f.Error
	}
	for _, p := range []string{"out/shadow.txt", "out/env.txt", "out/d/p", "out/root", "out/fifo", "out/sock", "out/sparse"} {
		if reported[p] == "" {
			t.Errorf("%s was not reported as skipped", p)
		}
	}
}

func TestJailFilesInRejected(t *testing.T) {
	for _, p := range []string{"../../etc/cron.d/x", "/etc/x", "a/../../b", "a\x00b", "", strings.Repeat("n", 10000)} {
		_, err := testEngine.Run(t.Context(), &Request{Code: "pass", Limits: jail.DefaultLimits(), Files: []File{{Path: p}}})
		if err == nil {
			t.Errorf("file path %q accepted", p)
		}
	}
	_, err := testEngine.Run(t.Context(), &Request{Code: "pass", Limits: jail.DefaultLimits(), Files: []File{{Path: "a"}, {Path: "a"}}})
	if err == nil {
		t.Error("duplicate file paths accepted")
	}
	checkNoLeaks(t, "")
}
