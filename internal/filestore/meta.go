package filestore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jaild/jaild/internal/errdefs"
)

// MaxNameBytes bounds a file's name.
const MaxNameBytes = 255

// maxMetaBytes bounds a metadata record: a longer one is malformed (the
// longest name, escaped, takes under 2 KiB).
const maxMetaBytes = 4 << 10

// ValidName checks a file's name: 1 to 255 bytes of UTF-8, not "." or
// "..", without '/', NUL or control characters (C0, DEL, C1, line and
// paragraph separators, bidirectional formatting controls, which could
// make a name read as another). The error is an errdefs.FieldError for
// "name".
func ValidName(name string) error {
	switch {
	case name == "":
		return errdefs.Field("name", "is empty; name the file (?name=data.csv)")
	case len(name) > MaxNameBytes:
		return errdefs.Field("name", "is %d bytes long; the most is %d", len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return errdefs.Field("name", "is not valid UTF-8")
	case name == "." || name == "..":
		return errdefs.Field("name", "must not be %q", name)
	}
	for _, r := range name {
		switch {
		case r == '/':
			return errdefs.Field("name", "must not contain '/': it is a file's name, not a path")
		case unicode.IsControl(r) || r == '\u2028' || r == '\u2029' || bidiControl(r):
			return errdefs.Field("name", "must not contain control characters (found U+%04X)", r)
		}
	}
	return nil
}

func bidiControl(r rune) bool {
	return r == '\u061c' || r == '\u200e' || r == '\u200f' || (r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}

// record is a file's metadata as stored in <id>.meta.
type record struct {
	V       int       `json:"v"`
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	SHA256  string    `json:"sha256"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires"`
	Owner   uint32    `json:"owner"`
}

const recordVersion = 1

func encodeMeta(m Meta) ([]byte, error) {
	return json.Marshal(record{
		V: recordVersion, ID: m.ID, Name: m.Name, Size: m.Size, SHA256: m.SHA256,
		Created: m.Created.UTC(), Expires: m.Expires.UTC(), Owner: m.Owner,
	})
}

// decodeMeta parses and checks a record read from disk, which may be
// anything: truncated, corrupt, or written by hand. Times come back in
// UTC.
func decodeMeta(b []byte) (Meta, error) {
	if len(b) > maxMetaBytes {
		return Meta{}, fmt.Errorf("longer than %d bytes", maxMetaBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var r record
	if err := dec.Decode(&r); err != nil {
		return Meta{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Meta{}, errors.New("trailing data")
	}
	m := Meta{ID: r.ID, Name: r.Name, Size: r.Size, SHA256: r.SHA256, Created: r.Created.UTC(), Expires: r.Expires.UTC(), Owner: r.Owner}
	switch {
	case r.V != recordVersion:
		return Meta{}, fmt.Errorf("version %d, not %d", r.V, recordVersion)
	case !ValidID(m.ID):
		return Meta{}, errors.New("bad id")
	case ValidName(m.Name) != nil:
		return Meta{}, fmt.Errorf("bad name: %v", ValidName(m.Name))
	case m.Size < 0:
		return Meta{}, errors.New("negative size")
	case !validSHA256(m.SHA256):
		return Meta{}, errors.New("bad sha256")
	case !validTime(m.Created) || !validTime(m.Expires) || m.Expires.Before(m.Created):
		return Meta{}, errors.New("bad times")
	}
	return m, nil
}

// validTime: a time that encodes back (JSON holds years 0..9999), and
// not the zero time of a missing field.
func validTime(t time.Time) bool { return !t.IsZero() && t.Year() >= 1 && t.Year() <= 9999 }

func validSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
