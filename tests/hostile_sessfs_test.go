package tests

// A session's files from the API (issue 29): the daemon reads and writes
// a jail's tmpfs on the host, so what the session planted there is
// hostile: links out of it, a FIFO, and another uid after the files.

import (
	"net/http"
	"strings"
	"time"

	"testing"

	"github.com/jaild/jaild/internal/api"
)

func sessFSCases() []hcase {
	return []hcase{
		{id: "S57", cat: catSession, title: "a session plants links (to /etc, to /proc/1/root, to the host's /proc/self/root through its own /proc) and a FIFO in /workspace, then the API reads, writes, lists and moves through them",
			expect: "every read and write through a link is 409 naming path, nothing outside the session is read or written; the listing shows the links as links; a FIFO is refused at once (the daemon does not wait on it); removing a link removes only the link",
			run:    runSessionFSLinks},
		{id: "S58", cat: catSession, title: "uid 65534 after root's session's files: GET, PUT, DELETE and POST on /v1/sessions/{id}/fs/...",
			expect: "every request is 404 as for a session that never existed; root's files are unchanged",
			run:    runSessionFSOtherUID},
	}
}

func runSessionFSLinks(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := pauseSession(t, ss, "import os\nos.symlink('/etc', 'etc')\nos.symlink('/proc/1/root', 'root1')\nos.symlink('/proc/self/root', 'selfroot')\nos.mkfifo('fifo')\nopen('mine.txt', 'w').write('mine')")
	fs := "/v1/sessions/" + s.id + "/fs/workspace/"
	refused := 0
	for _, p := range []string{"etc/passwd", "etc/shadow", "root1/etc/hostname", "selfroot/etc/hostname", "etc", "fifo"} {
		for _, m := range []string{"GET", "PUT"} {
			var body []byte
			if m == "PUT" {
				body = []byte("planted")
			}
			start := time.Now()
			status, _, raw := fsRequest(t, h.d, m, fs+p, body, nil)
			e := apiError(t, raw)
			if status != http.StatusConflict || e.Error.Field != "path" || time.Since(start) > 5*time.Second {
				t.Errorf("%s %s: HTTP %d %s after %s", m, p, status, raw, time.Since(start))
				continue
			}
			refused++
		}
	}
	status, _, raw := fsRequest(t, h.d, "POST", fs+"mine.txt?op=move&to=/workspace/etc/moved", nil, nil)
	if status != http.StatusConflict {
		t.Errorf("a move through a link: HTTP %d %s", status, raw)
	}
	var l api.FSListing
	status, _, raw = fsRequest(t, h.d, "GET", strings.TrimSuffix(fs, "/"), nil, nil)
	if status != http.StatusOK || strictJSON(raw, &l) != nil {
		t.Fatalf("the listing: HTTP %d %s", status, raw)
	}
	links := 0
	for _, e := range l.Entries {
		if e.Type == "symlink" {
			links++
		}
	}
	if links != 3 {
		t.Errorf("the listing shows %d links, want 3: %s", links, raw)
	}
	if status, _, raw := fsRequest(t, h.d, "DELETE", fs+"etc", nil, nil); status != http.StatusNoContent {
		t.Errorf("DELETE of the link: HTTP %d %s", status, raw)
	}
	r := ss.exec(s, code("print(os.path.lexists('etc'), os.path.exists('/etc/passwd'), open('mine.txt').read())"))
	if r.Stdout != "False True mine\n" {
		t.Errorf("after the requests, the session sees %q", r.Stdout)
	}
	return "every read and write through a link or of the FIFO was 409 naming path, at once; the move through a link 409; the listing showed 3 links; DELETE removed the link only"
}

func runSessionFSOtherUID(t *testing.T, h *hostile) string {
	ss := h.sessions(t)
	defer ss.closeAll()
	s := pauseSession(t, ss, "open('secret.txt', 'w').write('root only')")
	fs := "/v1/sessions/" + s.id + "/fs/workspace/secret.txt"
	for _, r := range []struct{ method, path, body string }{
		{"GET", fs, ""}, {"PUT", fs, "overwritten"}, {"DELETE", fs, ""}, {"POST", fs + "?op=move&to=/tmp/x", ""}, {"POST", fs + "?op=store", ""},
		{"GET", "/v1/sessions/" + s.id + "/fs/workspace", ""},
	} {
		if status, raw := ss.request(true, r.method, r.path, r.body); status != http.StatusNotFound {
			t.Errorf("uid 65534 %s %s: HTTP %d %s", r.method, r.path, status, raw)
		}
	}
	if r := ss.exec(s, code("print(open('secret.txt').read())")); r.Stdout != "root only\n" {
		t.Errorf("root's file after uid 65534's requests: %q", r.Stdout)
	}
	return "every request of uid 65534 404; root's file unchanged"
}
