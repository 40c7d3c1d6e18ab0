package tests

// Streams and stored files (issue 14): what a jail returns into the file
// store (links, special files, sparse and growing files, hostile names,
// more than the caller's quota), what a run's output can forge in a
// streamed response, what a slow or vanishing reader costs the daemon,
// and the store's endpoints under a hostile caller (uid 65534): guessed
// and path-like ids, another uid's file_id, malformed multipart uploads,
// a full store. The hostile daemon's store has small bounds
// (hostileStore), so that every bound is reached with a few MiB. Every
// case starts and ends with an empty store (clearStore), which it checks:
// no temporary file or record is left behind.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jaild/jaild/internal/api"
)

// The hostile daemon's file-store bounds ([files]); min_free_mb and the
// TTL keep their defaults.
const (
	storeMaxFileMB  = 16
	storeMaxUIDMB   = 32
	storeMaxFiles   = 8
	storeMaxTotalMB = 48
)

// hostileStore sets the hostile daemon's file-store bounds.
func hostileStore(cfg string) string {
	if strings.Count(cfg, "\n[files]\n") != 1 {
		panic("test config has no single [files] table")
	}
	return strings.Replace(cfg, "\n[files]\n", fmt.Sprintf("\n[files]\nmax_file_mb = %d\nmax_mb_per_uid = %d\nmax_files_per_uid = %d\nmax_total_mb = %d\n",
		storeMaxFileMB, storeMaxUIDMB, storeMaxFiles, storeMaxTotalMB), 1)
}

var (
	storedIDRe  = regexp.MustCompile(`^f-[0-9a-f]{32}$`)
	storedSHARe = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func (h *hostile) storeDir() string { return filepath.Join(h.d.Dir, "files") }

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// rootDo sends a request as root (an admin) and returns the status and
// body; unlike daemon.call it reports errors with t.Errorf, so that
// clearStore can run in a deferred call of a failed case.
func (h *hostile) rootDo(t *testing.T, method, p string, ctype string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://jaild"+p, body)
	if err != nil {
		t.Errorf("%s %s: %v", method, p, err)
		return 0, nil
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := h.d.Client.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, p, err)
		return 0, nil
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// rootUpload stores data as root under name.
func (h *hostile) rootUpload(t *testing.T, name string, data []byte) api.StoredFile {
	t.Helper()
	status, raw := h.rootDo(t, "POST", "/v1/files?name="+url.QueryEscape(name), "application/octet-stream", bytes.NewReader(data))
	var m api.StoredFile
	if err := strictJSON(raw, &m); status != http.StatusCreated || err != nil || m.SizeBytes != int64(len(data)) || m.SHA256 != sha256Hex(data) {
		t.Fatalf("upload %q as root: HTTP %d (%v): %s", name, status, err, short(string(raw)))
	}
	return m
}

// storeList lists every caller's stored files (root is an admin).
func (h *hostile) storeList(t *testing.T) []api.StoredFile {
	t.Helper()
	status, raw := h.rootDo(t, "GET", "/v1/files", "", nil)
	var fl api.FileList
	if err := strictJSON(raw, &fl); status != http.StatusOK || err != nil {
		t.Errorf("GET /v1/files: HTTP %d (%v): %s", status, err, short(string(raw)))
	}
	return fl.Files
}

// clearStore deletes every stored file, then checks that the store's
// directory is empty: no temporary file, no data without its record, no
// record without its data.
func (h *hostile) clearStore(t *testing.T) {
	t.Helper()
	for _, f := range h.storeList(t) {
		if status, raw := h.rootDo(t, "DELETE", "/v1/files/"+f.FileID, "", nil); status != http.StatusOK {
			t.Errorf("DELETE %s: HTTP %d: %s", f.FileID, status, short(string(raw)))
		}
	}
	if left := dirNames(h.storeDir()); len(left) != 0 {
		t.Errorf("the store's directory holds %v after every file was deleted", left)
	}
}

// storeCase is a case that starts and ends with an empty store.
func storeCase(id, title, expect string, run func(t *testing.T, h *hostile) string) hcase {
	return hcase{id: id, cat: catStore, title: title, expect: expect, run: func(t *testing.T, h *hostile) string {
		h.clearStore(t)
		defer h.clearStore(t)
		return run(t, h)
	}}
}

// storeExec runs code as root with its return_files returned into the
// store.
func (h *hostile) storeExec(t *testing.T, code string, patterns ...string) *api.ExecuteResponse {
	t.Helper()
	return h.exec(t, api.ExecuteRequest{Code: code, ReturnFiles: patterns, ReturnFilesAs: api.ReturnStore})
}

// checkStored checks that f was stored as owner's and that the store's
// copy is what the response says: its record (name, size, sha256,
// owner), its content (size and sha256 of a download) and its data file
// on the host (a regular file of the daemon's with one link and mode
// 0600: a copy, never a link to anything of the jail's). It returns the
// content.
func (h *hostile) checkStored(t *testing.T, f api.FileOut, owner uint32) []byte {
	t.Helper()
	if f.Error != "" || f.ContentB64 != "" || !storedIDRe.MatchString(f.FileID) || !storedSHARe.MatchString(f.SHA256) {
		t.Errorf("%q: %+v, want it stored (a file_id and sha256, no content, no error)", f.Path, f)
		return nil
	}
	status, raw := h.rootDo(t, "GET", "/v1/files/"+f.FileID+"/meta", "", nil)
	var m api.StoredFile
	if err := strictJSON(raw, &m); status != http.StatusOK || err != nil || m.Name != path.Base(f.Path) || m.SizeBytes != f.SizeBytes || m.SHA256 != f.SHA256 || m.UID != owner {
		t.Errorf("%q: meta HTTP %d (%v) %+v, want name %q, size %d, sha256 %s, uid %d", f.Path, status, err, m, path.Base(f.Path), f.SizeBytes, f.SHA256, owner)
	}
	status, data := h.rootDo(t, "GET", "/v1/files/"+f.FileID, "", nil)
	if status != http.StatusOK || int64(len(data)) != f.SizeBytes || sha256Hex(data) != f.SHA256 {
		t.Errorf("%q: download HTTP %d of %d bytes, sha256 %s; the response says %d bytes, sha256 %s", f.Path, status, len(data), sha256Hex(data), f.SizeBytes, f.SHA256)
	}
	h.checkDataFile(t, f.FileID, f.SizeBytes)
	return data
}

// checkDataFile checks a stored file's data on the host.
func (h *hostile) checkDataFile(t *testing.T, id string, size int64) {
	t.Helper()
	var st syscall.Stat_t
	p := filepath.Join(h.storeDir(), id+".data")
	if err := syscall.Lstat(p, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFREG || st.Nlink != 1 || st.Uid != 0 || st.Mode&0o7777 != 0o600 || st.Size != size {
		t.Errorf("%s: %v, mode %#o, %d links, uid %d, %d bytes; want a regular file, 0600, one link, uid 0, %d bytes", p, err, st.Mode, st.Nlink, st.Uid, st.Size, size)
	}
}

// notStored checks that each path is reported, with an error containing
// why, and neither stored nor returned inline.
func notStored(t *testing.T, r *api.ExecuteResponse, why string, paths ...string) string {
	t.Helper()
	m := filesByPath(r)
	for _, p := range paths {
		f, ok := m[p]
		if !ok || f.FileID != "" || f.SHA256 != "" || f.ContentB64 != "" || !strings.Contains(f.Error, why) {
			t.Errorf("%q: %+v, want it reported as %q, not stored (all files: %+v)", p, f, why, r.Files)
		}
	}
	return strings.Join(paths, ", ") + ": reported as " + why + ", nothing stored"
}

// onlyStored checks that the store holds exactly the files the response
// names by file_id.
func (h *hostile) onlyStored(t *testing.T, r *api.ExecuteResponse) {
	t.Helper()
	var want, got []string
	for _, f := range r.Files {
		if f.FileID != "" {
			want = append(want, f.FileID)
		}
	}
	for _, f := range h.storeList(t) {
		got = append(got, f.FileID)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(want, got) {
		t.Errorf("the store holds %v; the response names %v", got, want)
	}
}

// curlNobody runs curl against the socket as uid 65534 with extra
// headers and, unless body is nil, body as the request's body (read from
// stdin), and returns the status, headers and body of the response. The
// path is sent as it is (no dot-segment removal), and the response is
// parsed as it came (--raw: curl -i would print the headers of a chunked
// response over a body it decoded).
func curlNobody(t *testing.T, socket, method, p string, headers []string, body []byte) (int, http.Header, []byte) {
	t.Helper()
	args := []string{"--path-as-is", "--unix-socket", socket, "-X", method, "-H", "Expect:"}
	for _, hd := range headers {
		args = append(args, "-H", hd)
	}
	if body != nil {
		args = append(args, "--data-binary", "@-")
	}
	return curlAsNobody(t, body, append(args, "http://jaild"+p)...)
}

// nobodyExec runs an execute request as uid 65534 and returns its 200
// response.
func (h *hostile) nobodyExec(t *testing.T, req any) *api.ExecuteResponse {
	t.Helper()
	body, _ := json.Marshal(req)
	status, _, raw := curlNobody(t, h.d.Socket, "POST", "/v1/execute", []string{"Content-Type: application/json"}, body)
	var r api.ExecuteResponse
	if err := strictJSON(raw, &r); status != http.StatusOK || err != nil || r.RunID == "" {
		t.Fatalf("execute as uid 65534: HTTP %d (%v): %s", status, err, short(string(raw)))
	}
	h.noteRun(r.RunID)
	return &r
}

// nobodyUpload uploads data as uid 65534 with the given Content-Type and
// query, returning the status and body.
func (h *hostile) nobodyUpload(t *testing.T, query, ctype string, data []byte) (int, []byte) {
	t.Helper()
	status, _, raw := curlNobody(t, h.d.Socket, "POST", "/v1/files"+query, []string{"Content-Type: " + ctype}, data)
	return status, raw
}

// wantError checks an error response: status, type, and a message that
// mentions each of mentions.
func wantStoreErr(t *testing.T, what string, status int, raw []byte, wantStatus int, typ string, mentions ...string) string {
	t.Helper()
	var e api.ErrorBody
	err := strictJSON(raw, &e)
	ok := err == nil && status == wantStatus && e.Error.Type == typ
	for _, m := range mentions {
		ok = ok && strings.Contains(e.Error.Message+" "+e.Error.Field, m)
	}
	if !ok {
		t.Errorf("%s: HTTP %d (%v) %s, want %d %s mentioning %q", what, status, err, short(string(raw)), wantStatus, typ, mentions)
	}
	return fmt.Sprintf("%d %s", status, e.Error.Type)
}

// streamRun runs req streamed in format to its end and returns the
// stream, checked for its framing (parseStream), and its execute
// response (done, with the output of the events).
func (h *hostile) streamRun(t *testing.T, req any, format string) (*streamed, *api.ExecuteResponse) {
	t.Helper()
	s, err := streamExec(context.Background(), h.d, "/v1/execute", h.d.withInject(req), format)
	if s != nil {
		h.noteRun(s.start.RunID)
	}
	if err != nil {
		t.Fatalf("%s: %v", format, err)
	}
	r, err := s.execute()
	if err != nil {
		t.Fatalf("%s: %v", format, err)
	}
	return s, r
}

// countEvents counts a stream's events named name.
func countEvents(s *streamed, name string) int {
	n := 0
	for _, a := range s.events {
		if a.Event.Event == name {
			n++
		}
	}
	return n
}

// sampleRSS samples pid's RSS every 5 ms until stop is closed and returns
// the largest.
func sampleRSS(pid int, stop <-chan struct{}) (peak *atomic.Int64, done <-chan struct{}) {
	peak = &atomic.Int64{}
	d := make(chan struct{})
	go func() {
		defer close(d)
		for {
			if n := vmRSS(pid); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	return peak, d
}

func storeCases() []hcase {
	return []hcase{
		storeCase("T01", "symlinks to /etc/shadow, /proc/self/environ, the daemon's store directory and a stored file's data, returned into the store",
			"each is reported as a symlink and nothing is stored; nothing is read or walked through them; the store holds only what was uploaded",
			runStoreSymlinks),
		storeCase("T02", "hardlinks: from the image into the workspace, and two names of one inode returned into the store",
			"link(2) from the image fails with EXDEV; the two names are stored as two independent copies (each data file the daemon's own, one link, 0600)",
			runStoreHardlinks),
		storeCase("T03", "a FIFO (with a regular file after it) returned into the store",
			"the daemon does not open the FIFO blocking: the run ends, the FIFO is reported and not stored, the regular file is stored",
			func(t *testing.T, h *hostile) string {
				start := time.Now()
				r := h.storeExec(t, "import os\nos.makedirs('out')\nos.mkfifo('out/a.fifo')\nopen('out/b.txt', 'w').write('after the fifo')\n", "out/*")
				wantStatus(t, r, "ok")
				if took := time.Since(start); took > 30*time.Second {
					t.Errorf("the request took %v", took)
				}
				obs := notStored(t, r, "fifo", "out/a.fifo")
				if data := h.checkStored(t, filesByPath(r)["out/b.txt"], 0); string(data) != "after the fifo" {
					t.Errorf("out/b.txt stored as %q", data)
				}
				h.onlyStored(t, r)
				return obs + "; out/b.txt stored"
			}),
		storeCase("T04", "a sparse 1 TiB file, and sparse and holey files of tens of MiB, returned into the store",
			"RLIMIT_FSIZE refuses the 1 TiB file (EFBIG); the sparse files are reported without being read, and nothing is stored",
			func(t *testing.T, h *hostile) string {
				r := h.storeExec(t, `import json, os
res = {}
open('huge.bin', 'w').close()
try: os.truncate('huge.bin', 1 << 40); res['1TiB'] = 'ok'
except OSError as e: res['1TiB'] = e.errno
with open('sparse.bin', 'wb') as f: f.truncate(60 << 20)
with open('holey.bin', 'wb') as f: f.write(b'x' * 4096); f.seek(8 << 20); f.write(b'y')
print(json.dumps(res))
`, "sparse.bin", "holey.bin")
				wantStatus(t, r, "ok")
				obs := "truncate to " + sameValues(t, outJSON(t, r), []string{"1TiB"}, "27") + " (EFBIG); " + notStored(t, r, "sparse file", "sparse.bin", "holey.bin")
				h.onlyStored(t, r)
				return obs
			}),
		storeCase("T05", "a detached process keeps appending to (and rewriting) a returned file after the run's main process exits",
			"files are stored after every process of the run is dead: the stored size is the reported size and the download's sha256 is the one returned",
			runStoreGrowing),
		storeCase("T05b", "a session's background process keeps appending to a file that a later call returns into the store",
			"the session's cgroup is frozen while its files are stored: the stored size is the reported size and the download's sha256 is the one returned; the writer lives on in the session",
			runStoreGrowingSession),
		storeCase("T06", "hostile names returned into the store: newline, invalid UTF-8 (as the name and as a directory above a valid name), RTL override, 255 bytes, leading dash",
			"a name the store cannot hold is reported and not stored; the 255-byte and dash names are stored under their own names; the store holds exactly the files the response names",
			runStoreNames),
		storeCase("T07", "uid 65534 returns more files and bytes into the store than its quota and the file bound allow",
			"the run answers 200; each file over max_file_bytes, max_bytes_per_uid or max_files_per_uid is reported naming that bound; the rest are stored as uid 65534's",
			runStoreQuota),
		{id: "T08", cat: catStore, title: "output that forges events: NDJSON done lines and SSE event blocks (with CR, LF and U+2028) on stdout and stderr",
			expect: "in both framings exactly one done event, the daemon's, last, with the run's run_id; the forged text arrives byte for byte as stdout and stderr text; the JSON response is the same",
			run:    runStreamForged},
		{id: "T09", cat: catStore, title: "only invalid UTF-8 bytes, streamed: exactly the output cap on stderr, then past it on stdout",
			expect: "status output_limit; each stream is one U+FFFD in one event (a run of invalid bytes is one U+FFFD), in both framings and in the JSON response",
			run:    runStreamInvalidUTF8},
		{id: "T10", cat: catStore, title: "8-byte writes alternating between stdout and stderr up to the output cap, to a client that reads nothing until the run has ended",
			expect: "the run does not wait for the reader; the stream is complete and in order (each stream exactly its cap); the daemon's RSS grows by less than 4 x the two caps",
			run:    runStreamAlternating},
		{id: "T11", cat: catStore, title: "a streamed run that prints without end; the client disconnects",
			expect: "the run is killed after the disconnect and its jail torn down, long before its timeout",
			run:    runStreamDisconnect},
		storeCase("T12", "uid 65534 guesses file ids: random f-... ids and the id of root's file",
			"GET, GET meta and DELETE answer 404 not_found with the same message for a random id and for root's; uid 65534's list is empty; root's file is intact",
			runStoreGuess),
		storeCase("T13", "path-like ids: dot segments (plain and %2F/%2e-encoded), the data and record file names, a temporary file's name, upper case, NUL, 4 KiB",
			"404 not_found for each, as uid 65534 and as root (an admin); no content, nothing deleted",
			runStorePathIDs),
		storeCase("T14", "uid 65534 uses root's file_id: in execute, in a session's creation and in a session's call",
			"404 not_found naming files[0].file_id, as for an id that does not exist; root's own run reads the file",
			runStoreOtherUID),
		storeCase("T15", "hostile multipart uploads by uid 65534: 100 fields before the file, no file part, an 11 MiB part header, 20,000 part headers, a traversal filename, a bidi-control filename",
			"400 invalid_argument naming body (or name) for each malformed one; the traversal filename is stored under its base name only; nothing else is stored",
			runStoreMultipart),
		storeCase("T15b", "uid 65534 opens 32 uploads, each inside a 10 MiB multipart part header, and keeps them alive a byte at a time",
			"each is refused (400 invalid_argument) once its part header passes the header bound; the daemon never holds the headers: its RSS grows by less than 1 MiB per upload; other callers are served meanwhile",
			runStoreStalledHeaders),
		storeCase("T16", "the store is full (max_total_bytes): uid 65534 uploads, returns a file into the store, and runs code; root runs code",
			"uploads answer 507 insufficient_storage naming max_total_bytes; the returned file is reported and the run answers 200; every other run and download works; no temporary file is left",
			runStoreFull),
		storeCase("T17", "a stored input file: the jail overwrites, truncates, appends to, chmods and hardlinks its copy, and looks for the store among its fds",
			"the jail gets the stored bytes (sha256 equal) as a copy: the stored file's bytes, sha256, mode and link count are unchanged; no fd of the jail points into the store",
			runStoreInputCopy),
	}
}

func runStoreSymlinks(t *testing.T, h *hostile) string {
	victim := h.rootUpload(t, "victim.txt", []byte("root's stored data "+h.secret))
	data := filepath.Join(h.storeDir(), victim.FileID+".data")
	code := fmt.Sprintf(`import os
os.makedirs('out')
for name, target in (('shadow', '/etc/shadow'), ('environ', '/proc/self/environ'), ('store', %q), ('victim', %q), ('up', '../../../../../../../..' + %q)):
    os.symlink(target, 'out/' + name)
`, h.storeDir(), data, data)
	r := h.storeExec(t, code, "out/**")
	wantStatus(t, r, "ok")
	for _, f := range r.Files {
		if strings.HasPrefix(f.Path, "out/store/") {
			t.Errorf("the daemon walked through out/store: %s", f.Path)
		}
	}
	obs := notStored(t, r, "symlink", "out/environ", "out/shadow", "out/store", "out/up", "out/victim")
	if got := h.storeList(t); len(got) != 1 || got[0].FileID != victim.FileID || got[0].SHA256 != victim.SHA256 {
		t.Errorf("the store holds %+v, want only root's upload", got)
	}
	return obs + "; nothing below out/store; the store holds only root's upload"
}

func runStoreHardlinks(t *testing.T, h *hostile) string {
	r := h.storeExec(t, `import json, os
os.makedirs('out')
res = {}
for src in ('/etc/passwd', '/usr/bin/python3'):
    try: os.link(src, 'out/' + os.path.basename(src)); res[src] = 'LINKED'
    except OSError as e: res[src] = e.errno
open('out/a.txt', 'w').write('one inode')
os.link('out/a.txt', 'out/b.txt')
res['nlink'] = os.stat('out/b.txt').st_nlink
print(json.dumps(res))
`, "out/*")
	wantStatus(t, r, "ok")
	got := outJSON(t, r)
	obs := "link from the image: " + sameValues(t, got, []string{"/etc/passwd", "/usr/bin/python3"}, "18") + " (EXDEV)"
	if fmt.Sprint(got["nlink"]) != "2" {
		t.Errorf("out/b.txt has %v links in the jail, want 2", got["nlink"])
	}
	m := filesByPath(r)
	a, b := m["out/a.txt"], m["out/b.txt"]
	da, db := h.checkStored(t, a, 0), h.checkStored(t, b, 0)
	if a.FileID == b.FileID || a.SHA256 != b.SHA256 || string(da) != "one inode" || string(db) != "one inode" {
		t.Errorf("out/a.txt %+v, out/b.txt %+v: want two ids of the same content", a, b)
	}
	// Independent: deleting one leaves the other whole.
	if status, _ := h.rootDo(t, "DELETE", "/v1/files/"+a.FileID, "", nil); status != http.StatusOK {
		t.Errorf("DELETE %s: HTTP %d", a.FileID, status)
	}
	if status, data := h.rootDo(t, "GET", "/v1/files/"+b.FileID, "", nil); status != http.StatusOK || string(data) != "one inode" {
		t.Errorf("after deleting out/a.txt's copy, out/b.txt's: HTTP %d %q", status, data)
	}
	h.onlyStoredExcept(t, r, a.FileID)
	return obs + "; out/a.txt and out/b.txt (one inode, 2 links in the jail) stored as two ids of one sha256, each data file the daemon's with one link, 0600; deleting one leaves the other"
}

// onlyStoredExcept is onlyStored after the case deleted the files gone.
func (h *hostile) onlyStoredExcept(t *testing.T, r *api.ExecuteResponse, gone ...string) {
	t.Helper()
	rr := *r
	rr.Files = nil
	for _, f := range r.Files {
		if !slices.Contains(gone, f.FileID) {
			rr.Files = append(rr.Files, f)
		}
	}
	h.onlyStored(t, &rr)
}

// growCode writes 1 MiB, then leaves a detached process that appends and
// rewrites bytes in place as fast as it can; the main process exits soon.
const growCode = `import os, time
os.makedirs('out', exist_ok=True)
with open('out/grow.bin', 'wb') as f: f.write(b'x' * (1 << 20))
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        fa = os.open('out/grow.bin', os.O_WRONLY | os.O_APPEND)
        fw = os.open('out/grow.bin', os.O_WRONLY)
        i = 0
        while True:
            i += 1
            try:
                if os.fstat(fa).st_size < (8 << 20):
                    os.write(fa, b'y' * 4096)
                os.pwrite(fw, b'%08d' % i, (i * 4099) % (1 << 20))
            except OSError:
                pass
            time.sleep(0.0005)
    os._exit(0)
time.sleep(0.5)
print(os.path.getsize('out/grow.bin'))
`

func runStoreGrowing(t *testing.T, h *hostile) string {
	r := h.storeExec(t, growCode, "out/grow.bin")
	wantStatus(t, r, "ok")
	f := filesByPath(r)["out/grow.bin"]
	var atExit int64
	fmt.Sscan(r.Stdout, &atExit)
	if atExit <= 1<<20 {
		t.Errorf("the file did not grow during the run (%d bytes when the main process exited)", atExit)
	}
	h.checkStored(t, f, 0)
	h.onlyStored(t, r)
	return "the file grew during the run; stored size = reported size = downloaded size; the download's sha256 is the one returned; the data file is the daemon's with one link"
}

func runStoreGrowingSession(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := ss.open(api.SessionCreateRequest{})
	wantCall(t, ss.exec(s, code(strings.Replace(growCode, "time.sleep(0.5)", "time.sleep(0.2)", 1))), "ok")
	r := ss.exec(s, api.SessionExecuteRequest{Code: "import os, time\ntime.sleep(0.5)\nprint(os.path.getsize('out/grow.bin'))\n", ReturnFiles: []string{"out/grow.bin"}, ReturnFilesAs: api.ReturnStore})
	wantCall(t, r, "ok")
	f := filesByPath(&r.ExecuteResponse)["out/grow.bin"]
	h.checkStored(t, f, 0)
	h.onlyStored(t, &r.ExecuteResponse)
	// The writer lives on: in the next call the file is larger.
	r3 := ss.exec(s, code("import os, time\ntime.sleep(0.3)\nprint(os.path.getsize('out/grow.bin'))\n"))
	var later int64
	fmt.Sscan(r3.Stdout, &later)
	if later <= f.SizeBytes && later < 8<<20 {
		t.Errorf("the file is %d bytes in the next call, %d when stored: the writer did not live on", later, f.SizeBytes)
	}
	ss.del(s)
	return "stored size = reported size = downloaded size; the download's sha256 is the one returned; the file grew again in the next call"
}

func runStoreNames(t *testing.T, h *hostile) string {
	long := strings.Repeat("x", 255)
	r := h.storeExec(t, `import os
os.makedirs(b'out/d\xff')
for n in (b'a\nb.txt', b'\xc3.txt', b'x' * 255, b'r\xe2\x80\xaet.txt', b'd\xff/inner.txt', b'-rf', b'ok.txt'):
    open(b'out/' + n, 'wb').write(n)
`, "out/**")
	wantStatus(t, r, "ok")
	m := filesByPath(r)
	for _, n := range []string{long, "-rf", "ok.txt"} {
		if data := h.checkStored(t, m["out/"+n], 0); string(data) != n {
			t.Errorf("out/%s stored as %q", n, data)
		}
	}
	notStored(t, r, "control characters", "out/a\nb.txt", "out/r\u202et.txt")
	notStored(t, r, "not valid UTF-8", "out/\uFFFD.txt", "out/d\uFFFD/inner.txt")
	for _, f := range r.Files {
		if !utf8.ValidString(f.Path) {
			t.Errorf("invalid UTF-8 in a path of the response: %q", f.Path)
		}
	}
	h.onlyStored(t, r)
	// (The report names the hostile names, never prints them: U+202E
	// would turn the table's row around.)
	return "the 255-byte, -rf and ok.txt names stored under their own names; the newline and U+202E names reported (control characters), nothing stored; " +
		"the invalid UTF-8 name and inner.txt below an invalid UTF-8 directory reported (not valid UTF-8), nothing stored; the store holds exactly the files the response names"
}

func runStoreQuota(t *testing.T, h *hostile) string {
	const mib = 1 << 20
	// Stored in name order: a0.bin is over max_file_bytes; a1.bin and
	// a2.bin take 30 of uid 65534's 32 MiB, so a3.bin is over
	// max_bytes_per_uid; f00-f05 make 8 files, so f06-f09 are over
	// max_files_per_uid.
	code := `import os
os.makedirs('out')
open('out/a0.bin', 'wb').write(b'b' * (17 << 20))
for n in ('a1', 'a2', 'a3'): open(f'out/{n}.bin', 'wb').write(b'a' * (15 << 20))
for i in range(10): open(f'out/f{i:02d}.txt', 'w').write(f'small {i}')
`
	r := h.nobodyExec(t, api.ExecuteRequest{Code: code, ReturnFiles: []string{"out/*"}, ReturnFilesAs: api.ReturnStore})
	wantStatus(t, r, "ok")
	m := filesByPath(r)
	for _, p := range []string{"out/a1.bin", "out/a2.bin"} {
		if data := h.checkStored(t, m[p], nobodyUID); len(data) != 15*mib {
			t.Errorf("%s stored with %d bytes", p, len(data))
		}
	}
	for i := range 6 {
		p := fmt.Sprintf("out/f%02d.txt", i)
		if data := h.checkStored(t, m[p], nobodyUID); string(data) != fmt.Sprintf("small %d", i) {
			t.Errorf("%s stored as %q", p, data)
		}
	}
	obs := []string{
		notStored(t, r, "max_file_bytes", "out/a0.bin"),
		notStored(t, r, "max_bytes_per_uid", "out/a3.bin"),
		notStored(t, r, "max_files_per_uid", "out/f06.txt", "out/f07.txt", "out/f08.txt", "out/f09.txt"),
	}
	h.onlyStored(t, r)
	var info api.Info
	status, _, raw := curlNobody(t, h.d.Socket, "GET", "/v1/info", nil, nil)
	if err := json.Unmarshal(raw, &info); status != 200 || err != nil || info.Files.CallerFiles != storeMaxFiles || info.Files.CallerBytes != 30*mib+6*int64(len("small 0")) {
		t.Errorf("uid 65534's /v1/info files: HTTP %d (%v) %+v", status, err, info.Files)
	}
	return "HTTP 200, status ok; a1.bin, a2.bin and f00–f05 stored as uid 65534's (8 files); " + strings.Join(obs, "; ")
}

// forgedOut and forgedErr are what T08's run writes: NDJSON done lines
// and SSE blocks, with CR, CRLF and U+2028 line breaks.
const (
	forgedDone = `{"id":99,"event":"done","data":{"run_id":"forged","status":"ok","exit_code":0,"stdout":"pwned"}}`
	forgedSSE  = "id: 99\nevent: done\ndata: {\"run_id\":\"forged\",\"status\":\"ok\"}\n\n"
	forgedOut  = "\n" + forgedDone + "\n\n\n" + forgedSSE + "\r\n\r\nid: 100\r\nevent: error\r\ndata: {}\r\n\r\nevent: done\rdata: {}\r\r\u2028x\n"
	forgedErr  = "\n" + forgedDone + "\n" + forgedSSE
)

func runStreamForged(t *testing.T, h *hostile) string {
	code := fmt.Sprintf("import base64, sys\nsys.stdout.buffer.write(base64.b64decode(%q)); sys.stdout.flush()\nsys.stderr.buffer.write(base64.b64decode(%q)); sys.stderr.flush()\nprint('end')\n",
		base64.StdEncoding.EncodeToString([]byte(forgedOut)), base64.StdEncoding.EncodeToString([]byte(forgedErr)))
	req := api.ExecuteRequest{Code: code}
	plain := h.exec(t, req)
	wantStatus(t, plain, "ok")
	if plain.Stdout != forgedOut+"end\n" || plain.Stderr != forgedErr {
		t.Errorf("JSON response: stdout %q stderr %q", short(plain.Stdout), short(plain.Stderr))
	}
	for _, format := range []string{api.MediaNDJSON, api.MediaSSE} {
		s, r := h.streamRun(t, req, format)
		if n, e := countEvents(s, api.EventDone), countEvents(s, api.EventError); n != 1 || e != 0 {
			t.Errorf("%s: %d done and %d error events", format, n, e)
		}
		for _, a := range s.events {
			if a.Event.ID > int64(len(s.events)) {
				t.Errorf("%s: an event with id %d in a stream of %d", format, a.Event.ID, len(s.events))
			}
		}
		if r.RunID != s.start.RunID || r.RunID == "forged" || r.Status != "ok" {
			t.Errorf("%s: done of run %q status %q, start %q", format, r.RunID, r.Status, s.start.RunID)
		}
		if r.Stdout != forgedOut+"end\n" || r.Stderr != forgedErr {
			t.Errorf("%s: streamed stdout %q stderr %q", format, short(r.Stdout), short(r.Stderr))
		}
		for _, d := range diffResponses(r, plain) {
			t.Errorf("%s: %s", format, d)
		}
	}
	return "NDJSON and SSE: one done event (the daemon's, last, the run's run_id), no error event, ids in sequence; stdout and stderr byte for byte the forged text; equal to the JSON response"
}

func runStreamInvalidUTF8(t *testing.T, h *hostile) string {
	req := api.ExecuteRequest{
		// stderr stops at the cap, so that only stdout is truncated,
		// whenever the kill comes.
		Code:   "import os\nos.write(2, b'\\xfe' * (1 << 20))\nb = b'\\xff' * 65536\nwhile True:\n    os.write(1, b)\n",
		Limits: &api.Limits{OutputBytes: ptr(int64(1 << 20))},
	}
	check := func(what string, r *api.ExecuteResponse) {
		t.Helper()
		if r.Status != "output_limit" || !r.StdoutTruncated || r.StderrTruncated || r.Stdout != "\uFFFD" || r.Stderr != "\uFFFD" {
			t.Errorf("%s: status %q truncated %v/%v, stdout %q, stderr %q; want output_limit, stdout truncated, one U+FFFD each", what, r.Status, r.StdoutTruncated, r.StderrTruncated, short(r.Stdout), short(r.Stderr))
		}
	}
	plain := h.exec(t, req)
	check("JSON response", plain)
	for _, format := range []string{api.MediaNDJSON, api.MediaSSE} {
		s, r := h.streamRun(t, req, format)
		check(format, r)
		if o, e := countEvents(s, api.EventStdout), countEvents(s, api.EventStderr); o != 1 || e != 1 {
			t.Errorf("%s: %d stdout and %d stderr events, want one each", format, o, e)
		}
		for _, d := range diffResponses(r, plain) {
			t.Errorf("%s: %s", format, d)
		}
	}
	return "status output_limit, stdout truncated, stderr not; stdout and stderr each one U+FFFD in one event, NDJSON and SSE alike and equal to the JSON response"
}

func runStreamAlternating(t *testing.T, h *hostile) string {
	const outputCap = 4 << 20
	const n = outputCap / 8
	req := h.d.withInject(api.ExecuteRequest{Code: "import os\ni = 0\nwhile True:\n    os.write(1, b'%07d\\n' % i); os.write(2, b'%07d\\n' % i); i += 1\n", Limits: &api.Limits{OutputBytes: ptr(int64(outputCap)), TimeoutMs: ptr(int64(60000))}})
	pid := h.d.Cmd.Process.Pid
	base := vmRSS(pid)
	stop := make(chan struct{})
	peak, sampled := sampleRSS(pid, stop)
	resp, err := postStream(context.Background(), h.d, "/v1/execute", req, api.MediaNDJSON)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first, err := (&eventReader{br: br}).next()
	var start api.EventStartData
	if err != nil || first.Event != api.EventStart || json.Unmarshal(first.Data, &start) != nil {
		t.Fatalf("first event %+v (%v), want start", first, err)
	}
	h.noteRun(start.RunID)
	// Read nothing until the run's jail is gone: the run must not wait
	// for the reader.
	waitFor(t, 60*time.Second, "the run to end while its client reads nothing", func() bool { return !h.cg.live()[start.RunID] })
	rest, err := readEvents(&http.Response{Body: io.NopCloser(br)}, api.MediaNDJSON)
	close(stop)
	<-sampled
	if err != nil {
		t.Fatal(err)
	}
	s, err := parseStream(append([]arrived{{Event: first, at: time.Now()}}, rest...))
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.execute()
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range n {
		fmt.Fprintf(&want, "%07d\n", i)
	}
	if r.Status != "output_limit" || !r.StdoutTruncated || r.Stdout != want.String() || r.Stderr != want.String() {
		t.Errorf("status %q, stdout_truncated %v, %d bytes of stdout and %d of stderr (want each exactly the first %d records, in order)",
			r.Status, r.StdoutTruncated, len(r.Stdout), len(r.Stderr), n)
	}
	// The queue holds at most the two caps (past maxSegments, in
	// segments of maxEventText allocated whole: about the bytes it
	// holds); the response's collector holds the two caps again; the
	// runtime's heap may reach twice what is live before it collects,
	// and the read-out's events make garbage too. (Once a stream's
	// chunks joined one slice grown by append, which allocated 5 x the
	// bytes and grew RSS by 2.5-4.4 x the two caps.)
	if grew := peak.Load() - base; grew >= 4*2*outputCap {
		t.Errorf("daemon RSS grew by %d MiB (from %d MiB), want under 4 x the two caps (%d MiB)", grew>>20, base>>20, 4*2*outputCap>>20)
	} else {
		t.Logf("daemon RSS grew by %.1f MiB (from %d MiB)", float64(grew)/(1<<20), base>>20)
	}
	return "the run ended while the client read nothing; status output_limit; stdout and stderr each exactly their cap, every record in order; daemon RSS grew by less than 4 x the two caps"
}

func runStreamDisconnect(t *testing.T, h *hostile) string {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := postStream(ctx, h.d, "/v1/execute", h.d.withInject(api.ExecuteRequest{Code: "import itertools, time\nfor i in itertools.count():\n    print('x' * 100, i)\n    time.sleep(0.001)\n", Limits: &api.Limits{TimeoutMs: ptr(int64(60000)), OutputBytes: ptr(int64(16 << 20))}}), api.MediaNDJSON)
	if err != nil {
		t.Fatal(err)
	}
	dropAfterOutput(t, resp, cancel, h.cg, h.noteRun, disconnectBounds{wait: 20 * time.Second, die: 5 * time.Second, down: 20 * time.Second})
	return "the run's processes died after the disconnect (timeout 60 s) and its jail was torn down"
}

func runStoreGuess(t *testing.T, h *hostile) string {
	victim := h.rootUpload(t, "victim.txt", []byte("root's"))
	ids := []string{victim.FileID}
	for range 16 {
		ids = append(ids, "f-"+randHex(16))
	}
	for _, id := range ids {
		for _, req := range []struct{ method, path string }{{"GET", "/v1/files/" + id}, {"GET", "/v1/files/" + id + "/meta"}, {"DELETE", "/v1/files/" + id}} {
			status, _, raw := curlNobody(t, h.d.Socket, req.method, req.path, nil, nil)
			var e api.ErrorBody
			if err := strictJSON(raw, &e); status != http.StatusNotFound || err != nil || e.Error.Type != "not_found" || e.Error.Message != "no file "+id {
				t.Errorf("%s %s as uid 65534: HTTP %d (%v) %s, want 404 not_found \"no file %s\"", req.method, req.path, status, err, short(string(raw)), id)
			}
		}
	}
	status, _, raw := curlNobody(t, h.d.Socket, "GET", "/v1/files", nil, nil)
	var fl api.FileList
	if err := strictJSON(raw, &fl); status != http.StatusOK || err != nil || len(fl.Files) != 0 {
		t.Errorf("GET /v1/files as uid 65534: HTTP %d (%v) %s, want an empty list", status, err, short(string(raw)))
	}
	if status, data := h.rootDo(t, "GET", "/v1/files/"+victim.FileID, "", nil); status != http.StatusOK || string(data) != "root's" {
		t.Errorf("root's file after the guesses: HTTP %d %q", status, data)
	}
	return "GET, GET meta and DELETE of 16 random ids and of root's file id: 404 not_found \"no file <id>\" alike; uid 65534's list is empty; root's file intact"
}

func runStorePathIDs(t *testing.T, h *hostile) string {
	victim := h.rootUpload(t, "victim.txt", []byte("root's"))
	id := victim.FileID
	paths := []string{
		"../../../etc/shadow", "..%2F..%2F..%2Fetc%2Fshadow", "%2e%2e/%2e%2e/%2e%2e/etc/passwd", "..%2f..%2fetc%2fpasswd/meta",
		id + "%2F..%2F" + id, id + "/../" + id, id + ".data", id + ".meta", ".tmp-0123456789abcdef",
		strings.ToUpper(id), id[:len(id)-1], id + "%00", "%00", "*", "~root", "f-" + strings.Repeat("0", 4094),
	}
	var bad []string
	for _, p := range paths {
		for _, method := range []string{"GET", "DELETE"} {
			status, _, raw := curlNobody(t, h.d.Socket, method, "/v1/files/"+p, nil, nil)
			var e api.ErrorBody
			if err := strictJSON(raw, &e); status != http.StatusNotFound || err != nil || e.Error.Type != "not_found" {
				bad = append(bad, fmt.Sprintf("%s %s as uid 65534: HTTP %d %s", method, short(p), status, short(string(raw))))
			}
			req, err := http.NewRequest(method, "http://jaild/v1/files/"+p, nil)
			if err != nil {
				t.Fatalf("%s: %v", short(p), err)
			}
			resp, err := h.d.Client.Do(req)
			if err != nil {
				t.Fatalf("%s %s as root: %v", method, short(p), err)
			}
			raw, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err := strictJSON(raw, &e); resp.StatusCode != http.StatusNotFound || err != nil || e.Error.Type != "not_found" {
				bad = append(bad, fmt.Sprintf("%s %s as root: HTTP %d %s", method, short(p), resp.StatusCode, short(string(raw))))
			}
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
	if status, data := h.rootDo(t, "GET", "/v1/files/"+id, "", nil); status != http.StatusOK || string(data) != "root's" {
		t.Errorf("root's file after the requests: HTTP %d %q", status, data)
	}
	if got := h.storeList(t); len(got) != 1 {
		t.Errorf("the store holds %d files, want root's one", len(got))
	}
	return fmt.Sprintf("GET and DELETE of %d path-like ids: 404 not_found each, as uid 65534 and as root; root's file intact", len(paths))
}

func runStoreOtherUID(t *testing.T, h *hostile) string {
	victim := h.rootUpload(t, "victim.txt", []byte("root's secret data"))
	unknown := "f-" + randHex(16)
	files := func(id string) []api.FileIn { return []api.FileIn{{Path: "x.txt", FileID: id}} }
	readX := "print(open('x.txt').read())"
	var obs []string
	// The message for root's id must be the one for an unknown id.
	for _, id := range []string{victim.FileID, unknown} {
		body, _ := json.Marshal(api.ExecuteRequest{Code: readX, Files: files(id)})
		status, _, raw := curlAs(t, h.d.Socket, "POST", "/v1/execute", string(body))
		o := wantStoreErr(t, "execute with "+id, status, raw, http.StatusNotFound, "not_found", "files[0].file_id", "no file "+id)
		if id == victim.FileID {
			obs = append(obs, "execute: "+o)
		}
	}
	ss := h.sessions(t)
	defer ss.closeAll()
	if s, status, raw := ss.openNobody(api.SessionCreateRequest{Files: files(victim.FileID)}); s != nil {
		t.Errorf("uid 65534 created a session with root's file")
	} else {
		obs = append(obs, "session creation: "+wantStoreErr(t, "session creation", status, raw, http.StatusNotFound, "not_found", "files[0].file_id", "no file "+victim.FileID))
	}
	s, status, raw := ss.openNobody(api.SessionCreateRequest{})
	if s == nil {
		t.Fatalf("create a session as uid 65534: HTTP %d: %s", status, raw)
	}
	status, raw = ss.request(true, "POST", "/v1/sessions/"+s.id+"/execute", api.SessionExecuteRequest{Code: readX, Files: files(victim.FileID)})
	obs = append(obs, "session call: "+wantStoreErr(t, "session call", status, raw, http.StatusNotFound, "not_found", "files[0].file_id", "no file "+victim.FileID))
	ss.del(s)
	r := h.exec(t, api.ExecuteRequest{Code: readX, Files: files(victim.FileID)})
	if wantStatus(t, r, "ok"); r.Stdout != "root's secret data\n" {
		t.Errorf("root's run read %q", r.Stdout)
	}
	return strings.Join(obs, "; ") + " naming files[0].file_id, the message of an unknown id; root's run reads the file"
}

// multipartBody builds a multipart/form-data body: fields parts without a
// filename, then (unless fileHeader is "") a part with the header lines
// fileHeader and content.
func multipartBody(boundary string, fields int, fileHeader, content string) []byte {
	var b bytes.Buffer
	for i := range fields {
		fmt.Fprintf(&b, "--%s\r\nContent-Disposition: form-data; name=\"f%d\"\r\n\r\nvalue %d\r\n", boundary, i, i)
	}
	if fileHeader != "" {
		fmt.Fprintf(&b, "--%s\r\n%s\r\n\r\n%s\r\n", boundary, fileHeader, content)
	}
	fmt.Fprintf(&b, "--%s--\r\n", boundary)
	return b.Bytes()
}

func runStoreMultipart(t *testing.T, h *hostile) string {
	const bd = "hostileboundary"
	ctype := "multipart/form-data; boundary=" + bd
	file := `Content-Disposition: form-data; name="file"; filename="data.csv"`
	manyHeaders := file + strings.Repeat("\r\nX-H: v", 20000)
	hugeHeader := file + "\r\nX-Huge: " + strings.Repeat("h", 11<<20)
	cases := []struct {
		what     string
		body     []byte
		mentions string
	}{
		{"100 fields, then the file", multipartBody(bd, 100, file, "1,2\n"), "body"},
		{"no file part", multipartBody(bd, 3, "", ""), "body"},
		{"an 11 MiB part header", multipartBody(bd, 0, hugeHeader, "1,2\n"), "body"},
		{"20,000 part headers", multipartBody(bd, 0, manyHeaders, "1,2\n"), "body"},
		{"a bidi control in the filename", multipartBody(bd, 0, `Content-Disposition: form-data; name="file"; filename*=UTF-8''evil%E2%80%AEtxt.exe`, "x"), "name"},
	}
	var obs []string
	for _, c := range cases {
		status, raw := h.nobodyUpload(t, "", ctype, c.body)
		obs = append(obs, c.what+": "+wantStoreErr(t, c.what, status, raw, http.StatusBadRequest, "invalid_argument", c.mentions))
	}
	if got := h.storeList(t); len(got) != 0 {
		t.Errorf("the malformed uploads stored %+v", got)
	}
	// A traversal in the filename: the part's file name is its base.
	status, raw := h.nobodyUpload(t, "", ctype, multipartBody(bd, 0, `Content-Disposition: form-data; name="file"; filename="../../../../etc/cron.d/jaild-x"`, "* * * * * root id\n"))
	var m api.StoredFile
	if err := strictJSON(raw, &m); status != http.StatusCreated || err != nil || m.Name != "jaild-x" || m.UID != nobodyUID {
		t.Errorf("traversal filename: HTTP %d (%v) %s, want 201 named jaild-x", status, err, short(string(raw)))
	}
	if _, err := os.Lstat("/etc/cron.d/jaild-x"); err == nil {
		t.Errorf("/etc/cron.d/jaild-x exists on the host")
	}
	if got := h.storeList(t); len(got) != 1 {
		t.Errorf("the store holds %d files, want the one upload", len(got))
	} else {
		h.checkDataFile(t, got[0].FileID, got[0].SizeBytes)
	}
	return strings.Join(obs, "; ") + "; a traversal filename: 201, stored named jaild-x, nothing written outside the store"
}

// headerHolderSrc is a program run as uid 65534: it opens n uploads at
// once, each a chunked multipart body whose file part has a header line
// of size bytes that never ends, keeps each alive with a byte every 500
// ms for hold, then reads each response's status line and prints how
// many got which status ("none": no answer). It is built at test time.
const headerHolderSrc = `package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	n, _ := strconv.Atoi(os.Args[2])
	size, _ := strconv.Atoi(os.Args[3])
	hold, _ := time.ParseDuration(os.Args[4])
	part := "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x\"\r\nX-Huge: " + strings.Repeat("h", size)
	req := "POST /v1/files HTTP/1.1\r\nHost: jaild\r\nContent-Type: multipart/form-data; boundary=b\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n", len(part), part)
	var mu sync.Mutex
	statuses := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status := "none"
			defer func() { mu.Lock(); statuses[status]++; mu.Unlock() }()
			c, err := net.Dial("unix", os.Args[1])
			if err != nil {
				status = "dial error"
				return
			}
			defer c.Close()
			c.Write([]byte(req)) // the daemon may stop reading: errors are expected
			for end := time.Now().Add(hold); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
				c.Write([]byte("1\r\nh\r\n"))
			}
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
				if f := strings.Fields(line); len(f) > 1 {
					status = f[1]
				}
			}
		}()
	}
	fmt.Println("held", n)
	wg.Wait()
	var out []string
	for k, v := range statuses {
		out = append(out, fmt.Sprintf("%s:%d", k, v))
	}
	sort.Strings(out)
	fmt.Println(strings.Join(out, " "))
}
`

// buildNobodyProgram builds a helper program from src into a directory
// uid 65534 can read; the caller removes the directory.
func buildNobodyProgram(t *testing.T, src string) (bin, dir string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "jaild-helper-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "helper")
	cmd := exec.Command("go", "build", "-o", bin, filepath.Join(dir, "main.go"))
	cmd.Env = append(os.Environ(), "GO111MODULE=off", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("build a helper: %v\n%s", err, out)
	}
	return bin, dir
}

func runStoreStalledHeaders(t *testing.T, h *hostile) string {
	const n = 32
	bin, dir := buildNobodyProgram(t, headerHolderSrc)
	defer os.RemoveAll(dir)
	pid := h.d.Cmd.Process.Pid
	base := vmRSS(pid)
	stop := make(chan struct{})
	peak, sampled := sampleRSS(pid, stop)
	cmd := exec.Command(bin, h.d.Socket, fmt.Sprint(n), fmt.Sprint(10<<20-4096), "4s")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyUID, Gid: nobodyUID}}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	time.Sleep(time.Second)
	h.print1(t) // another caller, while the uploads are held
	var err error
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		err = <-done
	}
	close(stop)
	<-sampled
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if err != nil || len(lines) != 2 || lines[0] != fmt.Sprintf("held %d", n) || lines[1] != fmt.Sprintf("400:%d", n) {
		t.Errorf("the helper (%v) says %q, want every upload answered 400", err, out.String())
	}
	if grew := peak.Load() - base; grew >= n<<20 {
		t.Errorf("daemon RSS grew by %d MiB (from %d MiB) with %d uploads stalled in their part headers, want under 1 MiB per upload", grew>>20, base>>20, n)
	} else {
		t.Logf("daemon RSS grew by %.1f MiB (from %d MiB)", float64(grew)/(1<<20), base>>20)
	}
	return fmt.Sprintf("%d uploads: each answered 400; daemon RSS grew by less than 1 MiB per upload; another caller's print(1) served meanwhile", n)
}

func runStoreFull(t *testing.T, h *hostile) string {
	const mib = 1 << 20
	chunk := make([]byte, storeMaxFileMB*mib)
	_, _ = rand.Read(chunk)
	// Root fills its per-uid share, uid 65534 the rest of the store.
	h.rootUpload(t, "r1.bin", chunk)
	h.rootUpload(t, "r2.bin", chunk[:storeMaxFileMB*mib-1])
	status, raw := h.nobodyUpload(t, "?name=n1.bin", "application/octet-stream", chunk)
	var n1 api.StoredFile
	if err := strictJSON(raw, &n1); status != http.StatusCreated || err != nil {
		t.Fatalf("uid 65534's upload to fill the store: HTTP %d (%v): %s", status, err, short(string(raw)))
	}
	if status, raw := h.nobodyUpload(t, "?name=n2.bin", "application/octet-stream", []byte("x")); status != http.StatusCreated {
		t.Fatalf("uid 65534's last byte: HTTP %d: %s", status, short(string(raw)))
	}
	var obs []string
	status, raw = h.nobodyUpload(t, "?name=more.bin", "application/octet-stream", []byte("xy"))
	obs = append(obs, "raw upload: "+wantStoreErr(t, "raw upload", status, raw, http.StatusInsufficientStorage, "insufficient_storage", "max_total_bytes"))
	status, raw = h.nobodyUpload(t, "", "multipart/form-data; boundary=b", multipartBody("b", 0, `Content-Disposition: form-data; name="file"; filename="more.bin"`, "xy"))
	obs = append(obs, "multipart upload: "+wantStoreErr(t, "multipart upload", status, raw, http.StatusInsufficientStorage, "insufficient_storage", "max_total_bytes"))
	r := h.nobodyExec(t, api.ExecuteRequest{Code: "open('out.txt', 'w').write('result')\nprint(len(open('in.bin', 'rb').read()))", Files: []api.FileIn{{Path: "in.bin", FileID: n1.FileID}}, ReturnFiles: []string{"out.txt"}, ReturnFilesAs: api.ReturnStore})
	wantStatus(t, r, "ok")
	if r.Stdout != fmt.Sprintf("%d\n", len(chunk)) {
		t.Errorf("uid 65534's run read %q of its stored file", r.Stdout)
	}
	obs = append(obs, "uid 65534's run (with its stored file as input): HTTP 200, "+notStored(t, r, "max_total_bytes", "out.txt"))
	h.print1(t)
	if r := h.nobodyExec(t, api.ExecuteRequest{Code: "print(1)"}); r.Status != "ok" || r.Stdout != "1\n" {
		t.Errorf("uid 65534's print(1): %+v", r)
	}
	if status, data := h.rootDo(t, "GET", "/v1/files/"+n1.FileID, "", nil); status != http.StatusOK || !bytes.Equal(data, chunk) {
		t.Errorf("download of a stored file from the full store: HTTP %d, %d bytes", status, len(data))
	}
	var names []string
	for _, n := range dirNames(h.storeDir()) {
		if strings.HasPrefix(n, ".") {
			names = append(names, n)
		}
	}
	if len(names) != 0 || len(dirNames(h.storeDir())) != 8 {
		t.Errorf("the store's directory holds %v, want the 4 files' data and records only", dirNames(h.storeDir()))
	}
	return strings.Join(obs, "; ") + "; print(1) of root and uid 65534 and a download work; no temporary file left"
}

func runStoreInputCopy(t *testing.T, h *hostile) string {
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	in := h.rootUpload(t, "in.bin", data)
	r := h.exec(t, api.ExecuteRequest{Code: `import hashlib, json, os
res = {'sha256': hashlib.sha256(open('in.bin', 'rb').read()).hexdigest()}
with open('in.bin', 'r+b') as f: f.write(b'OVERWRITTEN')
os.truncate('in.bin', 5)
with open('in.bin', 'ab') as f: f.write(b'appended')
os.chmod('in.bin', 0o777)
os.link('in.bin', 'in2.bin')
res['links'] = os.stat('in.bin').st_nlink
targets = []
for fd in os.listdir('/proc/self/fd'):
    try: targets.append(os.readlink('/proc/self/fd/' + fd))
    except OSError: pass
res['store_fds'] = [l for l in targets if '.data' in l or '/files' in l or 'f-' in l]
print(json.dumps(res))
`, Files: []api.FileIn{{Path: "in.bin", FileID: in.FileID}}})
	wantStatus(t, r, "ok")
	got := outJSON(t, r)
	if got["sha256"] != in.SHA256 || fmt.Sprint(got["links"]) != "2" || fmt.Sprint(got["store_fds"]) != "[]" {
		t.Errorf("in the jail: %v; want sha256 %s, 2 links, no fd into the store", got, in.SHA256)
	}
	status, after := h.rootDo(t, "GET", "/v1/files/"+in.FileID, "", nil)
	if status != http.StatusOK || !bytes.Equal(after, data) {
		t.Errorf("the stored file after the run: HTTP %d, %d bytes, sha256 %s (was %s)", status, len(after), sha256Hex(after), in.SHA256)
	}
	status, raw := h.rootDo(t, "GET", "/v1/files/"+in.FileID+"/meta", "", nil)
	var m api.StoredFile
	if err := strictJSON(raw, &m); status != http.StatusOK || err != nil || m.SHA256 != in.SHA256 || m.SizeBytes != in.SizeBytes {
		t.Errorf("the stored file's record after the run: HTTP %d (%v) %s", status, err, short(string(raw)))
	}
	h.checkDataFile(t, in.FileID, in.SizeBytes)
	return "the jail read the stored bytes (sha256 equal); after its writes, truncate, chmod 0777 and link the stored file's bytes, record, mode 0600 and single link are unchanged; no fd of the jail points into the store"
}
