package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/jaild/jaild/internal/api"
)

// A session's files (GET, PUT, DELETE, POST /v1/sessions/{id}/fs/{path}):
// path is the session's, /workspace/... or /tmp/....

// sessionFSPath is the request path of a session's file path.
func sessionFSPath(id, path string) string {
	return "/v1/sessions/" + url.PathEscape(id) + "/fs/" + url.PathEscape(strings.TrimPrefix(path, "/"))
}

// SessionFS opens the session's path: a directory's listing, or a
// file's content (the caller closes it) and its size (-1 when not said).
func (c *Client) SessionFS(ctx context.Context, id, path string) (*api.FSListing, io.ReadCloser, int64, error) {
	p := sessionFSPath(id, path)
	req, err := c.newRequest(ctx, http.MethodGet, p, nil)
	if err != nil {
		return nil, nil, 0, err
	}
	resp, err := c.sendOK(req)
	if err != nil {
		return nil, nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, nil, 0, fmt.Errorf("jaild GET %s: unexpected status %q", p, resp.Status)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/json" {
		defer resp.Body.Close()
		raw, err := c.readObject(resp, http.MethodGet, p)
		if err != nil {
			return nil, nil, 0, err
		}
		var l api.FSListing
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, nil, 0, fmt.Errorf("jaild GET %s: malformed listing: %w", p, err)
		}
		return &l, nil, 0, nil
	}
	return nil, resp.Body, resp.ContentLength, nil
}

// PutSessionFile writes the bytes of r to the session's path (parents:
// make the missing directories); size as PutFile's. It does not close r.
func (c *Client) PutSessionFile(ctx context.Context, id, path string, r io.Reader, size int64, parents bool) (*api.FSEntry, error) {
	p := sessionFSPath(id, path)
	if parents {
		p += "?parents=true"
	}
	var body io.Reader = http.NoBody
	if size != 0 {
		body = struct{ io.Reader }{r}
	}
	req, err := c.newRequest(ctx, http.MethodPut, p, body)
	if err != nil {
		return nil, err
	}
	req.ContentLength = max(size, -1)
	req.Header.Set("Content-Type", "application/octet-stream")
	var e api.FSEntry
	if err := c.decode(req, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// RemoveSessionFile removes the session's path: a file or an empty
// directory.
func (c *Client) RemoveSessionFile(ctx context.Context, id, path string) error {
	req, err := c.newRequest(ctx, http.MethodDelete, sessionFSPath(id, path), nil)
	if err != nil {
		return err
	}
	resp, err := c.sendOK(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// MkdirSessionFile makes the session's directory path (parents: and its
// missing parents).
func (c *Client) MkdirSessionFile(ctx context.Context, id, path string, parents bool) (*api.FSEntry, error) {
	q := "?op=mkdir"
	if parents {
		q += "&parents=true"
	}
	return callAs[api.FSEntry](ctx, c, http.MethodPost, sessionFSPath(id, path)+q, nil)
}

// MoveSessionFile renames the session's path to to.
func (c *Client) MoveSessionFile(ctx context.Context, id, path, to string) (*api.FSEntry, error) {
	return callAs[api.FSEntry](ctx, c, http.MethodPost, sessionFSPath(id, path)+"?op=move&to="+url.QueryEscape(to), nil)
}
