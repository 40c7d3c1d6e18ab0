package tests

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

// fsRequest sends a raw request to a session's files and returns the
// status, the headers and the body.
func fsRequest(t *testing.T, d *daemon, method, path string, body []byte, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, _ := http.NewRequest(method, "http://jaild"+path, rd)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

// A session's files from the API (issue 29), with a real jail: what the
// session wrote is listed and read, what the API writes the session reads
// as its own (its uid), directories and moves, ranges and ETags; and the
// hostile paths: links planted by the session (to /etc, to the host's
// view, to itself) are never followed, a FIFO is refused without
// blocking, a link is removed as a link, a write past the session's
// files limit is refused whole, another uid is 404, a running call 409;
// a paused session is restored for its files and keeps its state.
func TestSessionFiles(t *testing.T) {
	d := startDaemon(t, daemontest.Options{Config: "socket_mode = \"0666\"\n", Tune: func(c string) string {
		return setKeys(c, map[string]string{"daily_quota": "1000"}) + strings.Replace(sessionConfig, "on_idle = \"end\"\n", "", 1)
	}})
	s := newSession(t, d, api.SessionCreateRequest{})
	fs := "/v1/sessions/" + s.SessionID + "/fs"
	mustExec(t, d, s.SessionID, `
import os
open('report.txt', 'w').write('from the session\n')
os.makedirs('data/raw')
open('data/raw/x.csv', 'w').write('a,b\n1,2\n')
os.symlink('/etc', 'etc-link')
os.symlink('/proc/1/root', 'root-link')
os.symlink('report.txt', 'self-link')
os.mkfifo('pipe')
n = 42
`)

	// The listing: sorted, typed, links as links.
	var l api.FSListing
	status, _, body := fsRequest(t, d, "GET", fs+"/workspace", nil, nil)
	if status != 200 || json.Unmarshal(body, &l) != nil {
		t.Fatalf("GET %s/workspace: %d %s", fs, status, body)
	}
	var got []string
	for _, e := range l.Entries {
		got = append(got, e.Name+":"+e.Type)
	}
	if want := "data:dir etc-link:symlink pipe:other report.txt:file root-link:symlink self-link:symlink"; strings.Join(got, " ") != want {
		t.Errorf("listing %q, want %q", strings.Join(got, " "), want)
	}
	status, hdr, body := fsRequest(t, d, "GET", fs+"/workspace/report.txt", nil, nil)
	if status != 200 || string(body) != "from the session\n" || hdr.Get("ETag") == "" {
		t.Errorf("GET report.txt: %d %q ETag %q", status, body, hdr.Get("ETag"))
	}
	if status, _, body := fsRequest(t, d, "GET", fs+"/workspace/report.txt", nil, map[string]string{"Range": "bytes=5-7"}); status != 206 || string(body) != "the" {
		t.Errorf("a range: %d %q", status, body)
	}
	if status, _, _ := fsRequest(t, d, "GET", fs+"/workspace/report.txt", nil, map[string]string{"If-None-Match": hdr.Get("ETag")}); status != 304 {
		t.Errorf("If-None-Match: %d, want 304", status)
	}

	// Links planted by the session are not followed, a FIFO does not
	// block the daemon; every refusal is JSON naming path.
	for _, p := range []string{"/workspace/etc-link/passwd", "/workspace/etc-link", "/workspace/root-link/etc/shadow", "/workspace/self-link", "/workspace/pipe"} {
		start := time.Now()
		status, _, body := fsRequest(t, d, "GET", fs+p, nil, nil)
		var e api.ErrorBody
		if status != 409 || json.Unmarshal(body, &e) != nil || e.Error.Field != "path" || time.Since(start) > 5*time.Second {
			t.Errorf("GET %s: %d %s (after %s), want 409 naming path at once", p, status, body, time.Since(start))
		}
		if status, _, body := fsRequest(t, d, "PUT", fs+p, []byte("planted"), nil); status != 409 {
			t.Errorf("PUT %s: %d %s, want 409", p, status, body)
		}
	}
	for _, p := range []string{"/etc/passwd", "/workspace/../etc/passwd", "/proc/self/environ", "/opt/jaild/runner.py"} {
		if status, _, body := fsRequest(t, d, "GET", fs+strings.ReplaceAll(p, "/", "%2F")[3:], nil, nil); status != 404 && status != 400 {
			t.Errorf("GET %s: %d %s, want 404 or 400", p, status, body)
		}
	}

	// What the API writes is the session's own.
	if status, _, body := fsRequest(t, d, "PUT", fs+"/workspace/in/new.txt?parents=true", []byte("from the API"), nil); status != 201 {
		t.Fatalf("PUT in/new.txt: %d %s", status, body)
	}
	if status, _, body := fsRequest(t, d, "PUT", fs+"/workspace/report.txt", []byte("replaced"), nil); status != 200 {
		t.Errorf("PUT report.txt: %d %s", status, body)
	}
	if status, _, body := fsRequest(t, d, "POST", fs+"/workspace/out?op=mkdir", nil, nil); status != 201 {
		t.Errorf("mkdir: %d %s", status, body)
	}
	if status, _, body := fsRequest(t, d, "POST", fs+"/workspace/data/raw/x.csv?op=move&to=/tmp/x.csv", nil, nil); status != 200 {
		t.Errorf("move to /tmp: %d %s", status, body)
	}
	if status, _, body := fsRequest(t, d, "DELETE", fs+"/workspace/etc-link", nil, nil); status != 204 {
		t.Errorf("DELETE the link: %d %s", status, body)
	}
	r := mustExec(t, d, s.SessionID, `
st = os.stat('in/new.txt')
print(open('in/new.txt').read(), open('report.txt').read(), st.st_uid == os.getuid(), oct(st.st_mode & 0o777),
      os.path.isdir('out'), open('/tmp/x.csv').read().count(','), os.path.exists('data/raw/x.csv'),
      os.path.lexists('etc-link'), os.path.exists('/etc/passwd'), n)
`)
	if r.Status != "ok" || r.Stdout != "from the API replaced True 0o644 True 2 False False True 42\n" {
		t.Errorf("the session after the API's writes: %s %q %q", r.Status, r.Stdout, r.Stderr)
	}

	// The file store: a session's file stored, and a stored file copied in.
	var sf api.StoredFile
	status, _, body = fsRequest(t, d, "POST", fs+"/workspace/in/new.txt?op=store&name=kept.txt", nil, nil)
	if status != 201 || json.Unmarshal(body, &sf) != nil || sf.Name != "kept.txt" || sf.SizeBytes != int64(len("from the API")) {
		t.Errorf("op=store: %d %s", status, body)
	} else if status, _, body := fsRequest(t, d, "PUT", fs+"/tmp/copy.txt?from_file="+sf.FileID, nil, nil); status != 201 {
		t.Errorf("PUT from_file: %d %s", status, body)
	} else if r := mustExec(t, d, s.SessionID, "print(open('/tmp/copy.txt').read())"); r.Stdout != "from the API\n" {
		t.Errorf("the copy in the session: %q", r.Stdout)
	}

	// The session's tmpfs (128 MiB) refuses a write past it whole.
	status, _, body = fsRequest(t, d, "PUT", fs+"/workspace/big", bytes.Repeat([]byte("x"), 129<<20), nil)
	if status != 507 && status != 413 {
		t.Errorf("PUT past the files limit: %d %s, want 507 or 413", status, body)
	}
	if status, _, _ := fsRequest(t, d, "GET", fs+"/workspace/big", nil, nil); status != 404 {
		t.Errorf("the refused write left a file: %d", status)
	}

	// Another uid is 404, as for a session that does not exist.
	if status, _, body := curlAs(t, d.Socket, "GET", fs+"/workspace/report.txt", ""); status != 404 {
		t.Errorf("uid 65534's GET: %d %s", status, body)
	}

	// A paused session is restored for its files, and keeps its state.
	if code, _ := d.call(t, http.MethodPost, "/v1/sessions/"+s.SessionID+"/pause", nil, nil); code != http.StatusOK {
		t.Fatalf("pause: %d", code)
	}
	if status, _, body := fsRequest(t, d, "GET", fs+"/workspace/in/new.txt", nil, nil); status != 200 || string(body) != "from the API" {
		t.Errorf("GET of a paused session's file: %d %q", status, body)
	}
	if r := mustExec(t, d, s.SessionID, "n"); r.Result == nil || *r.Result != "42" {
		t.Errorf("the session after its files were read while paused: %+v", r)
	}

	// Not during a call.
	done := make(chan struct{})
	go func() {
		defer close(done)
		mustExec(t, d, s.SessionID, "import time; time.sleep(2)")
	}()
	time.Sleep(500 * time.Millisecond)
	if status, _, body := fsRequest(t, d, "GET", fs+"/workspace/report.txt", nil, nil); status != 409 {
		t.Errorf("GET during a call: %d %s, want 409", status, body)
	}
	<-done
}
