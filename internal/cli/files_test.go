package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

// storeDaemon is a daemon with a file store (unless disabled) and an
// execute whose answer a test sets; it logs every request.
type storeDaemon struct {
	sock    string
	mu      sync.Mutex
	files   map[string]api.StoredFile
	content map[string][]byte
	log     []string // "put NAME SIZE", "delete ID", "execute", "info"
	exec    api.ExecuteRequest
	// lengths are the Content-Length of each upload (-1: chunked).
	lengths []int64
	// execute answers POST /v1/execute; nil: a plain ok.
	execute func(w http.ResponseWriter, r *http.Request)
}

type storeMode int

const (
	storeOn       storeMode = iota
	storeDisabled           // info says files.enabled false, and there are no routes
	storeNoRoutes           // info says enabled, but POST /v1/files is a 404 (an old daemon)
)

func newStoreDaemon(t *testing.T, mode storeMode, routes ...func(*http.ServeMux)) *storeDaemon {
	t.Helper()
	d := &storeDaemon{files: map[string]api.StoredFile{}, content: map[string][]byte{}}
	write := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	notFound := func(w http.ResponseWriter) {
		write(w, 404, api.ErrorBody{Error: api.ErrorDetail{Type: "not_found", Message: "no such file"}})
	}
	note := func(s string) {
		d.mu.Lock()
		d.log = append(d.log, s)
		d.mu.Unlock()
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, r *http.Request) {
		note("info")
		write(w, 200, api.Info{Files: api.FilesInfo{Enabled: mode != storeDisabled, MaxFileBytes: 1 << 30}})
	})
	mux.HandleFunc("POST /v1/execute", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.log = append(d.log, "execute")
		d.exec = api.ExecuteRequest{}
		json.NewDecoder(r.Body).Decode(&d.exec)
		d.mu.Unlock()
		if d.execute != nil {
			d.execute(w, r)
			return
		}
		write(w, 200, api.ExecuteResponse{RunID: "r1", Status: "ok", ExitCode: intp(0)})
	})
	if mode == storeOn {
		mux.HandleFunc("POST /v1/files", func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			name := r.URL.Query().Get("name")
			d.mu.Lock()
			id := "f-" + strconv.Itoa(len(d.log))
			d.log = append(d.log, "put "+name+" "+strconv.Itoa(len(b)))
			d.lengths = append(d.lengths, r.ContentLength)
			now := time.Now()
			f := api.StoredFile{FileID: id, Name: name, SizeBytes: int64(len(b)), SHA256: "5891b5b5", CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour), UID: 1000}
			d.files[id], d.content[id] = f, b
			d.mu.Unlock()
			write(w, 201, f)
		})
		mux.HandleFunc("GET /v1/files", func(w http.ResponseWriter, r *http.Request) {
			d.mu.Lock()
			defer d.mu.Unlock()
			l := api.FileList{Files: []api.StoredFile{}}
			for _, f := range d.files {
				l.Files = append(l.Files, f)
			}
			write(w, 200, l)
		})
		mux.HandleFunc("GET /v1/files/{id}", func(w http.ResponseWriter, r *http.Request) {
			d.mu.Lock()
			b, ok := d.content[r.PathValue("id")]
			d.mu.Unlock()
			if !ok {
				notFound(w)
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b)
		})
		mux.HandleFunc("GET /v1/files/{id}/meta", func(w http.ResponseWriter, r *http.Request) {
			d.mu.Lock()
			f, ok := d.files[r.PathValue("id")]
			d.mu.Unlock()
			if !ok {
				notFound(w)
				return
			}
			write(w, 200, f)
		})
		mux.HandleFunc("DELETE /v1/files/{id}", func(w http.ResponseWriter, r *http.Request) {
			id := r.PathValue("id")
			d.mu.Lock()
			f, ok := d.files[id]
			delete(d.files, id)
			delete(d.content, id)
			d.log = append(d.log, "delete "+id)
			d.mu.Unlock()
			if !ok {
				notFound(w)
				return
			}
			write(w, 200, f)
		})
	}
	for _, add := range routes {
		add(mux)
	}
	d.sock = serveMux(t, mux)
	return d
}

func (d *storeDaemon) events() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Join(d.log, ", ")
}

func (d *storeDaemon) stored() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.files)
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

// A --file over 1 MiB goes through the store, streamed with its length,
// and is removed after the run; a small one stays inline.
func TestExecFileThroughStore(t *testing.T) {
	d := newStoreDaemon(t, storeOn)
	dir := t.TempDir()
	big, content := bigFile(t, dir)
	small := filepath.Join(dir, "small.txt")
	os.WriteFile(small, []byte("hi"), 0o644)

	r := jailctl(t, d.sock, "", "exec", "--file", big+":in/data.bin", "--file", small, "-c", "x")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("got %+v", r)
	}
	if got, want := d.events(), "info, put data.bin "+strconv.Itoa(len(content))+", execute, delete f-1"; got != want {
		t.Errorf("requests %q; want %q", got, want)
	}
	if len(d.lengths) != 1 || d.lengths[0] != int64(len(content)) {
		t.Errorf("upload Content-Length %v; want %d", d.lengths, len(content))
	}
	files := d.exec.Files
	if len(files) != 2 || files[0] != (api.FileIn{Path: "in/data.bin", FileID: "f-1"}) ||
		files[1] != (api.FileIn{Path: "small.txt", ContentB64: b64("hi")}) {
		t.Errorf("files %+v", files)
	}
	if d.stored() != 0 {
		t.Error("the stored file was left behind")
	}

	// A run the daemon refuses still removes what was stored; so does
	// one given up with Ctrl-C.
	d = newStoreDaemon(t, storeOn)
	d.execute = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(503)
		io.WriteString(w, `{"error":{"type":"busy","message":"all 8 slots are busy"}}`)
	}
	if r := jailctl(t, d.sock, "", "exec", "--file", big, "-c", "x"); r.code != 2 || r.stderr != "jailctl: all 8 slots are busy\n" || d.stored() != 0 {
		t.Errorf("refused run: %+v; %d stored", r, d.stored())
	}
	d = newStoreDaemon(t, storeOn)
	ctx, cancel := context.WithCancel(context.Background())
	d.execute = func(w http.ResponseWriter, r *http.Request) {
		cancel()
		<-r.Context().Done()
	}
	var out, errOut bytes.Buffer
	code := Main(ctx, []string{"--socket", d.sock, "exec", "--file", big, "-c", "x"}, strings.NewReader(""), &out, &errOut)
	if code != 130 || d.stored() != 0 || !strings.HasSuffix(d.events(), "delete f-1") {
		t.Errorf("Ctrl-C: %d %q; requests %q", code, errOut.String(), d.events())
	}
}

// Without a store, large files go inline as before.
func TestExecFileWithoutStore(t *testing.T) {
	dir := t.TempDir()
	big, content := bigFile(t, dir)
	for name, mode := range map[string]storeMode{"disabled": storeDisabled, "old daemon": storeNoRoutes} {
		d := newStoreDaemon(t, mode)
		r := jailctl(t, d.sock, "", "exec", "--file", big, "--file", big+":b.bin", "-c", "x")
		if r.code != 0 || r.stderr != "" {
			t.Fatalf("%s: %+v", name, r)
		}
		files := d.exec.Files
		if len(files) != 2 || files[0] != (api.FileIn{Path: "big.bin", ContentB64: b64(string(content))}) || files[1].Path != "b.bin" || files[1].ContentB64 != files[0].ContentB64 {
			t.Errorf("%s: files %d", name, len(files))
		}
		// The store is asked about once.
		if got := d.events(); got != "info, execute" {
			t.Errorf("%s: requests %q", name, got)
		}
	}
	// No large file: not even info is asked.
	d := newStoreDaemon(t, storeOn)
	small := filepath.Join(dir, "s.txt")
	os.WriteFile(small, []byte("s"), 0o644)
	if r := jailctl(t, d.sock, "", "exec", "--file", small, "-c", "x"); r.code != 0 || d.events() != "execute" {
		t.Errorf("small file: %+v; requests %q", r, d.events())
	}
}

// session exec and session new use the store the same way.
func TestSessionFilesThroughStore(t *testing.T) {
	var create api.SessionCreateRequest
	var req api.SessionExecuteRequest
	d := newStoreDaemon(t, storeOn, func(mux *http.ServeMux) {
		mux.HandleFunc("POST /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
			json.NewDecoder(r.Body).Decode(&create)
			w.WriteHeader(201)
			json.NewEncoder(w).Encode(api.Session{SessionID: "s-1", State: api.SessionIdle})
		})
		mux.HandleFunc("POST /v1/sessions/s-1/execute", func(w http.ResponseWriter, r *http.Request) {
			json.NewDecoder(r.Body).Decode(&req)
			json.NewEncoder(w).Encode(api.SessionExecuteResponse{ExecuteResponse: api.ExecuteResponse{Status: "ok", ExitCode: intp(0)},
				Session: api.SessionStatus{State: api.SessionIdle}})
		})
	})
	big, _ := bigFile(t, t.TempDir())
	if r := jailctl(t, d.sock, "", "session", "new", "--file", big); r.code != 0 || r.stdout != "s-1\n" {
		t.Fatalf("session new: %+v", r)
	}
	if len(create.Files) != 1 || create.Files[0].FileID == "" || create.Files[0].ContentB64 != "" || d.stored() != 0 {
		t.Errorf("session new: files %+v, %d left stored", create.Files, d.stored())
	}
	if r := jailctl(t, d.sock, "", "session", "exec", "s-1", "--file", big+":x.bin", "--return-to-store", "-c", "x"); r.code != 0 {
		t.Fatalf("session exec: %+v", r)
	}
	if len(req.Files) != 1 || req.Files[0].FileID == "" || req.Files[0].Path != "x.bin" || req.ReturnFilesAs != api.ReturnStore || d.stored() != 0 {
		t.Errorf("session exec: %+v, %d left stored", req, d.stored())
	}
}

func TestFilesCommands(t *testing.T) {
	d := newStoreDaemon(t, storeOn)
	dir := t.TempDir()
	local := filepath.Join(dir, "data.csv")
	os.WriteFile(local, []byte("a,b\n1,2\n"), 0o644)

	// put: the ID on stdout; --name; stdin with --name; --json.
	r := jailctl(t, d.sock, "", "files", "put", local)
	if r.code != 0 || r.stdout != "f-0\n" || r.stderr != "" {
		t.Fatalf("put: %+v", r)
	}
	r = jailctl(t, d.sock, "", "files", "put", "--name", "other name.csv", local)
	if r.code != 0 || r.stdout != "f-1\n" {
		t.Fatalf("put --name: %+v", r)
	}
	r = jailctl(t, d.sock, "from stdin", "files", "put", "-", "--name", "in.txt", "--json")
	var sf api.StoredFile
	if err := json.Unmarshal([]byte(r.stdout), &sf); err != nil || r.code != 0 || sf.FileID != "f-2" || sf.Name != "in.txt" || sf.SizeBytes != 10 {
		t.Fatalf("put - --json: %+v %v", r, err)
	}
	if got := d.events(); got != "put data.csv 8, put other name.csv 8, put in.txt 10" {
		t.Errorf("requests %q", got)
	}
	if d.lengths[0] != 8 || d.lengths[2] != -1 {
		t.Errorf("Content-Length %v; want 8 for a file, chunked for stdin", d.lengths)
	}

	// get: stdout, -o FILE (replacing one, keeping its mode), -o DIR.
	if r := jailctl(t, d.sock, "", "files", "get", "f-0"); r.code != 0 || r.stdout != "a,b\n1,2\n" {
		t.Errorf("get: %+v", r)
	}
	out := filepath.Join(dir, "copy.csv")
	os.WriteFile(out, []byte("old content, longer than the new"), 0o600)
	if r := jailctl(t, d.sock, "", "files", "get", "f-2", "-o", out); r.code != 0 || r.stdout != "" || r.stderr != "" {
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
	if r := jailctl(t, d.sock, "", "files", "get", "-o", sub, "f-1"); r.code != 0 {
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
	if r := jailctl(t, d.sock, "", "files", "get", "f-9", "-o", out); r.code != 2 || r.stderr != "jailctl: no such file\n" {
		t.Errorf("get missing: %+v", r)
	}
	if got, _ := os.ReadFile(out); string(got) != "from stdin" {
		t.Errorf("a failed get changed -o: %q", got)
	}

	// ls and show.
	r = jailctl(t, d.sock, "", "files", "ls")
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.code != 0 || len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "ID NAME SIZE EXPIRES" ||
		!strings.Contains(r.stdout, "other name.csv") || !strings.Contains(lines[1], "8 B") || !strings.Contains(lines[1], "in 23h59m") && !strings.Contains(lines[1], "in 1d") {
		t.Errorf("ls:\n%s", r.stdout)
	}
	var list api.FileList
	if r := jailctl(t, d.sock, "", "files", "ls", "--json"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &list) != nil || len(list.Files) != 3 {
		t.Errorf("ls --json: %+v", r)
	}
	r = jailctl(t, d.sock, "", "files", "show", "f-1")
	for _, want := range []string{"file:", "f-1", "other name.csv", "8 bytes (8 B)", "5891b5b5", "uid 1000"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show lacks %q:\n%s", want, r.stdout)
		}
	}
	if r := jailctl(t, d.sock, "", "files", "show", "--json", "f-1"); r.code != 0 || json.Unmarshal([]byte(r.stdout), &sf) != nil || sf.Name != "other name.csv" {
		t.Errorf("show --json: %+v", r)
	}

	// rm: every ID, the missing one named.
	r = jailctl(t, d.sock, "", "files", "rm", "f-0", "f-9", "f-1")
	if r.code != 2 || r.stderr != "jailctl: f-9: no such file\n" || d.stored() != 1 {
		t.Errorf("rm: %+v; %d stored", r, d.stored())
	}
}

func TestFilesUsage(t *testing.T) {
	d := newStoreDaemon(t, storeOn)
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
		r := jailctl(t, d.sock, "", args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "jailctl: ") && !strings.HasPrefix(r.stderr, "Usage: ") || r.stdout != "" {
			t.Errorf("%q: got %d %q %q; want a usage error", args, r.code, r.stdout, r.stderr)
		}
	}
	if got := d.events(); got != "" {
		t.Errorf("usage errors reached the daemon: %q", got)
	}
	if r := jailctl(t, d.sock, "", "files", "put", "/nonexistent/x"); r.code != 2 || !strings.Contains(r.stderr, "/nonexistent/x") {
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
	d := newStoreDaemon(t, storeOn)
	d.execute = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(api.ExecuteResponse{RunID: "r1", Status: "ok", ExitCode: intp(0), Stdout: "done\n",
			Files: []api.FileOut{
				{Path: "out/a.csv", SizeBytes: 3 << 20, FileID: "f-a", SHA256: "ab"},
				{Path: "out/b.csv", Error: "larger than the file size limit"},
			},
			Figures: []api.Figure{{Name: "figure_1.png", ContentB64: b64("png")}},
		})
	}
	dir := t.TempDir()
	r := jailctl(t, d.sock, "", "exec", "--return-to-store", "--get", "out/*", "--out-dir", dir, "-c", "x")
	want := "stored out/a.csv as f-a (3.0 MiB)\njailctl: out/b.csv not returned: larger than the file size limit\nwrote " + filepath.Join(dir, "figure_1.png") + "\n"
	if r.code != 0 || r.stdout != "done\n" || r.stderr != want {
		t.Errorf("got %d %q %q\nwant %q", r.code, r.stdout, r.stderr, want)
	}
	if d.exec.ReturnFilesAs != api.ReturnStore || strings.Join(d.exec.ReturnFiles, " ") != "out/*" {
		t.Errorf("request %+v", d.exec)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("out-dir holds %v; want the figure alone", entries)
	}
	// Without the flag, nothing asks for the store.
	jailctl(t, d.sock, "", "exec", "-c", "x", "--out-dir", dir)
	if d.exec.ReturnFilesAs != "" {
		t.Errorf("return_files_as %q without the flag", d.exec.ReturnFilesAs)
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 100 << 20: "100.0 MiB", 1 << 30: "1.0 GiB", 5 << 40: "5.0 TiB", 1 << 62: "4194304.0 TiB"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q; want %q", n, got, want)
		}
	}
}
