package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/jaild/jaild/internal/api"
)

const formatHelp = `Prints the formatted code on stdout. With --write, rewrites FILE in place
(atomically) if formatting changes it; with --check, prints nothing and
exits 1 if formatting would change it.`

func runFormat(e *env, args []string) int {
	fs := e.flagSet("format")
	jsonOut := fs.Bool("json", false, "print the daemon's response JSON")
	check := fs.Bool("check", false, "print nothing; exit 1 if formatting would change the code")
	write := fs.Bool("write", false, "rewrite FILE in place if formatting changes it")
	image := imageFlag(fs, ruffImageUsage)
	daemon := targetFlags(fs)
	pos, rc, ok := e.parse(fs, args, 1)
	if !ok {
		return rc
	}
	src := ""
	if len(pos) == 1 {
		src = pos[0]
	}
	switch {
	case *check && *write:
		return e.usageError("format: give --check or --write, not both")
	case *write && (src == "" || src == "-"):
		return e.usageError("format: --write needs a FILE")
	}
	code, _, err := e.readSource(src)
	if err != nil {
		return e.errorf("%v", err)
	}
	req := &api.FormatRequest{Code: code, Image: *image}

	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	var resp api.FormatResponse
	if *jsonOut {
		raw, err := c.Do(e.ctx, http.MethodPost, "/v1/format", req)
		if err != nil {
			return e.daemonError(err)
		}
		if err := json.Unmarshal(raw, &resp); err != nil {
			return e.errorf("malformed response: %v", err)
		}
		e.printJSON(raw)
	} else {
		r, err := c.Format(e.ctx, req)
		if err != nil {
			return e.daemonError(err)
		}
		resp = *r
	}
	changed := resp.Code != code

	switch {
	case *check:
		if changed {
			return exitFail
		}
	case *write:
		if changed {
			if err := replaceFile(src, []byte(resp.Code)); err != nil {
				return e.errorf("%v", err)
			}
			fmt.Fprintf(e.stderr, "reformatted %s\n", src)
		}
	case !*jsonOut:
		fmt.Fprint(e.stdout, resp.Code)
	}
	return exitOK
}

// replaceFile atomically replaces the content of the regular file name
// (or of the file its symlinks lead to), keeping its permissions.
func replaceFile(name string, data []byte) (retErr error) {
	target, err := filepath.EvalSymlinks(name)
	if err != nil {
		return err
	}
	fi, err := os.Stat(target)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", name)
	}
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".jailctl-*")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			os.Remove(f.Name())
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(fi.Mode().Perm())
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), target)
}
