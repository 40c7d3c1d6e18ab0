package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/server"
	"github.com/jaild/jaild/internal/server/servertest"
)

type reply struct {
	status int
	header http.Header
	body   []byte
}

// errBody decodes an error reply, failing the test if it is not the API's
// error shape.
func (r reply) errBody(t *testing.T) api.ErrorDetail {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal(r.body, &eb); err != nil || eb.Error.Type == "" || eb.Error.Message == "" || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("HTTP %d with a body that is not the error shape: %s", r.status, r.body)
	}
	return eb.Error
}

func (r reply) stored(t *testing.T) api.StoredFile {
	t.Helper()
	var f api.StoredFile
	if err := json.Unmarshal(r.body, &f); err != nil || f.FileID == "" {
		t.Fatalf("HTTP %d: not a stored file: %s", r.status, r.body)
	}
	return f
}

// send sends one request over the harness's socket.
func send(t *testing.T, h *servertest.Harness, method, path string, hdr map[string]string, body io.Reader) reply {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.Socket)
	}}}
	req, err := http.NewRequest(method, "http://jaild"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// sendAs serves one request in process as another caller.
func sendAs(h *servertest.Harness, who peer.Caller, method, path string, hdr map[string]string, body string) reply {
	req := httptest.NewRequest(method, "http://jaild"+path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	server.WithCaller(h.Server.Handler(), who).ServeHTTP(rec, req)
	return reply{rec.Code, rec.Header(), rec.Body.Bytes()}
}

func upload(t *testing.T, h *servertest.Harness, name, content string) api.StoredFile {
	t.Helper()
	r := send(t, h, "POST", "/v1/files?name="+url.QueryEscape(name), map[string]string{"Content-Type": "text/csv"}, strings.NewReader(content))
	if r.status != http.StatusCreated {
		t.Fatalf("upload %s: HTTP %d %s", name, r.status, r.body)
	}
	return r.stored(t)
}

func hexSum(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func TestFileRoutes(t *testing.T) {
	h := harness(t, nil)
	content := "a,b\n1,2\n3,4\n"
	r := send(t, h, "POST", "/v1/files?name=data.csv", nil, strings.NewReader(content))
	if r.status != http.StatusCreated {
		t.Fatalf("upload: HTTP %d %s", r.status, r.body)
	}
	f := r.stored(t)
	if f.Name != "data.csv" || f.SizeBytes != int64(len(content)) || f.SHA256 != hexSum(content) || f.UID != user.UID ||
		f.ExpiresAt.Sub(f.CreatedAt) != 24*time.Hour || r.header.Get("Location") != "/v1/files/"+f.FileID {
		t.Errorf("stored %+v, Location %q", f, r.header.Get("Location"))
	}

	r = send(t, h, "GET", "/v1/files", nil, nil)
	var list api.FileList
	if err := json.Unmarshal(r.body, &list); err != nil || r.status != 200 || len(list.Files) != 1 || list.Files[0] != f {
		t.Errorf("list: HTTP %d %s", r.status, r.body)
	}
	r = send(t, h, "GET", "/v1/files/"+f.FileID+"/meta", nil, nil)
	if r.status != 200 || r.stored(t) != f {
		t.Errorf("meta: HTTP %d %s", r.status, r.body)
	}

	r = send(t, h, "GET", "/v1/files/"+f.FileID, nil, nil)
	if r.status != 200 || string(r.body) != content || r.header.Get("Content-Length") != "12" ||
		r.header.Get("Content-Type") != "application/octet-stream" || r.header.Get("ETag") != `"`+f.SHA256+`"` ||
		r.header.Get("Content-Disposition") != `attachment; filename="data.csv"; filename*=UTF-8''data.csv` ||
		r.header.Get("Accept-Ranges") != "bytes" {
		t.Errorf("download: HTTP %d %q %v", r.status, r.body, r.header)
	}
	r = send(t, h, "HEAD", "/v1/files/"+f.FileID, nil, nil)
	if r.status != 200 || len(r.body) != 0 || r.header.Get("Content-Length") != "12" || r.header.Get("ETag") == "" {
		t.Errorf("head: HTTP %d %v", r.status, r.header)
	}
	r = send(t, h, "GET", "/v1/files/"+f.FileID, map[string]string{"Range": "bytes=4-6"}, nil)
	if r.status != http.StatusPartialContent || string(r.body) != "1,2" || r.header.Get("Content-Range") != "bytes 4-6/12" {
		t.Errorf("range: HTTP %d %q %v", r.status, r.body, r.header)
	}
	r = send(t, h, "GET", "/v1/files/"+f.FileID, map[string]string{"Range": "bytes=-4"}, nil)
	if r.status != http.StatusPartialContent || string(r.body) != "3,4\n" {
		t.Errorf("suffix range: HTTP %d %q", r.status, r.body)
	}
	r = send(t, h, "GET", "/v1/files/"+f.FileID, map[string]string{"Range": "bytes=100-"}, nil)
	if e := r.errBody(t); r.status != http.StatusRequestedRangeNotSatisfiable || e.Type != "range_not_satisfiable" ||
		!strings.Contains(e.Message, "12 bytes") || r.header.Get("Content-Range") != "bytes */12" || r.header.Get("Content-Disposition") != "" {
		t.Errorf("bad range: HTTP %d %+v %v", r.status, e, r.header)
	}
	r = send(t, h, "GET", "/v1/files/"+f.FileID, map[string]string{"If-None-Match": `"` + f.SHA256 + `"`}, nil)
	if r.status != http.StatusNotModified || len(r.body) != 0 {
		t.Errorf("If-None-Match: HTTP %d", r.status)
	}

	for _, c := range []struct{ method, path, allow string }{
		{"PUT", "/v1/files", "GET, HEAD, POST"},
		{"DELETE", "/v1/files", "GET, HEAD, POST"},
		{"POST", "/v1/files/" + f.FileID, "DELETE, GET, HEAD"},
		{"PUT", "/v1/files/" + f.FileID, "DELETE, GET, HEAD"},
		{"DELETE", "/v1/files/" + f.FileID + "/meta", "GET, HEAD"},
	} {
		r := send(t, h, c.method, c.path, nil, nil)
		if e := r.errBody(t); r.status != 405 || e.Type != "method_not_allowed" || r.header.Get("Allow") != c.allow {
			t.Errorf("%s %s: HTTP %d %+v Allow %q", c.method, c.path, r.status, e, r.header.Get("Allow"))
		}
	}

	r = send(t, h, "DELETE", "/v1/files/"+f.FileID, nil, nil)
	if r.status != 200 || r.stored(t) != f {
		t.Errorf("delete: HTTP %d %s", r.status, r.body)
	}
	for _, p := range []string{"/v1/files/" + f.FileID, "/v1/files/" + f.FileID + "/meta"} {
		if r := send(t, h, "GET", p, nil, nil); r.status != 404 || r.errBody(t).Type != "not_found" {
			t.Errorf("GET %s after delete: HTTP %d", p, r.status)
		}
	}
	if r := send(t, h, "DELETE", "/v1/files/"+f.FileID, nil, nil); r.status != 404 {
		t.Errorf("second delete: HTTP %d", r.status)
	}
	log := h.Log()
	if !strings.Contains(log, `"op":"file_upload"`) || !strings.Contains(log, `"op":"file_delete"`) || !strings.Contains(log, `"file_id":"`+f.FileID+`"`) {
		t.Errorf("no audit lines for the upload and delete:\n%s", log)
	}
}

func TestFileIDsNeverReveal(t *testing.T) {
	h := harness(t, nil)
	for _, p := range []string{"/v1/files/f-0123456789abcdef0123456789abcdef", "/v1/files/x", "/v1/files/..%2f..%2fetc%2fpasswd", "/v1/files/.tmp-0123456789abcdef", "/v1/files/F-0123456789ABCDEF0123456789ABCDEF/meta"} {
		r := send(t, h, "GET", p, nil, nil)
		if e := r.errBody(t); r.status != 404 || strings.Contains(e.Message, "/") && !strings.Contains(e.Message, "/v1/") {
			t.Errorf("GET %s: HTTP %d %+v", p, r.status, e)
		}
	}
}

func multipartBody(t *testing.T, parts ...[3]string) (string, *bytes.Buffer) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, p := range parts { // field name, filename ("" for a form field), content
		var w io.Writer
		var err error
		if p[1] == "" {
			w, err = mw.CreateFormField(p[0])
		} else {
			w, err = mw.CreateFormFile(p[0], p[1])
		}
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, p[2])
	}
	mw.Close()
	return mw.FormDataContentType(), &b
}

func TestFileUploadMultipart(t *testing.T) {
	h := harness(t, nil)
	ct, body := multipartBody(t, [3]string{"note", "", "a form field first"}, [3]string{"file", "report.csv", "x,y\n"}, [3]string{"file2", "other", "ignored"})
	r := send(t, h, "POST", "/v1/files", map[string]string{"Content-Type": ct}, body)
	if r.status != 201 {
		t.Fatalf("multipart: HTTP %d %s", r.status, r.body)
	}
	f := r.stored(t)
	if f.Name != "report.csv" || f.SizeBytes != 4 || f.SHA256 != hexSum("x,y\n") {
		t.Errorf("stored %+v", f)
	}
	if got := send(t, h, "GET", "/v1/files/"+f.FileID, nil, nil); string(got.body) != "x,y\n" {
		t.Errorf("content %q", got.body)
	}
	// ?name= overrides the part's filename.
	ct, body = multipartBody(t, [3]string{"file", "report.csv", "z"})
	if r := send(t, h, "POST", "/v1/files?name=renamed.txt", map[string]string{"Content-Type": ct}, body); r.status != 201 || r.stored(t).Name != "renamed.txt" {
		t.Errorf("?name= with multipart: HTTP %d %s", r.status, r.body)
	}

	for _, c := range []struct {
		name, ctype, body string
		status            int
		field             string
	}{
		{"no file part", "", "", 400, "body"},
		{"no boundary", "multipart/form-data", "x", 400, "body"},
		{"multipart/mixed", "multipart/mixed; boundary=x", "x", 415, ""},
		{"bad media type", "multipart/form-data; boundary=", "x", 415, ""},
		{"truncated", "", "truncated", 400, "body"},
		{"bad filename", "", "dotdot", 400, "name"},
		{"garbage", "multipart/form-data; boundary=zz", "not multipart at all", 400, "body"},
	} {
		ct, b := c.ctype, bytes.NewBufferString(c.body)
		switch c.name {
		case "no file part":
			ct, b = multipartBody(t, [3]string{"a", "", "b"})
		case "truncated":
			ct, b = multipartBody(t, [3]string{"file", "t.bin", strings.Repeat("y", 100000)})
			b.Truncate(b.Len() - 60) // the closing boundary and a bit of content lost
		case "bad filename":
			ct, b = multipartBody(t, [3]string{"file", "..", "x"})
		}
		r := send(t, h, "POST", "/v1/files", map[string]string{"Content-Type": ct}, b)
		if e := r.errBody(t); r.status != c.status || e.Field != c.field {
			t.Errorf("%s: HTTP %d %+v, want %d field %q", c.name, r.status, e, c.status, c.field)
		}
	}
	var list api.FileList
	json.Unmarshal(send(t, h, "GET", "/v1/files", nil, nil).body, &list)
	if len(list.Files) != 2 {
		t.Errorf("refused uploads stored something: %+v", list.Files)
	}
}

func TestFileNames(t *testing.T) {
	h := harness(t, nil)
	for _, c := range []struct{ query, field string }{
		{"", "name"},
		{"?name=", "name"},
		{"?name=..", "name"},
		{"?name=a%2Fb", "name"},
		{"?name=a%00b", "name"},
		{"?name=a%0Ab", "name"},
		{"?name=%E2%80%AEtxt.exe", "name"},
		{"?name=%FF", "name"},
		{"?name=" + strings.Repeat("x", 256), "name"},
		{"?name=a&name=b", "name"},
		{"?name=a&other=1", "query"},
		{"?name=a;b", "query"},
	} {
		r := send(t, h, "POST", "/v1/files"+c.query, nil, strings.NewReader("x"))
		if e := r.errBody(t); r.status != 400 || e.Field != c.field {
			t.Errorf("%q: HTTP %d %+v, want 400 field %s", c.query, r.status, e, c.field)
		}
	}
	f := upload(t, h, "données 🙂 \"q\".csv", "x")
	r := send(t, h, "GET", "/v1/files/"+f.FileID, nil, nil)
	if cd := r.header.Get("Content-Disposition"); cd != `attachment; filename="donn__es ____ _q_.csv"; filename*=UTF-8''donn%C3%A9es%20%F0%9F%99%82%20%22q%22.csv` {
		t.Errorf("Content-Disposition %s", cd)
	}
}

func TestFileOwnership(t *testing.T) {
	h := harness(t, nil)
	mine := upload(t, h, "mine", "mine")
	other := peer.Caller{UID: 2000, PID: 1}
	admin := peer.Caller{UID: 0, PID: 1, Admin: true}
	theirs := sendAs(h, other, "POST", "/v1/files?name=theirs", nil, "theirs").stored(t)
	for _, p := range []string{"/v1/files/" + mine.FileID, "/v1/files/" + mine.FileID + "/meta"} {
		if r := sendAs(h, other, "GET", p, nil, ""); r.status != 404 {
			t.Errorf("another uid's GET %s: HTTP %d", p, r.status)
		}
	}
	if r := sendAs(h, other, "DELETE", "/v1/files/"+mine.FileID, nil, ""); r.status != 404 {
		t.Errorf("another uid's DELETE: HTTP %d", r.status)
	}
	var list api.FileList
	json.Unmarshal(sendAs(h, other, "GET", "/v1/files", nil, "").body, &list)
	if len(list.Files) != 1 || list.Files[0].FileID != theirs.FileID {
		t.Errorf("other's list %+v", list)
	}
	json.Unmarshal(sendAs(h, admin, "GET", "/v1/files", nil, "").body, &list)
	if len(list.Files) != 2 {
		t.Errorf("admin's list %+v", list)
	}
	if r := sendAs(h, admin, "GET", "/v1/files/"+mine.FileID, nil, ""); r.status != 200 || string(r.body) != "mine" {
		t.Errorf("admin's GET: HTTP %d %q", r.status, r.body)
	}
	if r := sendAs(h, admin, "DELETE", "/v1/files/"+theirs.FileID, nil, ""); r.status != 200 || r.stored(t).UID != other.UID {
		t.Errorf("admin's DELETE: HTTP %d %s", r.status, r.body)
	}
}

func TestFileBounds(t *testing.T) {
	h := harness(t, func(c *config.Config) {
		c.Files.MaxFileMB, c.Files.MaxMBPerUID, c.Files.MaxFilesPerUID, c.Files.MaxTotalMB = 1, 2, 3, 3
		c.MaxBodyBytes = 1024 // JSON only: uploads are not bound by it
	})
	mib := strings.Repeat("x", 1<<20)
	post := func(who *peer.Caller, content string) reply {
		if who == nil {
			return send(t, h, "POST", "/v1/files?name=f", nil, strings.NewReader(content))
		}
		return sendAs(h, *who, "POST", "/v1/files?name=f", nil, content)
	}
	r := post(nil, mib+"x")
	if e := r.errBody(t); r.status != 413 || e.Type != "too_large" || e.Field != "body" || !strings.Contains(e.Message, "max_file_bytes (1048576 bytes)") {
		t.Errorf("over max_file_bytes: HTTP %d %+v", r.status, e)
	}
	first := post(nil, mib).stored(t)
	post(nil, mib).stored(t)
	r = post(nil, "x")
	if e := r.errBody(t); r.status != 413 || !strings.Contains(e.Message, "max_bytes_per_uid (2097152 bytes") {
		t.Errorf("over max_bytes_per_uid: HTTP %d %+v", r.status, e)
	}
	other := peer.Caller{UID: 2000}
	post(&other, mib).stored(t)
	r = post(&other, "x")
	if e := r.errBody(t); r.status != 507 || e.Type != "insufficient_storage" || !strings.Contains(e.Message, "max_total_bytes") {
		t.Errorf("over max_total_bytes: HTTP %d %+v", r.status, e)
	}
	send(t, h, "DELETE", "/v1/files/"+first.FileID, nil, nil)
	post(nil, "a").stored(t)
	post(nil, "b").stored(t)
	r = post(nil, "c")
	if e := r.errBody(t); r.status != 413 || !strings.Contains(e.Message, "max_files_per_uid (3)") {
		t.Errorf("over max_files_per_uid: HTTP %d %+v", r.status, e)
	}
	info, err := h.Client.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if fi := info.Files; !fi.Enabled || fi.MaxFileBytes != 1<<20 || fi.MaxBytesPerUID != 2<<20 || fi.MaxFilesPerUID != 3 || fi.MaxTotalBytes != 3<<20 ||
		fi.TTLS != 86400 || fi.UsedBytes != 2<<20+2 || fi.CallerBytes != 1<<20+2 || fi.CallerFiles != 3 || fi.MinFreeBytes != 0 {
		t.Errorf("info.files %+v", fi)
	}

	full := harness(t, func(c *config.Config) {
		c.Files.Dir = t.TempDir() + "/files"
		c.Files.MinFreeMB = 1 << 40
	})
	r = send(t, full, "POST", "/v1/files?name=f", nil, strings.NewReader("x"))
	if e := r.errBody(t); r.status != 507 || !strings.Contains(e.Message, "min_free_mb") {
		t.Errorf("disk below min_free_mb: HTTP %d %+v", r.status, e)
	}
}

func TestFilesDisabled(t *testing.T) {
	h := harness(t, func(c *config.Config) { c.Files.Enabled = false })
	for _, c := range []struct{ method, path string }{
		{"POST", "/v1/files?name=x"}, {"GET", "/v1/files"}, {"GET", "/v1/files/f-0123456789abcdef0123456789abcdef"},
		{"GET", "/v1/files/f-0123456789abcdef0123456789abcdef/meta"}, {"DELETE", "/v1/files/f-0123456789abcdef0123456789abcdef"},
	} {
		r := send(t, h, c.method, c.path, nil, strings.NewReader("x"))
		if e := r.errBody(t); r.status != 403 || !strings.Contains(e.Message, "files.enabled") {
			t.Errorf("%s %s: HTTP %d %+v", c.method, c.path, r.status, e)
		}
	}
	info, err := h.Client.Info(t.Context())
	if err != nil || info.Files.Enabled || info.Files.MaxFileBytes != 0 {
		t.Errorf("info.files %+v %v", info.Files, err)
	}
	if h.Server.FileStore() != nil {
		t.Error("a store without files.enabled")
	}
}

// slowBody gives n bytes in chunks, pausing between them.
type slowBody struct {
	left  int
	pause time.Duration
}

func (b *slowBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.EOF
	}
	time.Sleep(b.pause)
	n := min(len(p), b.left, 64<<10)
	for i := range n {
		p[i] = 'z'
	}
	b.left -= n
	return n, nil
}

// read_timeout bounds a pause in a transfer, not the whole of it. The
// pauses are 20 times shorter than read_timeout, and a transfer lasts
// three times as long: a loaded machine (CI runs test packages side by
// side) delays a pause by less than that.
func TestFileTransfersOutlastReadTimeout(t *testing.T) {
	h := harness(t, func(c *config.Config) { c.ReadTimeout.Duration = 800 * time.Millisecond })
	const size = 4 << 20
	r := send(t, h, "POST", "/v1/files?name=slow", nil, &slowBody{left: size, pause: 40 * time.Millisecond}) // 64 chunks: 2.6 s
	if r.status != 201 {
		t.Fatalf("slow upload: HTTP %d %s", r.status, r.body)
	}
	f := r.stored(t)
	if f.SizeBytes != size || f.SHA256 != hexSum(strings.Repeat("z", size)) {
		t.Fatalf("stored %+v", f)
	}
	// A slow reader of a download: 2.6 s as well.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.Socket)
	}}}
	resp, err := hc.Get("http://jaild/v1/files/" + f.FileID)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got := 0
	buf := make([]byte, 64<<10)
	for {
		time.Sleep(40 * time.Millisecond)
		n, err := io.ReadFull(resp.Body, buf)
		got += n
		if err != nil {
			break
		}
	}
	if got != size {
		t.Errorf("slow download: %d of %d bytes", got, size)
	}
	// A pause longer than read_timeout ends an upload, and stores nothing.
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("partial"))
		time.Sleep(2500 * time.Millisecond)
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}()
	req, _ := http.NewRequest("POST", "http://jaild/v1/files?name=stalled", pr)
	if resp, err := hc.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 201 {
			t.Error("a stalled upload was stored")
		}
	}
	if _, n, _ := h.Server.FileStore().Usage(user.UID); n != 1 {
		t.Errorf("%d files stored, want 1", n)
	}
}

// A transfer's deadlines do not outlive it: the next request on the same
// connection has none of them.
func TestFileDeadlinesEndWithTheTransfer(t *testing.T) {
	h := harness(t, func(c *config.Config) { c.ReadTimeout.Duration = 300 * time.Millisecond })
	f := upload(t, h, "f", "content")
	h.Engine.RunFunc = func(context.Context, *spec.Request) (*spec.Result, error) {
		time.Sleep(700 * time.Millisecond)
		return &spec.Result{Status: spec.StatusOK}, nil
	}
	hc := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", h.Socket)
	}}}
	for _, req := range []func() (*http.Response, error){
		func() (*http.Response, error) { return hc.Get("http://jaild/v1/files/" + f.FileID) },
		func() (*http.Response, error) {
			return hc.Post("http://jaild/v1/files?name=g", "", strings.NewReader("g"))
		},
	} {
		resp, err := req()
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		resp, err = hc.Post("http://jaild/v1/execute", "application/json", strings.NewReader(`{"code":"1"}`))
		if err != nil {
			t.Fatalf("execute after a transfer on the same connection: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("execute after a transfer: HTTP %d", resp.StatusCode)
		}
	}
}
