package cli

import (
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
	check := fs.Bool("check", false, "print nothing; exit 1 if formatting would change the code")
	write := fs.Bool("write", false, "rewrite FILE in place if formatting changes it")
	var f runFlags
	f.register(fs, forRuff)
	daemon := targetFlags(fs)
	code, src, c, rc, ok := e.ruffInput(fs, daemon, args, func(src string) (int, bool) {
		switch {
		case *check && *write:
			return e.usageError("format: give --check or --write, not both"), false
		case *write && (src == "" || src == "-"):
			return e.usageError("format: --write needs a FILE"), false
		}
		return 0, true
	})
	if !ok {
		return rc
	}
	var resp api.FormatResponse
	if rc, ok := e.fetch(c, http.MethodPost, "/v1/format", &api.FormatRequest{Code: code, Image: f.image}, &resp, f.json); !ok {
		return rc
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
	case !f.json:
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
