package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
)

// FileURITemplate is the URI template of the caller's stored files, served
// as MCP resources.
const FileURITemplate = storedPrefix + "{file_id}"

const storedPrefix = "jaild://files/"

// MaxResourceBytes bounds a stored file read through resources/read; a
// larger one is read with `jailctl files get` or GET /v1/files/{id}.
const MaxResourceBytes = 16 << 20

// maxResourceBytes is MaxResourceBytes; tests lower it.
var maxResourceBytes int64 = MaxResourceBytes

// addResources serves the caller's stored files as resources: the template
// FileURITemplate, whose reads go to the daemon, and a resources/list that
// asks the daemon for the list each time. The SDK lists only resources
// added one by one, and the store changes under it, so a middleware
// answers resources/list instead.
func (s *Server) addResources() {
	s.mcp.AddResourceTemplate(&sdk.ResourceTemplate{
		Name:        "stored_file",
		Title:       "A file of jaild's file store",
		Description: fmt.Sprintf("A file you uploaded to jaild (jailctl files put) or that a run returned with return_files_as \"store\"; pass its file_id in run_python's files to use it in a run. Reads are bounded at %s.", bytesString(maxResourceBytes)),
		URITemplate: FileURITemplate,
	}, s.readFile)
	s.mcp.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			if method != "resources/list" {
				return next(ctx, method, req)
			}
			return s.listFiles(ctx, req)
		}
	})
}

// storedFileURI is the resource URI of a stored file.
func storedFileURI(id string) string {
	return storedPrefix + url.PathEscape(id)
}

// storedFileID is the file_id of a stored file's URI, and false for any
// other URI.
func storedFileID(uri string) (string, bool) {
	rest, ok := strings.CutPrefix(uri, storedPrefix)
	if !ok || rest == "" || strings.ContainsAny(rest, "/?#") {
		return "", false
	}
	id, err := url.PathUnescape(rest)
	if err != nil || id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/?#") {
		return "", false
	}
	return id, true
}

// mimeType guesses a stored file's type from its name.
func mimeType(name string) string {
	if typ := mime.TypeByExtension(path.Ext(name)); typ != "" {
		return typ
	}
	return "application/octet-stream"
}

// own reports whether the caller owns f. Only an admin's lists and reads
// reach other users' files; the daemon answers 404 to anyone else.
func (s *Server) own(f *api.StoredFile) bool {
	return !s.info.Caller.Admin || f.UID == s.info.Caller.UID
}

// listFiles answers resources/list with the caller's stored files, all in
// one page (the daemon bounds how many a caller has).
func (s *Server) listFiles(ctx context.Context, req sdk.Request) (sdk.Result, error) {
	if p, ok := req.GetParams().(*sdk.ListResourcesParams); ok && p != nil && p.Cursor != "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "invalid cursor: the list has one page"}
	}
	list, err := s.client.ListFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("jaild did not list the stored files: %w", err)
	}
	res := &sdk.ListResourcesResult{Resources: []*sdk.Resource{}, Cacheable: sdk.Cacheable{CacheScope: "private"}}
	for i := range list.Files {
		if f := &list.Files[i]; s.own(f) {
			res.Resources = append(res.Resources, fileResource(f))
		}
	}
	return res, nil
}

func fileResource(f *api.StoredFile) *sdk.Resource {
	return &sdk.Resource{
		URI:         storedFileURI(f.FileID),
		Name:        f.Name,
		MIMEType:    mimeType(f.Name),
		Size:        f.SizeBytes,
		Description: fmt.Sprintf("stored file %s, sha256 %s, expires %s", f.FileID, f.SHA256, f.ExpiresAt.UTC().Format(time.RFC3339)),
		Annotations: &sdk.Annotations{LastModified: f.CreatedAt.UTC().Format(time.RFC3339)},
	}
}

// readFile answers resources/read of a stored file: its content as text
// when it is UTF-8 (without NUL), else as a blob. Another user's file, and
// one that does not exist or expired, is "Resource not found"; a file over
// maxResourceBytes is an invalid-params error that says how to get it.
func (s *Server) readFile(ctx context.Context, req *sdk.ReadResourceRequest) (*sdk.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := storedFileID(uri)
	if !ok {
		return nil, sdk.ResourceNotFoundError(uri)
	}
	meta, err := s.client.FileMeta(ctx, id)
	switch {
	case errors.Is(err, errdefs.ErrNotFound), err == nil && !s.own(meta):
		return nil, sdk.ResourceNotFoundError(uri)
	case err != nil:
		return nil, fmt.Errorf("jaild did not read stored file %s: %w", id, err)
	case meta.SizeBytes > maxResourceBytes:
		return nil, tooLarge(uri, id, meta.SizeBytes)
	}
	body, size, err := s.client.GetFile(ctx, id)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return nil, sdk.ResourceNotFoundError(uri)
	case err != nil:
		return nil, fmt.Errorf("jaild did not read stored file %s: %w", id, err)
	}
	defer body.Close()
	if size > maxResourceBytes {
		return nil, tooLarge(uri, id, size)
	}
	content, err := io.ReadAll(io.LimitReader(body, maxResourceBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("jaild did not read stored file %s: %w", id, err)
	case int64(len(content)) > maxResourceBytes:
		return nil, tooLarge(uri, id, int64(len(content)))
	}
	return &sdk.ReadResourceResult{
		Contents:  []*sdk.ResourceContents{resourceContents(uri, meta.Name, content)},
		Cacheable: sdk.Cacheable{CacheScope: "private"},
	}, nil
}

func tooLarge(uri, id string, size int64) error {
	data, _ := json.Marshal(map[string]any{"uri": uri, "size_bytes": size, "max_bytes": maxResourceBytes})
	return &jsonrpc.Error{
		Code: jsonrpc.CodeInvalidParams,
		Message: fmt.Sprintf("stored file %s is %d bytes, over the %s that MCP reads return; get it with `jailctl files get %s` or GET /v1/files/%s on jaild's socket",
			id, size, bytesString(maxResourceBytes), id, url.PathEscape(id)),
		Data: data,
	}
}
