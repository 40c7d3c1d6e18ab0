package client

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
)

// Error is an error response from the daemon. It unwraps to the
// *api.Error rebuilt by api.FromWire, and so to its class:
// errors.Is(err, errdefs.ErrBusy) and errors.As(err, &apiErr) both work.
type Error struct {
	Err *api.Error
	// RetryAfter is the daemon's Retry-After (sent with 429 and 503);
	// zero when it sent none.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("%s (retry after %s)", e.Err.Message, e.RetryAfter)
	}
	return e.Err.Message
}

// Unwrap returns the *api.Error.
func (e *Error) Unwrap() error { return e.Err }

// responseError reads a non-2xx response into an *Error. A body that is
// not the api.ErrorBody shape still yields an error of the internal class
// that names the HTTP status.
func responseError(resp *http.Response) error {
	var body api.ErrorBody
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	if err != nil || json.Unmarshal(raw, &body) != nil || (body.Error.Type == "" && body.Error.Message == "") {
		body.Error = api.ErrorDetail{
			Message: fmt.Sprintf("jaild answered %q with no valid error body", resp.Status),
		}
	}
	return wireError(resp.StatusCode, body.Error, retryAfter(resp.Header.Get("Retry-After"), time.Now()))
}

// streamError is the *Error of a streamed request's error event: the
// error the same failure gives as a response, with the status its class
// has (the stream's own status was 200).
func streamError(body api.ErrorDetail) error {
	status, _ := errdefs.Classify(errdefs.FromName(body.Type))
	if body.Type == "" && body.Message == "" {
		body.Message = "jaild ended the stream with an error event with no valid error body"
	}
	return wireError(status, body, 0)
}

func wireError(status int, body api.ErrorDetail, retry time.Duration) *Error {
	var apiErr *api.Error
	if !errors.As(api.FromWire(status, body), &apiErr) {
		// FromWire always returns *api.Error; this keeps a change of
		// that contract from becoming a nil dereference.
		apiErr = &api.Error{Class: errdefs.ErrInternal, Status: status, Message: body.Message}
	}
	return &Error{Err: apiErr, RetryAfter: retry}
}

// retryAfter parses a Retry-After value: delay-seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > 24*3600 {
			n = 24 * 3600
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now).Round(time.Second); d > 0 {
			return d
		}
	}
	return 0
}

// ConnectError is returned when the daemon cannot be reached: its socket
// cannot be dialed, or its TLS listener cannot be dialed, fails the TLS
// handshake or refuses the client's certificate. It unwraps to the dial,
// handshake or alert error, so errors.Is(err, syscall.ENOENT) and
// errors.As(err, &x509.UnknownAuthorityError{}) work.
type ConnectError struct {
	Socket string // the socket's path; "" for a TLS listener
	Host   string // the TLS listener's URL (https://HOST:PORT); "" for a socket
	Err    error
}

func (e *ConnectError) Error() string {
	reason := e.Err.Error()
	var errno syscall.Errno
	if errors.As(e.Err, &errno) {
		reason = errno.Error()
	}
	at := e.Socket
	if e.Host != "" {
		at = e.Host
	}
	return fmt.Sprintf("cannot connect to jaild at %s: %s (%s)", at, reason, e.hint())
}

// Unwrap returns the dial error.
func (e *ConnectError) Unwrap() error { return e.Err }

func (e *ConnectError) hint() string {
	if e.Host != "" {
		return e.tlsHint()
	}
	const other = "set JAILD_SOCKET or --socket for another socket"
	switch {
	case errors.Is(e.Err, syscall.ENOENT), errors.Is(e.Err, syscall.ECONNREFUSED):
		return `is the daemon running? start it (as root) with "systemctl start jaild.socket" or "make run"; ` + other
	case errors.Is(e.Err, syscall.EACCES), errors.Is(e.Err, syscall.EPERM):
		return `only root and members of the jaild group may use the socket: "usermod -aG jaild $USER" as root, then log in again; ` + other
	}
	return other
}

func (e *ConnectError) tlsHint() string {
	const other = "set JAILD_HOST or --host for another daemon"
	var (
		dns      *net.DNSError
		op       *net.OpError
		ne       net.Error
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
	)
	switch {
	case errors.Is(e.Err, syscall.ECONNREFUSED):
		return "is the daemon running, with its tls.listen on that address? " + other
	case errors.As(e.Err, &dns):
		return "no such host? " + other
	case errors.As(e.Err, &op) && op.Op == "remote error":
		// The daemon checked the certificate after the handshake.
		return "the daemon refused this client's certificate: it must be signed by the daemon's tls.client_ca, " +
			"be valid now, and match a [[tls.clients]] entry by its subject CN or a san pattern; JAILD_CERT or --cert names it"
	case errors.As(e.Err, &unknown):
		return "the daemon's certificate is not signed by a CA of JAILD_CA or --ca"
	case errors.As(e.Err, &hostname):
		return "the daemon's certificate does not name the host of the URL in a subjectAltName: use a name it has, or reissue it"
	case errors.As(e.Err, &invalid):
		return "the daemon's certificate is not valid now (expired, or not yet valid), or is not a server's: the daemon's operator must renew it"
	case errors.As(e.Err, &record):
		return "that address does not speak TLS: is it the daemon's tls.listen? " + other
	case errors.As(e.Err, &ne) && ne.Timeout():
		return "is the address right, and the port open to this host? " + other
	}
	return other
}
