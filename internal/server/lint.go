package server

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/jail"
)

const ruffPath = "/usr/bin/ruff"

// Default rule selection: everything, minus rules that conflict with the
// formatter or only make sense for packages, not snippets.
var (
	defaultSelect = []string{"ALL"}
	defaultIgnore = []string{"COM812", "CPY", "D100", "D203", "D213", "FBT", "RUF029"}
	ruleCode      = regexp.MustCompile(`^(ALL|[A-Z]{1,4}[0-9]{0,4})$`)
)

const maxRules = 200

// ruffLimits are the limits of a lint or format jail: ruff is fast, and
// its output is bounded by the diagnostics of at most maxCodeBytes of code.
func (s *Server) ruffLimits() jail.Limits {
	l := EngineLimits(s.cfg.Defaults)
	l.Timeout = 20 * time.Second
	l.OutputBytes = 32 << 20
	l.Pids = max(l.Pids, 32) // ruff runs a thread per CPU
	return l
}

func checkRules(field string, rules []string) error {
	if len(rules) > maxRules {
		return invalid("%s has %d entries; the maximum is %d", field, len(rules), maxRules)
	}
	for i, r := range rules {
		if !ruleCode.MatchString(r) {
			return invalid("%s[%d]: %q is not a ruff rule code or prefix (like E501, F, or ALL)", field, i, r)
		}
	}
	return nil
}

func checkCode(code string) error {
	if len(code) > maxCodeBytes {
		return invalid("code is %d bytes; the maximum is %d", len(code), maxCodeBytes)
	}
	if strings.IndexByte(code, 0) >= 0 {
		return invalid("code contains a NUL byte")
	}
	return nil
}

// ruffDiagnostic is one element of `ruff check --output-format json`.
type ruffDiagnostic struct {
	Code        *string      `json:"code"`
	Message     string       `json:"message"`
	Location    ruffLocation `json:"location"`
	EndLocation ruffLocation `json:"end_location"`
	Fix         *struct {
		Applicability string `json:"applicability"`
	} `json:"fix"`
	URL *string `json:"url"`
}

type ruffLocation struct {
	Row    int `json:"row"`
	Column int `json:"column"`
}

func (s *Server) lint(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	who := callerOf(r)
	var req api.LintRequest
	err := s.decode(w, r, &req)
	if err == nil {
		err = checkCode(req.Code)
	}
	if err == nil {
		err = checkRules("select", req.Select)
	}
	if err == nil {
		err = checkRules("ignore", req.Ignore)
	}
	if err != nil {
		s.audit.refused(who, "lint", err)
		return err
	}
	sel, ign := defaultSelect, defaultIgnore
	if req.Select != nil {
		sel = req.Select
	}
	if req.Ignore != nil {
		ign = req.Ignore
	}
	args := []string{ruffPath, "check", "--isolated", "--no-cache", "--output-format", "json", "--exit-zero",
		"--stdin-filename", "main.py"}
	if len(sel) > 0 {
		args = append(args, "--select", strings.Join(sel, ","))
	}
	if len(ign) > 0 {
		args = append(args, "--ignore", strings.Join(ign, ","))
	}
	args = append(args, "-")
	jr := &jail.Request{Command: args, Stdin: []byte(req.Code), Limits: s.ruffLimits()}
	res, queued, err := s.run(r.Context(), who, jr)
	s.setQuotaHeader(w, who)
	if err != nil {
		s.audit.refused(who, "lint", err)
		return err
	}
	s.audit.ran(who, "lint", req.Code, jr.Limits, res, queued, time.Since(start))
	if err := ruffFailed(res); err != nil {
		return err
	}
	var diags []ruffDiagnostic
	if err := json.Unmarshal(res.Stdout, &diags); err != nil {
		return errdefs.New(errdefs.ErrInternal, "ruff output is not the expected JSON: %v", err)
	}
	out := api.LintResponse{Diagnostics: make([]api.Diagnostic, 0, len(diags))}
	for _, d := range diags {
		ad := api.Diagnostic{
			Code:        "invalid-syntax", // older ruff reports syntax errors without a code
			Message:     d.Message,
			Location:    api.Location{Line: d.Location.Row, Column: d.Location.Column},
			EndLocation: api.Location{Line: d.EndLocation.Row, Column: d.EndLocation.Column},
			Fixable:     d.Fix != nil && d.Fix.Applicability == "safe",
		}
		if d.Code != nil {
			ad.Code = *d.Code
		}
		// A syntax error has no rule page (ruff fills in a stale URL).
		if d.URL != nil && ad.Code != "invalid-syntax" {
			ad.URL = *d.URL
		}
		out.Diagnostics = append(out.Diagnostics, ad)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ruffFailed turns a ruff run that did not complete into an error.
func ruffFailed(res *jail.Result) error {
	if res.Status == jail.StatusOK {
		return nil
	}
	switch res.Status {
	case jail.StatusTimeout, jail.StatusMemoryLimit, jail.StatusOutputLimit, jail.StatusCPULimit:
		return errdefs.New(errdefs.ErrInvalidArgument, "ruff hit a limit (%s); try smaller code", res.Status)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(strings.ToValidUTF8(string(res.Stderr), "?")), "\n")
	return errdefs.New(errdefs.ErrInternal, "ruff failed (%s, exit %d): %s", res.Status, res.ExitCode, first)
}

func (s *Server) format(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	who := callerOf(r)
	var req api.FormatRequest
	err := s.decode(w, r, &req)
	if err == nil {
		err = checkCode(req.Code)
	}
	if err != nil {
		s.audit.refused(who, "format", err)
		return err
	}
	args := []string{ruffPath, "format", "--isolated", "--no-cache", "--stdin-filename", "main.py", "-"}
	jr := &jail.Request{Command: args, Stdin: []byte(req.Code), Limits: s.ruffLimits()}
	res, queued, err := s.run(r.Context(), who, jr)
	s.setQuotaHeader(w, who)
	if err != nil {
		s.audit.refused(who, "format", err)
		return err
	}
	s.audit.ran(who, "format", req.Code, jr.Limits, res, queued, time.Since(start))
	if res.Status == jail.StatusError && res.ExitCode == 2 {
		// ruff format exits 2 on code it cannot parse.
		first, _, _ := strings.Cut(strings.TrimSpace(strings.ToValidUTF8(string(res.Stderr), "?")), "\n")
		return invalid("code cannot be formatted: %s", first)
	}
	if err := ruffFailed(res); err != nil {
		return err
	}
	formatted := string(res.Stdout)
	writeJSON(w, http.StatusOK, api.FormatResponse{Code: formatted, Changed: formatted != req.Code})
	return nil
}
