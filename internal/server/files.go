package server

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/filestore"
)

// The file store's endpoints: uploads and downloads stream (the daemon
// holds a buffer, never a file), and are bounded by files.max_file_mb, not
// max_body_bytes. read_timeout bounds each pause of a transfer, not the
// whole of it.

// Bounds on what a multipart upload may send before its file part.
const (
	maxFormParts = 64
	maxFormBytes = 1 << 20
	// maxPartHead bounds a part's boundary line and header (a file
	// part's is a few hundred bytes). The multipart reader holds a header
	// whole, up to its own bound of 10 MiB: one caller's 64 connections
	// stalled inside such headers held 640 MiB of the daemon's memory.
	maxPartHead = 16 << 10
	// partReadAhead is what the multipart reader may read past what it
	// consumed (its buffer is 4 KiB).
	partReadAhead = 8 << 10
)

func (s *Server) filesEnabled() error {
	if s.files == nil {
		return errdefs.New(errdefs.ErrForbidden, "the file store is disabled on this daemon (files.enabled in its configuration)")
	}
	return nil
}

func storedFileWire(m filestore.Meta) api.StoredFile {
	return api.StoredFile{
		FileID: m.ID, Name: m.Name, SizeBytes: m.Size, SHA256: m.SHA256,
		CreatedAt: m.Created.UTC(), ExpiresAt: m.Expires.UTC(), UID: m.Owner,
	}
}

func (s *Server) uploadFile(w http.ResponseWriter, r *http.Request) error {
	who := callerOf(r)
	fail := func(err error) error {
		s.audit.refused(who, "file_upload", err)
		return err
	}
	if err := s.filesEnabled(); err != nil {
		return fail(err)
	}
	q, err := parseUploadQuery(r.URL.RawQuery)
	if err != nil {
		return fail(err)
	}
	body := progressReader{r: r.Body, p: newProgress(w, s.cfg.ReadTimeout.Duration)}
	m, err := storeUpload(s.files, who.UID, r.Header.Get("Content-Type"), q.name, &body)
	if err != nil {
		// After a pause of read_timeout the write deadline has lapsed
		// too: move it once more, so that the error still goes out.
		body.p.last = time.Time{}
		body.p.tick()
		return fail(err)
	}
	s.log.Info("audit", "op", "file_upload", "uid", who.UID, "client", who.Client, "pid", who.PID, "admin", who.Admin,
		"file_id", m.ID, "size_bytes", m.Size, "sha256", m.SHA256)
	w.Header().Set("Location", "/v1/files/"+m.ID)
	writeJSON(w, http.StatusCreated, storedFileWire(m))
	return nil
}

// uploadQuery is the query of POST /v1/files.
type uploadQuery struct {
	name string // "" when not given
}

// parseUploadQuery parses POST /v1/files's query: an optional name, and
// nothing else.
func parseUploadQuery(raw string) (uploadQuery, error) {
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return uploadQuery{}, errdefs.Field("query", "is not a valid URL query: %v", err)
	}
	var q uploadQuery
	for k, v := range vals {
		if k != "name" {
			return uploadQuery{}, errdefs.Field("query", "unknown parameter %q (the only one is name)", trimHeader(k))
		}
		if len(v) != 1 {
			return uploadQuery{}, errdefs.Field("name", "is given %d times", len(v))
		}
		if err := filestore.ValidName(v[0]); err != nil {
			return uploadQuery{}, err
		}
		q.name = v[0]
	}
	return q, nil
}

// storeUpload stores an upload's body: the body itself, named by name;
// or, for multipart/form-data, its first part with a filename, named by
// name or else by that filename. Nothing is buffered beyond the
// multipart reader's own buffer.
func storeUpload(st *filestore.Store, owner uint32, ctype, name string, body io.Reader) (filestore.Meta, error) {
	mt, params, err := mime.ParseMediaType(ctype)
	switch {
	case ctype == "" || (!strings.HasPrefix(mt, "multipart/") && (err == nil || errors.Is(err, mime.ErrInvalidMediaParameter))):
		if name == "" {
			return filestore.Meta{}, errdefs.Field("name", "is required with a raw body: POST /v1/files?name=data.csv (or send multipart/form-data, as curl -F 'file=@data.csv' does)")
		}
		return st.Put(owner, name, bodyReader{body})
	case err != nil:
		return filestore.Meta{}, errdefs.New(errdefs.ErrUnsupportedMediaType, "Content-Type %q is not a media type", trimHeader(ctype))
	case mt != "multipart/form-data":
		return filestore.Meta{}, errdefs.New(errdefs.ErrUnsupportedMediaType, "Content-Type %s: send multipart/form-data (curl -F 'file=@data.csv') or the raw content with ?name=", mt)
	case params["boundary"] == "":
		return filestore.Meta{}, errdefs.Field("body", "multipart/form-data without a boundary")
	}
	lim := &partLimit{r: body}
	mr := multipart.NewReader(lim, params["boundary"])
	var skipped int64
	for i := 0; ; i++ {
		lim.left = maxPartHead + partReadAhead
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return filestore.Meta{}, errdefs.Field("body", "the multipart body has no file part (a part with a filename, as curl -F 'file=@data.csv' sends)")
		}
		if err != nil {
			return filestore.Meta{}, bodyError(err)
		}
		if p.FileName() == "" {
			// A form field before the file: read past it, within bounds.
			lim.left = maxFormBytes - skipped + 1 + partReadAhead
			n, err := io.Copy(io.Discard, io.LimitReader(p, maxFormBytes-skipped+1))
			if skipped += n; skipped > maxFormBytes || i+1 >= maxFormParts {
				return filestore.Meta{}, errdefs.Field("body", "the multipart body has no file part within its first %d parts or %d bytes", maxFormParts, maxFormBytes)
			}
			if err != nil {
				return filestore.Meta{}, bodyError(err)
			}
			continue
		}
		if name == "" {
			name = p.FileName()
		}
		if err := filestore.ValidName(name); err != nil {
			return filestore.Meta{}, err
		}
		lim.left = -1 // the file's content: bounded by the store
		return st.Put(owner, name, bodyReader{p})
	}
}

// partLimit bounds what the multipart reader reads of a body before the
// file's content: left more bytes; no bound when left is negative.
type partLimit struct {
	r    io.Reader
	left int64
}

var errPartLimit = errdefs.Field("body", "a multipart part's header is longer than %d bytes, or its form fields longer than %d bytes", maxPartHead, maxFormBytes)

func (l *partLimit) Read(p []byte) (int, error) {
	if l.left < 0 {
		return l.r.Read(p)
	}
	if l.left == 0 {
		return 0, errPartLimit
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// bodyReader classifies the errors of an upload's body: a body cut short
// or malformed is the caller's.
type bodyReader struct{ r io.Reader }

func (b bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = bodyError(err)
	}
	return n, err
}

// bodyError is the caller's error for a failed read of an upload; the
// connection's own errors name the socket, which the message must not.
func bodyError(err error) error {
	var ne *net.OpError
	switch {
	case errors.Is(err, errPartLimit):
		return errPartLimit
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errdefs.Field("body", "the upload paused for longer than read_timeout")
	case errors.As(err, &ne):
		return errdefs.Field("body", "the connection failed during the upload")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errdefs.Field("body", "the upload was cut short")
	}
	return errdefs.Field("body", "the upload is malformed: %v", err)
}

// progress moves a connection's deadlines forward while a transfer makes
// progress: a pause of read_timeout ends it, a long transfer does not.
// Both deadlines move: a download's connection is read in the background
// too (a lapsed read deadline would cancel the request).
type progress struct {
	rc   *http.ResponseController
	d    time.Duration
	last time.Time
}

func newProgress(w http.ResponseWriter, d time.Duration) *progress {
	p := &progress{rc: http.NewResponseController(w), d: d}
	p.tick()
	return p
}

// tick extends the deadlines, at most a few times per timeout.
func (p *progress) tick() {
	now := time.Now()
	if now.Sub(p.last) < p.d/8 {
		return
	}
	p.last = now
	// ErrNotSupported (a writer that is no connection's) is no failure.
	_ = p.rc.SetReadDeadline(now.Add(p.d))
	_ = p.rc.SetWriteDeadline(now.Add(p.d))
}

type progressReader struct {
	r io.Reader
	p *progress
}

func (r *progressReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	if n > 0 {
		r.p.tick()
	}
	return n, err
}

// downloadWriter is the ResponseWriter of a download: it moves the
// deadlines forward as chunks go out, and turns http.ServeContent's plain
// text errors into the API's JSON shape.
type downloadWriter struct {
	http.ResponseWriter
	p      *progress
	onErr  func(status int) // writes the JSON error for a status
	failed bool
}

// downloadChunk is how much goes out between two deadline moves.
const downloadChunk = 1 << 20

func (w *downloadWriter) WriteHeader(status int) {
	// 412 (If-Match) has no body; 416 and 500 have ServeContent's text.
	if status == http.StatusRequestedRangeNotSatisfiable || status >= 500 {
		w.failed = true
		w.onErr(status)
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *downloadWriter) Write(b []byte) (int, error) {
	if w.failed {
		return len(b), nil // ServeContent's text, replaced by onErr's JSON
	}
	written := 0
	for len(b) > 0 {
		w.p.tick()
		n, err := w.ResponseWriter.Write(b[:min(len(b), downloadChunk)])
		written += n
		if err != nil {
			return written, err
		}
		b = b[n:]
	}
	return written, nil
}

// ReadFrom copies chunk by chunk (io.Copy would otherwise hand the whole
// file to the connection's ReadFrom at once, past any deadline).
func (w *downloadWriter) ReadFrom(src io.Reader) (int64, error) {
	var total int64
	buf := make([]byte, 32<<10)
	for {
		n, err := io.CopyBuffer(writerOnly{w}, io.LimitReader(src, downloadChunk), buf)
		total += n
		if err != nil || n < downloadChunk {
			return total, err
		}
	}
}

// writerOnly hides ReadFrom, so that io.CopyBuffer uses Write.
type writerOnly struct{ io.Writer }

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) error {
	who := callerOf(r)
	if err := s.filesEnabled(); err != nil {
		return err
	}
	f, m, err := s.files.Open(who.UID, who.Admin, r.PathValue("id"))
	if err != nil {
		return err
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", contentDisposition(m.Name))
	h.Set("ETag", `"`+m.SHA256+`"`)
	h.Set("X-Content-Type-Options", "nosniff")
	dw := &downloadWriter{ResponseWriter: w, p: newProgress(w, s.cfg.ReadTimeout.Duration)}
	dw.onErr = func(status int) {
		var err error
		switch status {
		case http.StatusRequestedRangeNotSatisfiable:
			err = errdefs.New(errdefs.ErrRangeNotSatisfiable, "Range %q is not satisfiable: the file is %d bytes", trimHeader(r.Header.Get("Range")), m.Size)
		default:
			err = fmt.Errorf("serve %s: HTTP %d", m.ID, status)
		}
		st, body := s.errorBody(r, err)
		w.Header().Del("Content-Disposition")
		w.Header().Del("ETag")
		writeJSON(w, st, body)
	}
	http.ServeContent(dw, r, "", m.Created, f)
	return nil
}

// contentDisposition is an attachment named name: an ASCII fallback
// (other bytes, quotes and backslashes as _) and the exact name in
// RFC 8187's encoding.
func contentDisposition(name string) string {
	var ascii, enc strings.Builder
	for _, c := range []byte(name) {
		switch {
		case c < 0x20 || c >= 0x7f || c == '"' || c == '\\':
			ascii.WriteByte('_')
		default:
			ascii.WriteByte(c)
		}
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte("!#$&+-.^_`|~", c) >= 0:
			enc.WriteByte(c)
		default:
			fmt.Fprintf(&enc, "%%%02X", c)
		}
	}
	return `attachment; filename="` + ascii.String() + `"; filename*=UTF-8''` + enc.String()
}

func (s *Server) getFileMeta(w http.ResponseWriter, r *http.Request) error {
	who := callerOf(r)
	if err := s.filesEnabled(); err != nil {
		return err
	}
	m, err := s.files.Stat(who.UID, who.Admin, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, storedFileWire(m))
	return nil
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request) error {
	who := callerOf(r)
	if err := s.filesEnabled(); err != nil {
		return err
	}
	out := api.FileList{Files: []api.StoredFile{}}
	for _, m := range s.files.List(who.UID, who.Admin) {
		out.Files = append(out.Files, storedFileWire(m))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request) error {
	who := callerOf(r)
	if err := s.filesEnabled(); err != nil {
		return err
	}
	m, err := s.files.Delete(who.UID, who.Admin, r.PathValue("id"))
	if err != nil {
		s.audit.refused(who, "file_delete", err)
		return err
	}
	s.log.Info("audit", "op", "file_delete", "uid", who.UID, "client", who.Client, "pid", who.PID, "admin", who.Admin,
		"file_id", m.ID, "owner", m.Owner, "size_bytes", m.Size)
	writeJSON(w, http.StatusOK, storedFileWire(m))
	return nil
}

// filesInfo is /v1/info's files: the bounds and the caller's use.
func (s *Server) filesInfo(uid uint32) api.FilesInfo {
	fc := s.cfg.Files
	if s.files == nil {
		return api.FilesInfo{}
	}
	used, n, total := s.files.Usage(uid)
	return api.FilesInfo{
		Enabled: true, MaxFileBytes: fc.MaxFileMB << 20, MaxBytesPerUID: fc.MaxMBPerUID << 20, MaxFilesPerUID: fc.MaxFilesPerUID,
		MaxTotalBytes: fc.MaxTotalMB << 20, MinFreeBytes: fc.MinFreeMB << 20, TTLS: int64(fc.TTL.Seconds()),
		UsedBytes: total, CallerBytes: used, CallerFiles: n,
	}
}
