package jail

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
)

// The daemon's configuration checks host_id_base against the span the
// engine uses; the two must agree.
func TestHostIDSpan(t *testing.T) {
	if config.HostIDSpan != MaxJails*IDsPerJail {
		t.Fatalf("config.HostIDSpan = %d, engine uses MaxJails*IDsPerJail = %d", config.HostIDSpan, MaxJails*IDsPerJail)
	}
}

func TestSlots(t *testing.T) {
	var s slots
	for want := range 3 {
		if got, err := s.get(); err != nil || got != want {
			t.Fatalf("get = %d, %v; want %d", got, err, want)
		}
	}
	s.put(1)
	if got, _ := s.get(); got != 1 {
		t.Fatalf("after put(1), get = %d, want the lowest free slot 1", got)
	}
	for range MaxJails - 3 {
		if _, err := s.get(); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := s.get(); !errors.Is(err, errNoSlot) {
		t.Fatalf("get with every slot used = %d, %v; want errNoSlot", got, err)
	}
}

func TestValidatePath(t *testing.T) {
	ok := []string{"a", "a/b.txt", "dir/sub/file.csv", strings.Repeat("x", 255), "a b/ü.txt"}
	bad := []string{"", "/etc/x", "../../etc/cron.d/x", "a/../../b", "a\x00b", "a//b", "./a", "a/.", "a/..",
		strings.Repeat("x", 256), strings.Repeat("a/", 40) + "f", strings.Repeat("x", 10000)}
	for _, p := range ok {
		if err := ValidatePath(p); err != nil {
			t.Errorf("ValidatePath(%q) = %v, want nil", p, err)
		}
	}
	for _, p := range bad {
		if err := ValidatePath(p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ValidatePath(%q) = %v, want ErrInvalid", p, err)
		}
	}
}

func TestMatchGlob(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"out.csv", "out.csv", true},
		{"*.csv", "out.csv", true},
		{"*.csv", "d/out.csv", false},
		{"**/*.csv", "out.csv", true},
		{"**/*.csv", "a/b/out.csv", true},
		{"out/*", "out/a.png", true},
		{"out/*", "out/d/a.png", false},
		{"out/**", "out/d/a.png", true},
		{"a/**/z", "a/z", true},
		{"a/**/z", "a/b/c/z", true},
		{"a/**/z", "a/b/c/y", false},
		{"f?.txt", "f1.txt", true},
		{"[ab].txt", "c.txt", false},
	}
	for _, c := range cases {
		if got := matchGlob(strings.Split(c.pattern, "/"), strings.Split(c.name, "/")); got != c.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", c.pattern, c.name, got, c.want)
		}
	}
	// 31 "**" against a 12-deep name: exponential with backtracking.
	start := time.Now()
	deep := strings.Split(strings.Repeat("d/", 12)+"f", "/")
	if matchGlob(strings.Split(strings.Repeat("**/", 31)+"nomatch", "/"), deep) || !matchGlob(strings.Split(strings.Repeat("**/", 31)+"f", "/"), deep) {
		t.Error("many ** matched wrongly")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("matching many ** took %v", d)
	}
	if err := ValidatePattern("a/[x"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ValidatePattern(bad glob) = %v, want ErrInvalid", err)
	}
	if err := ValidatePattern("../*"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ValidatePattern(../*) = %v, want ErrInvalid", err)
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("default limits invalid: %v", err)
	}
	l := DefaultLimits()
	l.MemoryBytes = -1
	if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "memory_bytes") {
		t.Errorf("negative memory: %v, want an error naming memory_bytes", err)
	}
	l = DefaultLimits()
	l.Timeout = 48 * time.Hour
	if err := l.Validate(); err == nil || !strings.Contains(err.Error(), "timeout_ms") {
		t.Errorf("huge timeout: %v, want an error naming timeout_ms", err)
	}
}

func TestValidateEnv(t *testing.T) {
	good := map[string]string{"FOO": "bar", "PYTHONPATH": "/workspace/lib", "TZ": "Europe/Paris"}
	if err := ValidateEnv(good); err != nil {
		t.Errorf("ValidateEnv(good) = %v", err)
	}
	for _, env := range []map[string]string{
		{"LD_PRELOAD": "/x.so"}, {"PATH": "/x"}, {"PYTHONHOME": "/x"}, {"PYTHONSTARTUP": "x"},
		{"1BAD": "x"}, {"A-B": "x"}, {"A": "x\x00y"}, {"_LIBCONTAINER_INITPIPE": "3"},
	} {
		if err := ValidateEnv(env); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ValidateEnv(%v) = %v, want ErrInvalid", env, err)
		}
	}
}

func TestParseRecords(t *testing.T) {
	data := []byte(`garbage
{"type":"exception","exc_type":"Fake","message":"forged by user code","line":1}
{"type":"exception","exc_type":"` + strings.Repeat("T", 1000) + `","message":"x","line":99}
{"type":"result","repr":"42"}
{"type":"exception","exc_type":"ZeroDivisionError","message":"division by zero","line":3}
{"type":"exception","exc_type":"","message":"ignored"}
` + "\xff\xfe not json\n")
	recs := parseRecords(data, 3)
	exc, res := recs.exc, recs.result
	if exc == nil || exc.Type != "ZeroDivisionError" || exc.Line != 3 || exc.Message != "division by zero" {
		t.Errorf("exception = %+v, want the last well-formed record", exc)
	}
	if res == nil || *res != "42" {
		t.Errorf("result = %v, want 42", res)
	}
	exc = parseRecords([]byte(`{"type":"exception","exc_type":"`+strings.Repeat("T", 1000)+`","message":"`+strings.Repeat("m", 10000)+`","line":99}`), 3).exc
	if exc == nil || len(exc.Type) > maxExcTypeBytes || len(exc.Message) > maxExcMsgBytes || exc.Line != 0 {
		t.Errorf("oversized record not bounded: type %d bytes, message %d bytes, line %d", len(exc.Type), len(exc.Message), exc.Line)
	}
}

func TestClip(t *testing.T) {
	s := strings.Repeat("é", 100) // 2 bytes each
	got := clip(s, 51)
	if len(got) > 51 || !strings.HasSuffix(got, truncationMarker) || !strings.HasPrefix(got, "éé") {
		t.Errorf("clip = %q (%d bytes)", got, len(got))
	}
	if clip("short", 10) != "short" {
		t.Error("clip changed a short string")
	}
}

func TestCapture(t *testing.T) {
	calls := 0
	c := &capture{limit: 10, onOverflow: func() { calls++ }}
	c.readFrom(strings.NewReader(strings.Repeat("x", 100000)))
	if len(c.buf) != 10 || !c.truncated || calls != 1 {
		t.Errorf("capture: %d bytes, truncated=%v, overflow calls=%d", len(c.buf), c.truncated, calls)
	}
	c = &capture{limit: 10}
	c.readFrom(strings.NewReader("0123456789"))
	if string(c.buf) != "0123456789" || c.truncated {
		t.Errorf("capture at exactly the limit: %q truncated=%v", c.buf, c.truncated)
	}
}

// FuzzParseRecords: the runner's side channel is written by user code too;
// whatever it holds, what comes out is bounded.
func FuzzParseRecords(f *testing.F) {
	f.Add([]byte(`{"type":"exception","exc_type":"E","message":"m","line":2}` + "\n" + `{"type":"result","repr":"1"}`))
	f.Add([]byte("\xff\n{\n{\"type\":\"result\",\"repr\":null}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs := parseRecords(data, 10)
		exc, res := recs.exc, recs.result
		if exc != nil && (len(exc.Type) > maxExcTypeBytes || len(exc.Message) > maxExcMsgBytes || exc.Line < 0 || exc.Line > 10 || exc.Type == "") {
			t.Fatalf("unbounded exception %+v", exc)
		}
		if recs.signal < 0 || recs.signal > 64 {
			t.Fatalf("signal %d", recs.signal)
		}
		if res != nil && len(*res) > maxResultBytes {
			t.Fatalf("unbounded result of %d bytes", len(*res))
		}
	})
}

func TestImportsAny(t *testing.T) {
	tops := map[string]bool{"pandas": true, "matplotlib": true}
	for code, want := range map[string]bool{
		"import pandas":                          true,
		"import pandas as pd; print(1)":          true,
		"import os, pandas":                      true,
		"import os as o, pandas as p":            true,
		"from pandas import DataFrame":           true,
		"import matplotlib.pyplot as plt":        true,
		"from matplotlib.pyplot import plot":     true,
		"def f():\n    import pandas\n":          true,
		"x = 1; import pandas":                   true,
		"if True: import pandas":                 true,
		"import\tpandas":                         true,
		"print(1)":                               false,
		"import os":                              false,
		"import pandasx":                         false,
		"import mypandas":                        false,
		"from os import pandas_like":             false,
		"x = 'import'\npandas = 1":               false,
		"__import__('pandas')":                   false, // missed: costs time only
		"print('see pandas')\nimport numpy as n": false,
	} {
		if got := importsAny(code, tops); got != want {
			t.Errorf("importsAny(%q) = %v, want %v", code, got, want)
		}
	}
}
