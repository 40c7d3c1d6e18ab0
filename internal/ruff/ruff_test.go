package ruff

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/errdefs"
)

func TestCheckArgs(t *testing.T) {
	got := strings.Join(CheckArgs(nil, nil), " ")
	if !strings.Contains(got, "--select ALL --ignore "+strings.Join(DefaultIgnore, ",")) || !strings.HasSuffix(got, " -") {
		t.Errorf("defaults: %s", got)
	}
	got = strings.Join(CheckArgs([]string{"F", "E501"}, []string{}), " ")
	if !strings.Contains(got, "--select F,E501") || strings.Contains(got, "--ignore") {
		t.Errorf("explicit select, empty ignore: %s", got)
	}
	if f := FormatArgs(); f[0] != Path || f[1] != "format" || f[len(f)-1] != "-" {
		t.Errorf("format: %v", f)
	}
}

func TestCheckRules(t *testing.T) {
	if err := CheckRules("select", []string{"ALL", "F", "E501", "RUF029"}); err != nil {
		t.Errorf("valid rules refused: %v", err)
	}
	for _, bad := range [][]string{{"E; rm -rf /"}, {"--fix"}, {"e501"}, {""}, slices.Repeat([]string{"F"}, MaxRules+1)} {
		err := CheckRules("ignore", bad)
		var fe *errdefs.FieldError
		if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "ignore") {
			t.Errorf("CheckRules(%.40q) = %v, want a field error of ignore", bad, err)
		}
	}
}

func TestDiagnostics(t *testing.T) {
	out := []byte(`[{"code":"F821","message":"Undefined name x","location":{"row":1,"column":7},"end_location":{"row":1,"column":8},"fix":null,"url":"https://docs.astral.sh/ruff/rules/undefined-name"},
{"code":null,"message":"SyntaxError: x","location":{"row":2,"column":1},"end_location":{"row":2,"column":2},"fix":{"applicability":"safe"},"url":"https://stale"},
{"code":"I001","message":"unsorted","location":{"row":3,"column":1},"end_location":{"row":3,"column":9},"fix":{"applicability":"unsafe"},"url":null}]`)
	d, err := Diagnostics(out)
	if err != nil || len(d) != 3 {
		t.Fatalf("%+v %v", d, err)
	}
	if d[0].Code != "F821" || d[0].URL == "" || d[0].Fixable || d[0].Location.Column != 7 {
		t.Errorf("rule diagnostic %+v", d[0])
	}
	if d[1].Code != SyntaxErrorCode || d[1].URL != "" || !d[1].Fixable {
		t.Errorf("syntax error %+v", d[1])
	}
	if d[2].Fixable {
		t.Errorf("an unsafe fix is not fixable: %+v", d[2])
	}
	// Found by FuzzDiagnostics: an empty code is no code.
	if d, err := Diagnostics([]byte(`[{"code":""}]`)); err != nil || len(d) != 1 || d[0].Code != SyntaxErrorCode {
		t.Errorf("empty code: %+v %v", d, err)
	}
	if _, err := Diagnostics([]byte("error: no")); err == nil {
		t.Error("non-JSON output accepted")
	}
}

// The API's documentation states the defaults this package uses.
func TestDocsStateTheDefaults(t *testing.T) {
	doc, err := os.ReadFile("../../docs/API.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "`ignore` to `" + strings.Join(DefaultIgnore, ", ") + "`"; !strings.Contains(string(doc), want) {
		t.Errorf("docs/API.md does not say %s", want)
	}
}

// FuzzDiagnostics: whatever ruff (run on a caller's code, in a jail)
// prints, parsing it does not panic.
func FuzzDiagnostics(f *testing.F) {
	f.Add([]byte(`[{"code":"F","message":"m","location":{"row":1,"column":1},"end_location":{"row":1,"column":2},"fix":null,"url":null}]`))
	f.Fuzz(func(t *testing.T, out []byte) {
		d, err := Diagnostics(out)
		for _, x := range d {
			if err != nil || x.Code == "" || (x.Code == SyntaxErrorCode && x.URL != "") {
				t.Fatalf("diagnostic %+v (err %v) from %q", x, err, out)
			}
		}
	})
}
