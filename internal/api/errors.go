package api

import (
	"errors"
	"net/http"
)

// Error classes. Code anywhere in jaild wraps one of these with %w;
// Classify maps them to the wire in one place, and FromWire maps the wire
// back, so a client sees the same class the server had.
var (
	ErrInvalidArgument  = errors.New("invalid_argument")
	ErrForbidden        = errors.New("forbidden")
	ErrNotFound         = errors.New("not_found")
	ErrMethodNotAllowed = errors.New("method_not_allowed")
	ErrTooLarge         = errors.New("too_large")
	ErrRateLimited      = errors.New("rate_limited")
	ErrBusy             = errors.New("busy")
	ErrUnavailable      = errors.New("unavailable")
	ErrInternal         = errors.New("internal")
)

var classes = []struct {
	err    error
	status int
}{
	{ErrInvalidArgument, http.StatusBadRequest},
	{ErrForbidden, http.StatusForbidden},
	{ErrNotFound, http.StatusNotFound},
	{ErrMethodNotAllowed, http.StatusMethodNotAllowed},
	{ErrTooLarge, http.StatusRequestEntityTooLarge},
	{ErrRateLimited, http.StatusTooManyRequests},
	{ErrBusy, http.StatusServiceUnavailable},
	{ErrUnavailable, http.StatusServiceUnavailable},
	{ErrInternal, http.StatusInternalServerError},
}

// Classify returns the HTTP status and wire type of err. Errors of no
// class are internal.
func Classify(err error) (status int, typ string) {
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return c.status, c.err.Error()
		}
	}
	return http.StatusInternalServerError, ErrInternal.Error()
}

// Error is an error received from the daemon: its class (for errors.Is)
// and the daemon's message.
type Error struct {
	Class   error
	Status  int
	Message string
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the class, so errors.Is(err, api.ErrBusy) works.
func (e *Error) Unwrap() error { return e.Class }

// FromWire rebuilds the error a daemon sent.
func FromWire(status int, body ErrorDetail) error {
	class := ErrInternal
	for _, c := range classes {
		if c.err.Error() == body.Type {
			class = c.err
			break
		}
	}
	msg := body.Message
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Class: class, Status: status, Message: msg}
}
