package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/loopback"
)

// Path is where the Streamable HTTP endpoint is served.
const Path = "/mcp"

// ErrNotLoopback is returned by Listen for an address that is not a
// loopback one when remote clients are not allowed.
var ErrNotLoopback = loopback.ErrNotLoopback

// Listen listens on addr (HOST:PORT; port 0 picks a free one) for
// ServeHTTP. Whoever reaches it with the token runs code as its caller of
// the daemon, so unless allowRemote the host must be a loopback address
// or "localhost", and the address bound must be one too; otherwise the
// error wraps ErrNotLoopback (see loopback.Listen).
func Listen(addr string, allowRemote bool) (net.Listener, error) {
	return loopback.Listen(addr, allowRemote)
}

// Handler returns the Streamable HTTP endpoint at Path; other paths are
// 404. Every request, whatever its path and method, must carry token as a
// bearer credential (Authorization: Bearer TOKEN, compared in constant
// time); any other is answered 401 with WWW-Authenticate: Bearer and a
// JSON-RPC error, before anything else is looked at. The zero token lets
// nothing through. MCP sessions are stateful (Mcp-Session-Id); the daemon sessions
// opened through one are deleted when it closes (the client's DELETE).
// An MCP session whose client vanished without a DELETE stays open, and
// its daemon sessions end at their idle timeout. The SDK refuses a request
// that reached a loopback address with a Host header that is not a
// loopback name (DNS rebinding), and a browser's cross-origin POST or
// DELETE is refused as well; both with 403. A request whose connection
// drops cancels its call, and so the run in the daemon, where the
// protocol version ties calls to requests (2026-07-28 and later).
func (s *Server) Handler(token loopback.Token) http.Handler {
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.mcp },
		&sdk.StreamableHTTPOptions{MaxRequestBodyBytes: maxMessageBytes, PropagateRequestCancellation: true})
	mux := http.NewServeMux()
	mux.Handle(Path, http.NewCrossOriginProtection().Handler(h))
	return requireToken(token, mux)
}

// requireToken lets through the requests that carry token as a bearer
// credential, and answers every other 401 (RFC 6750): with
// error="invalid_token" when a bearer credential was sent but is not the
// token. The body is a JSON-RPC error with no id, which MCP clients
// report as it is.
func requireToken(token loopback.Token, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, isBearer := bearer(r.Header.Get("Authorization"))
		if isBearer && token.Equal(got) {
			next.ServeHTTP(w, r)
			return
		}
		challenge, msg := `Bearer realm="jailctl mcp"`, "no token: send the token jailctl mcp printed at its start as Authorization: Bearer TOKEN"
		if isBearer {
			challenge, msg = `Bearer realm="jailctl mcp", error="invalid_token"`, "wrong token: send the token jailctl mcp printed at its start as Authorization: Bearer TOKEN"
		}
		w.Header().Set("WWW-Authenticate", challenge)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]any{
			"jsonrpc": "2.0", "id": nil,
			"error": map[string]any{"code": codeUnauthorized, "message": msg},
		})
	})
}

// codeUnauthorized is the JSON-RPC error code of a refused credential:
// one of the server errors JSON-RPC reserves (-32000 to -32099) that the
// MCP specification and SDKs give no other meaning.
const codeUnauthorized = -32010

// bearer returns the credential of an Authorization header of the Bearer
// scheme (whose name is case-insensitive), and whether it was one.
func bearer(auth string) (string, bool) {
	scheme, cred, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(cred), true
}

// ServeHTTP serves Handler(token) on l until ctx is done (nil) or serving
// fails.
// Requests in flight get a second to finish; open event streams are then
// closed. Then it ends the daemon sessions opened through it, waiting at
// most EndTimeout; sessions it could not end make an error that wraps
// ErrSessionsLeft. A Server serves once: later calls to open_session are
// refused.
func (s *Server) ServeHTTP(ctx context.Context, l net.Listener, token loopback.Token) error {
	srv := &http.Server{Handler: s.Handler(token), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served:
		return errors.Join(fmt.Errorf("serve MCP over HTTP: %w", err), s.owned.endAll(ctx))
	case <-ctx.Done():
	}
	grace, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := srv.Shutdown(grace); err != nil {
		srv.Close()
	}
	return s.owned.endAll(ctx)
}
