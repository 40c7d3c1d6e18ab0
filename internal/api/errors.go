package api

import (
	"net/http"

	"github.com/jaild/jaild/internal/errdefs"
)

// Error is an error received from the daemon: its class (for errors.Is
// with the errdefs classes), the field it names, and the daemon's message.
type Error struct {
	Class   error
	Status  int
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the class, so errors.Is(err, errdefs.ErrBusy) works.
func (e *Error) Unwrap() error { return e.Class }

// FromWire rebuilds the error a daemon sent.
func FromWire(status int, body ErrorDetail) error {
	msg := body.Message
	if msg == "" {
		msg = http.StatusText(status)
	}
	return &Error{Class: errdefs.FromName(body.Type), Status: status, Field: body.Field, Message: msg}
}
