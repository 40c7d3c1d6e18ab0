package loopback

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestToken(t *testing.T) {
	a, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewToken()
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(a.String()) || a == b {
		t.Fatalf("tokens %q, %q: want two different 32-byte hex strings", a, b)
	}
	if !a.Equal(a.String()) || a.Equal(b.String()) || a.Equal("") || a.Equal(a.String()[:63]) || a.Equal(a.String()+"0") {
		t.Error("Equal accepts another token or refuses its own")
	}
	var zero Token
	if zero.Equal("") || zero.Equal(a.String()) {
		t.Error("the zero Token matches something")
	}

	good := strings.Repeat("k", MinTokenLen)
	for s, ok := range map[string]bool{
		good: true, good + "\n": true, " " + good + "\r\n": true, "~!" + good: true,
		good[1:]: false, "": false, good[2:] + " x": false, good + "é": false, good + "\x00": false,
		strings.Repeat("k", maxTokenLen): true, strings.Repeat("k", maxTokenLen+1): false,
	} {
		tok, err := ParseToken(s)
		if ok != (err == nil) || (ok && tok.String() != strings.TrimSpace(s)) {
			t.Errorf("ParseToken(%q): %q, %v", s, tok, err)
		}
		if !ok && err != nil && !strings.Contains(err.Error(), "token") {
			t.Errorf("ParseToken(%q): %v does not say what", s, err)
		}
	}

	dir := t.TempDir()
	p := filepath.Join(dir, "token")
	os.WriteFile(p, []byte(good+"\n"), 0o600)
	if tok, err := ReadToken(p); err != nil || tok.String() != good {
		t.Errorf("ReadToken: %q, %v", tok, err)
	}
	os.WriteFile(p, []byte("short\n"), 0o600)
	if _, err := ReadToken(p); err == nil || !strings.Contains(err.Error(), "32") {
		t.Errorf("ReadToken of a short token: %v, want the bound named", err)
	}
	os.WriteFile(p, []byte(strings.Repeat("k", 1<<20)), 0o600)
	if _, err := ReadToken(p); err == nil {
		t.Error("ReadToken of a 1 MiB file: no error")
	}
	if _, err := ReadToken(filepath.Join(dir, "none")); err == nil {
		t.Error("ReadToken of a missing file: no error")
	}
}
