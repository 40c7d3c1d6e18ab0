package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// jailctl session put, ls-files, cat, mkdir, mv and rm-file against the
// in-process daemon, whose fake sessions keep their files in a directory
// through run's own code: what goes in comes out, directories and moves,
// and the daemon's refusals as jailctl's errors (status 2), naming the
// session's paths.
func TestSessionFiles(t *testing.T) {
	h := newDaemon(t)
	s := jailctl(t, h.Socket, "", "session", "new")
	if s.code != 0 {
		t.Fatalf("session new: %+v", s)
	}
	id := strings.TrimSpace(s.stdout)
	local := filepath.Join(t.TempDir(), "in.csv")
	if err := os.WriteFile(local, []byte("a,b\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stdin string
		args  []string
		out   string
	}{
		{"", []string{"put", "-p", id, local, "/workspace/data/in.csv"}, "/workspace/data/in.csv\n"},
		{"from stdin", []string{"put", id, "-", "/workspace/note.txt"}, "/workspace/note.txt\n"},
		{"", []string{"cat", id, "/workspace/data/in.csv"}, "a,b\n1,2\n"},
		{"", []string{"mkdir", id, "/workspace/out"}, "/workspace/out\n"},
		{"", []string{"mv", id, "/workspace/note.txt", "/tmp/note.txt"}, "/tmp/note.txt\n"},
		{"", []string{"cat", id, "/tmp/note.txt"}, "from stdin"},
		{"", []string{"rm-file", id, "/workspace/out"}, ""},
	} {
		r := jailctl(t, h.Socket, tc.stdin, append([]string{"session"}, tc.args...)...)
		if r.code != 0 || r.stdout != tc.out {
			t.Errorf("session %v: %+v, want %q", tc.args, r, tc.out)
		}
	}
	r := jailctl(t, h.Socket, "", "session", "ls-files", id)
	if r.code != 0 || !strings.Contains(r.stdout, "TYPE") || !strings.Contains(r.stdout, "dir ") || !strings.Contains(r.stdout, "data") || strings.Contains(r.stdout, "out") {
		t.Errorf("ls-files: %+v", r)
	}
	r = jailctl(t, h.Socket, "", "session", "ls-files", "--json", id, "/workspace/data")
	if r.code != 0 || !strings.Contains(r.stdout, `"name":"in.csv"`) || !strings.Contains(r.stdout, `"size":8`) {
		t.Errorf("ls-files --json: %+v", r)
	}
	out := filepath.Join(t.TempDir(), "got.csv")
	if r := jailctl(t, h.Socket, "", "session", "cat", "-o", out, id, "/workspace/data/in.csv"); r.code != 0 {
		t.Errorf("cat -o: %+v", r)
	} else if b, _ := os.ReadFile(out); string(b) != "a,b\n1,2\n" {
		t.Errorf("cat -o wrote %q", b)
	}
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"cat", id, "/workspace/missing"}, "does not exist"},
		{[]string{"cat", id, "/workspace/data"}, "is a directory"},
		{[]string{"ls-files", id, "/workspace/data/in.csv"}, "is a file"},
		{[]string{"cat", id, "/etc/passwd"}, "not beneath /workspace or /tmp"},
		{[]string{"mv", id, "/workspace/data", "/workspace/data/inner"}, "beneath"},
		{[]string{"rm-file", id, "/workspace/data"}, "not empty"},
	} {
		r := jailctl(t, h.Socket, "", append([]string{"session"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.err) || strings.Contains(r.stderr, "work/") {
			t.Errorf("session %v: %+v, want status 2 saying %q of the session's paths", tc.args, r, tc.err)
		}
	}
}
