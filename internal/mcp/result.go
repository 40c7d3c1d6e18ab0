package mcp

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"mime"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
)

// runResult turns the daemon's answer into run_python's result: a text
// for the model, then each figure as a PNG image and each returned file as
// an embedded resource (or, for a file returned into the store, a link to
// its resource), plus the structured output. sess, for a call in a
// session, is what became of the session. A run that did not end with
// status ok is a result with IsError set, not a protocol error. The error
// is for a response whose base64 does not decode.
func runResult(resp *api.ExecuteResponse, sess *CallSession) (*sdk.CallToolResult, *RunOutput, error) {
	out := &RunOutput{
		Status:          resp.Status,
		Message:         resp.Message,
		Exception:       resp.Error,
		ExitCode:        resp.ExitCode,
		Signal:          resp.Signal,
		Stdout:          resp.Stdout,
		Stderr:          resp.Stderr,
		StdoutTruncated: resp.StdoutTruncated,
		StderrTruncated: resp.StderrTruncated,
		DurationMs:      resp.Usage.DurationMs,
		Result:          resp.Result,
		Session:         sess,
		Image:           resp.Image,
	}
	var attached []sdk.Content
	for _, f := range resp.Figures {
		png, err := base64.StdEncoding.DecodeString(f.ContentB64)
		if err != nil {
			return nil, nil, fmt.Errorf("malformed response from jaild: figure %q: %w", f.Name, err)
		}
		out.Figures = append(out.Figures, f.Name)
		attached = append(attached, &sdk.ImageContent{Data: png, MIMEType: "image/png"})
	}
	rich, err := outputContents(resp)
	if err != nil {
		return nil, nil, err
	}
	attached = append(attached, rich...)
	for _, f := range resp.Files {
		fr := FileResult{Path: f.Path, SizeBytes: f.SizeBytes, FileID: f.FileID, SHA256: f.SHA256, Error: f.Error}
		switch {
		case f.Error != "":
		case f.FileID != "":
			fr.URI = storedFileURI(f.FileID)
			attached = append(attached, &sdk.ResourceLink{URI: fr.URI, Name: path.Base(f.Path), MIMEType: mimeType(f.Path), Size: &fr.SizeBytes})
		default:
			content, err := base64.StdEncoding.DecodeString(f.ContentB64)
			if err != nil {
				return nil, nil, fmt.Errorf("malformed response from jaild: file %q: %w", f.Path, err)
			}
			fr.URI = fileURI(resp.RunID, f.Path)
			attached = append(attached, &sdk.EmbeddedResource{Resource: resourceContents(fr.URI, f.Path, content)})
		}
		out.Files = append(out.Files, fr)
	}
	res := &sdk.CallToolResult{
		Content: append([]sdk.Content{&sdk.TextContent{Text: runText(out)}}, attached...),
		IsError: resp.Status != api.StatusOK,
	}
	return res, out, nil
}

// Text types of a rich output a model is given as text, in this order;
// text/plain only when none of them is there.
var outputTexts = []string{"text/markdown", "text/html", "application/json", "text/latex", "image/svg+xml"}

// outputContents are the run's rich outputs for the model (figures are
// attached already): a text per output with its text types, and its
// PNG or JPEG as an image. An execute_result with text/plain alone is
// the stdout's last line already and adds nothing.
func outputContents(resp *api.ExecuteResponse) ([]sdk.Content, error) {
	figures := map[string]bool{}
	for _, f := range resp.Figures {
		figures[f.ContentB64] = true
	}
	var out []sdk.Content
	for i, o := range resp.Outputs {
		var png string
		if json.Unmarshal(o.Data["image/png"], &png) == nil && figures[png] {
			continue
		}
		var b strings.Builder
		for _, typ := range outputTexts {
			v, ok := o.Data[typ]
			if !ok {
				continue
			}
			var text string
			if json.Unmarshal(v, &text) != nil {
				text = string(v) // JSON types are JSON
			}
			fmt.Fprintf(&b, "%s:\n%s\n", typ, strings.TrimSuffix(text, "\n"))
		}
		var images []sdk.Content
		for _, typ := range []string{"image/png", "image/jpeg"} {
			var b64 string
			if json.Unmarshal(o.Data[typ], &b64) != nil || b64 == "" {
				continue
			}
			data, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				return nil, fmt.Errorf("malformed response from jaild: output %d: %s: %w", i+1, typ, err)
			}
			images = append(images, &sdk.ImageContent{Data: data, MIMEType: typ})
		}
		if b.Len() == 0 && o.OutputType == api.OutputDisplayData {
			var text string
			if json.Unmarshal(o.Data["text/plain"], &text) == nil {
				fmt.Fprintf(&b, "text/plain:\n%s\n", strings.TrimSuffix(text, "\n"))
			}
		}
		if b.Len() == 0 && len(images) == 0 {
			continue
		}
		head := fmt.Sprintf("output %d (%s)", i+1, o.OutputType)
		if len(images) > 0 {
			head += ", its image attached next"
		}
		out = append(out, &sdk.TextContent{Text: head + ":\n" + strings.TrimSuffix(b.String(), "\n")})
		out = append(out, images...)
	}
	return out, nil
}

// fileURI names a returned file: jaild://RUN_ID/PATH. The jail it came
// from is gone, so the URI identifies the content; nothing serves it.
func fileURI(runID, p string) string {
	return (&url.URL{Scheme: "jaild", Host: runID, Path: "/" + p}).String()
}

// resourceContents holds a returned file as text when it is UTF-8 without
// NUL bytes, else as a blob. An empty file is an empty blob: a text
// resource's text is required on the wire, and the SDK omits an empty one.
func resourceContents(uri, name string, content []byte) *sdk.ResourceContents {
	isText := len(content) > 0 && utf8.Valid(content) && !bytes.ContainsRune(content, 0)
	typ := mime.TypeByExtension(path.Ext(name))
	switch {
	case typ != "":
	case isText:
		typ = "text/plain; charset=utf-8"
	default:
		typ = "application/octet-stream"
	}
	if isText {
		return &sdk.ResourceContents{URI: uri, MIMEType: typ, Text: string(content)}
	}
	if content == nil {
		content = []byte{}
	}
	return &sdk.ResourceContents{URI: uri, MIMEType: typ, Blob: content}
}

// runText is the run's result as a model reads it: what happened, then
// the output streams verbatim, then what is attached.
func runText(out *RunOutput) string {
	var b strings.Builder
	fmt.Fprintf(&b, "status: %s (%s)\n", out.Status, seconds(out.DurationMs))
	if s := out.Session; s != nil {
		fmt.Fprintf(&b, "session: %s, execution_count %d\n", s.SessionID, s.ExecutionCount)
		switch {
		case s.StateLost:
			fmt.Fprintf(&b, "state_lost: true (lost_reason: %s): the session's interpreter was replaced; variables and imports are gone, files in /workspace and /tmp are kept.\n", s.LostReason)
		case out.Status == api.StatusTimeout:
			fmt.Fprintf(&b, "state kept: the code stopped at the KeyboardInterrupt; variables are as it left them.\n")
		}
		if s.State == api.SessionEnded {
			why := ""
			if s.EndReason != "" {
				why = ": " + endReasonText(s.EndReason)
			}
			fmt.Fprintf(&b, "session ended%s. It takes no more calls, and its variables and files are gone; open a new one with %s.\n", why, OpenSessionTool)
		}
	}
	e := out.Exception
	if out.Message != "" && (e == nil || out.Message != e.Type+": "+e.Message) {
		fmt.Fprintf(&b, "message: %s\n", out.Message)
	}
	if e != nil {
		fmt.Fprintf(&b, "exception: %s", e.Type)
		if e.Message != "" {
			fmt.Fprintf(&b, ": %s", e.Message)
		}
		if e.Line != nil {
			fmt.Fprintf(&b, " (line %d of the code)", *e.Line)
		}
		b.WriteString("\n")
	}
	switch {
	case out.ExitCode != nil:
		fmt.Fprintf(&b, "exit code: %d\n", *out.ExitCode)
	case out.Signal != nil:
		fmt.Fprintf(&b, "killed by signal %d\n", *out.Signal)
	}
	empty := "(empty)"
	if out.Status == api.StatusOK {
		empty = "(empty: print() what you want to see)"
	}
	stream(&b, "stdout", out.Stdout, out.StdoutTruncated, empty)
	stream(&b, "stderr", out.Stderr, out.StderrTruncated, "(empty)")
	for _, f := range out.Files {
		switch {
		case f.Error != "":
			fmt.Fprintf(&b, "file %s: not returned: %s\n", f.Path, f.Error)
		case f.FileID != "":
			fmt.Fprintf(&b, "file %s: %d bytes, stored as file_id %s (%s)\n", f.Path, f.SizeBytes, f.FileID, f.URI)
		default:
			fmt.Fprintf(&b, "file %s: %d bytes, attached as %s\n", f.Path, f.SizeBytes, f.URI)
		}
	}
	for _, name := range out.Figures {
		fmt.Fprintf(&b, "figure %s: attached as an image\n", name)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func stream(b *strings.Builder, name, s string, truncated bool, empty string) {
	switch {
	case s == "":
		fmt.Fprintf(b, "%s: %s\n", name, empty)
		return
	case truncated:
		fmt.Fprintf(b, "%s (cut at the output limit):\n", name)
	default:
		fmt.Fprintf(b, "%s:\n", name)
	}
	b.WriteString(s)
	if !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
}

// lintText lists lint findings one a line, as "LINE:COL: CODE message".
func lintText(diags []api.Diagnostic) string {
	if len(diags) == 0 {
		return "No findings: the code is clean."
	}
	var b strings.Builder
	for _, d := range diags {
		fmt.Fprintf(&b, "%d:%d: %s %s", d.Location.Line, d.Location.Column, d.Code, d.Message)
		if d.Fixable {
			b.WriteString(" (fixable)")
		}
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}
