package tests

// The file store against real daemons (issue 14): uploads raw, multipart
// and by curl, downloads with ranges; a 1 GiB upload and download with the
// daemon's RSS flat; stored files in execute and in sessions; outputs
// returned into the store; quotas and TTL; owner isolation; kill -9 during
// an upload and during a run that returns into the store, then a restart
// that finds nothing partial and loses nothing acknowledged; hostile names,
// bodies and ids.

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

// fsStartDaemon starts a daemon of a file test's own: its socket open
// to uid 65534, a quota and queue the tests cannot exhaust, and files (TOML
// keys) added to its [files] section.
func fsStartDaemon(t *testing.T, files string) *daemon {
	t.Helper()
	d := startDaemon(t, daemontest.Options{Config: "socket_mode = \"0666\"\n", Tune: func(c string) string {
		c = setKeys(c, map[string]string{"daily_quota": "1000", "max_concurrent": "4", "queue_size": "16", "queue_wait": `"60s"`})
		return fsSetKeys(c, files)
	}})
	return d
}

// fsSetKeys adds keys right after the [files] line of the harness's
// configuration (which has its dir).
func fsSetKeys(cfg, keys string) string {
	const section = "\n[files]\n"
	i := strings.Index(cfg, section)
	if i < 0 {
		panic("test config has no [files] section")
	}
	i += len(section)
	return cfg[:i] + keys + cfg[i:]
}

// fsDetReader is n deterministic pseudo-random bytes of seed: large bodies
// are made as they are sent, never held whole.
func fsDetReader(seed uint64, n int64) io.Reader {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	return io.LimitReader(rand.NewChaCha8(s), n)
}

func fsDetBytes(seed uint64, n int) []byte {
	b, _ := io.ReadAll(fsDetReader(seed, int64(n)))
	return b
}

func fsSHA(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fsCall sends a request to d as root; hdr holds header names and
// values in turn. It returns the response (its body read and closed) and
// the body.
func fsCall(t *testing.T, d *daemon, method, path string, body io.Reader, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://jaild"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the body: %v", method, path, err)
	}
	return resp, b
}

// fsDecodeStored decodes a stored file's description strictly and checks
// its shape.
func fsDecodeStored(t *testing.T, what string, raw []byte) api.StoredFile {
	t.Helper()
	var f api.StoredFile
	if err := strictJSON(raw, &f); err != nil {
		t.Fatalf("%s: not a stored file (%v): %s", what, err, raw)
	}
	if !fsIDRe.MatchString(f.FileID) || !fsSHARe.MatchString(f.SHA256) {
		t.Errorf("%s: malformed file_id or sha256: %s", what, raw)
	}
	return f
}

var (
	fsIDRe  = regexp.MustCompile(`^f-[0-9a-f]{32}$`)
	fsSHARe = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// fsUpload stores data as root under name (a raw body) and checks the 201.
func fsUpload(t *testing.T, d *daemon, name string, data []byte) api.StoredFile {
	t.Helper()
	resp, body := fsCall(t, d, "POST", "/v1/files?name="+url.QueryEscape(name), bytes.NewReader(data), "Content-Type", "application/octet-stream")
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload %q: HTTP %d: %s", name, resp.StatusCode, body)
	}
	f := fsDecodeStored(t, "upload "+name, body)
	if f.Name != name || f.SizeBytes != int64(len(data)) || f.SHA256 != fsSHA(data) || f.UID != 0 {
		t.Errorf("upload %q of %d bytes (sha256 %s): got %+v", name, len(data), fsSHA(data), f)
	}
	if loc := resp.Header.Get("Location"); loc != "/v1/files/"+f.FileID {
		t.Errorf("upload %q: Location %q", name, loc)
	}
	return f
}

// fsWantError checks an error response: its status, and the one error
// shape with type, field (when not "") and a message mentioning mention.
func fsWantError(t *testing.T, what string, status int, body []byte, wantStatus int, typ, field, mention string) api.ErrorDetail {
	t.Helper()
	var e api.ErrorBody
	if err := strictJSON(body, &e); err != nil {
		t.Errorf("%s: HTTP %d, not the error shape (%v): %q", what, status, err, body)
		return e.Error
	}
	if status != wantStatus || e.Error.Type != typ || e.Error.Field != field || !strings.Contains(e.Error.Message, mention) {
		t.Errorf("%s: HTTP %d %+v; want %d %s field %q naming %q", what, status, e.Error, wantStatus, typ, field, mention)
	}
	return e.Error
}

// fsList returns the files root (an admin: everyone's) sees.
func fsList(t *testing.T, d *daemon) []api.StoredFile {
	t.Helper()
	resp, body := fsCall(t, d, "GET", "/v1/files", nil)
	return fsDecodeList(t, resp.StatusCode, body)
}

func fsDecodeList(t *testing.T, status int, body []byte) []api.StoredFile {
	t.Helper()
	var l api.FileList
	if err := strictJSON(body, &l); status != http.StatusOK || err != nil || l.Files == nil {
		t.Fatalf("list: HTTP %d (%v): %s", status, err, body)
	}
	return l.Files
}

func fsIDs(fs []api.StoredFile) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.FileID
	}
	return out
}

// fsDownload reads file id's content as root, hashing it on the way.
func fsDownload(t *testing.T, d *daemon, id string) (sum string, n int64) {
	t.Helper()
	resp, err := d.Client.Get("http://jaild/v1/files/" + id)
	if err != nil {
		t.Fatalf("GET %s: %v", id, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: HTTP %d: %s", id, resp.StatusCode, b)
	}
	h := sha256.New()
	if n, err = io.Copy(h, resp.Body); err != nil {
		t.Fatalf("GET %s: %v after %d bytes", id, err, n)
	}
	if resp.ContentLength != n {
		t.Errorf("GET %s: Content-Length %d, got %d bytes", id, resp.ContentLength, n)
	}
	return hex.EncodeToString(h.Sum(nil)), n
}

// fsStoreNames lists the store's directory.
func fsStoreNames(t *testing.T, d *daemon) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(d.Dir, "files"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// fsCheckStoreHolds checks that the store's directory holds the data and
// the record of each of fileIDs, and nothing else: no temporary file, no
// orphan.
func fsCheckStoreHolds(t *testing.T, d *daemon, fileIDs ...string) {
	t.Helper()
	var want []string
	for _, id := range fileIDs {
		want = append(want, id+".data", id+".meta")
	}
	slices.Sort(want)
	if got := fsStoreNames(t, d); !slices.Equal(got, want) {
		t.Errorf("the store's directory holds %q, want %q", got, want)
	}
}

// fsNobody runs curl as uid 65534 against d with args (after the URL) and
// returns the status, the headers and the body.
func fsNobody(t *testing.T, d *daemon, method, path string, args ...string) (int, http.Header, []byte) {
	t.Helper()
	return curlAsNobody(t, nil, append([]string{"-H", "Expect:", "--unix-socket", d.Socket, "-X", method, "http://jaild" + path}, args...)...)
}

// fsNobodyUpload stores data as uid 65534 (curl --data-binary from a file in
// the daemon's directory) and returns the status and the body.
func fsNobodyUpload(t *testing.T, d *daemon, name string, data []byte) (int, []byte) {
	t.Helper()
	src := filepath.Join(d.Dir, "upload-"+randHex(4))
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(src)
	status, _, body := fsNobody(t, d, "POST", "/v1/files?name="+url.QueryEscape(name), "-H", "Content-Type: application/octet-stream", "--data-binary", "@"+src)
	return status, body
}

// fsNobodyJSON posts a JSON body as uid 65534.
func fsNobodyJSON(t *testing.T, d *daemon, path string, body any) (int, []byte) {
	t.Helper()
	j, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	status, _, out := fsNobody(t, d, "POST", path, "-H", "Content-Type: application/json", "--data-binary", string(j))
	return status, out
}

// fsRawConn opens a connection to d's socket for requests the HTTP client
// would not send.
func fsRawConn(t *testing.T, d *daemon) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("unix", d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// fsReadResponse reads one response from a raw connection within limit.
func fsReadResponse(t *testing.T, c net.Conn, br *bufio.Reader, limit time.Duration) (*http.Response, []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(limit))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read a response within %v: %v", limit, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("read a response's body: %v", err)
	}
	return resp, b
}

// fsExec posts an execute request as root and returns its 200 response.
func fsExec(t *testing.T, d *daemon, path string, req any) ([]byte, *api.ExecuteResponse) {
	t.Helper()
	j, _ := json.Marshal(req)
	resp, body := fsCall(t, d, "POST", path, bytes.NewReader(j), "Content-Type", "application/json")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: HTTP %d: %s", path, resp.StatusCode, body)
	}
	var r api.ExecuteResponse
	if path == "/v1/execute" {
		if err := strictJSON(body, &r); err != nil {
			t.Fatalf("execute: %v\n%s", err, body)
		}
	} else {
		var sr api.SessionExecuteResponse
		if err := strictJSON(body, &sr); err != nil {
			t.Fatalf("session call: %v\n%s", err, body)
		}
		r = sr.ExecuteResponse
	}
	if r.Status != api.StatusOK {
		t.Fatalf("POST %s: status %s: %s\nstdout: %s\nstderr: %s", path, r.Status, r.Message, r.Stdout, r.Stderr)
	}
	return body, &r
}

// TestFilesUploadDownload: an upload raw, multipart, and by curl as the
// README shows it; the content back whole, by HEAD and by ranges; meta,
// list, delete; and the owners: uid 65534 cannot tell root's files from
// missing ones, root (an admin) sees everyone's.
func TestFilesUploadDownload(t *testing.T) {
	t.Parallel()
	d := fsStartDaemon(t, "")
	const ttl = 24 * time.Hour // the default
	data := fsDetBytes(1, 300_000)

	before := time.Now()
	f := fsUpload(t, d, "data.csv", data)
	after := time.Now()
	if f.CreatedAt.Before(before.Add(-time.Second)) || f.CreatedAt.After(after.Add(time.Second)) || f.CreatedAt.Location() != time.UTC {
		t.Errorf("created_at %v, not between %v and %v in UTC", f.CreatedAt, before, after)
	}
	if got := f.ExpiresAt.Sub(f.CreatedAt); got != ttl {
		t.Errorf("expires_at - created_at = %v, want the ttl %v", got, ttl)
	}

	t.Run("get", func(t *testing.T) {
		resp, body := fsCall(t, d, "GET", "/v1/files/"+f.FileID, nil)
		if resp.StatusCode != http.StatusOK || !bytes.Equal(body, data) {
			t.Fatalf("GET: HTTP %d, %d bytes (equal: %v)", resp.StatusCode, len(body), bytes.Equal(body, data))
		}
		h := resp.Header
		for k, want := range map[string]string{
			"Content-Type": "application/octet-stream", "Content-Length": fmt.Sprint(len(data)), "ETag": `"` + f.SHA256 + `"`,
			"Accept-Ranges": "bytes", "X-Content-Type-Options": "nosniff",
			"Content-Disposition": `attachment; filename="data.csv"; filename*=UTF-8''data.csv`,
		} {
			if h.Get(k) != want {
				t.Errorf("GET: %s %q, want %q", k, h.Get(k), want)
			}
		}
		resp, body = fsCall(t, d, "HEAD", "/v1/files/"+f.FileID, nil)
		if resp.StatusCode != http.StatusOK || len(body) != 0 || resp.Header.Get("Content-Length") != fmt.Sprint(len(data)) || resp.Header.Get("ETag") != h.Get("ETag") {
			t.Errorf("HEAD: HTTP %d, %d bytes of body, Content-Length %q, ETag %q", resp.StatusCode, len(body), resp.Header.Get("Content-Length"), resp.Header.Get("ETag"))
		}
		resp, body = fsCall(t, d, "GET", "/v1/files/"+f.FileID, nil, "If-None-Match", `"`+f.SHA256+`"`)
		if resp.StatusCode != http.StatusNotModified || len(body) != 0 {
			t.Errorf("If-None-Match with the ETag: HTTP %d, %d bytes", resp.StatusCode, len(body))
		}
	})

	t.Run("ranges", func(t *testing.T) {
		n := len(data)
		for _, c := range []struct {
			rng, crange string
			want        []byte
		}{
			{"bytes=10-19", fmt.Sprintf("bytes 10-19/%d", n), data[10:20]},
			{"bytes=-7", fmt.Sprintf("bytes %d-%d/%d", n-7, n-1, n), data[n-7:]},
			{fmt.Sprintf("bytes=%d-", n-3), fmt.Sprintf("bytes %d-%d/%d", n-3, n-1, n), data[n-3:]},
		} {
			resp, body := fsCall(t, d, "GET", "/v1/files/"+f.FileID, nil, "Range", c.rng)
			if resp.StatusCode != http.StatusPartialContent || resp.Header.Get("Content-Range") != c.crange || !bytes.Equal(body, c.want) {
				t.Errorf("Range %s: HTTP %d Content-Range %q body %q; want 206 %q %q", c.rng, resp.StatusCode, resp.Header.Get("Content-Range"), body, c.crange, c.want)
			}
		}
		for _, rng := range []string{fmt.Sprintf("bytes=%d-", n), fmt.Sprintf("bytes=%d-%d", n+10, n+20)} {
			resp, body := fsCall(t, d, "GET", "/v1/files/"+f.FileID, nil, "Range", rng)
			fsWantError(t, "Range "+rng, resp.StatusCode, body, http.StatusRequestedRangeNotSatisfiable, "range_not_satisfiable", "", fmt.Sprint(n))
			if cr := resp.Header.Get("Content-Range"); cr != fmt.Sprintf("bytes */%d", n) || resp.Header.Get("Content-Type") != "application/json" {
				t.Errorf("Range %s: Content-Range %q Content-Type %q", rng, cr, resp.Header.Get("Content-Type"))
			}
		}
	})

	t.Run("meta", func(t *testing.T) {
		resp, body := fsCall(t, d, "GET", "/v1/files/"+f.FileID+"/meta", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("meta: HTTP %d: %s", resp.StatusCode, body)
		}
		if m := fsDecodeStored(t, "meta", body); !fsSameStored(m, f) {
			t.Errorf("meta %+v, upload said %+v", m, f)
		}
	})

	var mp, curlF, curlT api.StoredFile
	t.Run("multipart", func(t *testing.T) {
		content := fsDetBytes(2, 70_000)
		var buf bytes.Buffer
		w := multipart.NewWriter(&buf)
		w.WriteField("note", "a form field before the file is skipped")
		fw, _ := w.CreateFormFile("file", "report.bin")
		fw.Write(content)
		w.WriteField("after", "not read")
		w.Close()
		resp, body := fsCall(t, d, "POST", "/v1/files", bytes.NewReader(buf.Bytes()), "Content-Type", w.FormDataContentType())
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("multipart: HTTP %d: %s", resp.StatusCode, body)
		}
		mp = fsDecodeStored(t, "multipart", body)
		if mp.Name != "report.bin" || mp.SizeBytes != int64(len(content)) || mp.SHA256 != fsSHA(content) {
			t.Errorf("multipart: %+v; want report.bin, %d bytes, sha256 %s", mp, len(content), fsSHA(content))
		}
		if sum, n := fsDownload(t, d, mp.FileID); sum != fsSHA(content) || n != int64(len(content)) {
			t.Errorf("multipart: downloaded %d bytes of sha256 %s", n, sum)
		}
		// ?name= wins over the part's filename.
		resp, body = fsCall(t, d, "POST", "/v1/files?name=renamed.bin", bytes.NewReader(buf.Bytes()), "Content-Type", w.FormDataContentType())
		if r := fsDecodeStored(t, "multipart ?name=", body); resp.StatusCode != http.StatusCreated || r.Name != "renamed.bin" || r.SHA256 != fsSHA(content) {
			t.Errorf("multipart with ?name=: HTTP %d %+v", resp.StatusCode, r)
		} else {
			fsCall(t, d, "DELETE", "/v1/files/"+r.FileID, nil)
		}
	})

	t.Run("curl", func(t *testing.T) {
		content := fsDetBytes(3, 200_000)
		src := filepath.Join(d.Dir, "curl data.csv")
		if err := os.WriteFile(src, content, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(src)
		for _, c := range []struct {
			args []string
			name string
			dst  *api.StoredFile
		}{
			{[]string{"-F", "file=@" + src, "http://jaild/v1/files"}, "curl data.csv", &curlF},
			{[]string{"-X", "POST", "-T", src, "http://jaild/v1/files?name=put.csv"}, "put.csv", &curlT},
		} {
			out, err := exec.Command("curl", append([]string{"-sS", "--fail-with-body", "--unix-socket", d.Socket}, c.args...)...).Output()
			if err != nil {
				t.Fatalf("curl %q: %v: %s", c.args, err, out)
			}
			*c.dst = fsDecodeStored(t, "curl", out)
			if c.dst.Name != c.name || c.dst.SizeBytes != int64(len(content)) || c.dst.SHA256 != fsSHA(content) {
				t.Errorf("curl %q: %+v", c.args, *c.dst)
			}
		}
	})

	t.Run("list and delete", func(t *testing.T) {
		want := []string{f.FileID, mp.FileID, curlF.FileID, curlT.FileID}
		got := fsList(t, d)
		if !slices.Equal(fsIDs(got), want) {
			t.Fatalf("list %q, want %q (oldest first)", fsIDs(got), want)
		}
		if !fsSameStored(got[0], f) {
			t.Errorf("list entry %+v, upload said %+v", got[0], f)
		}
		resp, body := fsCall(t, d, "DELETE", "/v1/files/"+f.FileID, nil)
		if resp.StatusCode != http.StatusOK || !fsSameStored(fsDecodeStored(t, "delete", body), f) {
			t.Errorf("DELETE: HTTP %d %s", resp.StatusCode, body)
		}
		for _, m := range []string{"GET /v1/files/" + f.FileID, "HEAD /v1/files/" + f.FileID, "GET /v1/files/" + f.FileID + "/meta", "DELETE /v1/files/" + f.FileID} {
			method, path, _ := strings.Cut(m, " ")
			resp, body := fsCall(t, d, method, path, nil)
			if method == "HEAD" {
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("%s after DELETE: HTTP %d", m, resp.StatusCode)
				}
				continue
			}
			fsWantError(t, m+" after DELETE", resp.StatusCode, body, http.StatusNotFound, "not_found", "", f.FileID)
		}
		if got := fsIDs(fsList(t, d)); !slices.Equal(got, want[1:]) {
			t.Errorf("list after DELETE %q, want %q", got, want[1:])
		}
		fsCheckStoreHolds(t, d, want[1:]...)
	})

	t.Run("owners", func(t *testing.T) {
		mine := fsUpload(t, d, "root.txt", []byte("root's own\n"))
		missing := "f-" + randHex(16)
		// The same answer for root's file as for one that never existed
		// (the id itself aside).
		for _, c := range []struct{ method, suffix string }{{"GET", ""}, {"GET", "/meta"}, {"DELETE", ""}} {
			s1, _, b1 := fsNobody(t, d, c.method, "/v1/files/"+mine.FileID+c.suffix)
			s2, _, b2 := fsNobody(t, d, c.method, "/v1/files/"+missing+c.suffix)
			fsWantError(t, "uid 65534 "+c.method+" root's file"+c.suffix, s1, b1, http.StatusNotFound, "not_found", "", mine.FileID)
			if s1 != s2 || strings.ReplaceAll(string(b1), mine.FileID, "ID") != strings.ReplaceAll(string(b2), missing, "ID") {
				t.Errorf("uid 65534 %s%s: root's file answers %d %s, a missing one %d %s", c.method, c.suffix, s1, b1, s2, b2)
			}
		}
		if sum, _ := fsDownload(t, d, mine.FileID); sum != mine.SHA256 {
			t.Errorf("root's file changed after uid 65534's DELETE: sha256 %s", sum)
		}
		status, body := fsNobodyUpload(t, d, "nobody.txt", []byte("uid 65534's\n"))
		if status != http.StatusCreated {
			t.Fatalf("upload as uid 65534: HTTP %d: %s", status, body)
		}
		theirs := fsDecodeStored(t, "upload as 65534", body)
		if theirs.UID != nobodyUID {
			t.Errorf("upload as uid 65534: uid %d", theirs.UID)
		}
		status, _, body = fsNobody(t, d, "GET", "/v1/files")
		if got := fsDecodeList(t, status, body); len(got) != 1 || !fsSameStored(got[0], theirs) {
			t.Errorf("uid 65534's list: %s, want only its own file", body)
		}
		all := fsList(t, d)
		if i := slices.Index(fsIDs(all), theirs.FileID); i < 0 || all[i].UID != nobodyUID || !slices.Contains(fsIDs(all), mine.FileID) {
			t.Errorf("root's (an admin's) list %+v lacks uid 65534's file or its own", all)
		}
		if sum, _ := fsDownload(t, d, theirs.FileID); sum != fsSHA([]byte("uid 65534's\n")) {
			t.Errorf("root reading uid 65534's file: sha256 %s", sum)
		}
		status, _, body = fsNobody(t, d, "GET", "/v1/files/"+theirs.FileID)
		if status != http.StatusOK || string(body) != "uid 65534's\n" {
			t.Errorf("uid 65534 reading its own file: HTTP %d %q", status, body)
		}
		if resp, body := fsCall(t, d, "DELETE", "/v1/files/"+theirs.FileID, nil); resp.StatusCode != http.StatusOK {
			t.Errorf("root deleting uid 65534's file: HTTP %d %s", resp.StatusCode, body)
		}
	})
}

// fsSameStored compares two descriptions of a stored file.
func fsSameStored(a, b api.StoredFile) bool {
	return a.FileID == b.FileID && a.Name == b.Name && a.SizeBytes == b.SizeBytes && a.SHA256 == b.SHA256 &&
		a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) && a.UID == b.UID
}

// fsLargeFile is the size of TestFilesLarge's upload.
const fsLargeFile = 1 << 30

// fsRSSSlack bounds how much the daemon's peak RSS may grow over a 1 GiB
// upload and download: the transfers stream through buffers of tens of
// KiB, so anything near the file's size (or even a tenth of it) means a
// file was held in memory; 64 MiB leaves room for the Go runtime's heap
// growth and for pages not yet returned.
const fsRSSSlack = 64 << 20

// fsLargeTook is how long each 1 GiB transfer is paced to take: longer
// than the test daemons' read_timeout (5 s).
const fsLargeTook = 6500 * time.Millisecond

// fsPaced reads r no faster than one GiB in took.
type fsPaced struct {
	r     io.Reader
	took  time.Duration
	start time.Time
	n     int64
}

func (p *fsPaced) Read(b []byte) (int, error) {
	if p.start.IsZero() {
		p.start = time.Now()
	}
	if ahead := time.Duration(float64(p.took)*float64(p.n)/fsLargeFile) - time.Since(p.start); ahead > 0 {
		time.Sleep(ahead)
	}
	n, err := p.r.Read(b)
	p.n += int64(n)
	return n, err
}

// TestFilesLarge uploads 1 GiB (made as it is sent, hashed on the way) and
// downloads it (hashed as it arrives), each paced to outlast the daemon's
// read_timeout of 5 s: the transfers pass because the deadlines move
// while bytes flow, and the daemon's peak RSS stays within fsRSSSlack of
// what it was before.
func TestFilesLarge(t *testing.T) {
	t.Parallel()
	d := fsStartDaemon(t, "max_file_mb = 2048\nmin_free_mb = 0\n")
	// Warm up the paths of an upload and a download first.
	small := fsUpload(t, d, "warm.bin", fsDetBytes(4, 1<<20))
	fsDownload(t, d, small.FileID)
	pid := d.Cmd.Process.Pid
	hwmBefore := procStatusKB(t, pid, "VmHWM") << 10

	h := sha256.New()
	req, err := http.NewRequest("POST", "http://jaild/v1/files?name=large.bin", &fsPaced{r: io.TeeReader(fsDetReader(5, fsLargeFile), h), took: fsLargeTook})
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = fsLargeFile
	start := time.Now()
	resp, err := d.Client.Do(req)
	if err != nil {
		t.Fatalf("upload 1 GiB: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	upTook := time.Since(start)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("upload 1 GiB: HTTP %d after %v: %s", resp.StatusCode, upTook, body)
	}
	f := fsDecodeStored(t, "upload 1 GiB", body)
	want := hex.EncodeToString(h.Sum(nil))
	if f.SizeBytes != fsLargeFile || f.SHA256 != want {
		t.Errorf("upload 1 GiB: %d bytes sha256 %s; sent %d bytes sha256 %s", f.SizeBytes, f.SHA256, fsLargeFile, want)
	}
	hwmUp := procStatusKB(t, pid, "VmHWM") << 10

	start = time.Now()
	resp, err = d.Client.Get("http://jaild/v1/files/" + f.FileID)
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	h.Reset()
	n, err := io.Copy(h, &fsPaced{r: resp.Body, took: fsLargeTook})
	resp.Body.Close()
	downTook := time.Since(start)
	if sum := hex.EncodeToString(h.Sum(nil)); resp.StatusCode != http.StatusOK || err != nil || sum != want || n != fsLargeFile {
		t.Errorf("download: HTTP %d, %d bytes sha256 %s (%v); want %d bytes sha256 %s", resp.StatusCode, n, sum, err, fsLargeFile, want)
	}
	if upTook < fsLargeTook || downTook < fsLargeTook {
		t.Errorf("the transfers took %v and %v, not the %v that outlasts read_timeout", upTook, downTook, fsLargeTook)
	}
	hwmAfter := procStatusKB(t, pid, "VmHWM") << 10
	t.Logf("1 GiB up in %v, down in %v; daemon peak RSS %d MiB before, %d MiB after the upload, %d MiB after the download (bound %d MiB); RSS now %d MiB",
		upTook.Round(time.Millisecond), downTook.Round(time.Millisecond), hwmBefore>>20, hwmUp>>20, hwmAfter>>20, (hwmBefore+fsRSSSlack)>>20, procStatusKB(t, pid, "VmRSS")>>10)
	if hwmAfter > hwmBefore+fsRSSSlack {
		t.Errorf("the daemon's peak RSS grew from %d MiB to %d MiB over a 1 GiB upload and download (bound +%d MiB)", hwmBefore>>20, hwmAfter>>20, fsRSSSlack>>20)
	}
	if resp, body := fsCall(t, d, "DELETE", "/v1/files/"+f.FileID, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("DELETE: HTTP %d %s", resp.StatusCode, body)
	}
}

// TestFilesSlowUploads: read_timeout (5 s) bounds a pause, not a
// transfer. An upload fed slowly for longer than it passes; one that
// stalls for longer is cut with a 400 naming the body, and leaves nothing.
func TestFilesSlowUploads(t *testing.T) {
	t.Parallel()
	d := fsStartDaemon(t, "min_free_mb = 0\n")
	var slow api.StoredFile
	t.Run("group", func(t *testing.T) { fsSlowUploads(t, d, &slow) })
	if t.Failed() {
		return
	}
	if got := fsIDs(fsList(t, d)); !slices.Equal(got, []string{slow.FileID}) {
		t.Errorf("list %q, want only the slow upload", got)
	}
	fsCheckStoreHolds(t, d, slow.FileID)
}

// fsSlowUploads runs TestFilesSlowUploads's cases in parallel; the slow
// one's file goes into slow.
func fsSlowUploads(t *testing.T, d *daemon, slow *api.StoredFile) {
	t.Run("slow", func(t *testing.T) {
		t.Parallel()
		pr, pw := io.Pipe()
		content := fsDetBytes(6, 8<<10)
		go func() {
			// 1 KiB a second for 8 s.
			for i := range 8 {
				time.Sleep(time.Second)
				pw.Write(content[i<<10 : (i+1)<<10])
			}
			pw.Close()
		}()
		start := time.Now()
		resp, body := fsCall(t, d, "POST", "/v1/files?name=slow.bin", pr)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("slow upload: HTTP %d after %v: %s", resp.StatusCode, time.Since(start), body)
		}
		*slow = fsDecodeStored(t, "slow upload", body)
		if slow.SHA256 != fsSHA(content) || time.Since(start) < 7*time.Second {
			t.Errorf("slow upload: %+v after %v", *slow, time.Since(start))
		}
	})
	t.Run("stall", func(t *testing.T) {
		t.Parallel()
		c, br := fsRawConn(t, d)
		fmt.Fprintf(c, "POST /v1/files?name=stalled.bin HTTP/1.1\r\nHost: jaild\r\nContent-Length: %d\r\n\r\n", 1<<20)
		c.Write(fsDetBytes(7, 64<<10))
		start := time.Now()
		resp, body := fsReadResponse(t, c, br, 20*time.Second)
		took := time.Since(start)
		fsWantError(t, "a stalled upload", resp.StatusCode, body, http.StatusBadRequest, "invalid_argument", "body", "read_timeout")
		if took < 4*time.Second || took > 12*time.Second {
			t.Errorf("a stalled upload was cut after %v, want about read_timeout (5 s)", took)
		}
	})
}

// TestFilesInRuns: stored files as inputs of execute and of a session
// (copied into the workspace whole), other callers' ids refused as
// missing, and outputs returned into the store as the caller's.
func TestFilesInRuns(t *testing.T) {
	t.Parallel()
	d := fsStartDaemon(t, "")
	in := fsDetBytes(8, 3<<20+17)
	f := fsUpload(t, d, "input.bin", in)

	// First, alone (it checks that nothing is added to the store): a
	// symlink to a host file matched by return_files is reported, not
	// stored.
	t.Run("symlink not stored", func(t *testing.T) {
		before := fsList(t, d)
		_, r := fsExec(t, d, "/v1/execute", api.ExecuteRequest{
			Code:          "import os\nos.symlink('/etc/shadow', 'shadow')\nos.symlink('/etc/passwd', 'passwd.txt')\nopen('real.txt', 'w').write('real')",
			ReturnFiles:   []string{"shadow", "*.txt"},
			ReturnFilesAs: "store",
		})
		var real api.FileOut
		for _, fo := range r.Files {
			switch fo.Path {
			case "shadow", "passwd.txt":
				if fo.Error == "" || fo.FileID != "" || fo.SHA256 != "" || fo.ContentB64 != "" {
					t.Errorf("symlink %s: %+v, want an error and nothing stored", fo.Path, fo)
				}
			case "real.txt":
				real = fo
			default:
				t.Errorf("unexpected file %+v", fo)
			}
		}
		if len(r.Files) != 3 || real.FileID == "" || real.SHA256 != fsSHA([]byte("real")) {
			t.Fatalf("files %+v, want two symlinks reported and real.txt stored", r.Files)
		}
		after := fsList(t, d)
		if want := append(fsIDs(before), real.FileID); !slices.Equal(fsIDs(after), want) {
			t.Errorf("list after the run %q, want %q (real.txt only added)", fsIDs(after), want)
		}
		fsCheckStoreHolds(t, d, fsIDs(after)...)
		fsCall(t, d, "DELETE", "/v1/files/"+real.FileID, nil)
	})

	readCode := func(paths ...string) string {
		j, _ := json.Marshal(paths)
		return fmt.Sprintf("import hashlib, json, os\nprint(json.dumps({p: [hashlib.sha256(open(p, 'rb').read()).hexdigest(), os.path.getsize(p)] for p in %s}))", j)
	}
	checkRead := func(t *testing.T, stdout string, want map[string]api.StoredFile) {
		t.Helper()
		var got map[string][2]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(stdout)), &got); err != nil {
			t.Fatalf("stdout %q: %v", stdout, err)
		}
		for p, f := range want {
			if g := got[p]; g[0] != f.SHA256 || g[1] != float64(f.SizeBytes) {
				t.Errorf("%s in the workspace: sha256 %v, %v bytes; stored %s, %d bytes", p, g[0], g[1], f.SHA256, f.SizeBytes)
			}
		}
	}

	t.Run("group", func(t *testing.T) {
		t.Run("execute", func(t *testing.T) {
			t.Parallel()
			_, r := fsExec(t, d, "/v1/execute", api.ExecuteRequest{
				Code:  readCode("data/input.bin"),
				Files: []api.FileIn{{Path: "data/input.bin", FileID: f.FileID}},
			})
			checkRead(t, r.Stdout, map[string]api.StoredFile{"data/input.bin": f})
		})

		t.Run("session", func(t *testing.T) {
			t.Parallel()
			g := fsUpload(t, d, "second.bin", fsDetBytes(9, 100_000))
			s := newSession(t, d, api.SessionCreateRequest{Files: []api.FileIn{{Path: "a.bin", FileID: f.FileID}}})
			defer deleteSession(t, d, s.SessionID)
			_, r := fsExec(t, d, "/v1/sessions/"+s.SessionID+"/execute", api.SessionExecuteRequest{
				Code:  readCode("a.bin", "b.bin"),
				Files: []api.FileIn{{Path: "b.bin", FileID: g.FileID}},
			})
			checkRead(t, r.Stdout, map[string]api.StoredFile{"a.bin": f, "b.bin": g})
			// A session's call returns into the store too.
			_, r = fsExec(t, d, "/v1/sessions/"+s.SessionID+"/execute", api.SessionExecuteRequest{
				Code:          "import hashlib\nb = open('a.bin', 'rb').read()[::-1]\nopen('rev.bin', 'wb').write(b)\nprint(hashlib.sha256(b).hexdigest())",
				ReturnFiles:   []string{"rev.bin"},
				ReturnFilesAs: "store",
			})
			fsCheckStoredOutputs(t, d, r, map[string]int64{"rev.bin": f.SizeBytes}, map[string]string{"rev.bin": strings.TrimSpace(r.Stdout)}, 0)
		})

		t.Run("refused", func(t *testing.T) {
			t.Parallel()
			missing := "f-" + randHex(16)
			for _, c := range []struct {
				path, id string
			}{{"/v1/execute", f.FileID}, {"/v1/execute", missing}, {"/v1/execute", "f-../../etc/shadow"}, {"/v1/sessions", f.FileID}} {
				status, body := fsNobodyJSON(t, d, c.path, api.ExecuteRequest{Code: "print(1)", Files: []api.FileIn{{Path: "x.bin", FileID: c.id}}})
				if c.path == "/v1/sessions" {
					status, body = fsNobodyJSON(t, d, c.path, api.SessionCreateRequest{Files: []api.FileIn{{Path: "x.bin", FileID: c.id}}})
				}
				fsWantError(t, "uid 65534 "+c.path+" with file_id "+c.id, status, body, http.StatusNotFound, "not_found", "files[0].file_id", "")
			}
			resp, body := fsCall(t, d, "POST", "/v1/execute", strings.NewReader(fmt.Sprintf(
				`{"code":"print(1)","files":[{"path":"x.bin","file_id":%q,"content_b64":"eA=="}]}`, f.FileID)), "Content-Type", "application/json")
			fsWantError(t, "file_id and content_b64", resp.StatusCode, body, http.StatusBadRequest, "invalid_argument", "files[0]", "content_b64")
		})

		t.Run("outputs", func(t *testing.T) {
			t.Parallel()
			code := `import hashlib, json, os
os.makedirs('out')
big = os.urandom(5 << 20)
text = ''.join('line %d of the report\n' % i for i in range(2000)).encode()
open('out/big.bin', 'wb').write(big)
open('out/report.txt', 'wb').write(text)
print(json.dumps({'out/big.bin': hashlib.sha256(big).hexdigest(), 'out/report.txt': hashlib.sha256(text).hexdigest()}))`
			text := 0
			for i := range 2000 {
				text += len(fmt.Sprintf("line %d of the report\n", i))
			}
			sizes := map[string]int64{"out/big.bin": 5 << 20, "out/report.txt": int64(text)}
			raw, r := fsExec(t, d, "/v1/execute", api.ExecuteRequest{Code: code, ReturnFiles: []string{"out/*"}, ReturnFilesAs: "store"})
			if bytes.Contains(raw, []byte("content_b64")) {
				t.Errorf("a response returning into the store has content_b64: %.500s", raw)
			}
			var sums map[string]string
			if err := json.Unmarshal([]byte(r.Stdout), &sums); err != nil {
				t.Fatalf("stdout %q: %v", r.Stdout, err)
			}
			stored := fsCheckStoredOutputs(t, d, r, sizes, sums, 0)
			for _, fo := range stored {
				status, _, body := fsNobody(t, d, "GET", "/v1/files/"+fo.FileID)
				fsWantError(t, "uid 65534 reading root's output", status, body, http.StatusNotFound, "not_found", "", "")
			}

			// uid 65534's outputs are its own.
			status, body := fsNobodyJSON(t, d, "/v1/execute", api.ExecuteRequest{
				Code:          "open('mine.txt', 'w').write('made by 65534')",
				ReturnFiles:   []string{"mine.txt"},
				ReturnFilesAs: "store",
			})
			var nr api.ExecuteResponse
			if err := strictJSON(body, &nr); status != http.StatusOK || err != nil || nr.Status != api.StatusOK || len(nr.Files) != 1 || nr.Files[0].FileID == "" {
				t.Fatalf("uid 65534's run returning into the store: HTTP %d (%v): %s", status, err, body)
			}
			status, _, body = fsNobody(t, d, "GET", "/v1/files")
			theirs := fsDecodeList(t, status, body)
			if len(theirs) != 1 || theirs[0].FileID != nr.Files[0].FileID || theirs[0].UID != nobodyUID || theirs[0].Name != "mine.txt" || theirs[0].SHA256 != fsSHA([]byte("made by 65534")) {
				t.Errorf("uid 65534's list after its run: %s", body)
			}
			status, _, body = fsNobody(t, d, "GET", "/v1/files/"+nr.Files[0].FileID)
			if status != http.StatusOK || string(body) != "made by 65534" {
				t.Errorf("uid 65534 reading its output: HTTP %d %q", status, body)
			}
		})
	})
}

// fsCheckStoredOutputs checks a run's files returned into the store: each
// has its id, sha256 (as the code computed it) and size and no content;
// the stored file has the same content, its base name and owner uid.
func fsCheckStoredOutputs(t *testing.T, d *daemon, r *api.ExecuteResponse, sizes map[string]int64, sums map[string]string, uid uint32) []api.FileOut {
	t.Helper()
	if len(r.Files) != len(sizes) {
		t.Fatalf("files %+v, want %d", r.Files, len(sizes))
	}
	for _, fo := range r.Files {
		if !fsIDRe.MatchString(fo.FileID) || fo.SHA256 != sums[fo.Path] || fo.SizeBytes != sizes[fo.Path] || fo.ContentB64 != "" || fo.Error != "" {
			t.Errorf("returned file %+v; want an id, sha256 %s, %d bytes, no content", fo, sums[fo.Path], sizes[fo.Path])
			continue
		}
		if sum, n := fsDownload(t, d, fo.FileID); sum != fo.SHA256 || n != fo.SizeBytes {
			t.Errorf("stored %s: %d bytes of sha256 %s", fo.Path, n, sum)
		}
		resp, body := fsCall(t, d, "GET", "/v1/files/"+fo.FileID+"/meta", nil)
		if m := fsDecodeStored(t, "meta", body); resp.StatusCode != http.StatusOK || m.Name != filepath.Base(fo.Path) || m.UID != uid || m.SHA256 != fo.SHA256 {
			t.Errorf("stored %s: meta %+v", fo.Path, m)
		}
	}
	return r.Files
}

// TestFilesQuotasAndTTL: every bound of [files] with small values (the
// 413s and the 507 name theirs, a refused upload leaves no temporary
// file), /v1/info reports them, and a file is gone at its TTL, then from
// the disk once collected.
func TestFilesQuotasAndTTL(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second
	d := fsStartDaemon(t, "max_file_mb = 1\nmax_mb_per_uid = 2\nmax_files_per_uid = 3\nmax_total_mb = 2\nmin_free_mb = 0\nttl = \"3s\"\n")
	var info api.Info
	if status, _ := d.call(t, "GET", "/v1/info", nil, &info); status != http.StatusOK {
		t.Fatalf("info: HTTP %d", status)
	}
	if want := (api.FilesInfo{Enabled: true, MaxFileBytes: 1 << 20, MaxBytesPerUID: 2 << 20, MaxFilesPerUID: 3, MaxTotalBytes: 2 << 20, TTLS: 3}); info.Files != want {
		t.Errorf("info.files %+v, want %+v", info.Files, want)
	}

	// Over max_file_bytes, with a Content-Length and chunked: refused,
	// nothing left behind.
	over := fsDetBytes(10, 2<<20)
	resp, body := fsCall(t, d, "POST", "/v1/files?name=big.bin", bytes.NewReader(over))
	fsWantError(t, "2 MiB with Content-Length", resp.StatusCode, body, http.StatusRequestEntityTooLarge, "too_large", "body", "max_file_bytes")
	resp, body = fsCall(t, d, "POST", "/v1/files?name=big.bin", io.MultiReader(bytes.NewReader(over)))
	fsWantError(t, "2 MiB chunked", resp.StatusCode, body, http.StatusRequestEntityTooLarge, "too_large", "body", "max_file_bytes")
	fsCheckStoreHolds(t, d)

	// Everything from the first upload on happens well within the TTL.
	a := fsUpload(t, d, "a.bin", fsDetBytes(11, 1<<20)) // exactly max_file_bytes
	b := fsUpload(t, d, "b.bin", fsDetBytes(12, 1<<20))
	resp, body = fsCall(t, d, "POST", "/v1/files?name=c.bin", strings.NewReader("c"))
	fsWantError(t, "root over max_bytes_per_uid", resp.StatusCode, body, http.StatusRequestEntityTooLarge, "too_large", "", "max_bytes_per_uid")
	status, body := fsNobodyUpload(t, d, "n.bin", []byte("n"))
	fsWantError(t, "uid 65534 over max_total_bytes", status, body, http.StatusInsufficientStorage, "insufficient_storage", "", "max_total_bytes")
	fsCheckStoreHolds(t, d, a.FileID, b.FileID)
	var mine api.Info
	if d.call(t, "GET", "/v1/info", nil, &mine); mine.Files.CallerBytes != 2<<20 || mine.Files.CallerFiles != 2 || mine.Files.UsedBytes != 2<<20 {
		t.Errorf("info.files with two files of 1 MiB: %+v", mine.Files)
	}

	fsCall(t, d, "DELETE", "/v1/files/"+b.FileID, nil)
	c := fsUpload(t, d, "c.bin", []byte("c"))
	e := fsUpload(t, d, "e.bin", []byte("e"))
	resp, body = fsCall(t, d, "POST", "/v1/files?name=f.bin", strings.NewReader("f"))
	fsWantError(t, "root's 4th file", resp.StatusCode, body, http.StatusRequestEntityTooLarge, "too_large", "", "max_files_per_uid")
	if time.Since(a.CreatedAt) >= ttl {
		t.Fatalf("the quota checks took %v, longer than the TTL: they are void", time.Since(a.CreatedAt))
	}
	fsCheckStoreHolds(t, d, a.FileID, c.FileID, e.FileID)

	// The TTL: visible until expires_at, then 404 at once, then gone from
	// the disk within the collector's period (1 s with this TTL).
	for {
		resp, body := fsCall(t, d, "GET", "/v1/files/"+a.FileID+"/meta", nil)
		now := time.Now()
		if resp.StatusCode == http.StatusOK {
			if now.After(a.ExpiresAt.Add(200 * time.Millisecond)) {
				t.Fatalf("file still there %v after its expires_at", now.Sub(a.ExpiresAt))
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		fsWantError(t, "expired file", resp.StatusCode, body, http.StatusNotFound, "not_found", "", a.FileID)
		if now.Before(a.ExpiresAt.Add(-100 * time.Millisecond)) {
			t.Errorf("file gone %v before its expires_at", a.ExpiresAt.Sub(now))
		}
		break
	}
	waitFor(t, 5*time.Second, "the expired files to leave the disk", func() bool { return len(fsStoreNames(t, d)) == 0 })
	if got := fsList(t, d); len(got) != 0 {
		t.Errorf("list after the TTL: %+v", got)
	}
	// The space is free again.
	status, body = fsNobodyUpload(t, d, "n.bin", fsDetBytes(13, 1<<20))
	if status != http.StatusCreated {
		t.Errorf("uid 65534's upload once the files expired: HTTP %d %s", status, body)
	}
}

// TestFilesHostileUploads: names that are paths, controls or not UTF-8;
// bodies longer or shorter than they say, over the bound, or cut; ids
// with path characters. Each is refused with the one error shape, and
// nothing is stored.
func TestFilesHostileUploads(t *testing.T) {
	t.Parallel()
	d := fsStartDaemon(t, "max_file_mb = 8\nmin_free_mb = 0\n")
	nothingStored := func(t *testing.T) {
		t.Helper()
		if got := fsList(t, d); len(got) != 0 {
			t.Errorf("list: %+v, want nothing", got)
		}
		fsCheckStoreHolds(t, d)
	}

	t.Run("names", func(t *testing.T) {
		for _, q := range []string{
			"a%2Fb", "%2Fetc%2Fpasswd", "..", ".", "a%00b", "a%01b", "a%0Ab", "a%7Fb", "a%C2%85b",
			"a%E2%80%A8b", "a%E2%80%AEcod.exe", "a%E2%81%A6b", "a%D8%9Cb", strings.Repeat("a", 256), "%FF", "a%C3", "",
		} {
			resp, body := fsCall(t, d, "POST", "/v1/files?name="+q, strings.NewReader("x"))
			fsWantError(t, "name="+q, resp.StatusCode, body, http.StatusBadRequest, "invalid_argument", "name", "")
		}
		// A multipart part's filename is checked too (".." is its own
		// base name; a bidi override is refused).
		for _, fn := range []string{"..", "evil\u202etxt.exe", "a\u2028b"} {
			var buf bytes.Buffer
			w := multipart.NewWriter(&buf)
			fw, _ := w.CreateFormFile("file", fn)
			fw.Write([]byte("x"))
			w.Close()
			resp, body := fsCall(t, d, "POST", "/v1/files", &buf, "Content-Type", w.FormDataContentType())
			fsWantError(t, fmt.Sprintf("multipart filename %q", fn), resp.StatusCode, body, http.StatusBadRequest, "invalid_argument", "name", "")
		}
		for _, c := range []struct{ query, field, ctype string }{
			{"name=a&name=b", "name", ""}, {"name=a&path=b", "query", ""}, {"name=a;b", "query", ""}, {"name=a%zz", "query", ""},
		} {
			resp, body := fsCall(t, d, "POST", "/v1/files?"+c.query, strings.NewReader("x"))
			fsWantError(t, "?"+c.query, resp.StatusCode, body, http.StatusBadRequest, "invalid_argument", c.field, "")
		}
		resp, body := fsCall(t, d, "POST", "/v1/files?name=a", strings.NewReader("x"), "Content-Type", "multipart/mixed; boundary=x")
		fsWantError(t, "multipart/mixed", resp.StatusCode, body, http.StatusUnsupportedMediaType, "unsupported_media_type", "", "")
		nothingStored(t)
		// The longest name and one of non-ASCII letters are fine, and the
		// latter is exact in Content-Disposition's filename*.
		for _, name := range []string{strings.Repeat("a", 255), "données été.csv"} {
			f := fsUpload(t, d, name, []byte("ok"))
			resp, _ := fsCall(t, d, "GET", "/v1/files/"+f.FileID, nil)
			if _, params, err := mime.ParseMediaType(resp.Header.Get("Content-Disposition")); err != nil || params["filename"] != name {
				t.Errorf("Content-Disposition %q for %q (%v)", resp.Header.Get("Content-Disposition"), name, err)
			}
			fsCall(t, d, "DELETE", "/v1/files/"+f.FileID, nil)
		}
		nothingStored(t)
	})

	t.Run("longer than Content-Length", func(t *testing.T) {
		// The bytes past Content-Length are the connection's next request
		// (a malformed one), never part of the file.
		c, br := fsRawConn(t, d)
		fmt.Fprint(c, "POST /v1/files?name=cl.bin HTTP/1.1\r\nHost: jaild\r\nContent-Length: 10\r\n\r\n0123456789EXTRA BYTES THAT ARE NO FILE\r\n\r\n")
		resp, body := fsReadResponse(t, c, br, 10*time.Second)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("HTTP %d %s", resp.StatusCode, body)
		}
		f := fsDecodeStored(t, "Content-Length 10", body)
		if f.SizeBytes != 10 || f.SHA256 != fsSHA([]byte("0123456789")) {
			t.Errorf("stored %+v, want the 10 bytes of Content-Length", f)
		}
		if resp, _ := fsReadResponse(t, c, br, 10*time.Second); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("the excess bytes as a request: HTTP %d, want 400", resp.StatusCode)
		}
		if got := fsIDs(fsList(t, d)); !slices.Equal(got, []string{f.FileID}) {
			t.Errorf("list %q, want only %s", got, f.FileID)
		}
		fsCall(t, d, "DELETE", "/v1/files/"+f.FileID, nil)
		nothingStored(t)
	})

	t.Run("Content-Length over the bound", func(t *testing.T) {
		// A Content-Length of 1 GiB over a max_file_bytes of 8 MiB: the
		// answer comes after 9 MiB of it, not after the whole.
		for _, hdr := range []string{fmt.Sprintf("Content-Length: %d", 1<<30), "Transfer-Encoding: chunked"} {
			c, br := fsRawConn(t, d)
			fmt.Fprintf(c, "POST /v1/files?name=huge.bin HTTP/1.1\r\nHost: jaild\r\n%s\r\n\r\n", hdr)
			go func() {
				chunk := fsDetBytes(14, 1<<20)
				for range 9 {
					if hdr[0] == 'T' {
						fmt.Fprintf(c, "%x\r\n", len(chunk))
					}
					if _, err := c.Write(chunk); err != nil {
						return
					}
					if hdr[0] == 'T' {
						fmt.Fprint(c, "\r\n")
					}
				}
			}()
			resp, body := fsReadResponse(t, c, br, 20*time.Second)
			fsWantError(t, hdr, resp.StatusCode, body, http.StatusRequestEntityTooLarge, "too_large", "body", "max_file_bytes")
			c.Close()
		}
		nothingStored(t)
	})

	t.Run("cut short", func(t *testing.T) {
		// The client goes away mid-body (chunked, and short of its
		// Content-Length): the temporary file that was being written goes
		// too.
		for _, hdr := range []string{"Transfer-Encoding: chunked", fmt.Sprintf("Content-Length: %d", 6<<20)} {
			c, _ := fsRawConn(t, d)
			fmt.Fprintf(c, "POST /v1/files?name=cut.bin HTTP/1.1\r\nHost: jaild\r\n%s\r\n\r\n", hdr)
			chunk := fsDetBytes(15, 1<<20)
			for range 3 {
				if hdr[0] == 'T' {
					fmt.Fprintf(c, "%x\r\n%s\r\n", len(chunk), chunk)
				} else {
					c.Write(chunk)
				}
			}
			waitFor(t, 5*time.Second, "the upload's temporary file", func() bool {
				return slices.ContainsFunc(fsStoreNames(t, d), func(n string) bool { return strings.HasPrefix(n, ".tmp-") })
			})
			c.Close()
			waitFor(t, 5*time.Second, "the cut upload's temporary file to go", func() bool { return len(fsStoreNames(t, d)) == 0 })
		}
		nothingStored(t)
	})

	t.Run("ids", func(t *testing.T) {
		for _, p := range []string{
			"/v1/files/..%2f..%2fetc", "/v1/files/..%2F..%2Fetc%2Fpasswd", "/v1/files/f-../x", "/v1/files/f-..%2fx",
			"/v1/files/%2e%2e", "/v1/files/../../etc/passwd", "/v1/files/f-" + strings.Repeat("A", 32), "/v1/files/f-" + strings.Repeat("0", 31),
			"/v1/files/f-" + randHex(16) + "%00", "/v1/files/f-..%2f..%2fetc%2fshadow/meta", "/v1/files/.meta",
		} {
			for _, method := range []string{"GET", "DELETE"} {
				resp, body := fsCall(t, d, method, p, nil)
				fsWantError(t, method+" "+p, resp.StatusCode, body, http.StatusNotFound, "not_found", "", "")
				if bytes.Contains(body, []byte("root:")) {
					t.Errorf("%s %s: %s", method, p, body)
				}
			}
		}
		nothingStored(t)
	})
}

// TestFilesKillDuringUpload: kill -9 of the daemon in the middle of a
// 512 MiB upload, then a restart on the same directory: the partial file
// is gone, the file acknowledged before is there whole.
func TestFilesKillDuringUpload(t *testing.T) {
	t.Parallel()
	d := fsStartDaemon(t, "min_free_mb = 0\n")
	kept := fsUpload(t, d, "kept.bin", fsDetBytes(16, 3<<20))

	pr, pw := io.Pipe()
	go func() {
		// 64 MiB of the 512, then nothing more until the daemon is gone.
		io.Copy(pw, fsDetReader(17, 64<<20))
	}()
	req, _ := http.NewRequest("POST", "http://jaild/v1/files?name=partial.bin", pr)
	req.ContentLength = 512 << 20
	done := make(chan error, 1)
	go func() {
		resp, err := d.Client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			err = fmt.Errorf("HTTP %d %s", resp.StatusCode, b)
		}
		done <- err
	}()
	var tmp string
	waitFor(t, 30*time.Second, "32 MiB of the upload in its temporary file", func() bool {
		for _, n := range fsStoreNames(t, d) {
			if st, err := os.Stat(filepath.Join(d.Dir, "files", n)); err == nil && strings.HasPrefix(n, ".tmp-") && st.Size() >= 32<<20 {
				tmp = n
				return true
			}
		}
		return false
	})
	fsKillAndRestart(t, d)
	pw.CloseWithError(errors.New("the daemon is gone"))
	if err := <-done; err == nil || strings.HasPrefix(err.Error(), "HTTP") {
		t.Errorf("the killed upload got an answer: %v", err)
	}

	if got := fsList(t, d); len(got) != 1 || !fsSameStored(got[0], kept) {
		t.Errorf("list after the restart %+v, want only %+v", got, kept)
	}
	if sum, n := fsDownload(t, d, kept.FileID); sum != kept.SHA256 || n != kept.SizeBytes {
		t.Errorf("the acknowledged file after the restart: %d bytes of sha256 %s, want %d of %s", n, sum, kept.SizeBytes, kept.SHA256)
	}
	fsCheckStoreHolds(t, d, kept.FileID)
	t.Logf("killed with %s of the upload on disk; after the restart the store holds %q", tmp, fsStoreNames(t, d))
}

// fsKillAndRestart kill -9s d's process and starts it again on the same
// configuration and directory. Nothing may fail between the two: a
// killed daemon's jails are swept only by its successor.
func fsKillAndRestart(t *testing.T, d *daemon) {
	t.Helper()
	if err := d.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Errorf("kill -9: %v", err)
	}
	<-d.Exited()
	t.Logf("after kill -9 the store holds %q", fsStoreNames(t, d))
	if err := d.Start(); err != nil {
		t.Fatalf("restart: %v", err)
	}
}

// TestFilesKillDuringStoredRun: kill -9 of the daemon while a run's eight
// 16 MiB outputs stream into the store, then a restart: every file the
// store lists is whole (its content has its sha256 and size), and nothing
// else is on its disk.
func TestFilesKillDuringStoredRun(t *testing.T) {
	t.Parallel()
	d := fsStartDaemon(t, "min_free_mb = 0\n")
	code := `import os
os.makedirs('out')
for i in range(8):
    with open(f'out/f{i}.bin', 'wb') as f:
        for _ in range(16):
            f.write(os.urandom(1 << 20))`
	body, _ := json.Marshal(api.ExecuteRequest{
		Code:          code,
		ReturnFiles:   []string{"out/*.bin"},
		ReturnFilesAs: "store",
		Limits:        &api.Limits{FileSizeMB: ptr(int64(256)), MemoryMB: ptr(int64(1024)), TimeoutMs: ptr(int64(60000))},
	})
	done := make(chan string, 1)
	go func() {
		resp, err := d.Client.Post("http://jaild/v1/execute", "application/json", bytes.NewReader(body))
		if err != nil {
			done <- ""
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- fmt.Sprintf("HTTP %d %.1000s", resp.StatusCode, b)
	}()
	// Kill while the outputs are being stored: three of them are in
	// already (stored, not yet answered), a fourth is being written.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Millisecond) {
		names := fsStoreNames(t, d)
		metas := 0
		for _, n := range names {
			if strings.HasSuffix(n, ".meta") {
				metas++
			}
		}
		if metas >= 3 && slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, ".tmp-") }) {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the run ended before its outputs were seen being stored: %s", r)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no output was stored within 60 s")
		}
	}
	fsKillAndRestart(t, d)
	if r := <-done; r != "" {
		t.Errorf("the killed run got an answer: %s", r)
	}

	got := fsList(t, d)
	var listed []string
	for _, f := range got {
		listed = append(listed, f.FileID)
		if sum, n := fsDownload(t, d, f.FileID); sum != f.SHA256 || n != f.SizeBytes || n != 16<<20 || !regexp.MustCompile(`^f[0-7]\.bin$`).MatchString(f.Name) {
			t.Errorf("stored file %+v after the restart: %d bytes of sha256 %s", f, n, sum)
		}
	}
	fsCheckStoreHolds(t, d, listed...)
	if len(got) < 3 || len(got) > 7 {
		t.Errorf("%d of the 8 outputs listed after the restart; three or more were stored before the kill, and one was not finished", len(got))
	}
	t.Logf("%d of the 8 outputs were stored whole before the kill", len(got))

	// The restarted daemon swept the killed run's jail.
	runs := filepath.Join(d.Dir, "run", "runs")
	waitFor(t, 30*time.Second, "the killed run's jail to be swept", func() bool {
		ents, _ := os.ReadDir(runs)
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		return len(ents) == 0 && !strings.Contains(string(mi), runs)
	})
	// And stores again.
	f := fsUpload(t, d, "after.txt", []byte("after the restart"))
	fsCheckStoreHolds(t, d, append(listed, f.FileID)...)
}

// TestFilesDisabled: with [files] enabled = false every endpoint of the
// store is 403, execute refuses file_id and return_files_as "store" with
// a 400 naming the field, /v1/info says so, and no directory is made.
func TestFilesDisabled(t *testing.T) {
	t.Parallel()
	d := fsStartDaemon(t, "enabled = false\n")
	for _, m := range []string{"POST /v1/files?name=a", "GET /v1/files", "GET /v1/files/f-" + strings.Repeat("0", 32), "GET /v1/files/f-" + strings.Repeat("0", 32) + "/meta", "DELETE /v1/files/f-" + strings.Repeat("0", 32)} {
		method, path, _ := strings.Cut(m, " ")
		resp, body := fsCall(t, d, method, path, strings.NewReader("x"))
		fsWantError(t, m, resp.StatusCode, body, http.StatusForbidden, "forbidden", "", "files.enabled")
	}
	for _, c := range []struct {
		req   string
		field string
	}{
		{`{"code":"print(1)","files":[{"path":"a","file_id":"f-` + strings.Repeat("0", 32) + `"}]}`, "files[0].file_id"},
		{`{"code":"print(1)","return_files":["a"],"return_files_as":"store"}`, "return_files_as"},
	} {
		resp, body := fsCall(t, d, "POST", "/v1/execute", strings.NewReader(c.req), "Content-Type", "application/json")
		fsWantError(t, c.req, resp.StatusCode, body, http.StatusBadRequest, "invalid_argument", c.field, "disabled")
	}
	var info api.Info
	if status, _ := d.call(t, "GET", "/v1/info", nil, &info); status != http.StatusOK || info.Files != (api.FilesInfo{}) {
		t.Errorf("info: HTTP %d, files %+v, want all zero", status, info.Files)
	}
	if _, err := os.Lstat(filepath.Join(d.Dir, "files")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a disabled store's directory: %v", err)
	}
}
