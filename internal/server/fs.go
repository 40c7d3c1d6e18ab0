package server

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
)

// A session's files (issue 29): /v1/sessions/{id}/fs/{path...}, its
// /workspace and /tmp. GET lists a directory (JSON) or sends a file
// (Range, ETag); PUT writes a file from the body, streamed; DELETE
// removes a file or an empty directory; POST ?op=mkdir makes a directory
// and ?op=move&to=PATH renames. The session is busy meanwhile (a call
// then is 409, as during another call), a paused one is restored first, and its
// processes stay frozen: the daemon reaches its files from the host,
// beneath its tmpfs, following no link.

// FileSession is a Session whose files the daemon reaches (run.Session).
type FileSession interface {
	FS(r spec.FSRequest) (spec.FSResult, error)
}

func fsWire(path string, e spec.FSEntry) api.FSEntry {
	return api.FSEntry{Name: e.Name, Path: path, Type: e.Type, Size: e.Size, Mode: fmt.Sprintf("%04o", e.Mode), MTime: e.MTime.UTC()}
}

// fsPathOf is the session's path of a request: "/" and the rest of its
// URL beneath fs/.
func fsPathOf(r *http.Request) string {
	return "/" + strings.TrimSuffix(r.PathValue("path"), "/")
}

// boolParam reads the query's boolean name: absent is false.
func boolParam(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errdefs.Field(name, "%q is not true or false", trimHeader(v))
	}
	return b, nil
}

// sessionFS serves every method of /v1/sessions/{id}/fs/{path...}.
func (s *Server) sessionFS(w http.ResponseWriter, r *http.Request) error {
	op := map[string]string{http.MethodGet: "session_fs_get", http.MethodHead: "session_fs_get", http.MethodPut: "session_fs_put", http.MethodDelete: "session_fs_delete", http.MethodPost: "session_fs_post"}[r.Method]
	who, sw := s.sessionCaller(r)
	id := r.PathValue("id")
	path := fsPathOf(r)
	h, _, done, err := s.sessions.Begin(id, sw)
	if err != nil {
		s.audit.refused(who, op, err)
		return err
	}
	defer done(0)
	fsh, ok := h.(FileSession)
	if !ok {
		return errdefs.New(errdefs.ErrUnavailable, "sessions' files cannot be reached on this daemon")
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return s.fsGet(w, r, fsh, path, func() { done(0) })
	case http.MethodPut:
		parents, err := boolParam(r, "parents")
		if err != nil {
			return err
		}
		body := io.Reader(r.Body)
		if fid := r.URL.Query().Get("from_file"); fid != "" {
			// A stored file of the caller's, copied in (no body).
			if r.ContentLength != 0 {
				return errdefs.Field("from_file", "cannot be given with a body: the file is the stored one")
			}
			if err := s.filesEnabled(); err != nil {
				return err
			}
			f, _, err := s.files.Open(who.UID, who.Admin, fid)
			if err != nil {
				s.audit.refused(who, op, err)
				return errdefs.InField("from_file", err)
			}
			defer f.Close()
			body = f
		}
		res, err := fsh.FS(spec.FSRequest{Op: spec.FSPut, Path: path, Body: body, Parents: parents})
		if err != nil {
			s.audit.refused(who, op, err)
			return err
		}
		s.log.Info("audit", "op", op, "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", id, "path", path, "bytes", res.Entry.Size)
		status := http.StatusOK
		if res.Created {
			status = http.StatusCreated
		}
		writeJSON(w, status, fsWire(path, res.Entry))
		return nil
	case http.MethodDelete:
		if _, err := fsh.FS(spec.FSRequest{Op: spec.FSRemove, Path: path}); err != nil {
			s.audit.refused(who, op, err)
			return err
		}
		s.log.Info("audit", "op", op, "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", id, "path", path)
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return s.fsPost(w, r, fsh, path, op)
}

// fsGet answers a directory's listing or a file's bytes. The session is
// released (done) once the file is open: a slow reader does not hold it.
func (s *Server) fsGet(w http.ResponseWriter, r *http.Request, fsh FileSession, path string, done func()) error {
	st, err := fsh.FS(spec.FSRequest{Op: spec.FSStat, Path: path})
	if err != nil {
		return err
	}
	if st.Entry.Type == spec.FSDir {
		res, err := fsh.FS(spec.FSRequest{Op: spec.FSList, Path: path})
		if err != nil {
			return err
		}
		out := api.FSListing{Path: path, Entries: make([]api.FSEntry, 0, len(res.Entries)), Truncated: res.Truncated}
		for _, e := range res.Entries {
			out.Entries = append(out.Entries, fsWire(strings.TrimSuffix(path, "/")+"/"+e.Name, e))
		}
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	res, err := fsh.FS(spec.FSRequest{Op: spec.FSOpen, Path: path})
	if err != nil {
		return err
	}
	defer res.File.Close()
	done()
	e := res.Entry
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("ETag", fmt.Sprintf(`"%x-%x"`, e.Size, e.MTime.UnixNano()))
	dw := &downloadWriter{ResponseWriter: w, p: newProgress(w, s.cfg.ReadTimeout.Duration)}
	dw.onErr = func(status int) {
		var err error
		switch status {
		case http.StatusRequestedRangeNotSatisfiable:
			err = errdefs.New(errdefs.ErrRangeNotSatisfiable, "Range %q is not satisfiable: the file is %d bytes", trimHeader(r.Header.Get("Range")), e.Size)
		default:
			err = fmt.Errorf("serve a session's file: HTTP %d", status)
		}
		st, body := s.errorBody(r, err)
		w.Header().Del("ETag")
		writeJSON(w, st, body)
	}
	http.ServeContent(dw, r, "", e.MTime, res.File)
	return nil
}

// fsPost serves POST ?op=mkdir (parents) and ?op=move&to=PATH.
func (s *Server) fsPost(w http.ResponseWriter, r *http.Request, fsh FileSession, path, op string) error {
	who := callerOf(r)
	q := r.URL.Query()
	req := spec.FSRequest{Path: path}
	status := http.StatusOK
	switch q.Get("op") {
	case "mkdir":
		parents, err := boolParam(r, "parents")
		if err != nil {
			return err
		}
		req.Op, req.Parents, status = spec.FSMkdir, parents, http.StatusCreated
	case "move":
		if q.Get("to") == "" {
			return errdefs.Field("to", "is required with op=move: the new path, beneath /workspace or /tmp")
		}
		req.Op, req.To = spec.FSMove, q.Get("to")
	case "store":
		return s.fsStore(w, r, fsh, path)
	case "":
		return errdefs.Field("op", "is required: mkdir, move or store")
	default:
		return errdefs.Field("op", "%q is not mkdir, move or store", trimHeader(q.Get("op")))
	}
	res, err := fsh.FS(req)
	if err != nil {
		s.audit.refused(who, op, err)
		return err
	}
	s.log.Info("audit", "op", op+"_"+req.Op, "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", r.PathValue("id"), "path", path, "to", req.To)
	at := path
	if req.Op == spec.FSMove {
		at = "/" + strings.Trim(req.To, "/")
	}
	writeJSON(w, status, fsWire(at, res.Entry))
	return nil
}

// fsStore serves POST ?op=store[&name=NAME]: the session's file put in
// the caller's file store (201, its StoredFile), under NAME or its own
// name.
func (s *Server) fsStore(w http.ResponseWriter, r *http.Request, fsh FileSession, path string) error {
	who := callerOf(r)
	if err := s.filesEnabled(); err != nil {
		return err
	}
	res, err := fsh.FS(spec.FSRequest{Op: spec.FSOpen, Path: path})
	if err != nil {
		s.audit.refused(who, "session_fs_store", err)
		return err
	}
	defer res.File.Close()
	name := r.URL.Query().Get("name")
	if name == "" {
		name = res.Entry.Name
	}
	m, err := s.files.Put(who.UID, name, io.LimitReader(res.File, res.Entry.Size))
	if err != nil {
		s.audit.refused(who, "session_fs_store", err)
		return err
	}
	s.log.Info("audit", "op", "session_fs_store", "uid", who.UID, "client", who.Client, "pid", who.PID, "session_id", r.PathValue("id"), "path", path, "file_id", m.ID, "bytes", m.Size)
	writeJSON(w, http.StatusCreated, storedFileWire(m))
	return nil
}
