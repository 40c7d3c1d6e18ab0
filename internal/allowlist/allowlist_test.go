package allowlist

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	ok := map[string]string{
		"example.com":         "example.com",
		"Example.COM.":        "example.com",
		"*.example.com":       "*.example.com",
		"api.example.com:443": "api.example.com:443",
		"198.51.100.7":        "198.51.100.7",
		"198.51.100.7:80":     "198.51.100.7:80",
		"198.51.100.0/24":     "198.51.100.0/24",
		"198.51.100.0/24:53":  "198.51.100.0/24:53",
	}
	for in, want := range ok {
		a, err := Parse(in)
		if err != nil || a.String() != want {
			t.Errorf("Parse(%q) = %v, %v; want %s", in, a, err, want)
		}
	}
	bad := map[string]string{
		"":                       "",
		"localhost":              "domain name",
		"exa mple.com":           "domain name",
		"-a.com":                 "domain name",
		"a.com:0":                "port",
		"a.com:65536":            "port",
		"a.com:http":             "port",
		"2001:db8::1":            "IPv6",
		"[2001:db8::1]:443":      "IPv6",
		"198.51.100.1/24":        "host bits",
		"198.51.100.0/33":        "IPv4 prefix",
		"*.*.a.com":              "domain name",
		strings.Repeat("a", 300): "",
	}
	for in, has := range bad {
		if _, err := Parse(in); err == nil || !strings.Contains(err.Error(), has) {
			t.Errorf("Parse(%q) = %v, want an error mentioning %q", in, err, has)
		}
	}
}

func TestMatches(t *testing.T) {
	exact, _ := Parse("api.test")
	wild, _ := Parse("*.other.test")
	for _, c := range []struct {
		a    Allow
		name string
		want bool
	}{
		{exact, "api.test", true}, {exact, "x.api.test", false}, {exact, "api.test.evil", false},
		{wild, "www.other.test", true}, {wild, "a.b.other.test", true}, {wild, "other.test", false}, {wild, "evilother.test", false},
	} {
		if got := c.a.Matches(c.name); got != c.want {
			t.Errorf("%s matches %q = %v, want %v", c.a, c.name, got, c.want)
		}
	}
}

func TestParseList(t *testing.T) {
	l, err := ParseList([]string{"a.com", "A.com", "198.51.100.7"})
	if err != nil || len(l) != 2 {
		t.Errorf("ParseList = %v, %v; want duplicates dropped", l, err)
	}
	if _, err := ParseList(make([]string, MaxEntries+1)); err == nil {
		t.Error("ParseList accepted more than MaxEntries")
	}
}

// Parse never panics, and what it accepts prints back to itself.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"example.com", "*.a.b:443", "198.51.100.0/24:53", "1.2.3.4", "::1", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := Parse(s)
		if err != nil {
			return
		}
		b, err := Parse(a.String())
		if err != nil || b != a {
			t.Fatalf("Parse(%q) = %v, but Parse(%q) = %v, %v", s, a, a.String(), b, err)
		}
	})
}
