package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jaild/jaild/internal/api"
)

// A session's files (issue 29): jailctl session ls-files | cat | put |
// mkdir | mv | rm-file, over /v1/sessions/{id}/fs/{path}. Paths are the
// session's: /workspace/... or /tmp/....

func runSessionLsFiles(e *env, sc *subcommand, args []string) int {
	a, rc, ok := e.ask("session ls-files", jsonUsage, sc, args, 1, 2)
	if !ok {
		return rc
	}
	path := "/workspace"
	if len(a.pos) > 1 {
		path = a.pos[1]
	}
	l, body, _, err := a.c.SessionFS(e.ctx, a.pos[0], path)
	if err != nil {
		return e.daemonError(err)
	}
	if body != nil {
		body.Close()
		return e.errorf("%s is a file: jailctl session cat %s %s", quoteName(path), a.pos[0], path)
	}
	if a.json {
		b, _ := json.Marshal(l)
		e.printJSON(b)
		return exitOK
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tMODE\tSIZE\tMODIFIED\tNAME")
	for _, en := range l.Entries {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", en.Type, en.Mode, en.Size, en.MTime.Local().Format(time.DateTime), quoteName(en.Name))
	}
	tw.Flush()
	if l.Truncated {
		fmt.Fprintf(e.stderr, "jailctl: %s has more entries than the %d listed\n", quoteName(path), len(l.Entries))
	}
	return exitOK
}

func runSessionCat(e *env, sc *subcommand, args []string) int {
	fs := e.flagSet("session cat")
	out := fs.String("o", "", "write the file to `PATH` instead of stdout")
	daemon := targetFlags(fs)
	pos, rc, ok := e.parseSub(fs, sc, args, 2, 2)
	if !ok {
		return rc
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	l, body, size, err := c.SessionFS(e.ctx, pos[0], pos[1])
	if err != nil {
		return e.daemonError(err)
	}
	if l != nil {
		return e.errorf("%s is a directory: jailctl session ls-files %s %s", quoteName(pos[1]), pos[0], pos[1])
	}
	defer body.Close()
	if *out == "" || *out == "-" {
		n, err := io.Copy(e.stdout, body)
		if err == nil && size >= 0 && n != size {
			err = fmt.Errorf("got %d of %d bytes", n, size)
		}
		if err != nil {
			return e.transferError(quoteName(pos[1]), err)
		}
		return exitOK
	}
	if err := writeDownload(*out, body, size); err != nil {
		return e.transferError("write "+*out, err)
	}
	return exitOK
}

func runSessionPut(e *env, sc *subcommand, args []string) int {
	fs := e.flagSet("session put")
	parents := fs.Bool("p", false, "make the missing directories above PATH")
	jsonOut := fs.Bool("json", false, jsonUsage)
	daemon := targetFlags(fs)
	pos, rc, ok := e.parseSub(fs, sc, args, 3, 3)
	if !ok {
		return rc
	}
	r, size := io.Reader(e.stdin), int64(-1)
	if src := pos[1]; src != "-" {
		f, n, err := openUpload(src)
		if err != nil {
			return e.errorf("%v", err)
		}
		defer f.Close()
		r, size = f, n
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	en, err := c.PutSessionFile(e.ctx, pos[0], pos[2], r, size, *parents)
	if err != nil {
		return e.daemonError(err)
	}
	return e.printEntry(en, *jsonOut)
}

func runSessionMkdir(e *env, sc *subcommand, args []string) int {
	fs := e.flagSet("session mkdir")
	parents := fs.Bool("p", false, "make the missing parents too, and no error when it exists")
	jsonOut := fs.Bool("json", false, jsonUsage)
	daemon := targetFlags(fs)
	pos, rc, ok := e.parseSub(fs, sc, args, 2, 2)
	if !ok {
		return rc
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	en, err := c.MkdirSessionFile(e.ctx, pos[0], pos[1], *parents)
	if err != nil {
		return e.daemonError(err)
	}
	return e.printEntry(en, *jsonOut)
}

func runSessionMove(e *env, sc *subcommand, args []string) int {
	a, rc, ok := e.ask("session mv", jsonUsage, sc, args, 3, 3)
	if !ok {
		return rc
	}
	en, err := a.c.MoveSessionFile(e.ctx, a.pos[0], a.pos[1], a.pos[2])
	if err != nil {
		return e.daemonError(err)
	}
	return e.printEntry(en, a.json)
}

func runSessionRemoveFile(e *env, sc *subcommand, args []string) int {
	a, rc, ok := e.ask("session rm-file", jsonUsage, sc, args, 2, 2)
	if !ok {
		return rc
	}
	if err := a.c.RemoveSessionFile(e.ctx, a.pos[0], a.pos[1]); err != nil {
		return e.daemonError(err)
	}
	return exitOK
}

// printEntry prints what a write made: its path, or with jsonOut its
// FSEntry.
func (e *env) printEntry(en *api.FSEntry, jsonOut bool) int {
	if jsonOut {
		b, _ := json.Marshal(en)
		e.printJSON(b)
	} else {
		fmt.Fprintln(e.stdout, en.Path)
	}
	return exitOK
}
