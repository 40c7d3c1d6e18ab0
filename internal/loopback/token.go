package loopback

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// MinTokenLen is the fewest characters a token read from a file or the
// environment may have: as many as a fresh token's 32 random bytes give
// in hex would be 64; half that still leaves guessing hopeless.
const MinTokenLen = 32

// maxTokenLen bounds a token read from a file (and so the file read).
const maxTokenLen = 4096

// Token is the secret a local HTTP server of jailctl requires of every
// request: whoever reaches its port without it acts as no one. The zero
// Token matches nothing.
type Token struct{ secret string }

// NewToken returns a fresh token: 32 random bytes, in hex.
func NewToken() (Token, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return Token{}, fmt.Errorf("token: %w", err)
	}
	return Token{hex.EncodeToString(b)}, nil
}

// ParseToken takes a token chosen by the user, surrounding white space
// (a file's final newline) aside: at least MinTokenLen characters, each
// printable ASCII other than a space, so that it fits an HTTP header as
// it is.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	if len(s) < MinTokenLen || len(s) > maxTokenLen {
		return Token{}, fmt.Errorf("token: want %d to %d characters, not %d", MinTokenLen, maxTokenLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return Token{}, errors.New("token: want printable ASCII characters other than spaces only")
		}
	}
	return Token{s}, nil
}

// ReadToken reads a token from the file at path (see ParseToken).
func ReadToken(path string) (Token, error) {
	f, err := os.Open(path)
	if err != nil {
		return Token{}, err
	}
	defer f.Close()
	// The token and a CRLF; more is too long for ParseToken.
	b, err := io.ReadAll(io.LimitReader(f, maxTokenLen+3))
	if err != nil {
		return Token{}, fmt.Errorf("token file %s: %w", path, err)
	}
	tok, err := ParseToken(string(b))
	if err != nil {
		return Token{}, fmt.Errorf("token file %s: %w", path, err)
	}
	return tok, nil
}

// String is the token itself, to print once to whoever started the
// server.
func (t Token) String() string { return t.secret }

// Equal reports, in constant time for a guess of the token's length,
// whether got is the token. The zero Token equals nothing.
func (t Token) Equal(got string) bool {
	return t.secret != "" && subtle.ConstantTimeCompare([]byte(got), []byte(t.secret)) == 1
}
