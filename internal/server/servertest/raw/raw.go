// Package raw serves a hand-written handler in place of jaild on a Unix
// socket: for the client-side tests that need what the real handlers
// never send (malformed or truncated bodies, unknown fields, error bodies
// of any shape, a server that hangs). Anything the real handlers can say
// is better asked of servertest, which serves them over a fake engine.
package raw

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
)

// SocketDir returns a short temporary directory, removed when the test
// ends: a Unix socket path has at most 107 bytes, which t.TempDir() can
// exceed.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "jt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Serve serves h on a new Unix socket until the test ends and returns the
// socket's path.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(SocketDir(t), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return sock
}

// JSON answers every request with status, headers and body as JSON.
func JSON(status int, headers map[string]string, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for k, v := range headers {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}
