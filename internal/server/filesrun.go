package server

import (
	"errors"
	"io"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/filestore"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/run/spec"
)

// FileStore returns the daemon's file store, nil when it is disabled.
func (s *Server) FileStore() *filestore.Store { return s.files }

// storeEnabled refuses when the daemon has no file store; field names
// the request field that needs one.
func (s *Server) storeEnabled(field string) error {
	if s.files == nil {
		return errdefs.Field(field, "needs the file store, which is disabled on this daemon (files.enabled in its configuration)")
	}
	return nil
}

// returnSink resolves return_files_as: nil for inline, the caller's
// store for "store".
func (s *Server) returnSink(as string, who peer.Caller) (spec.FileSink, error) {
	switch as {
	case "", api.ReturnInline:
		return nil, nil
	case api.ReturnStore:
		if err := s.storeEnabled("return_files_as"); err != nil {
			return nil, err
		}
		return storeSink{s.files, who.UID}, nil
	}
	return nil, errdefs.Field("return_files_as", `must be "inline" or "store", got %q`, trimHeader(as))
}

// storeSink puts a run's returned files into the store as the caller's.
type storeSink struct {
	st  *filestore.Store
	uid uint32
}

func (k storeSink) Put(name string, r io.Reader, size int64) (string, string, error) {
	m, err := k.st.Put(k.uid, name, r)
	var fe *errdefs.FieldError
	if errors.As(err, &fe) {
		// The store names upload fields ("name", "body") the run never
		// sent: the reason alone, of the same class.
		_, class := errdefs.Classify(err)
		return "", "", errdefs.New(errdefs.FromName(class), "%s", fe.Reason)
	}
	if err != nil {
		return "", "", err
	}
	if m.Size != size {
		// The file changed under the read (nothing of the jail runs by
		// then); keep nothing half-true.
		_, _ = k.st.Delete(k.uid, true, m.ID)
		return "", "", errdefs.New(errdefs.ErrConflict, "the file changed while it was stored")
	}
	return m.ID, m.SHA256, nil
}

// storedFile opens the caller's stored file id for a run (closeFiles
// closes it). Another uid's file is not found, as over the file API.
// Errors name no field: the caller puts them in files[i].file_id.
func (s *Server) storedFile(id string, who peer.Caller) (spec.File, error) {
	if err := s.storeEnabled(""); err != nil {
		return spec.File{}, err
	}
	f, m, err := s.files.Open(who.UID, who.Admin, id)
	if err != nil {
		return spec.File{}, err
	}
	return spec.File{Src: f, Size: m.Size}, nil
}
