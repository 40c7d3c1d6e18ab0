package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/server/servertest"
	"github.com/jaild/jaild/internal/workspace"
)

// stored is how many files h's store holds.
func stored(t *testing.T, h *servertest.Harness) int {
	t.Helper()
	l, err := h.Client.ListFiles(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Files)
}

// bigFile writes a file just over the store threshold.
func bigFile(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	content := bytes.Repeat([]byte{'x', 0, 0xff}, storeThreshold/3+1)
	name := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(name, content, 0o644); err != nil {
		t.Fatal(err)
	}
	return name, content
}

// A --file over 1 MiB goes through the store, and is removed after the
// run; a small one stays inline.
func TestExecFileThroughStore(t *testing.T) {
	h := newDaemon(t)
	var size int64
	h.Engine.RunFunc = func(_ context.Context, req *run.Request) (*run.Result, error) {
		size = req.Files[0].Size
		return &run.Result{Status: spec.StatusOK}, nil
	}
	dir := t.TempDir()
	big, content := bigFile(t, dir)
	small := filepath.Join(dir, "small.txt")
	os.WriteFile(small, []byte("hi"), 0o644)

	r := jailctl(t, h.Socket, "", "exec", "--file", big+":in/data.bin", "--file", small, "-c", "x")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("got %+v", r)
	}
	if got := audited(h); got != "file_upload execute file_delete" {
		t.Errorf("audited %q", got)
	}
	files := lastRun(t, h).Files
	if len(files) != 2 || files[0].Path != "in/data.bin" || files[0].Data != nil || size != int64(len(content)) ||
		files[1].Path != "small.txt" || string(files[1].Data) != "hi" {
		t.Errorf("files %+v", files)
	}
	if n := stored(t, h); n != 0 {
		t.Errorf("%d stored files left behind", n)
	}

	// A run the daemon refuses still removes what was stored; so does
	// one given up with Ctrl-C.
	h.Engine.RunFunc = func(context.Context, *run.Request) (*run.Result, error) {
		return nil, errdefs.New(errdefs.ErrBusy, "all 8 slots are busy")
	}
	if r := jailctl(t, h.Socket, "", "exec", "--file", big, "-c", "x"); r.code != 2 || !strings.HasPrefix(r.stderr, "jailctl: run failed: all 8 slots are busy") || stored(t, h) != 0 {
		t.Errorf("refused run: %+v; %d stored", r, stored(t, h))
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.Engine.RunFunc = func(rctx context.Context, _ *run.Request) (*run.Result, error) {
		cancel()
		<-rctx.Done()
		return nil, rctx.Err()
	}
	var out, errOut bytes.Buffer
	code := Main(ctx, []string{"--socket", h.Socket, "exec", "--file", big, "-c", "x"}, strings.NewReader(""), &out, &errOut)
	if code != 130 || stored(t, h) != 0 || !strings.HasSuffix(audited(h), "file_upload execute file_delete") {
		t.Errorf("Ctrl-C: %d %q; audited %q", code, errOut.String(), audited(h))
	}
}

// oldDaemon says it has a file store but has no routes for it (a daemon
// older than this jailctl); it counts the requests of each route.
type oldDaemon struct {
	mu   sync.Mutex
	seen map[string]int
	exec api.ExecuteRequest
}

func newOldDaemon(t *testing.T) (*oldDaemon, string) {
	d := &oldDaemon{seen: map[string]int{}}
	return d, misbehaving(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.seen[r.Method+" "+r.URL.Path]++
		switch r.Method + " " + r.URL.Path {
		case "GET /v1/info":
			canned(200, "", `{"files":{"enabled":true}}`)(w, r)
		case "POST /v1/execute":
			json.NewDecoder(r.Body).Decode(&d.exec)
			canned(200, "", `{"run_id":"r1","status":"ok","exit_code":0}`)(w, r)
		default:
			canned(404, "", `{"error":{"type":"not_found","message":"no route"}}`)(w, r)
		}
	}))
}

// Without a store, large files go inline as before.
func TestExecFileWithoutStore(t *testing.T) {
	dir := t.TempDir()
	big, content := bigFile(t, dir)
	args := []string{"exec", "--file", big, "--file", big + ":b.bin", "-c", "x"}

	h := newDaemon(t, func(c *config.Config) { c.Files.Enabled = false })
	if r := jailctl(t, h.Socket, "", args...); r.code != 0 || r.stderr != "" {
		t.Fatalf("disabled: %+v", r)
	}
	files := lastRun(t, h).Files
	if len(files) != 2 || files[0].Path != "big.bin" || !bytes.Equal(files[0].Data, content) || files[1].Path != "b.bin" || !bytes.Equal(files[1].Data, content) {
		t.Errorf("disabled: files %d", len(files))
	}
	if got := audited(h); got != "execute" {
		t.Errorf("disabled: audited %q", got)
	}

	d, sock := newOldDaemon(t)
	if r := jailctl(t, sock, "", args...); r.code != 0 || r.stderr != "" {
		t.Fatalf("old daemon: %+v", r)
	}
	if f := d.exec.Files; len(f) != 2 || f[0] != (api.FileIn{Path: "big.bin", ContentB64: b64(string(content))}) || f[1].ContentB64 != f[0].ContentB64 {
		t.Errorf("old daemon: files %d", len(f))
	}
	// The store is asked about once, and tried once.
	if d.seen["GET /v1/info"] != 1 || d.seen["POST /v1/files"] != 1 || d.seen["POST /v1/execute"] != 1 {
		t.Errorf("old daemon: requests %v", d.seen)
	}

	// No large file: the store is not used.
	h = newDaemon(t)
	small := filepath.Join(dir, "s.txt")
	os.WriteFile(small, []byte("s"), 0o644)
	if r := jailctl(t, h.Socket, "", "exec", "--file", small, "-c", "x"); r.code != 0 || audited(h) != "execute" {
		t.Errorf("small file: %+v; audited %q", r, audited(h))
	}
}

// session exec and session new use the store the same way.
func TestSessionFilesThroughStore(t *testing.T) {
	h := newDaemon(t)
	var call run.Call
	h.Engine.SessionExec = func(_ context.Context, c *run.Call) (*run.CallResult, error) {
		call = *c
		return &run.CallResult{Result: run.Result{Status: spec.StatusOK}}, nil
	}
	big, _ := bigFile(t, t.TempDir())
	r := jailctl(t, h.Socket, "", "session", "new", "--file", big)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "s-") {
		t.Fatalf("session new: %+v", r)
	}
	if f := h.Engine.Sessions()[0].Spec.Files; len(f) != 1 || f[0].Path != "big.bin" || f[0].Data != nil || stored(t, h) != 0 {
		t.Errorf("session new: files %+v, %d left stored", f, stored(t, h))
	}
	id := strings.TrimSpace(r.stdout)
	if r := jailctl(t, h.Socket, "", "session", "exec", id, "--file", big+":x.bin", "--return-to-store", "-c", "x"); r.code != 0 {
		t.Fatalf("session exec: %+v", r)
	}
	if len(call.Files) != 1 || call.Files[0].Path != "x.bin" || call.Files[0].Data != nil || call.Hooks.Store == nil || stored(t, h) != 0 {
		t.Errorf("session exec: %+v, %d left stored", call, stored(t, h))
	}
	if got := audited(h); got != "file_upload session_create file_delete file_upload session_execute file_delete" {
		t.Errorf("audited %q", got)
	}
}

func TestFilesCommands(t *testing.T) {
	h := newDaemon(t)
	dir := t.TempDir()
	local := filepath.Join(dir, "data.csv")
	os.WriteFile(local, []byte("a,b\n1,2\n"), 0o644)

	// put: the ID on stdout; --name; stdin with --name; --json.
	r := jailctl(t, h.Socket, "", "files", "put", local)
	first := strings.TrimSuffix(r.stdout, "\n")
	if r.code != 0 || !strings.HasPrefix(first, "f-") || r.stderr != "" {
		t.Fatalf("put: %+v", r)
	}
	r = jailctl(t, h.Socket, "", "files", "put", "--name", "other name.csv", local)
	other := strings.TrimSuffix(r.stdout, "\n")
	if r.code != 0 || !strings.HasPrefix(other, "f-") {
		t.Fatalf("put --name: %+v", r)
	}
	r = jailctl(t, h.Socket, "from stdin", "files", "put", "-", "--name", "in.txt", "--json")
	var sf api.StoredFile
	if err := json.Unmarshal([]byte(r.stdout), &sf); err != nil || r.code != 0 || sf.Name != "in.txt" || sf.SizeBytes != 10 {
		t.Fatalf("put - --json: %+v %v", r, err)
	}
	if got := audited(h); got != "file_upload file_upload file_upload" {
		t.Errorf("audited %q", got)
	}

	// get: stdout, -o FILE (replacing one, keeping its mode), -o DIR.
	if r := jailctl(t, h.Socket, "", "files", "get", first); r.code != 0 || r.stdout != "a,b\n1,2\n" {
		t.Errorf("get: %+v", r)
	}
	out := filepath.Join(dir, "copy.csv")
	os.WriteFile(out, []byte("old content, longer than the new"), 0o600)
	if r := jailctl(t, h.Socket, "", "files", "get", sf.FileID, "-o", out); r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Errorf("get -o: %+v", r)
	}
	if got, _ := os.ReadFile(out); string(got) != "from stdin" {
		t.Errorf("get -o wrote %q", got)
	}
	if fi, _ := os.Stat(out); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v; want the replaced file's 0600", fi.Mode().Perm())
	}
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	if r := jailctl(t, h.Socket, "", "files", "get", "-o", sub, other); r.code != 0 {
		t.Errorf("get -o DIR: %+v", r)
	}
	if got, _ := os.ReadFile(filepath.Join(sub, "other name.csv")); string(got) != "a,b\n1,2\n" {
		t.Errorf("get -o DIR wrote %q", got)
	}
	for _, dir := range []string{dir, sub} {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".jailctl-") {
				t.Errorf("temporary file %s left behind", e.Name())
			}
		}
	}
	// A missing file leaves -o's target alone.
	missing := "f-" + strings.Repeat("0", 32)
	if r := jailctl(t, h.Socket, "", "files", "get", missing, "-o", out); r.code != 2 || !strings.HasPrefix(r.stderr, "jailctl: ") {
		t.Errorf("get missing: %+v", r)
	}
	if got, _ := os.ReadFile(out); string(got) != "from stdin" {
		t.Errorf("a failed get changed -o: %q", got)
	}

	// ls and show.
	r = jailctl(t, h.Socket, "", "files", "ls")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "ID NAME SIZE EXPIRES" ||
		!strings.Contains(r.stdout, "other name.csv") || !strings.Contains(lines[1], "8 B") || !strings.Contains(lines[1], "in 23h59m") && !strings.Contains(lines[1], "in 1d") {
		t.Errorf("ls:\n%s", r.stdout)
	}
	var list api.FileList
	if r := jailctl(t, h.Socket, "", "files", "ls", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Files) != 3 {
		t.Errorf("ls --json: %+v", r)
	}
	r = jailctl(t, h.Socket, "", "files", "show", other)
	for _, want := range []string{"file:", other, "other name.csv", "8 bytes (8 B)", "sha256:", "uid 1000"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := jailctl(t, h.Socket, "", "files", "show", "--json", other); r.code != 0 || json.Unmarshal([]byte(r.stdout), &sf) != nil || sf.Name != "other name.csv" {
		t.Errorf("show --json: %+v", r)
	}

	// rm: every ID, the missing one named.
	r = jailctl(t, h.Socket, "", "files", "rm", first, missing, other)
	if r.code != 2 || !strings.HasPrefix(r.stderr, "jailctl: ") || !strings.Contains(r.stderr, missing) || strings.Count(r.stderr, "\n") != 1 || stored(t, h) != 1 {
		t.Errorf("rm: %+v; %d stored", r, stored(t, h))
	}
}

func TestFilesUsage(t *testing.T) {
	h := newDaemon(t)
	for _, args := range [][]string{
		{"files"},
		{"files", "bogus"},
		{"files", "put"},
		{"files", "put", "a", "b"},
		{"files", "put", "-"},
		{"files", "get"},
		{"files", "get", "a", "b"},
		{"files", "ls", "x"},
		{"files", "show"},
		{"files", "rm"},
		{"files", "get", "--bogus", "x"},
	} {
		r := jailctl(t, h.Socket, "", args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "jailctl: ") && !strings.HasPrefix(r.stderr, "Usage: ") || r.stdout != "" {
			t.Errorf("%q: got %d %q %q; want a usage error", args, r.code, r.stdout, r.stderr)
		}
	}
	if got := audited(h); got != "" {
		t.Errorf("usage errors reached the daemon: %q", got)
	}
	if r := jailctl(t, h.Socket, "", "files", "put", "/nonexistent/x"); r.code != 2 || !strings.Contains(r.stderr, "/nonexistent/x") {
		t.Errorf("missing local file: %+v", r)
	}
	for _, args := range [][]string{{"files", "-h"}, {"help", "files"}, {"files", "help"}} {
		r := jailctl(t, "", "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "put  ") || !strings.Contains(r.stdout, "file store") {
			t.Errorf("%q: %+v", args, r)
		}
	}
	if r := jailctl(t, "", "", "files", "help", "get"); r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: jailctl files get [flags] ID") || !strings.Contains(r.stdout, "-o PATH") {
		t.Errorf("files help get: %+v", r)
	}
	if r := jailctl(t, "", "", "help"); !strings.Contains(r.stdout, "files ") {
		t.Errorf("help lacks files: %s", r.stdout)
	}
}

// --return-to-store asks for the store and prints the IDs of the files
// returned there instead of writing them; figures are still written.
func TestExecReturnToStore(t *testing.T) {
	h := newDaemon(t)
	h.Engine.RunFunc = answer(run.Result{Status: spec.StatusOK, Stdout: []byte("done\n"),
		Files: []workspace.File{
			{Path: "out/a.csv", Size: 3 << 20, FileID: "f-a", SHA256: "ab"},
			{Path: "out/b.csv", Error: "larger than the file size limit"},
		},
		Figures: []workspace.Figure{{Name: "figure_1.png", Data: []byte("png")}},
	})
	dir := t.TempDir()
	r := jailctl(t, h.Socket, "", "exec", "--return-to-store", "--get", "out/*", "--out-dir", dir, "-c", "x")
	want := "stored out/a.csv as f-a (3.0 MiB)\njailctl: out/b.csv not returned: larger than the file size limit\nwrote " + filepath.Join(dir, "figure_1.png") + "\n"
	if r.code != 0 || r.stdout != "done\n" || r.stderr != want {
		t.Errorf("got %d %q %q\nwant %q", r.code, r.stdout, r.stderr, want)
	}
	if req := lastRun(t, h); req.Hooks.Store == nil || strings.Join(req.ReturnFiles, " ") != "out/*" {
		t.Errorf("request %+v", req)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("out-dir holds %v; want the figure alone", entries)
	}
	// Without the flag, nothing asks for the store.
	jailctl(t, h.Socket, "", "exec", "-c", "x", "--out-dir", dir)
	if lastRun(t, h).Hooks.Store != nil {
		t.Error("the store was asked for without the flag")
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 100 << 20: "100.0 MiB", 1 << 30: "1.0 GiB", 5 << 40: "5.0 TiB", 1 << 62: "4194304.0 TiB"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q; want %q", n, got, want)
		}
	}
}
