package servertest

import (
	"errors"
	"net"
	"net/http"
	"testing"

	"github.com/jaild/jaild/internal/tlsauth"
)

// ServeTLS serves the harness's API on a mutual-TLS listener on
// 127.0.0.1, as cmd/jaild does (Server.TLSServer with auth on a
// tls.NewListener of auth.TLSConfig()), and returns its address. tune,
// when set, changes the http.Server before it serves. The listener is
// closed when the test ends.
func (h *Harness) ServeTLS(t testing.TB, auth *tlsauth.Auth, tune func(*http.Server)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := h.Server.TLSServer(auth)
	if tune != nil {
		tune(hs)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := hs.Serve(h.Server.TLSListener(ln, auth)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve TLS: %v", err)
		}
	}()
	t.Cleanup(func() {
		_ = hs.Close()
		<-done
	})
	return ln.Addr().String()
}
