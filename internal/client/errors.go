package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// ConnectError is returned when the daemon's socket cannot be dialed. It
// unwraps to the dial error, so errors.Is(err, syscall.ENOENT) works.
type ConnectError struct {
	Socket string
	Err    error
}

func (e *ConnectError) Error() string {
	reason := e.Err.Error()
	var errno syscall.Errno
	if errors.As(e.Err, &errno) {
		reason = errno.Error()
	}
	return fmt.Sprintf("cannot connect to jaild at %s: %s (%s)", e.Socket, reason, e.hint())
}

// Unwrap returns the dial error.
func (e *ConnectError) Unwrap() error { return e.Err }

func (e *ConnectError) hint() string {
	const other = "set JAILD_SOCKET or --socket for another socket"
	switch {
	case errors.Is(e.Err, syscall.ENOENT), errors.Is(e.Err, syscall.ECONNREFUSED):
		return `is the daemon running? start it (as root) with "systemctl start jaild.socket" or "make run"; ` + other
	case errors.Is(e.Err, syscall.EACCES), errors.Is(e.Err, syscall.EPERM):
		return `only root and members of the jaild group may use the socket: "usermod -aG jaild $USER" as root, then log in again; ` + other
	}
	return other
}
