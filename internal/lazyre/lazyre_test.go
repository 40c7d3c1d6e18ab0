package lazyre

import "testing"

func TestLazy(t *testing.T) {
	r := New(`^a(b+)$`)
	if r.String() != `^a(b+)$` {
		t.Errorf("String = %q", r.String())
	}
	if !r.MatchString("abb") || r.MatchString("ab c") {
		t.Error("MatchString")
	}
	if m := r.FindAllStringSubmatch("abbb", -1); len(m) != 1 || m[0][1] != "bbb" {
		t.Errorf("FindAllStringSubmatch = %q", m)
	}
	bad := New(`(`)
	defer func() {
		if recover() == nil {
			t.Error("a bad expression did not panic at first use")
		}
	}()
	bad.MatchString("x")
}
