package errdefs

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		name   string
		msg    string
	}{
		{New(ErrInvalidArgument, "code is empty"), 400, "invalid_argument", "code is empty"},
		{fmt.Errorf("run failed: %w", New(ErrUnavailable, "too many jails")), 503, "unavailable", "run failed: too many jails"},
		{Field("limits.memory_mb", "must be in 1..%d", 4096), 400, "invalid_argument", "limits.memory_mb: must be in 1..4096"},
		{InField("files[2]", Field("path", "contains ..")), 400, "invalid_argument", "files[2].path: contains .."},
		{InField("env", New(ErrInvalidArgument, "FOO is not allowed")), 400, "invalid_argument", "env: FOO is not allowed"},
		{FieldOfClass(ErrTooLarge, "body", "over max_file_bytes"), 413, "too_large", "body: over max_file_bytes"},
		{InField("files[0]", FieldOfClass(ErrTooLarge, "content", "big")), 413, "too_large", "files[0].content: big"},
		{InField("files[0].file_id", New(ErrNotFound, "no file f-1")), 404, "not_found", "files[0].file_id: no file f-1"},
		{InField("files[0]", io.EOF), 400, "invalid_argument", "files[0]: EOF"},
		{New(ErrUnsupportedMediaType, "x"), http.StatusUnsupportedMediaType, "unsupported_media_type", "x"},
		{New(ErrConflict, "x"), http.StatusConflict, "conflict", "x"},
		{io.EOF, 500, "internal", "EOF"},
		{Wrap(ErrBusy, io.EOF), 503, "busy", "EOF"},
	} {
		status, name := Classify(tc.err)
		if status != tc.status || name != tc.name || tc.err.Error() != tc.msg {
			t.Errorf("%v: Classify = %d %q, message %q; want %d %q %q", tc.err, status, name, tc.err.Error(), tc.status, tc.name, tc.msg)
		}
	}
}

func TestNewWrapsCause(t *testing.T) {
	err := New(ErrInternal, "write: %w", io.ErrShortWrite)
	if !errors.Is(err, io.ErrShortWrite) || !errors.Is(err, ErrInternal) || errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("errors.Is on %v gives the wrong answers", err)
	}
	if Wrap(ErrInternal, nil) != nil {
		t.Fatal("Wrap(nil) is not nil")
	}
}

func TestFieldOf(t *testing.T) {
	var fe *FieldError
	err := fmt.Errorf("decode: %w", InField("files[0]", Field("path", "is empty")))
	if !errors.As(err, &fe) || fe.Field != "files[0].path" || fe.Reason != "is empty" {
		t.Fatalf("errors.As(%v) = %+v", err, fe)
	}
}

func TestFromNameRoundTrip(t *testing.T) {
	for _, c := range classes {
		if got := FromName(c.class.Error()); !errors.Is(got, c.class) || !errors.Is(c.class, got) {
			t.Errorf("FromName(%q) = %v", c.class.Error(), got)
		}
	}
	if !errors.Is(FromName("no_such_class"), ErrInternal) {
		t.Error("an unknown wire name is not internal")
	}
}
