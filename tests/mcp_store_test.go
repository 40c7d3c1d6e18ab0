package tests

// `jailctl mcp` against real daemons for issue 14: progress notifications
// of a streamed run_python (over stdio, where the order on the wire is
// checked, and over Streamable HTTP), and the caller's stored files as
// resources (list, read, another uid's file, file_id in a run, outputs
// returned into the store and read back).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"mime"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
)

// mstTwoLines prints a line, sleeps 2 s, prints another and a line on
// stderr, and fails: the result has every field a run can fill but
// figures and files.
const mstTwoLines = "import sys, time\nprint('first line')\ntime.sleep(2)\nprint('second line')\nprint('a warning', file=sys.stderr)\nraise ValueError('boom')\n"

// mstNote is a progress notification and when it was seen.
type mstNote struct {
	at time.Time
	p  *sdk.ProgressNotificationParams
}

// mstLog is a list one goroutine appends to while another reads it.
type mstLog[T any] struct {
	mu    sync.Mutex
	items []T
}

func (l *mstLog[T]) add(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, v)
}

func (l *mstLog[T]) since(i int) []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.items[i:])
}

func (l *mstLog[T]) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.items)
}

// mstProgress records the progress notifications a client's handler gets.
type mstProgress struct{ mstLog[mstNote] }

func (r *mstProgress) handle(_ context.Context, req *sdk.ProgressNotificationClientRequest) {
	r.add(mstNote{time.Now(), req.Params})
}

// mstWire records, in the order they were read off the connection, the
// progress notifications and responses a client receives: the handler
// runs apart from the reader, so only the wire tells what came first.
type mstWire struct{ mstLog[mstWireMsg] }

type mstWireMsg struct {
	at       time.Time
	response bool                            // a response (to any request)
	progress *sdk.ProgressNotificationParams // a notifications/progress
}

// mstRecording is a transport whose connection logs what it reads to wire.
type mstRecording struct {
	sdk.Transport
	wire *mstWire
}

func (r *mstRecording) Connect(ctx context.Context) (sdk.Connection, error) {
	c, err := r.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &mstRecordingConn{c, r.wire}, nil
}

type mstRecordingConn struct {
	sdk.Connection
	wire *mstWire
}

func (c *mstRecordingConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if err != nil {
		return msg, err
	}
	m := mstWireMsg{at: time.Now()}
	switch msg := msg.(type) {
	case *jsonrpc.Response:
		m.response = true
	case *jsonrpc.Request:
		if msg.Method != "notifications/progress" {
			return msg, nil
		}
		m.progress = &sdk.ProgressNotificationParams{}
		if err := json.Unmarshal(msg.Params, m.progress); err != nil {
			m.progress.Message = "malformed params: " + err.Error()
		}
	}
	c.wire.add(m)
	return msg, nil
}

// mstConnect connects a client with opts over transport and lists the
// tools (connectMCP checks them too).
func mstConnect(ctx context.Context, t *testing.T, transport sdk.Transport, opts *sdk.ClientOptions) *mcpClient {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "jaild-tests", Version: "1"}, opts)
	session, err := c.Connect(ctx, transport, nil)
	if err != nil {
		t.Fatalf("initialize: %v", err)
	}
	t.Cleanup(func() { session.Close() })
	list, err := session.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	m := &mcpClient{t: t, session: session, tools: map[string]*sdk.Tool{}}
	for _, tool := range list.Tools {
		m.tools[tool.Name] = tool
	}
	return m
}

// mstCall calls run_python with args, with the progress token token
// unless it is "", and returns the result and when it came.
func mstCall(ctx context.Context, t *testing.T, m *mcpClient, token string, args map[string]any) (*sdk.CallToolResult, time.Time) {
	t.Helper()
	params := &sdk.CallToolParams{Name: "run_python", Arguments: args}
	if token != "" {
		params.SetProgressToken(token)
	}
	res, err := m.session.CallTool(ctx, params)
	done := time.Now()
	if err != nil {
		t.Fatalf("tools/call run_python (token %q): %v", token, err)
	}
	return res, done
}

// mstCheckNotes checks the progress notifications of one call with token
// (seen at the times in notes) whose result came at done: at least one,
// the run's first line in one of them while the run still slept, their
// progress increasing, no total, messages of at most 1 KiB of UTF-8.
func mstCheckNotes(t *testing.T, what string, notes []mstNote, token string, done time.Time) {
	t.Helper()
	if len(notes) == 0 {
		t.Errorf("%s: no notifications/progress before the result", what)
		return
	}
	t.Logf("%s: %d notifications, the first %v before the result:%s", what, len(notes), done.Sub(notes[0].at).Round(time.Millisecond), mstNotesString(notes))
	var firstAt time.Time
	prev := -1.0
	for i, n := range notes {
		p := n.p
		if p.ProgressToken != token || p.Total != 0 || p.Progress <= prev || len(p.Message) > 1024 || !utf8.ValidString(p.Message) {
			t.Errorf("%s: notification %d: %+v (progress before %g): want token %q, progress increasing, no total, at most 1 KiB of UTF-8", what, i, p, prev, token)
		}
		prev = p.Progress
		if firstAt.IsZero() && strings.Contains(p.Message, "first line") {
			firstAt = n.at
		}
	}
	if firstAt.IsZero() {
		t.Errorf("%s: no notification has the first line: %s", what, mstNotesString(notes))
	} else if gap := done.Sub(firstAt); gap < sleepGap {
		t.Errorf("%s: the first line's notification came %v before the result; want it while the run slept (at least %v before)", what, gap, sleepGap)
	}
}

func mstNotesString(notes []mstNote) string {
	var b strings.Builder
	for _, n := range notes {
		b.WriteString("\n\t")
		j, _ := json.Marshal(n.p)
		b.Write(j)
	}
	return b.String()
}

var mstStatusLine = regexp.MustCompile(`\Astatus: (\S+) \([^)\n]*\)`)

// mstComparable is a run_python result without what differs between two
// runs of the same code (the duration, in the text and structured).
func mstComparable(t *testing.T, res *sdk.CallToolResult) map[string]any {
	t.Helper()
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var all map[string]any
	if err := json.Unmarshal(raw, &all); err != nil {
		t.Fatal(err)
	}
	// _meta and resultType are the protocol's, which the transports
	// negotiate apart.
	m := map[string]any{"content": all["content"], "isError": all["isError"], "structuredContent": all["structuredContent"]}
	if content, ok := m["content"].([]any); ok && len(content) > 0 {
		if c, ok := content[0].(map[string]any); ok {
			if s, ok := c["text"].(string); ok {
				c["text"] = mstStatusLine.ReplaceAllString(s, "status: $1")
			}
		}
	}
	if sc, ok := m["structuredContent"].(map[string]any); ok {
		delete(sc, "duration_ms")
	}
	return m
}

func mstSameResult(t *testing.T, what string, got, want *sdk.CallToolResult) {
	t.Helper()
	g, w := mstComparable(t, got), mstComparable(t, want)
	if !reflect.DeepEqual(g, w) {
		gj, _ := json.MarshalIndent(g, "", "  ")
		wj, _ := json.MarshalIndent(w, "", "  ")
		t.Errorf("%s: the result differs from the one without a token (durations aside):\n%s\nwant\n%s", what, gj, wj)
	}
}

// mstCheckTwoLines checks mstTwoLines's result itself.
func mstCheckTwoLines(t *testing.T, what string, res *sdk.CallToolResult) {
	t.Helper()
	sc, _ := res.StructuredContent.(map[string]any)
	stderr, _ := sc["stderr"].(string)
	if !res.IsError || sc == nil || sc["status"] != "error" || sc["stdout"] != "first line\nsecond line\n" ||
		!strings.HasPrefix(stderr, "a warning\n") || !strings.Contains(text(res), "exception: ValueError: boom (line 6 of the code)") {
		t.Errorf("%s: isError %v, structured %v, text %q: want the run's ValueError with both lines and the warning", what, res.IsError, sc, text(res))
	}
}

// TestMCPStoreProgress: a run_python call with a progress token gets
// notifications/progress while the run sleeps, all before the result on
// the wire, and the same result as a call without a token, which gets
// none; over stdio and over Streamable HTTP.
func TestMCPStoreProgress(t *testing.T) {
	d := fsStartDaemon(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := map[string]any{"code": mstTwoLines}

	var notes mstProgress
	wire := &mstWire{}
	cmd := mcpCommand(t, filepath.Join(binDir, "jailctl"), d.Socket, "jailctl mcp")
	m := mstConnect(ctx, t, &mstRecording{&sdk.CommandTransport{Command: cmd, TerminateDuration: stdioGrace}, wire},
		&sdk.ClientOptions{ProgressNotificationHandler: notes.handle})

	// settle lets the handler catch up with what was read.
	const settle = 500 * time.Millisecond

	// wireCall calls run_python with token over stdio and returns the
	// result and the notifications read before it, checking that none
	// came after it and that the handler got each.
	wireCall := func(what, token string, args map[string]any) (*sdk.CallToolResult, []mstNote, time.Time) {
		t.Helper()
		n0, w0 := notes.count(), wire.count()
		res, _ := mstCall(ctx, t, m, token, args)
		time.Sleep(settle)
		var onWire []mstNote
		var result *mstWireMsg
		for _, msg := range wire.since(w0) {
			switch {
			case msg.response && result == nil:
				result = &msg
			case msg.response:
				t.Errorf("%s: a second response during one call", what)
			case result != nil:
				t.Errorf("%s: notifications/progress %+v after the call's result", what, msg.progress)
			default:
				onWire = append(onWire, mstNote{msg.at, msg.progress})
			}
		}
		if result == nil {
			t.Fatalf("%s: no response on the wire", what)
		}
		if handled := notes.since(n0); len(handled) != len(onWire) {
			t.Errorf("%s: %d notifications read, %d handled", what, len(onWire), len(handled))
		}
		return res, onWire, result.at
	}

	withToken, onWire, done := wireCall("stdio", "stdio-1", args)
	mstCheckTwoLines(t, "stdio with a token", withToken)
	mstCheckNotes(t, "stdio (wire)", onWire, "stdio-1", done)

	n0, w0 := notes.count(), wire.count()
	without, _ := mstCall(ctx, t, m, "", args)
	time.Sleep(settle)
	mstCheckTwoLines(t, "stdio without a token", without)
	if msgs := wire.since(w0); len(msgs) != 1 || !msgs[0].response || notes.count() != n0 {
		t.Errorf("stdio without a token: %d messages read (want the response only), %d notifications handled", len(msgs), notes.count()-n0)
	}
	mstSameResult(t, "stdio", withToken, without)

	// In a session, the same.
	sess := m.openSession(ctx, nil)
	inSession, onWire, done := wireCall("stdio in a session", "stdio-session", map[string]any{"code": mstTwoLines, "session_id": sess.SessionID})
	mstCheckNotes(t, "stdio in a session (wire)", onWire, "stdio-session", done)
	if sc, _ := inSession.StructuredContent.(map[string]any); sc == nil || sc["stdout"] != "first line\nsecond line\n" || !strings.Contains(text(inSession), "exception: ValueError: boom") {
		t.Errorf("in a session: %q", text(inSession))
	}
	if res := m.call(ctx, "close_session", map[string]any{"session_id": sess.SessionID}, nil); res.IsError {
		t.Errorf("close_session: %q", text(res))
	}

	// Over Streamable HTTP, notifications go on the call's own stream;
	// the handler's times show they came while the run slept.
	mcpHTTP := startMCPHTTP(t, d)
	var httpNotes mstProgress
	h := mstConnect(ctx, t, mcpHTTP.transport(), &sdk.ClientOptions{ProgressNotificationHandler: httpNotes.handle})
	res, done := mstCall(ctx, t, h, "http-1", args)
	time.Sleep(settle)
	mstCheckTwoLines(t, "HTTP with a token", res)
	mstCheckNotes(t, "HTTP", httpNotes.since(0), "http-1", done)
	mstSameResult(t, "HTTP", res, without)

	// A token of another type (a number) is echoed as it came.
	n0 = httpNotes.count()
	params := &sdk.CallToolParams{Name: "run_python", Arguments: map[string]any{"code": "import time\ntime.sleep(0.3)\nprint('x')"}}
	params.SetProgressToken(7)
	if res, err := h.session.CallTool(ctx, params); err != nil || res.IsError {
		t.Fatalf("numeric token: %v %v", err, res)
	}
	time.Sleep(settle)
	if len(httpNotes.since(n0)) == 0 {
		t.Errorf("numeric token: no notification (the start of the run comes at once)")
	}
	for _, n := range httpNotes.since(n0) {
		if n.p.ProgressToken != float64(7) {
			t.Errorf("numeric token 7: notification with token %#v", n.p.ProgressToken)
		}
	}
}

// mstFileOutput is run_python's structured files, as the resource tests
// read them.
type mstFileOutput struct {
	Status string `json:"status"`
	Stdout string `json:"stdout"`
	Files  []struct {
		Path      string `json:"path"`
		SizeBytes int64  `json:"size_bytes"`
		URI       string `json:"uri"`
		FileID    string `json:"file_id"`
		SHA256    string `json:"sha256"`
		Error     string `json:"error"`
	} `json:"files"`
}

func mstMIME(name string) string {
	if typ := mime.TypeByExtension(path.Ext(name)); typ != "" {
		return typ
	}
	return "application/octet-stream"
}

// mstWantNotFound checks that err is the protocol's "Resource not found"
// for uri.
func mstWantNotFound(t *testing.T, what, uri string, res *sdk.ReadResourceResult, err error) {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Errorf("%s: resources/read: %v, %+v: want Resource not found", what, err, res)
		return
	}
	var data struct {
		URI string `json:"uri"`
	}
	if we.Code != jsonrpc.CodeInvalidParams || we.Message != "Resource not found" || json.Unmarshal(we.Data, &data) != nil || data.URI != uri {
		t.Errorf("%s: error %d %q data %s: want %d Resource not found with uri %s", what, we.Code, we.Message, we.Data, jsonrpc.CodeInvalidParams, uri)
	}
}

// mstNobodyMCP starts `jailctl mcp` on d as uid 65534 (a copy of jailctl
// in d's directory, which uid 65534 can reach) and connects to it.
func mstNobodyMCP(ctx context.Context, t *testing.T, d *daemon) *mcpClient {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(binDir, "jailctl"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(d.Dir, "jailctl-"+randHex(4))
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := mcpCommand(t, bin, d.Socket, "jailctl mcp (uid 65534)")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobodyUID, Gid: nobodyUID}}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	return connectMCP(ctx, t, &sdk.CommandTransport{Command: cmd, TerminateDuration: stdioGrace})
}

// TestMCPStoreResources: the caller's stored files as resources, over
// stdio and HTTP: listed with name, size and type, read as text or blob;
// uid 65534's file neither listed nor readable for root (an admin: the
// same error as a file that never was); a file_id in run_python; outputs
// returned into the store as resource links that resources/read reads;
// and uid 65534's own `jailctl mcp`, to which root's files are not found,
// as resources and as a file_id.
func TestMCPStoreResources(t *testing.T) {
	d := fsStartDaemon(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	textData := []byte("{\"a\": 1, \"b\": \"\u00e9t\u00e9\"}\n")
	binData := append([]byte{0, 0xff, 0xfe, 0}, fsDetBytes(14, 4096)...)
	mine := fsUpload(t, d, "notes.json", textData)
	mineBin := fsUpload(t, d, "blob.bin", binData)
	status, body := fsNobodyUpload(t, d, "theirs.txt", []byte("uid 65534's secret\n"))
	if status != 201 {
		t.Fatalf("upload as uid 65534: HTTP %d: %s", status, body)
	}
	theirs := fsDecodeStored(t, "upload as uid 65534", body)
	if theirs.UID != nobodyUID {
		t.Fatalf("upload as uid 65534: owner %d", theirs.UID)
	}
	uri := func(id string) string { return "jaild://files/" + id }

	m, _ := startMCPStdio(ctx, t, d)
	if caps := m.session.InitializeResult().Capabilities; caps.Resources == nil || caps.Resources.ListChanged || caps.Resources.Subscribe {
		t.Errorf("capabilities %+v: want resources, without listChanged or subscribe", caps.Resources)
	}

	// list checks that the list holds exactly want (root's files, though
	// root is an admin whose GET /v1/files holds uid 65534's too).
	list := func(m *mcpClient, what string, want ...api.StoredFile) {
		t.Helper()
		res, err := m.session.ListResources(ctx, nil)
		if err != nil {
			t.Fatalf("%s: resources/list: %v", what, err)
		}
		got := map[string]*sdk.Resource{}
		for _, r := range res.Resources {
			got[r.URI] = r
		}
		if len(got) != len(want) || res.NextCursor != "" {
			var uris []string
			for u := range got {
				uris = append(uris, u)
			}
			t.Errorf("%s: resources/list %v (next cursor %q): want the caller's %d files only", what, uris, res.NextCursor, len(want))
		}
		for _, f := range want {
			r := got[uri(f.FileID)]
			if r == nil {
				t.Errorf("%s: resources/list lacks %s (%s)", what, uri(f.FileID), f.Name)
				continue
			}
			if r.Name != f.Name || r.Size != f.SizeBytes || r.MIMEType != mstMIME(f.Name) || !strings.Contains(r.Description, f.SHA256) {
				t.Errorf("%s: resource %+v: want name %q, size %d, type %s, sha256 %s in the description", what, r, f.Name, f.SizeBytes, mstMIME(f.Name), f.SHA256)
			}
		}
	}
	read := func(m *mcpClient, u string) (*sdk.ReadResourceResult, error) {
		return m.session.ReadResource(ctx, &sdk.ReadResourceParams{URI: u})
	}
	readOK := func(m *mcpClient, what, u string, wantText string, wantBlob []byte) {
		t.Helper()
		res, err := read(m, u)
		if err != nil {
			t.Fatalf("%s: resources/read %s: %v", what, u, err)
		}
		if len(res.Contents) != 1 || res.Contents[0].URI != u || res.Contents[0].Text != wantText || !bytes.Equal(res.Contents[0].Blob, wantBlob) {
			t.Errorf("%s: resources/read %s: %+v: want text %q / a blob of %d bytes", what, u, res.Contents, wantText, len(wantBlob))
		}
	}

	list(m, "stdio", mine, mineBin)
	readOK(m, "stdio", uri(mine.FileID), string(textData), nil)
	readOK(m, "stdio", uri(mineBin.FileID), "", binData)
	res, err := read(m, uri(theirs.FileID))
	mstWantNotFound(t, "uid 65534's file", uri(theirs.FileID), res, err)
	missing := "f-" + strings.Repeat("0", 32)
	res, err = read(m, uri(missing))
	mstWantNotFound(t, "a file that never was", uri(missing), res, err)
	res, err = read(m, "jaild://files/../etc/passwd")
	mstWantNotFound(t, "a URI that names no file", "jaild://files/../etc/passwd", res, err)

	tmpl, err := m.session.ListResourceTemplates(ctx, nil)
	if err != nil || !slices.ContainsFunc(tmpl.ResourceTemplates, func(r *sdk.ResourceTemplate) bool { return r.URITemplate == "jaild://files/{file_id}" }) {
		t.Errorf("resources/templates/list: %v, %+v: want jaild://files/{file_id}", err, tmpl)
	}

	// Over 16 MiB: refused, with the way to get it.
	huge := fsUpload(t, d, "huge.bin", fsDetBytes(16, 16<<20+1))
	res, err = read(m, uri(huge.FileID))
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != jsonrpc.CodeInvalidParams || !strings.Contains(we.Message, "jailctl files get "+huge.FileID) || !strings.Contains(string(we.Data), `"size_bytes":16777217`) {
		t.Errorf("resources/read of 16 MiB + 1: %v %+v, %+v: want -32602 saying `jailctl files get %s`, data with size_bytes", err, we, res, huge.FileID)
	}
	if resp, b := fsCall(t, d, "DELETE", "/v1/files/"+huge.FileID, nil); resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE %s: HTTP %d %s", huge.FileID, resp.StatusCode, b)
	}

	// Stored files in a run, by file_id.
	var out mstFileOutput
	code := "import hashlib\nprint(open('in/notes.json').read(), end='')\nprint(hashlib.sha256(open('blob.bin', 'rb').read()).hexdigest())\n"
	r := m.call(ctx, "run_python", map[string]any{"code": code, "files": []map[string]string{
		{"path": "in/notes.json", "file_id": mine.FileID}, {"path": "blob.bin", "file_id": mineBin.FileID},
	}}, &out)
	if r.IsError || out.Stdout != string(textData)+fsSHA(binData)+"\n" {
		t.Errorf("run_python with file_ids: isError %v, stdout %q, text %q", r.IsError, out.Stdout, text(r))
	}

	// uid 65534's own `jailctl mcp`: its file only, root's not found, as
	// a resource and as a file_id.
	n := mstNobodyMCP(ctx, t, d)
	list(n, "uid 65534", theirs)
	readOK(n, "uid 65534", uri(theirs.FileID), "uid 65534's secret\n", nil)
	res, err = read(n, uri(mine.FileID))
	mstWantNotFound(t, "uid 65534 reading root's file", uri(mine.FileID), res, err)
	out = mstFileOutput{}
	r = n.call(ctx, "run_python", map[string]any{"code": "print(open('x').read(), end='')", "files": []map[string]string{{"path": "x", "file_id": theirs.FileID}}}, &out)
	if r.IsError || out.Stdout != "uid 65534's secret\n" {
		t.Errorf("uid 65534's run_python with its file_id: isError %v, %q", r.IsError, text(r))
	}
	r = n.call(ctx, "run_python", map[string]any{"code": "print(open('x').read())", "files": []map[string]string{{"path": "x", "file_id": mine.FileID}}}, nil)
	if !r.IsError || !strings.Contains(text(r), "files[0].file_id") || strings.Contains(text(r), "\"a\": 1") {
		t.Errorf("uid 65534's run_python with root's file_id: isError %v, %q: want a tool error naming files[0].file_id", r.IsError, text(r))
	}
	n.session.Close()

	// Outputs returned into the store: resource links, readable.
	outData := "{\"total\": 42}\n"
	out = mstFileOutput{}
	code = "import os\nos.makedirs('out')\nopen('out/result.json', 'w').write('{\"total\": 42}\\n')\n"
	r = m.call(ctx, "run_python", map[string]any{"code": code, "return_files": []string{"out/*.json"}, "return_files_as": "store"}, &out)
	if r.IsError || len(out.Files) != 1 || out.Files[0].FileID == "" {
		t.Fatalf("return_files_as store: isError %v, %+v, %q", r.IsError, out, text(r))
	}
	stored := out.Files[0]
	sum := sha256.Sum256([]byte(outData))
	if stored.Path != "out/result.json" || stored.SizeBytes != int64(len(outData)) || stored.SHA256 != hex.EncodeToString(sum[:]) || stored.URI != uri(stored.FileID) {
		t.Errorf("returned into the store: %+v", stored)
	}
	var links []*sdk.ResourceLink
	for _, c := range r.Content {
		switch c := c.(type) {
		case *sdk.ResourceLink:
			links = append(links, c)
		case *sdk.EmbeddedResource:
			t.Errorf("return_files_as store: an embedded resource %s", c.Resource.URI)
		}
	}
	if len(links) != 1 || links[0].URI != uri(stored.FileID) || links[0].Name != "result.json" || links[0].MIMEType != mstMIME("result.json") ||
		links[0].Size == nil || *links[0].Size != int64(len(outData)) {
		t.Fatalf("return_files_as store: links %+v: want one to %s", links, uri(stored.FileID))
	}
	readOK(m, "stdio", links[0].URI, outData, nil)
	var meta api.StoredFile
	if resp, b := fsCall(t, d, "GET", "/v1/files/"+stored.FileID+"/meta", nil); resp.StatusCode != 200 || json.Unmarshal(b, &meta) != nil || meta.UID != 0 || meta.Name != "result.json" {
		t.Errorf("the returned file's meta: HTTP %d %s: want root's result.json", resp.StatusCode, b)
	}
	list(m, "stdio after the run", mine, mineBin, meta)

	// The same over Streamable HTTP.
	h := connectMCP(ctx, t, startMCPHTTP(t, d).transport())
	list(h, "HTTP", mine, mineBin, meta)
	readOK(h, "HTTP", uri(mine.FileID), string(textData), nil)
	res, err = read(h, uri(theirs.FileID))
	mstWantNotFound(t, "HTTP: uid 65534's file", uri(theirs.FileID), res, err)

	// Deleted: gone from the list, not found.
	if resp, b := fsCall(t, d, "DELETE", "/v1/files/"+mine.FileID, nil); resp.StatusCode/100 != 2 {
		t.Fatalf("DELETE %s: HTTP %d %s", mine.FileID, resp.StatusCode, b)
	}
	list(m, "after a DELETE", mineBin, meta)
	res, err = read(m, uri(mine.FileID))
	mstWantNotFound(t, "a deleted file", uri(mine.FileID), res, err)
}
