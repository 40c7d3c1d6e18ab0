package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/errdefs"
)

const filesHelp = `The daemon's file store keeps files for runs to use, so that a large file
is sent once and never as base64: "jailctl exec --file" sends a file
larger than 1 MiB through it, a request's files[].file_id names a stored
file, and "jailctl exec --return-to-store" puts a run's returned files
there. A file belongs to the user who stored it (others get "not found";
admins see all) and expires after the store's time to live ("jailctl
info --json": files.ttl_s; 24 h by default).`

// filesCommands is set in init for the same reason as commands.
var filesCommands []subcommand

func init() {
	filesCommands = []subcommand{
		{"put", "[flags] LOCAL|-", "store a local file (- for stdin, with --name) and print its ID", "", runFilesPut},
		{"get", "[flags] ID", "write a stored file to stdout, or to -o PATH", filesGetHelp, runFilesGet},
		{"ls", "[flags]", "list your stored files (an admin's: everyone's)", "", runFilesList},
		{"show", "[flags] ID", "describe a stored file", "", runFilesShow},
		{"rm", "[flags] ID...", "remove stored files", "", runFilesRemove},
	}
}

const filesGetHelp = `With -o PATH the file is written to a temporary file beside PATH, synced
and renamed into place, so PATH is never left half-written; when PATH is a
directory, the file keeps its stored name there.`

func runFiles(e *env, args []string) int {
	return e.runGroup("files", filesHelp, filesCommands, args)
}

func runFilesPut(e *env, sc *subcommand, args []string) int {
	fs := e.flagSet("files put")
	name := fs.String("name", "", "store the file under `NAME` (default: LOCAL's base name)")
	jsonOut := fs.Bool("json", false, "print the stored file's description as JSON instead of its ID")
	daemon := targetFlags(fs)
	pos, rc, ok := e.parseSub(fs, sc, args, 1, 1)
	if !ok {
		return rc
	}
	var r io.Reader
	size := int64(-1)
	if src := pos[0]; src == "-" {
		if *name == "" {
			return e.usageError("files put: stdin needs --name")
		}
		r = e.stdin
	} else {
		f, n, err := openUpload(src)
		if err != nil {
			return e.errorf("%v", err)
		}
		defer f.Close()
		r, size = f, n
		if *name == "" {
			*name = filepath.Base(src)
		}
	}
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	f, err := c.PutFile(e.ctx, *name, r, size)
	if err != nil {
		return e.daemonError(err)
	}
	if *jsonOut {
		b, _ := json.Marshal(f)
		e.printJSON(b)
	} else {
		fmt.Fprintln(e.stdout, f.FileID)
	}
	return exitOK
}

// openUpload opens a local file to upload and returns its size: -1 when
// it is not a regular file (a pipe, say), whose length is not known.
func openUpload(name string) (*os.File, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, 0, err
	case fi.IsDir():
		f.Close()
		return nil, 0, fmt.Errorf("%s is a directory", name)
	case !fi.Mode().IsRegular():
		return f, -1, nil
	}
	return f, fi.Size(), nil
}

func runFilesGet(e *env, sc *subcommand, args []string) int {
	fs := e.flagSet("files get")
	out := fs.String("o", "", "write the file to `PATH` instead of stdout")
	daemon := targetFlags(fs)
	pos, rc, ok := e.parseSub(fs, sc, args, 1, 1)
	if !ok {
		return rc
	}
	id := pos[0]
	c, rc, ok := e.client(daemon)
	if !ok {
		return rc
	}
	target := *out
	if target != "" && target != "-" {
		if fi, err := os.Stat(target); err == nil && fi.IsDir() {
			meta, err := c.FileMeta(e.ctx, id)
			if err != nil {
				return e.daemonError(err)
			}
			// The daemon refuses names with a '/', "." and ".."; this
			// is the client's own check of what it writes.
			if meta.Name != filepath.Base(meta.Name) || !safeRelPath(meta.Name) {
				return e.errorf("refusing the stored name %s; give -o a file name", quoteName(meta.Name))
			}
			target = filepath.Join(target, meta.Name)
		}
	}
	body, size, err := c.GetFile(e.ctx, id)
	if err != nil {
		return e.daemonError(err)
	}
	defer body.Close()
	if target == "" || target == "-" {
		n, err := io.Copy(e.stdout, body)
		if err == nil && size >= 0 && n != size {
			err = fmt.Errorf("got %d of %d bytes", n, size)
		}
		if err != nil {
			return e.transferError(quoteName(id), err)
		}
		return exitOK
	}
	if err := writeDownload(target, body, size); err != nil {
		return e.transferError("write "+target, err)
	}
	return exitOK
}

// transferError reports an error while a file moved, an interrupt as
// such.
func (e *env) transferError(what string, err error) int {
	if e.ctx.Err() != nil {
		return e.daemonError(e.ctx.Err())
	}
	return e.errorf("%s: %v", what, err)
}

// writeDownload writes r (size bytes; -1: unknown) to name through a
// temporary file beside it, synced and renamed into place: name is
// replaced whole or not at all, and a symlink there is replaced rather
// than followed. A new file gets 0666 less the umask; a file replaced
// keeps its permissions.
func writeDownload(name string, r io.Reader, size int64) (retErr error) {
	mode := os.FileMode(0o666)
	if fi, err := os.Lstat(name); err == nil && fi.Mode().IsRegular() {
		mode = fi.Mode().Perm()
	} else {
		umask := unix.Umask(0)
		unix.Umask(umask)
		mode &^= os.FileMode(umask)
	}
	f, err := os.CreateTemp(filepath.Dir(name), ".jailctl-*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	n, err := io.Copy(f, r)
	if err != nil {
		return err
	}
	if size >= 0 && n != size {
		return fmt.Errorf("got %d of %d bytes", n, size)
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

func runFilesList(e *env, sc *subcommand, args []string) int {
	return runList(e, sc, args, "files ls", "/v1/files", func(w io.Writer, l api.FileList, now time.Time) {
		writeFileTable(w, l.Files, now)
	})
}

// writeFileTable writes stored files as a table, oldest first.
func writeFileTable(w io.Writer, files []api.StoredFile, now time.Time) {
	files = append([]api.StoredFile(nil), files...)
	sort.SliceStable(files, func(i, j int) bool { return files[i].CreatedAt.Before(files[j].CreatedAt) })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSIZE\tEXPIRES")
	for _, f := range files {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", quoteName(f.FileID), quoteName(f.Name), humanSize(f.SizeBytes), fileExpires(f.ExpiresAt, now))
	}
	tw.Flush()
}

func fileExpires(t, now time.Time) string {
	switch {
	case t.IsZero():
		return "-"
	case !t.After(now):
		return "now"
	}
	return "in " + shortDuration(t.Sub(now))
}

// humanSize is a byte count for people: 512 B, 1.5 KiB, 100.0 MiB.
func humanSize(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, units := float64(n)/1024, []string{"KiB", "MiB", "GiB", "TiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

func runFilesShow(e *env, sc *subcommand, args []string) int {
	a, rc, ok := e.ask("files show", jsonUsage, sc, args, 1, 1)
	if !ok {
		return rc
	}
	f, err := a.c.FileMeta(e.ctx, a.pos[0])
	if err != nil {
		return e.daemonError(err)
	}
	if a.json {
		b, _ := json.Marshal(f)
		e.printJSON(b)
		return exitOK
	}
	writeStoredFile(e.stdout, f, time.Now())
	return exitOK
}

// writeStoredFile describes one stored file, a field a line.
func writeStoredFile(w io.Writer, f *api.StoredFile, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	stamp := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Local().Format(time.DateTime)
	}
	row("file:", "%s", quoteName(f.FileID))
	row("name:", "%s", quoteName(f.Name))
	row("size:", "%d bytes (%s)", f.SizeBytes, humanSize(f.SizeBytes))
	row("sha256:", "%s", quoteName(f.SHA256))
	row("created:", "%s (%s)", stamp(f.CreatedAt), ago(f.CreatedAt, now))
	row("expires:", "%s (%s)", stamp(f.ExpiresAt), fileExpires(f.ExpiresAt, now))
	row("owner:", "uid %d", f.UID)
	tw.Flush()
}

func runFilesRemove(e *env, sc *subcommand, args []string) int {
	return runRemove(e, sc, args, "files rm", func(c *client.Client, id string) error {
		_, err := c.DeleteFile(e.ctx, id)
		return err
	})
}

// storeThreshold is the size above which "exec --file" sends a file
// through the file store (streamed from disk) rather than as base64 in
// the request.
const storeThreshold = 1 << 20

// stageFiles turns --file uploads into a request's files. A regular file
// larger than storeThreshold is stored first, streamed from disk, and
// named by its file_id, when the daemon has a store; smaller files, and
// every file when it has none, go inline as before (at most
// maxInputBytes). cleanup removes the stored files: the caller runs it
// once the request is done, whatever its outcome. On error nothing is
// left stored.
func (e *env) stageFiles(c *client.Client, specs []fileSpec) (files []api.FileIn, cleanup func(), err error) {
	var stored []string
	remove := func() { e.removeStored(c, stored) }
	defer func() {
		if err != nil {
			remove()
			files, cleanup = nil, func() {}
		}
	}()
	const (
		unknown = iota
		yes
		no
	)
	store := unknown
	for _, spec := range specs {
		f, size, err := openUpload(spec.local)
		if err != nil {
			return nil, nil, fmt.Errorf("--file: %w", err)
		}
		if size > storeThreshold && store == unknown {
			store = no
			info, err := c.Info(e.ctx)
			if err != nil {
				f.Close()
				return nil, nil, err
			}
			if info.Files.Enabled {
				store = yes
			}
		}
		if size > storeThreshold && store == yes {
			sf, err := c.PutFile(e.ctx, path.Base(spec.path), f, size)
			switch {
			case err == nil:
				f.Close()
				stored = append(stored, sf.FileID)
				files = append(files, api.FileIn{Path: spec.path, FileID: sf.FileID})
				continue
			case isNotFound(err) && e.ctx.Err() == nil:
				// A daemon without the store's routes after all. The
				// upload's reader may still be read by the HTTP transport
				// after the answer (it writes a body the daemon refused
				// early until the connection closes): the file is opened
				// afresh, never sought back and shared.
				store = no
				f.Close()
				if f, _, err = openUpload(spec.local); err != nil {
					return nil, nil, fmt.Errorf("--file: %w", err)
				}
			default:
				f.Close()
				return nil, nil, fmt.Errorf("--file %s: %w", spec.local, err)
			}
		}
		b, err := readBounded(f, spec.local)
		f.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("--file: %w", err)
		}
		files = append(files, api.FileIn{Path: spec.path, ContentB64: base64.StdEncoding.EncodeToString(b)})
	}
	return files, remove, nil
}

// isNotFound reports whether err is the daemon's 404, whatever its body.
func isNotFound(err error) bool {
	var ae *api.Error
	return errors.Is(err, errdefs.ErrNotFound) || errors.As(err, &ae) && ae.Status == http.StatusNotFound
}

// removeStored removes the files stageFiles stored, best effort: even
// after Ctrl-C (the store's time to live removes what this cannot).
func (e *env) removeStored(c *client.Client, ids []string) {
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.ctx), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		if _, err := c.DeleteFile(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			fmt.Fprintf(e.stderr, "jailctl: cannot remove stored file %s: %v\n", quoteName(id), err)
		}
	}
}

// printOutput returns an ExecuteStream callback that writes a run's
// stdout and stderr events to jailctl's as they arrive, unbuffered.
func (e *env) printOutput() func(api.Event) error {
	return func(ev api.Event) error {
		var w io.Writer
		switch ev.Event {
		case api.EventStdout:
			w = e.stdout
		case api.EventStderr:
			w = e.stderr
		default:
			return nil
		}
		var t api.EventText
		if json.Unmarshal(ev.Data, &t) == nil {
			io.WriteString(w, t.Text)
		}
		return nil
	}
}
