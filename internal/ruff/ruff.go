// Package ruff maps jaild's lint and format requests to ruff's command
// line in the image, and ruff's JSON output back to the API's diagnostics:
// the one place that knows ruff's arguments, its default rule selection
// and its output format. It runs nothing itself.
package ruff

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/lazyre"
)

// Path is ruff in the image.
const Path = "/usr/bin/ruff"

// MaxRules bounds select and ignore.
const MaxRules = 200

// The default rule selection: everything, minus rules that conflict with
// the formatter or only make sense for packages, not snippets.
var (
	DefaultSelect = []string{"ALL"}
	DefaultIgnore = []string{"COM812", "CPY", "D100", "D203", "D213", "FBT", "RUF029"}
)

var ruleCode = lazyre.New(`^(ALL|[A-Z]{1,4}[0-9]{0,4})$`)

// CheckRules validates the rule codes of the request field field ("select"
// or "ignore"): each must be a code or prefix, so none can smuggle in an
// argument.
func CheckRules(field string, rules []string) error {
	if len(rules) > MaxRules {
		return errdefs.Field(field, "has %d entries; the maximum is %d", len(rules), MaxRules)
	}
	for i, r := range rules {
		if !ruleCode.MatchString(r) {
			return errdefs.Field(fmt.Sprintf("%s[%d]", field, i), "%q is not a ruff rule code or prefix (like E501, F, or ALL)", r)
		}
	}
	return nil
}

// CheckArgs is the command line that lints stdin as main.py with the rules
// selected and ignored (nil: the defaults; empty: none), printing JSON and
// exiting 0 whatever it finds.
func CheckArgs(sel, ign []string) []string {
	if sel == nil {
		sel = DefaultSelect
	}
	if ign == nil {
		ign = DefaultIgnore
	}
	args := []string{Path, "check", "--isolated", "--no-cache", "--output-format", "json", "--exit-zero", "--stdin-filename", "main.py"}
	if len(sel) > 0 {
		args = append(args, "--select", strings.Join(sel, ","))
	}
	if len(ign) > 0 {
		args = append(args, "--ignore", strings.Join(ign, ","))
	}
	return append(args, "-")
}

// FormatArgs is the command line that formats stdin as main.py to stdout.
// It exits 2 on code it cannot parse.
func FormatArgs() []string {
	return []string{Path, "format", "--isolated", "--no-cache", "--stdin-filename", "main.py", "-"}
}

// diagnostic is one element of `ruff check --output-format json`.
type diagnostic struct {
	Code        *string  `json:"code"`
	Message     string   `json:"message"`
	Location    location `json:"location"`
	EndLocation location `json:"end_location"`
	Fix         *struct {
		Applicability string `json:"applicability"`
	} `json:"fix"`
	URL *string `json:"url"`
}

type location struct {
	Row    int `json:"row"`
	Column int `json:"column"`
}

// SyntaxErrorCode is the code of a diagnostic ruff reports without one (a
// syntax error, in older ruff), or with an empty one.
const SyntaxErrorCode = "invalid-syntax"

// Diagnostics parses ruff check's JSON output (ruff ran in a jail, on the
// caller's code: it is bounded by the run's output limit, and anything that
// is not the expected JSON is an error).
func Diagnostics(out []byte) ([]api.Diagnostic, error) {
	var diags []diagnostic
	if err := json.Unmarshal(out, &diags); err != nil {
		return nil, fmt.Errorf("ruff output is not the expected JSON: %w", err)
	}
	res := make([]api.Diagnostic, 0, len(diags))
	for _, d := range diags {
		ad := api.Diagnostic{
			Code:        SyntaxErrorCode,
			Message:     d.Message,
			Location:    api.Location{Line: d.Location.Row, Column: d.Location.Column},
			EndLocation: api.Location{Line: d.EndLocation.Row, Column: d.EndLocation.Column},
			Fixable:     d.Fix != nil && d.Fix.Applicability == "safe",
		}
		if d.Code != nil && *d.Code != "" {
			ad.Code = *d.Code
		}
		// A syntax error has no rule page (ruff fills in a stale URL).
		if d.URL != nil && ad.Code != SyntaxErrorCode {
			ad.URL = *d.URL
		}
		res = append(res, ad)
	}
	return res, nil
}
