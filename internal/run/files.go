package run

import (
	"strings"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/workspace"
)

// A session's files from the daemon's side (issue 29): its /workspace and
// /tmp, read and written on the host through the jail's tmpfs (package
// workspace: openat2 beneath, no link followed), while its processes are
// frozen. One operation at a time, and not during a call (callMu, as a
// call): a paused session is restored first.

// fsRoots maps the first component of a session's path to its tree in
// the jail's files directory (jail.FilesDir).
var fsRoots = map[string]string{"workspace": "work", "tmp": "tmp"}

// FS runs the file operation r on the session's files.
func (ss *Session) FS(r spec.FSRequest) (spec.FSResult, error) {
	if _, _, err := fsPaths(r); err != nil {
		return spec.FSResult{}, err // before the session is touched
	}
	if !ss.tryCall() {
		return spec.FSResult{}, errdefs.New(errdefs.ErrConflict, "the session is running a call; its files are reached between calls")
	}
	defer ss.callMu.Unlock()
	if ss.isEnded() {
		return spec.FSResult{}, ss.endedError()
	}
	took, err := ss.resume()
	if err != nil {
		return spec.FSResult{}, err
	}
	if took > 0 {
		if err := freeze(ss.st.j); err != nil {
			ss.s.log.Error("freeze resumed session; ending it", "id", ss.ID(), "err", err)
			ss.end(spec.EndFreezeFailed)
			return spec.FSResult{}, ss.endedError()
		}
	}
	j := ss.st.j
	return FilesIn(j.FilesDir(), r, ss.limits.WorkspaceBytes, j.HostUID(), j.HostGID())
}

// FilesIn runs r on the files directory dir (a jail's: its trees work and
// tmp, jail.FilesDir), what it makes owned by uid:gid (-1: left as is),
// a file at most limit bytes. servertest's sessions use it on a
// directory of their own.
func FilesIn(dir string, r spec.FSRequest, limit int64, uid, gid int) (spec.FSResult, error) {
	rel, to, err := fsPaths(r)
	if err != nil {
		return spec.FSResult{}, err
	}
	d, err := workspace.Open(dir)
	if err != nil {
		return spec.FSResult{}, err
	}
	defer d.Close()
	d.Names = sessionName
	return fsDo(d, r, rel, to, limit, uid, gid)
}

// fsPaths maps r's paths to the files directory's.
func fsPaths(r spec.FSRequest) (rel, to string, err error) {
	if rel, err = fsPath("path", r.Path); err != nil || r.Op != spec.FSMove {
		return rel, "", err
	}
	if to, err = fsPath("to", r.To); err != nil {
		return "", "", err
	}
	if !strings.Contains(to, "/") {
		return "", "", errdefs.FieldOfClass(errdefs.ErrConflict, "to", "%q is not beneath /workspace or /tmp", clipPath(r.To))
	}
	return rel, to, nil
}

// fsDo runs r on d (the jail's files directory), rel and to its paths
// there.
func fsDo(d *workspace.Dir, r spec.FSRequest, rel, to string, limit int64, uid, gid int) (spec.FSResult, error) {
	var out spec.FSResult
	var err error
	if !strings.Contains(rel, "/") && r.Op != spec.FSList && r.Op != spec.FSStat && r.Op != spec.FSOpen {
		return out, errdefs.FieldOfClass(errdefs.ErrConflict, "path", "%s itself cannot be changed, only what is beneath it", sessionName(rel))
	}
	switch r.Op {
	case spec.FSStat:
		out.Entry, err = d.Stat(rel)
		if err == nil && !strings.Contains(rel, "/") {
			out.Entry.Name = jailName(rel)
		}
	case spec.FSList:
		out.Entries, out.Truncated, err = d.List(rel, spec.MaxFSList)
	case spec.FSOpen:
		out.File, out.Entry, err = d.OpenFile(rel)
	case spec.FSPut:
		out.Entry, out.Created, err = d.Put(rel, r.Body, limit, r.Parents, uid, gid)
	case spec.FSRemove:
		err = d.Remove(rel)
	case spec.FSMkdir:
		out.Entry, err = d.Mkdir(rel, r.Parents, uid, gid)
	case spec.FSMove:
		out.Entry, err = d.Move(rel, to)
	default:
		err = errdefs.New(errdefs.ErrInvalidArgument, "unknown file operation %q", r.Op)
	}
	return out, err
}

// fsPath maps a session's absolute path (/workspace/..., /tmp/...) to
// its path in the jail's files directory.
func fsPath(field, p string) (string, error) {
	if p == "/" || p == "" {
		return "", errdefs.Field(field, "is required: a path beneath /workspace or /tmp")
	}
	if !strings.HasPrefix(p, "/") {
		return "", errdefs.Field(field, "%q must be absolute: /workspace/... or /tmp/...", clipPath(p))
	}
	p = strings.TrimSuffix(p[1:], "/")
	if err := spec.ValidatePath(p); err != nil {
		return "", errdefs.Field(field, "%v", err)
	}
	first, rest, _ := strings.Cut(p, "/")
	tree, ok := fsRoots[first]
	if !ok {
		return "", errdefs.FieldOfClass(errdefs.ErrNotFound, field, "%q is not beneath /workspace or /tmp, the session's files", clipPath("/"+p))
	}
	if rest == "" {
		return tree, nil
	}
	return tree + "/" + rest, nil
}

// sessionName is the session's path of rel, a path in the files
// directory: /workspace/... or /tmp/....
func sessionName(rel string) string {
	tree, rest, _ := strings.Cut(rel, "/")
	p := "/" + jailName(tree)
	if rest != "" {
		p += "/" + rest
	}
	return p
}

// jailName is the session's name of a tree of the files directory.
func jailName(tree string) string {
	for k, v := range fsRoots {
		if v == tree {
			return k
		}
	}
	return tree
}

func clipPath(p string) string {
	if len(p) > 256 {
		return p[:256] + "..."
	}
	return p
}
