package cli

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jaild/jaild/internal/api"
)

const execHelp = `Code comes from -c CODE, or FILE, or stdin ("-" or no argument). The run's
stdout and stderr are written to jailctl's as they arrive; returned files
(--get), matplotlib figures and the images of display() (output-N.png)
are written beneath --out-dir, never outside it; display()'s text/plain is
printed after the run's output. With --return-to-store the returned files stay in the daemon's file
store instead, and their IDs are printed ("jailctl files get ID").

A --file larger than 1 MiB is stored in the daemon's file store first
(streamed from disk, not sent as base64) and removed from it after the
run; with a daemon that has no store, it is sent inline.

Exit status: the run's exit code; 124 when it timed out; 128+N when a
signal N killed it; 137 when it hit the memory limit; 1 for any other
failed run, or when a returned file could not be written; 2 for usage
errors and errors from the daemon. With --json, the daemon's response is
printed and nothing is written; the exit status is the same.`

func runExec(e *env, args []string) int {
	fs := e.flagSet("exec")
	var f runFlags
	f.register(fs, forRun)
	daemon := targetFlags(fs)
	pos, rc, ok := e.parse(fs, args, 1)
	if !ok {
		return rc
	}
	req := &api.ExecuteRequest{ReturnFiles: f.get, LastLineInteractive: f.interactive, Network: f.networkMode(), AllowHosts: f.allowHosts,
		Image: f.image, Limits: f.limitsPtr(), Env: f.envMap(), ReturnFilesAs: f.returnAs()}
	if req.Code, req.Stdin, rc, ok = f.readCode(e, "exec", pos); !ok {
		return rc
	}
	c, cleanup, rc, ok := e.dial(daemon, &f, &req.Files)
	if !ok {
		return rc
	}
	defer cleanup()
	if f.json {
		var resp api.ExecuteResponse
		if rc, ok := e.fetch(c, http.MethodPost, "/v1/execute", req, &resp, true); !ok {
			return rc
		}
		return exitCode(&resp)
	}
	resp, err := c.ExecuteStream(e.ctx, req, e.printOutput())
	if err != nil {
		return e.daemonError(err)
	}
	return e.report(resp, f.outDir)
}

// readCode reads a command's code (-c, else FILE or stdin: the one
// positional argument in pos) and its --stdin-file, if any. ok is false
// when the command must exit with rc.
func (f *runFlags) readCode(e *env, cmd string, pos []string) (code string, stdin *string, rc int, ok bool) {
	code = f.code
	switch {
	case f.codeSet && len(pos) > 0:
		return "", nil, e.usageError(cmd + ": give -c CODE or FILE, not both"), false
	case !f.codeSet:
		src := ""
		if len(pos) == 1 {
			src = pos[0]
		}
		if (src == "" || src == "-") && f.stdinFile == "-" {
			return "", nil, e.usageError(cmd + ": stdin cannot be both the code and --stdin-file"), false
		}
		c, _, err := e.readSource(src)
		if err != nil {
			return "", nil, e.errorf("%v", err), false
		}
		code = c
	}
	if f.stdinFile != "" {
		in, _, err := e.readSource(f.stdinFile)
		if err != nil {
			return "", nil, e.errorf("--stdin-file: %v", err), false
		}
		stdin = &in
	}
	return code, stdin, 0, true
}

// report prints a run's outcome after its output (which printOutput
// printed as it came), writes its files beneath outDir and returns
// jailctl's exit status for it.
func (e *env) report(resp *api.ExecuteResponse, outDir string) int {
	// With last_line_interactive the runner prints the value's repr to
	// stdout itself, as a REPL does; resp.Result is the same text.
	if resp.StdoutTruncated {
		fmt.Fprintln(e.stderr, "jailctl: the run's stdout was truncated")
	}
	if resp.StderrTruncated {
		fmt.Fprintln(e.stderr, "jailctl: the run's stderr was truncated")
	}
	e.printDisplays(resp)
	writeFailed := !e.writeOutputs(resp, outDir)
	if resp.Message != "" && resp.Status != api.StatusOK {
		fmt.Fprintf(e.stderr, "jailctl: %s\n", resp.Message)
	}
	code := exitCode(resp)
	if writeFailed && code == exitOK {
		code = exitFail
	}
	return code
}

// writeOutputs writes the returned files and figures beneath dir and
// reports each on stderr, with the ID of each file returned into the
// store. It returns false if any could not be written.
func (e *env) writeOutputs(resp *api.ExecuteResponse, dir string) bool {
	ok := true
	for _, f := range resp.Files {
		switch {
		case f.Error != "":
			fmt.Fprintf(e.stderr, "jailctl: %s not returned: %s\n", quoteName(f.Path), f.Error)
		case f.FileID != "":
			fmt.Fprintf(e.stderr, "stored %s as %s (%s)\n", quoteName(f.Path), quoteName(f.FileID), humanSize(f.SizeBytes))
		}
	}
	type output struct{ name, b64 string }
	var outs []output
	for _, f := range resp.Files {
		if f.Error == "" && f.FileID == "" {
			outs = append(outs, output{f.Path, f.ContentB64})
		}
	}
	for _, f := range resp.Figures {
		outs = append(outs, output{f.Name, f.ContentB64})
	}
	for i, o := range resp.Outputs {
		if figureOutput(resp, o) {
			continue
		}
		for _, im := range outputImages {
			var b64 string
			if json.Unmarshal(o.Data[im.mime], &b64) == nil && b64 != "" {
				outs = append(outs, output{fmt.Sprintf("output-%d.%s", i+1, im.ext), b64})
			}
		}
	}
	if len(outs) == 0 {
		return true
	}
	d, err := openOutDir(dir)
	if err != nil {
		fmt.Fprintf(e.stderr, "jailctl: --out-dir: %v\n", err)
		return false
	}
	defer d.close()
	for _, o := range outs {
		data, err := base64.StdEncoding.DecodeString(o.b64)
		if err == nil {
			err = d.write(o.name, data)
		}
		if err != nil {
			fmt.Fprintf(e.stderr, "jailctl: cannot write %s: %v\n", quoteName(o.name), err)
			ok = false
			continue
		}
		fmt.Fprintf(e.stderr, "wrote %s\n", quoteName(filepath.Join(dir, filepath.Clean(o.name))))
	}
	return ok
}

// The types of a rich output that jailctl saves as files (base64 on the
// wire; an SVG is text, saved as it is).
var outputImages = []struct{ mime, ext string }{{"image/png", "png"}, {"image/jpeg", "jpg"}, {"application/pdf", "pdf"}}

// figureOutput reports whether o is one of resp's figures as an output
// (its image/png is a figure's, which is saved under the figure's name).
func figureOutput(resp *api.ExecuteResponse, o api.Output) bool {
	var b64 string
	if json.Unmarshal(o.Data["image/png"], &b64) != nil {
		return false
	}
	for _, f := range resp.Figures {
		if f.ContentB64 == b64 {
			return true
		}
	}
	return false
}

// printDisplays prints the text/plain of each display() output on
// stdout, after the run's own output (the last expression's value the
// runner printed itself), as a terminal shows what a notebook would.
func (e *env) printDisplays(resp *api.ExecuteResponse) {
	for _, o := range resp.Outputs {
		if o.OutputType != api.OutputDisplayData || figureOutput(resp, o) {
			continue
		}
		var text string
		if json.Unmarshal(o.Data["text/plain"], &text) == nil {
			fmt.Fprintln(e.stdout, text)
		}
	}
}

// exitCode maps a run's outcome to jailctl's exit status, as timeout(1)
// and shells do: 124 for a timeout, 128+N for signal N.
func exitCode(r *api.ExecuteResponse) int {
	switch {
	case r.Status == api.StatusTimeout:
		return 124
	case r.Signal != nil && *r.Signal > 0 && *r.Signal < 128:
		return 128 + *r.Signal
	case r.Status == api.StatusMemoryLimit:
		return 128 + 9
	case r.ExitCode != nil && *r.ExitCode > 0 && *r.ExitCode < 256:
		return *r.ExitCode
	case r.Status == api.StatusOK:
		return exitOK
	}
	// A failed run that exited 0 (an output limit, say), or an exit code
	// that a process status cannot hold.
	return exitFail
}

// parseTimeout parses a --timeout: a Go duration, or plain seconds.
func parseTimeout(s string) (int64, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(secs) || math.IsInf(secs, 0) || secs > math.MaxInt64/float64(time.Second) {
			return 0, errors.New("want a duration such as 5s or 1500ms")
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 {
		return 0, errors.New("want a positive duration")
	}
	// Round up so that 1µs asks for 1ms rather than the daemon's default.
	return int64((d + time.Millisecond - 1) / time.Millisecond), nil
}
