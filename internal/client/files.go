package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
)

// PutFile stores the content of r in the daemon's file store under name
// (POST /v1/files?name=NAME) and describes the stored file. The content
// is streamed, never held whole; size, when not negative, is its length
// (sent as Content-Length; r must then give exactly size bytes), and a
// negative size sends it chunked. PutFile does not close r. Errors are
// Execute's: a file over the daemon's bound is errdefs.ErrTooLarge (413),
// a full store or disk errdefs.ErrInsufficientStorage (507) or
// errdefs.ErrUnavailable, a daemon without a store errdefs.ErrNotFound.
func (c *Client) PutFile(ctx context.Context, name string, r io.Reader, size int64) (*api.StoredFile, error) {
	path := "/v1/files?name=" + url.QueryEscape(name)
	var body io.Reader = http.NoBody
	if size != 0 {
		// Hidden behind a plain Reader: the transport would close an
		// io.Closer it was given, and r is the caller's.
		body = struct{ io.Reader }{r}
	}
	req, err := c.newRequest(ctx, http.MethodPost, path, body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = size
	if size < 0 {
		req.ContentLength = -1
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Accept", "application/json")
	var f api.StoredFile
	if err := c.decode(req, &f); err != nil {
		return nil, err
	}
	if f.FileID == "" {
		return nil, errors.New("jaild POST /v1/files: malformed response: no file_id")
	}
	return &f, nil
}

// GetFile returns the content of the stored file id (GET /v1/files/{id})
// and its size (-1 when the daemon did not say). The caller closes the
// reader; a read that ends before size bytes fails with
// io.ErrUnexpectedEOF. A file that is not the caller's, or does not
// exist, is errdefs.ErrNotFound.
func (c *Client) GetFile(ctx context.Context, id string) (io.ReadCloser, int64, error) {
	path, err := filePath(id)
	if err != nil {
		return nil, 0, err
	}
	req, err := c.newRequest(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/octet-stream")
	resp, err := c.send(req)
	if err != nil {
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
			return nil, 0, fmt.Errorf("jaild GET %s: unexpected status %q", path, resp.Status)
		}
		return nil, 0, responseError(resp)
	}
	size := resp.ContentLength
	if v := resp.Header.Get("Content-Length"); size < 0 && v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			size = n
		}
	}
	return resp.Body, size, nil
}

// FileMeta describes the stored file id (GET /v1/files/{id}/meta).
func (c *Client) FileMeta(ctx context.Context, id string) (*api.StoredFile, error) {
	path, err := filePath(id)
	if err != nil {
		return nil, err
	}
	return callAs[api.StoredFile](ctx, c, http.MethodGet, path+"/meta", nil)
}

// ListFiles lists the caller's stored files (an admin's: everyone's).
func (c *Client) ListFiles(ctx context.Context) (*api.FileList, error) {
	return callAs[api.FileList](ctx, c, http.MethodGet, "/v1/files", nil)
}

// DeleteFile removes the stored file id (DELETE /v1/files/{id}) and
// describes it as it was.
func (c *Client) DeleteFile(ctx context.Context, id string) (*api.StoredFile, error) {
	path, err := filePath(id)
	if err != nil {
		return nil, err
	}
	return callAs[api.StoredFile](ctx, c, http.MethodDelete, path, nil)
}

// filePath is the path of a stored file. An ID that would not stay one
// path segment ("", ".", "..", which a URL resolves) names no file.
func filePath(id string) (string, error) {
	if id == "" || id == "." || id == ".." {
		return "", errdefs.New(errdefs.ErrInvalidArgument, "invalid file id %q", id)
	}
	return "/v1/files/" + url.PathEscape(id), nil
}

// sendOK sends req and returns a 2xx response; any other is its error
// (responseError), its body read and closed.
func (c *Client) sendOK(req *http.Request) (*http.Response, error) {
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, responseError(resp)
	}
	return resp, nil
}

// decode sends req and decodes a 2xx response's JSON object into out.
func (c *Client) decode(req *http.Request, out any) error {
	resp, err := c.sendOK(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := c.readObject(resp, req.Method, req.URL.Path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("jaild %s %s: malformed response: %w", req.Method, req.URL.Path, err)
	}
	return nil
}
