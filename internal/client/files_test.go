package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/server/servertest/raw"
)

// fakeStore is the file store's API over a map, with what it last saw.
type fakeStore struct {
	mu      sync.Mutex
	files   map[string]api.StoredFile
	content map[string][]byte
	// The last upload's framing.
	contentLength int64
	chunked       bool
	ctype         string
}

func newFakeStore(t *testing.T) (*fakeStore, *Client) {
	s := &fakeStore{files: map[string]api.StoredFile{}, content: map[string][]byte{}}
	write := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	notFound := func(w http.ResponseWriter) {
		write(w, 404, api.ErrorBody{Error: api.ErrorDetail{Type: "not_found", Message: "no such file"}})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/files", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read upload: %v", err)
			return
		}
		sum := sha256.Sum256(b)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.contentLength, s.ctype = r.ContentLength, r.Header.Get("Content-Type")
		s.chunked = len(r.TransferEncoding) > 0 && r.TransferEncoding[0] == "chunked"
		id := "f/" + strconv.Itoa(len(s.files)+1) + " x" // needs escaping
		now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		f := api.StoredFile{FileID: id, Name: r.URL.Query().Get("name"), SizeBytes: int64(len(b)), SHA256: hex.EncodeToString(sum[:]),
			CreatedAt: now, ExpiresAt: now.Add(24 * time.Hour), UID: 1000}
		s.files[id], s.content[id] = f, b
		write(w, 201, f)
	})
	mux.HandleFunc("GET /v1/files", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		l := api.FileList{Files: []api.StoredFile{}}
		for _, f := range s.files {
			l.Files = append(l.Files, f)
		}
		write(w, 200, l)
	})
	mux.HandleFunc("GET /v1/files/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		b, ok := s.content[r.PathValue("id")]
		s.mu.Unlock()
		if !ok {
			notFound(w)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	})
	mux.HandleFunc("GET /v1/files/{id}/meta", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		f, ok := s.files[r.PathValue("id")]
		s.mu.Unlock()
		if !ok {
			notFound(w)
			return
		}
		write(w, 200, f)
	})
	mux.HandleFunc("DELETE /v1/files/{id}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		id := r.PathValue("id")
		f, ok := s.files[id]
		delete(s.files, id)
		delete(s.content, id)
		s.mu.Unlock()
		if !ok {
			notFound(w)
			return
		}
		write(w, 200, f)
	})
	return s, serve(t, mux)
}

// mustNotClose is a reader whose Close fails the test: PutFile does not
// close the caller's reader.
type mustNotClose struct {
	io.Reader
	t *testing.T
}

func (r mustNotClose) Close() error {
	r.t.Error("PutFile closed the caller's reader")
	return nil
}

func TestFilesRoundTrip(t *testing.T) {
	s, c := newFakeStore(t)
	ctx := context.Background()
	content := bytes.Repeat([]byte("0123456789abcdef\x00\xff"), 100_000) // ~1.8 MB
	name := "data set & more=1?.csv"

	f, err := c.PutFile(ctx, name, mustNotClose{bytes.NewReader(content), t}, int64(len(content)))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	if f.Name != name || f.SizeBytes != int64(len(content)) || f.SHA256 != hex.EncodeToString(sum[:]) || f.FileID == "" {
		t.Errorf("stored %+v", f)
	}
	if s.contentLength != int64(len(content)) || s.chunked || s.ctype != "application/octet-stream" {
		t.Errorf("upload framing: length %d, chunked %v, type %q", s.contentLength, s.chunked, s.ctype)
	}

	rc, size, err := c.GetFile(ctx, f.FileID)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, content) || size != int64(len(content)) {
		t.Errorf("GetFile: %d bytes (size %d), %v", len(got), size, err)
	}

	meta, err := c.FileMeta(ctx, f.FileID)
	if err != nil || *meta != *f {
		t.Errorf("FileMeta = %+v, %v; want %+v", meta, err, f)
	}

	// Unknown size: chunked.
	g, err := c.PutFile(ctx, "small.txt", io.MultiReader(strings.NewReader("a"), strings.NewReader("b")), -1)
	if err != nil || g.SizeBytes != 2 || !s.chunked {
		t.Errorf("chunked PutFile = %+v, %v (chunked %v)", g, err, s.chunked)
	}
	// Empty.
	e, err := c.PutFile(ctx, "empty", strings.NewReader(""), 0)
	if err != nil || e.SizeBytes != 0 || s.contentLength != 0 {
		t.Errorf("empty PutFile = %+v, %v", e, err)
	}

	l, err := c.ListFiles(ctx)
	if err != nil || len(l.Files) != 3 {
		t.Errorf("ListFiles = %+v, %v", l, err)
	}
	d, err := c.DeleteFile(ctx, f.FileID)
	if err != nil || d.FileID != f.FileID {
		t.Errorf("DeleteFile = %+v, %v", d, err)
	}
	for name, err := range map[string]error{
		"get":    func() error { _, _, err := c.GetFile(ctx, f.FileID); return err }(),
		"meta":   func() error { _, err := c.FileMeta(ctx, f.FileID); return err }(),
		"delete": func() error { _, err := c.DeleteFile(ctx, f.FileID); return err }(),
	} {
		var ae *api.Error
		if !errors.Is(err, errdefs.ErrNotFound) || !errors.As(err, &ae) || ae.Status != 404 || err.Error() != "no such file" {
			t.Errorf("%s after delete: %v", name, err)
		}
	}
	// IDs that a URL would resolve never leave /v1/files/.
	for _, id := range []string{"", ".", ".."} {
		if _, err := c.FileMeta(ctx, id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("FileMeta(%q) = %v", id, err)
		}
	}
}

func TestFilesErrors(t *testing.T) {
	for _, tt := range []struct {
		status int
		body   string
		class  error
	}{
		{404, `{"error":{"type":"not_found","message":"not found"}}`, errdefs.ErrNotFound},
		{413, `{"error":{"type":"too_large","message":"body: more than max_file_bytes (1 GiB)","field":"body"}}`, errdefs.ErrTooLarge},
		{413, `{"error":{"type":"too_large","message":"your quota of 4 GiB is full"}}`, errdefs.ErrTooLarge},
		{507, `{"error":{"type":"insufficient_storage","message":"the file store is full"}}`, errdefs.ErrInsufficientStorage},
		{400, `{"error":{"type":"invalid_argument","message":"name: has a '/'","field":"name"}}`, errdefs.ErrInvalidArgument},
	} {
		// The daemon refuses without reading a body it will not take.
		c := serve(t, raw.JSON(tt.status, nil, tt.body))
		var apiBody api.ErrorBody
		json.Unmarshal([]byte(tt.body), &apiBody)
		check := func(what string, err error) {
			t.Helper()
			var ae *api.Error
			if !errors.Is(err, tt.class) || !errors.As(err, &ae) || ae.Status != tt.status || ae.Field != apiBody.Error.Field || err.Error() != apiBody.Error.Message {
				t.Errorf("%s, %d: %v", what, tt.status, err)
			}
		}
		_, err := c.PutFile(context.Background(), "x", bytes.NewReader(make([]byte, 4<<20)), 4<<20)
		check("PutFile", err)
		_, _, err = c.GetFile(context.Background(), "f-1")
		check("GetFile", err)
		_, err = c.ListFiles(context.Background())
		check("ListFiles", err)
	}
}

func TestPutFileMalformed(t *testing.T) {
	c := serve(t, raw.JSON(201, nil, `{"name":"x"}`))
	if _, err := c.PutFile(context.Background(), "x", strings.NewReader("a"), 1); err == nil || !strings.Contains(err.Error(), "no file_id") {
		t.Errorf("err %v", err)
	}
	// A body shorter than the size given is the caller's error, not sent.
	c = serve(t, raw.JSON(201, nil, `{"file_id":"f"}`))
	if _, err := c.PutFile(context.Background(), "x", strings.NewReader("a"), 5); err == nil {
		t.Error("a short body was accepted")
	}
}
