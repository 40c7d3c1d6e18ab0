// Package errdefs is jaild's one error taxonomy: a small set of classes that
// every layer wraps its errors in, the wire name and HTTP status of each
// class (mapped here and nowhere else), and the way back from the wire for
// clients. A class never appears in an error's message, so no layer parses
// or trims error text: the message is what the caller reads.
package errdefs

import (
	"errors"
	"fmt"
	"net/http"
)

// The classes. Test with errors.Is; create errors with New or Field.
var (
	ErrInvalidArgument      = errors.New("invalid_argument")
	ErrForbidden            = errors.New("forbidden")
	ErrNotFound             = errors.New("not_found")
	ErrMethodNotAllowed     = errors.New("method_not_allowed")
	ErrUnsupportedMediaType = errors.New("unsupported_media_type")
	ErrConflict             = errors.New("conflict")
	ErrTooLarge             = errors.New("too_large")
	ErrRangeNotSatisfiable  = errors.New("range_not_satisfiable") // a Range outside the content
	ErrRateLimited          = errors.New("rate_limited")          // the caller's own rate or quota is used up
	ErrBusy                 = errors.New("busy")                  // every slot and queue place is taken
	ErrUnavailable          = errors.New("unavailable")           // the daemon cannot take it now (shutting down, no jail capacity)
	ErrInsufficientStorage  = errors.New("insufficient_storage")  // the file store or its disk is full
	ErrBadGateway           = errors.New("bad_gateway")           // a session's port proxied to answered nothing
	ErrInternal             = errors.New("internal")
)

// classes is the one mapping from class to wire name and HTTP status.
var classes = []struct {
	class  error
	status int
}{
	{ErrInvalidArgument, http.StatusBadRequest},
	{ErrForbidden, http.StatusForbidden},
	{ErrNotFound, http.StatusNotFound},
	{ErrMethodNotAllowed, http.StatusMethodNotAllowed},
	{ErrUnsupportedMediaType, http.StatusUnsupportedMediaType},
	{ErrConflict, http.StatusConflict},
	{ErrTooLarge, http.StatusRequestEntityTooLarge},
	{ErrRangeNotSatisfiable, http.StatusRequestedRangeNotSatisfiable},
	{ErrRateLimited, http.StatusTooManyRequests},
	{ErrBusy, http.StatusServiceUnavailable},
	{ErrUnavailable, http.StatusServiceUnavailable},
	{ErrInsufficientStorage, http.StatusInsufficientStorage},
	{ErrBadGateway, http.StatusBadGateway},
	{ErrInternal, http.StatusInternalServerError},
}

// Error is an error of a class. Its message is the wrapped error's,
// without the class's name.
type Error struct {
	class error
	err   error
}

func (e *Error) Error() string { return e.err.Error() }

// Unwrap returns the class and the wrapped error, so errors.Is matches
// both.
func (e *Error) Unwrap() []error { return []error{e.class, e.err} }

// New returns an error of class with the message fmt.Errorf(format,
// args...) would give (a %w in format wraps as usual).
func New(class error, format string, args ...any) error {
	return &Error{class: class, err: fmt.Errorf(format, args...)}
}

// Wrap classifies err, keeping its message. Wrap(nil) is nil.
func Wrap(class, err error) error {
	if err == nil {
		return nil
	}
	return &Error{class: class, err: err}
}

// FieldError is an invalid argument in one field of a request: the field's
// name as the caller wrote it ("files[2].path", "limits.memory_mb") and
// what is wrong with it, bound included.
type FieldError struct {
	Field  string
	Reason string
	// Class is the error's class; nil is ErrInvalidArgument.
	Class error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns the class: ErrInvalidArgument unless Class is set.
func (e *FieldError) Unwrap() error {
	if e.Class != nil {
		return e.Class
	}
	return ErrInvalidArgument
}

// Field returns a FieldError for field.
func Field(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// FieldOfClass returns a FieldError of another class than invalid
// argument: a field within its syntax but over a bound of the daemon
// (an upload over max_file_bytes is ErrTooLarge, field "body").
func FieldOfClass(class error, field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Class: class}
}

// InField returns err with its field prefixed by parent ("files[2]" and
// "path" give "files[2].path"); an error that is not a FieldError becomes
// one for parent, of err's class (an unknown file_id stays not found),
// or of ErrInvalidArgument when it has none.
func InField(parent string, err error) error {
	var fe *FieldError
	if errors.As(err, &fe) {
		f := parent
		if fe.Field != "" {
			f += "." + fe.Field
		}
		return &FieldError{Field: f, Reason: fe.Reason, Class: fe.Class}
	}
	var class error
	for _, c := range classes {
		if errors.Is(err, c.class) {
			class = c.class
			break
		}
	}
	return &FieldError{Field: parent, Reason: err.Error(), Class: class}
}

// Classify returns the HTTP status and wire name of err's class. An error
// of no class is internal.
func Classify(err error) (status int, name string) {
	for _, c := range classes {
		if errors.Is(err, c.class) {
			return c.status, c.class.Error()
		}
	}
	return http.StatusInternalServerError, ErrInternal.Error()
}

// FromName returns the class whose wire name is name, or ErrInternal.
func FromName(name string) error {
	for _, c := range classes {
		if c.class.Error() == name {
			return c.class
		}
	}
	return ErrInternal
}
