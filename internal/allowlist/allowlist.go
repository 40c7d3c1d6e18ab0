// Package allowlist parses the destinations a run with network egress may
// reach: domain names and IPv4 prefixes, each with an optional port.
package allowlist

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Allow is one entry of a run's allowlist: a domain name (exact, or
// "*.example.com" for its subdomains) or an IPv4 prefix, with an optional
// port (0: any port, TCP or UDP).
type Allow struct {
	Name   string       // lower case, no trailing dot; "" for a prefix
	Prefix netip.Prefix // valid when Name == ""
	Port   uint16
}

// MaxEntries bounds the entries of one allowlist.
const MaxEntries = 64

// String is the entry in the form Parse reads.
func (a Allow) String() string {
	s := a.Name
	if s == "" {
		s = a.Prefix.String()
		if a.Prefix.IsSingleIP() {
			s = a.Prefix.Addr().String()
		}
	}
	if a.Port != 0 {
		s += ":" + strconv.Itoa(int(a.Port))
	}
	return s
}

// Parse reads "example.com", "*.example.com", "198.51.100.7",
// "198.51.100.0/24", each optionally followed by ":port".
func Parse(s string) (Allow, error) {
	var a Allow
	if s == "" || len(s) > 260 {
		return a, fmt.Errorf("%q: must be a domain name or IPv4 address or prefix, with an optional :port", s)
	}
	host := s
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		p, err := strconv.ParseUint(s[i+1:], 10, 16)
		if err != nil || p == 0 {
			if strings.Count(s, ":") > 1 {
				return a, fmt.Errorf("%q: IPv6 destinations are not supported (jails have no IPv6 egress)", s)
			}
			return a, fmt.Errorf("%q: port must be in 1..65535", s)
		}
		a.Port, host = uint16(p), s[:i]
	}
	if strings.ContainsAny(host, "[]") || strings.Count(host, ":") > 0 {
		return a, fmt.Errorf("%q: IPv6 destinations are not supported (jails have no IPv6 egress)", s)
	}
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(host)
		if err != nil || !p.Addr().Is4() {
			return a, fmt.Errorf("%q: not an IPv4 prefix", s)
		}
		if p != p.Masked() {
			return a, fmt.Errorf("%q: prefix has host bits set (did you mean %s?)", s, p.Masked())
		}
		a.Prefix = p
		return a, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !ip.Is4() {
			return a, fmt.Errorf("%q: IPv6 destinations are not supported (jails have no IPv6 egress)", s)
		}
		a.Prefix = netip.PrefixFrom(ip, 32)
		return a, nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if !validName(strings.TrimPrefix(name, "*.")) {
		return a, fmt.Errorf("%q: not a valid domain name (letters, digits, - and ., optionally starting with *.)", s)
	}
	a.Name = name
	return a, nil
}

// validName checks a DNS name of letters, digits and hyphens, at most 253
// bytes, with at least two labels, the last with a letter.
func validName(n string) bool {
	if n == "" || len(n) > 253 {
		return false
	}
	labels := strings.Split(n, ".")
	if len(labels) < 2 || !strings.ContainsAny(labels[len(labels)-1], "abcdefghijklmnopqrstuvwxyz") {
		return false // a top-level label of digits only would read as an address
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// Matches reports whether the entry allows the (lower-case, dot-less)
// query name.
func (a Allow) Matches(name string) bool {
	if a.Name == "" {
		return false
	}
	if rest, ok := strings.CutPrefix(a.Name, "*."); ok {
		return strings.HasSuffix(name, "."+rest)
	}
	return name == a.Name
}

// ParseList parses every entry and drops duplicates; the error names
// the first bad entry.
func ParseList(in []string) ([]Allow, error) {
	if len(in) > MaxEntries {
		return nil, fmt.Errorf("at most %d entries, got %d", MaxEntries, len(in))
	}
	var out []Allow
	seen := map[Allow]bool{}
	for _, s := range in {
		a, err := Parse(s)
		if err != nil {
			return nil, err
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	return out, nil
}
