package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/server/servertest"
)

// filesInfoReply is infoReply of a daemon with a file store, to the
// caller uid 1000.
func filesInfoReply(admin bool) reply {
	var info api.Info
	if err := json.Unmarshal([]byte(infoReply(admin).body), &info); err != nil {
		panic(err)
	}
	info.Caller.UID = 1000
	info.Files = api.FilesInfo{Enabled: true, MaxFileBytes: 1 << 30, TTLS: 86400}
	return jsonReply(info)
}

func storedFile(id, name string, size int64, uid uint32) api.StoredFile {
	t := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	return api.StoredFile{FileID: id, Name: name, SizeBytes: size, SHA256: strings.Repeat("ab", 32), CreatedAt: t, ExpiresAt: t.Add(24 * time.Hour), UID: uid}
}

func filesDaemon(t *testing.T, admin bool) *fakeDaemon {
	mine, bin, theirs := storedFile("f-csv", "data.csv", 4, 1000), storedFile("f-bin", "blob", 3, 1000), storedFile("f-other", "theirs.txt", 2, 2000)
	huge := storedFile("f-huge", "huge.txt", 100, 1000)
	liar := storedFile("f-liar", "liar.txt", 5, 1000)
	replies := map[string]reply{
		"GET /v1/info":              filesInfoReply(admin),
		"GET /v1/files":             jsonReply(api.FileList{Files: []api.StoredFile{mine, bin}}),
		"GET /v1/files/f-csv/meta":  jsonReply(mine),
		"GET /v1/files/f-csv":       {body: "a,b\n"},
		"GET /v1/files/f-bin/meta":  jsonReply(bin),
		"GET /v1/files/f-bin":       {body: "\x00\xff\x01"},
		"GET /v1/files/f-huge/meta": jsonReply(huge),
		"GET /v1/files/f-huge":      {body: strings.Repeat("x", 100)},
		"GET /v1/files/f-liar/meta": jsonReply(liar),
		"GET /v1/files/f-liar":      {body: strings.Repeat("x", 100)},
	}
	if admin {
		// The daemon lets an admin see everyone's files.
		replies["GET /v1/files"] = jsonReply(api.FileList{Files: []api.StoredFile{mine, bin, theirs}})
		replies["GET /v1/files/f-other/meta"] = jsonReply(theirs)
		replies["GET /v1/files/f-other"] = reply{body: "hi"}
	}
	return newFakeDaemon(t, replies)
}

func TestStoredFilesAreResources(t *testing.T) {
	defer func(n int64) { maxResourceBytes = n }(maxResourceBytes)
	maxResourceBytes = 10
	for _, admin := range []bool{false, true} {
		f := filesDaemon(t, admin)
		_, cs := session(t, f)
		ctx := context.Background()
		caps := cs.InitializeResult().Capabilities
		if caps.Resources == nil || caps.Resources.ListChanged || caps.Resources.Subscribe || caps.Logging == nil {
			t.Errorf("admin %v: capabilities %+v", admin, caps)
		}
		tmpls, err := cs.ListResourceTemplates(ctx, nil)
		if err != nil || len(tmpls.ResourceTemplates) != 1 || tmpls.ResourceTemplates[0].URITemplate != "jaild://files/{file_id}" {
			t.Errorf("admin %v: templates %+v, %v", admin, tmpls, err)
		}

		list, err := cs.ListResources(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var uris []string
		for _, r := range list.Resources {
			uris = append(uris, r.URI)
		}
		// An admin's list holds everyone's: only the caller's are listed.
		want := "jaild://files/f-csv,jaild://files/f-bin"
		if strings.Join(uris, ",") != want {
			t.Errorf("admin %v: resources %v, want %s", admin, uris, want)
		}
		if r := list.Resources[0]; r.Name != "data.csv" || !strings.HasPrefix(r.MIMEType, "text/csv") || r.Size != 4 || !strings.Contains(r.Description, "expires 2026-05-02T12:00:00Z") {
			t.Errorf("admin %v: data.csv listed as %+v", admin, r)
		}
		if r := list.Resources[1]; r.Name != "blob" || r.MIMEType != "application/octet-stream" {
			t.Errorf("admin %v: blob listed as %+v", admin, r)
		}
		if list.CacheScope != "private" {
			t.Errorf("admin %v: cache scope %q", admin, list.CacheScope)
		}

		res, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "jaild://files/f-csv"})
		if err != nil || len(res.Contents) != 1 || res.Contents[0].Text != "a,b\n" || res.Contents[0].Blob != nil || res.Contents[0].URI != "jaild://files/f-csv" {
			t.Errorf("admin %v: read data.csv: %+v, %v", admin, res, err)
		}
		res, err = cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "jaild://files/f-bin"})
		if err != nil || len(res.Contents) != 1 || string(res.Contents[0].Blob) != "\x00\xff\x01" || res.Contents[0].MIMEType != "application/octet-stream" {
			t.Errorf("admin %v: read blob: %+v, %v", admin, res, err)
		}

		// Another user's file is not found, for an admin too (the
		// daemon would serve it to an admin: the server does not ask).
		for _, uri := range []string{"jaild://files/f-other", "jaild://files/f-none", "jaild://files/", "jaild://files/a/b", "jaild://files/..", "jaild://other/f-csv"} {
			_, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: uri})
			var werr *jsonrpc.Error
			if !errors.As(err, &werr) || werr.Code != sdk.CodeResourceNotFound || !strings.Contains(werr.Message, "Resource not found") {
				t.Errorf("admin %v: read %s: %v, want resource not found", admin, uri, err)
			}
		}
		if n := f.count("GET /v1/files/f-other"); n != 0 {
			t.Errorf("admin %v: another user's file was read %d times", admin, n)
		}

		// Over the bound, by its metadata or by what the daemon sends.
		for _, id := range []string{"f-huge", "f-liar"} {
			_, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "jaild://files/" + id})
			var werr *jsonrpc.Error
			if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams ||
				!strings.Contains(werr.Message, "over the 10 bytes") || !strings.Contains(werr.Message, "jailctl files get "+id) || !strings.Contains(werr.Message, "GET /v1/files/"+id) {
				t.Errorf("admin %v: read %s: %v, want the bound and how to get it", admin, id, err)
			}
		}
		if f.count("GET /v1/files/f-huge") != 0 {
			t.Errorf("admin %v: a file over the bound by its metadata was downloaded", admin)
		}
	}
}

func TestStoredFilesErrors(t *testing.T) {
	f := newFakeDaemon(t, map[string]reply{
		"GET /v1/info":         filesInfoReply(false),
		"GET /v1/files":        {http.StatusServiceUnavailable, `{"error":{"type":"unavailable","message":"the store is down"}}`},
		"GET /v1/files/f/meta": {http.StatusServiceUnavailable, `{"error":{"type":"unavailable","message":"the store is down"}}`},
	})
	_, cs := session(t, f)
	ctx := context.Background()
	if _, err := cs.ListResources(ctx, nil); err == nil || !strings.Contains(err.Error(), "jaild did not list the stored files: the store is down") {
		t.Errorf("list: %v", err)
	}
	if _, err := cs.ReadResource(ctx, &sdk.ReadResourceParams{URI: "jaild://files/f"}); err == nil || !strings.Contains(err.Error(), "jaild did not read stored file f: the store is down") {
		t.Errorf("read: %v", err)
	}
	if _, err := cs.ListResources(ctx, &sdk.ListResourcesParams{Cursor: "x"}); err == nil || !strings.Contains(err.Error(), "invalid cursor") {
		t.Errorf("list with a cursor: %v", err)
	}
}

// A daemon without a file store gets no resources, and run_python neither
// file_id nor return_files_as.
func TestNoFileStore(t *testing.T) {
	cfg := config.Default()
	cfg.Files.Enabled = false
	f := realDaemon{servertest.New(t, cfg, servertest.Caller)}
	_, cs := session(t, f)
	if caps := cs.InitializeResult().Capabilities; caps.Resources != nil || caps.Logging == nil {
		t.Errorf("capabilities %+v", caps)
	}
	if list, err := cs.ListResources(context.Background(), nil); err != nil || len(list.Resources) != 0 || f.Count("GET /v1/files") != 0 {
		t.Errorf("resources/list: %+v, %v", list, err)
	}
	run := toolByName(t, cs, RunTool)
	raw, _ := json.Marshal(run.InputSchema)
	if strings.Contains(string(raw), "file_id") || strings.Contains(string(raw), "return_files_as") || strings.Contains(run.Description, "file store") {
		t.Errorf("run_python speaks of the file store:\n%s\n%s", raw, run.Description)
	}
	for _, tool := range []*sdk.Tool{run, toolByName(t, cs, OpenSessionTool)} {
		var s struct {
			Properties map[string]struct {
				Items struct {
					Required []string `json:"required"`
				} `json:"items"`
			} `json:"properties"`
		}
		raw, _ := json.Marshal(tool.InputSchema)
		json.Unmarshal(raw, &s)
		if req := s.Properties["files"].Items.Required; strings.Join(req, ",") != "path,content_b64" {
			t.Errorf("%s: files[] requires %v, want path and content_b64", tool.Name, req)
		}
	}
}

// With a file store, files take a file_id and return_files_as "store"
// returns links to the stored files.
func TestRunWithStoredFiles(t *testing.T) {
	f := newFakeDaemon(t, map[string]reply{
		"GET /v1/info": filesInfoReply(false),
		"POST /v1/execute": jsonReply(api.ExecuteResponse{
			RunID: "r1", Status: api.StatusOK, ExitCode: new(0),
			Files: []api.FileOut{{Path: "out/result.csv", SizeBytes: 1 << 20, FileID: "f-out", SHA256: "cd"}},
		}),
	})
	_, cs := session(t, f)
	run := toolByName(t, cs, RunTool)
	raw, _ := json.Marshal(run.InputSchema)
	if !strings.Contains(string(raw), `"enum":["inline","store"]`) || !strings.Contains(string(raw), `"file_id"`) || !strings.Contains(run.Description, "by file_id") {
		t.Errorf("run_python does not offer the file store:\n%s\n%s", raw, run.Description)
	}
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: RunTool, Arguments: map[string]any{
		"code": "x", "return_files": []string{"out/*"}, "return_files_as": "store",
		"files": []map[string]string{{"path": "in.csv", "file_id": "f-csv"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var req api.ExecuteRequest
	f.request(t, "POST /v1/execute", &req)
	if req.ReturnFilesAs != api.ReturnStore || len(req.Files) != 1 || req.Files[0] != (api.FileIn{Path: "in.csv", FileID: "f-csv"}) {
		t.Errorf("request to the daemon: %+v", req)
	}
	if text := resultText(res); res.IsError || !strings.Contains(text, "file out/result.csv: 1048576 bytes, stored as file_id f-out (jaild://files/f-out)") {
		t.Errorf("isError %v, text:\n%s", res.IsError, text)
	}
	if len(res.Content) != 2 {
		t.Fatalf("%d content blocks, want text and a resource link", len(res.Content))
	}
	link, ok := res.Content[1].(*sdk.ResourceLink)
	if !ok || link.URI != "jaild://files/f-out" || link.Name != "result.csv" || !strings.HasPrefix(link.MIMEType, "text/csv") || link.Size == nil || *link.Size != 1<<20 {
		t.Errorf("content[1] = %#v, want a link to the stored file", res.Content[1])
	}
	var out RunOutput
	raw, _ = json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	if len(out.Files) != 1 || out.Files[0] != (FileResult{Path: "out/result.csv", SizeBytes: 1 << 20, URI: "jaild://files/f-out", FileID: "f-out", SHA256: "cd"}) {
		t.Errorf("structured content %s", raw)
	}
}

func TestStoredFileURI(t *testing.T) {
	for _, id := range []string{"f-1", "a b", "x%y"} {
		if got, ok := storedFileID(storedFileURI(id)); !ok || got != id {
			t.Errorf("%q: round trip %q, %v", id, got, ok)
		}
	}
	for _, uri := range []string{"jaild://files/", "jaild://files/a/b", "jaild://files/a%2Fb", "jaild://files/.", "jaild://files/%", "jaild://files/a?b", "file:///etc/passwd"} {
		if id, ok := storedFileID(uri); ok {
			t.Errorf("%s: file %q", uri, id)
		}
	}
}
