package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/jaild/jaild/internal/api"
)

const lintHelp = `Prints one line per finding, "FILE:LINE:COL: CODE message", with FILE as
given ("-" for stdin). Exit status: 0 when clean, 1 with findings, 2 on
errors.`

// codesFlag is a comma-separated, repeatable list of rule codes.
type codesFlag []string

func (c *codesFlag) String() string { return strings.Join(*c, ",") }

func (c *codesFlag) Set(s string) error {
	for _, code := range strings.Split(s, ",") {
		if code = strings.TrimSpace(code); code != "" {
			*c = append(*c, code)
		}
	}
	return nil
}

func runLint(e *env, args []string) int {
	fs := e.flagSet("lint")
	var sel, ignore codesFlag
	fs.Var(&sel, "select", "enable only the rules `CODES` (comma-separated; repeatable)")
	fs.Var(&ignore, "ignore", "disable the rules `CODES` (comma-separated; repeatable)")
	image := imageFlag(fs, ruffImageUsage)
	jsonOut := fs.Bool("json", false, "print the daemon's response JSON")
	daemon := targetFlags(fs)
	pos, rc, ok := e.parse(fs, args, 1)
	if !ok {
		return rc
	}
	src := ""
	if len(pos) == 1 {
		src = pos[0]
	}
	code, display, err := e.readSource(src)
	if err != nil {
		return e.errorf("%v", err)
	}
	req := &api.LintRequest{Code: code, Select: sel, Ignore: ignore, Image: *image}

	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	var resp api.LintResponse
	if *jsonOut {
		raw, err := c.Do(e.ctx, http.MethodPost, "/v1/lint", req)
		if err != nil {
			return e.daemonError(err)
		}
		if err := json.Unmarshal(raw, &resp); err != nil {
			return e.errorf("malformed response: %v", err)
		}
		e.printJSON(raw)
	} else {
		r, err := c.Lint(e.ctx, req)
		if err != nil {
			return e.daemonError(err)
		}
		resp = *r
		for _, d := range resp.Diagnostics {
			fmt.Fprintf(e.stdout, "%s:%d:%d: %s %s\n", display, d.Location.Line, d.Location.Column, d.Code, d.Message)
		}
	}
	if len(resp.Diagnostics) > 0 {
		return exitFail
	}
	return exitOK
}
