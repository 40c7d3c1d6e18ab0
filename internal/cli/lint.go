package cli

import (
	"flag"
	"fmt"
	"net/http"
	"strings"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
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
	var f runFlags
	f.register(fs, forRuff)
	daemon := targetFlags(fs)
	code, display, c, rc, ok := e.ruffInput(fs, daemon, args, nil)
	if !ok {
		return rc
	}
	req := &api.LintRequest{Code: code, Select: sel, Ignore: ignore, Image: f.image}
	var resp api.LintResponse
	if rc, ok := e.fetch(c, http.MethodPost, "/v1/lint", req, &resp, f.json); !ok {
		return rc
	}
	if !f.json {
		for _, d := range resp.Diagnostics {
			fmt.Fprintf(e.stdout, "%s:%d:%d: %s %s\n", display, d.Location.Line, d.Location.Column, d.Code, d.Message)
		}
	}
	if len(resp.Diagnostics) > 0 {
		return exitFail
	}
	return exitOK
}

// ruffInput parses lint's or format's args, checks the source named
// (FILE, or stdin: "" or "-") with check if any, reads the code and makes
// the client. display names the code's source.
func (e *env) ruffInput(fs *flag.FlagSet, daemon *target, args []string, check func(src string) (int, bool)) (code, display string, c *client.Client, rc int, ok bool) {
	pos, rc, ok := e.parse(fs, args, 1)
	if !ok {
		return "", "", nil, rc, false
	}
	src := ""
	if len(pos) == 1 {
		src = pos[0]
	}
	if check != nil {
		if rc, ok := check(src); !ok {
			return "", "", nil, rc, false
		}
	}
	code, display, err := e.readSource(src)
	if err != nil {
		return "", "", nil, e.errorf("%v", err), false
	}
	c, rc, ok = e.client(daemon)
	return code, display, c, rc, ok
}
