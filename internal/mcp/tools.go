package mcp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/ruff"
)

// Tool names.
const (
	RunTool    = "run_python"
	LintTool   = "lint_python"
	FormatTool = "format_python"
)

// RunInput is the arguments of run_python.
type RunInput struct {
	Code           string      `json:"code" jsonschema:"the Python program; it runs as main.py in /workspace, the current directory"`
	Stdin          string      `json:"stdin,omitempty" jsonschema:"the program's standard input (default: empty)"`
	TimeoutSeconds float64     `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit of the run in seconds (default: the daemon's)"`
	Files          []FileInput `json:"files,omitempty" jsonschema:"files written into /workspace before the code runs"`
	ReturnFiles    []string    `json:"return_files,omitempty" jsonschema:"paths or glob patterns (*, ?, [...] within a name, ** across directories), relative to /workspace, of files to send back after the run"`
	SessionID      string      `json:"session_id,omitempty" jsonschema:"run the code in this session, opened with open_session, where the variables, imports and files of its earlier calls persist (default: a fresh sandbox of its own)"`
	ReturnFilesAs  string      `json:"return_files_as,omitempty" jsonschema:"inline (the default: each returned file's content is in the result) or store: each goes into jaild's file store and comes back as a link to the resource jaild://files/FILE_ID, whose file_id later calls can use in files"`
	Image          string      `json:"image,omitempty" jsonschema:"the image to run the code in"`
}

// FileInput is a file written into the workspace before the code runs.
type FileInput struct {
	Path       string `json:"path" jsonschema:"relative path in /workspace, such as data.csv or in/data.csv"`
	ContentB64 string `json:"content_b64,omitempty" jsonschema:"the file's content, base64-encoded (standard alphabet, padded)"`
	FileID     string `json:"file_id,omitempty" jsonschema:"instead of content_b64, a file of jaild's file store: the file_id of the resource jaild://files/FILE_ID or of a file a call returned with return_files_as store"`
}

// RunOutput is run_python's structured result. Returned files' contents
// and figures are in the result's content, as embedded resources and
// images.
type RunOutput struct {
	Status          string         `json:"status" jsonschema:"ok, error (an exception or a non-zero exit), timeout, memory_limit, cpu_limit, output_limit or killed"`
	Message         string         `json:"message" jsonschema:"one line that says what went wrong; empty when ok"`
	Exception       *api.ExecError `json:"exception,omitempty" jsonschema:"the uncaught exception, if any: type, message and line in the code"`
	ExitCode        *int           `json:"exit_code" jsonschema:"the program's exit code; null when a signal killed it"`
	Signal          *int           `json:"signal,omitempty" jsonschema:"the signal that killed the program"`
	Stdout          string         `json:"stdout"`
	Stderr          string         `json:"stderr"`
	StdoutTruncated bool           `json:"stdout_truncated,omitempty" jsonschema:"stdout passed the output limit and was cut"`
	StderrTruncated bool           `json:"stderr_truncated,omitempty" jsonschema:"stderr passed the output limit and was cut"`
	Files           []FileResult   `json:"files,omitempty" jsonschema:"the files that matched return_files"`
	Figures         []string       `json:"figures,omitempty" jsonschema:"names of the matplotlib figures, returned as PNG images"`
	DurationMs      int64          `json:"duration_ms" jsonschema:"wall-clock time of the run"`
	Result          *string        `json:"result,omitempty" jsonschema:"in a session, the repr() of the value of a last line that is an expression (also printed to stdout)"`
	Session         *CallSession   `json:"session,omitempty" jsonschema:"with session_id: the call's number in the session and what became of the session"`
	Image           string         `json:"image,omitempty" jsonschema:"the image the code ran in"`
}

// FileResult is a file that matched return_files: returned (its content
// is an embedded resource of the result, or with FileID it went into the
// file store and the result links to it) or, with Error, not returned.
type FileResult struct {
	Path      string `json:"path"`
	SizeBytes int64  `json:"size_bytes"`
	URI       string `json:"uri,omitempty" jsonschema:"the URI of the embedded resource that holds the content, or of the stored file"`
	FileID    string `json:"file_id,omitempty" jsonschema:"with return_files_as store: the file's id in jaild's file store, for files in later calls"`
	SHA256    string `json:"sha256,omitempty" jsonschema:"with return_files_as store: the SHA-256 of the stored content, in hex"`
	Error     string `json:"error,omitempty" jsonschema:"why the file was not returned"`
}

// LintInput is the arguments of lint_python.
type LintInput struct {
	Code   string   `json:"code" jsonschema:"the Python source to lint"`
	Select []string `json:"select,omitempty" jsonschema:"ruff rule codes or prefixes to enable, such as F or E501"`
	Ignore []string `json:"ignore,omitempty" jsonschema:"ruff rule codes or prefixes to disable"`
	Image  string   `json:"image,omitempty" jsonschema:"the image whose ruff lints"`
}

// LintOutput is lint_python's structured result.
type LintOutput struct {
	Diagnostics []api.Diagnostic `json:"diagnostics" jsonschema:"ruff's findings, in source order"`
}

// FormatInput is the arguments of format_python.
type FormatInput struct {
	Code  string `json:"code" jsonschema:"the Python source to format"`
	Image string `json:"image,omitempty" jsonschema:"the image whose ruff formats"`
}

// FormatOutput is format_python's structured result.
type FormatOutput struct {
	Code    string `json:"code" jsonschema:"the formatted source"`
	Changed bool   `json:"changed" jsonschema:"the formatter changed the source"`
}

func (s *Server) addTools() error {
	runImage := "the image to run the code in"
	if s.info.Sessions.Enabled {
		runImage += ", without session_id (a session's calls run in the image it was opened in)"
	}
	err := addTool(s, &sdk.Tool{
		Name:        RunTool,
		Title:       "Run Python in a jail",
		Description: s.runDescription(),
		Annotations: hints(false, false, false),
	}, s.run, func(in *jsonschema.Schema) {
		nonEmpty(in, "code")
		if s.info.Sessions.Enabled {
			nonEmpty(in, "session_id")
		} else {
			delete(in.Properties, "session_id")
		}
		timeout := in.Properties["timeout_seconds"]
		timeout.ExclusiveMinimum = jsonschema.Ptr(0.0)
		timeout.Maximum = jsonschema.Ptr(float64(s.maxima().TimeoutMs) / 1000)
		if s.info.Files.Enabled {
			in.Properties["return_files_as"].Enum = []any{api.ReturnInline, api.ReturnStore}
		} else {
			delete(in.Properties, "return_files_as")
		}
		s.filesSchema(in.Properties["files"].Items)
		s.imageArgument(in, s.imageNames(false), runImage)
	})
	if err != nil {
		return err
	}
	err = addTool(s, &sdk.Tool{
		Name:        LintTool,
		Title:       "Lint Python with ruff",
		Description: lintDescription,
		Annotations: hints(true, false, true),
	}, s.lint, func(in *jsonschema.Schema) {
		// The defaults come from the one place that knows them.
		in.Properties["select"].Description += " (default: " + strings.Join(ruff.DefaultSelect, ", ") + ")"
		in.Properties["ignore"].Description += " (default: " + strings.Join(ruff.DefaultIgnore, ", ") + ")"
		s.imageArgument(in, s.imageNames(true), "the image whose ruff lints")
	})
	if err != nil {
		return err
	}
	err = addTool(s, &sdk.Tool{
		Name:        FormatTool,
		Title:       "Format Python with ruff",
		Description: formatDescription,
		Annotations: hints(true, false, true),
	}, s.format, func(in *jsonschema.Schema) {
		s.imageArgument(in, s.imageNames(true), "the image whose ruff formats")
	})
	if err != nil || !s.info.Sessions.Enabled {
		return err
	}
	return s.addSessionTools()
}

// addTool adds the tool t, served by h, with the input schema inferred
// from In (inputSchema) and then fitted to this daemon by fit.
func addTool[In, Out any](s *Server, t *sdk.Tool, h sdk.ToolHandlerFor[In, Out], fit func(*jsonschema.Schema)) error {
	in, err := inputSchema[In]()
	if err != nil {
		return fmt.Errorf("%s input schema: %w", t.Name, err)
	}
	if fit != nil {
		fit(in)
	}
	t.InputSchema = in
	sdk.AddTool(s.mcp, t, h)
	return nil
}

// hints are a tool's annotations: whether it only reads, destroys what
// the caller had, and does the same when called twice. No tool reaches
// beyond the daemon (OpenWorldHint false).
func hints(readOnly, destructive, idempotent bool) *sdk.ToolAnnotations {
	no := false
	a := &sdk.ToolAnnotations{ReadOnlyHint: readOnly, IdempotentHint: idempotent, OpenWorldHint: &no}
	if !readOnly {
		a.DestructiveHint = &destructive
	}
	return a
}

// nonEmpty makes the string arguments names of the schema non-empty.
func nonEmpty(in *jsonschema.Schema, names ...string) {
	for _, n := range names {
		in.Properties[n].MinLength = jsonschema.Ptr(1)
	}
}

// filesSchema fits the schema of FileInput to the daemon: without a file
// store there is no file_id, and content_b64 is required.
func (s *Server) filesSchema(item *jsonschema.Schema) {
	if s.info.Files.Enabled {
		return
	}
	delete(item.Properties, "file_id")
	item.Required = append(item.Required, "content_b64")
}

// inputSchema is the schema inferred from T, with its optional
// properties' types plain ("array", not ["null", "array"]): absent is how
// an argument is left out, and some clients pass schemas on to models that
// accept only one type.
func inputSchema[T any]() (*jsonschema.Schema, error) {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		return nil, err
	}
	for name, p := range s.Properties {
		if len(p.Types) == 2 && p.Types[0] == "null" && !slices.Contains(s.Required, name) {
			p.Type, p.Types = p.Types[1], nil
		}
	}
	return s, nil
}

// maxima are the most this caller may ask for, as the daemon sees it.
func (s *Server) maxima() api.LimitValues {
	if s.info.Caller.Admin {
		return s.info.AdminMaxima
	}
	return s.info.Maxima
}

func (s *Server) runDescription() string {
	d, m := s.info.Defaults, s.maxima()
	inSession := ""
	if s.info.Sessions.Enabled {
		inSession = " In a session the time limit defaults to the session's, and memory, processes and file size are the session's, for all its calls together."
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Run a Python program in an isolated sandbox (a jail) and get back its stdout, stderr and exit status, the exception if one was raised, matplotlib figures as PNG images, and the files you ask for.\n\n")
	b.WriteString(s.imagesText())
	if !s.info.Sessions.Enabled {
		fmt.Fprintf(&b, "- Each call starts from a clean state: no variables, imports or files survive from an earlier call, so send all the code and files a task needs in one call.\n")
	} else {
		fmt.Fprintf(&b, "- Without session_id, each call starts from a clean state in a fresh sandbox: no variables, imports or files survive from an earlier call, so send all the code and files a task needs in one call.\n")
		fmt.Fprintf(&b, "- With session_id (from %s), the code runs in that session's interpreter: variables, imports and the files in /workspace and /tmp persist from its earlier calls, and the value of a last line that is an expression is printed, as in a REPL. One call runs at a time in a session. If the interpreter had to be restarted (the call went past its time limit and did not stop at the interrupt, or hit the memory limit), the result says state_lost: variables and imports are gone, files are kept. An ended session takes no more calls.\n", OpenSessionTool)
	}
	fmt.Fprintf(&b, "- There is no network access.\n")
	fmt.Fprintf(&b, "- Only what the program prints is shown: print() what you want to see. Figures shown with plt.show() or still open at the end come back as images.\n")
	fmt.Fprintf(&b, "- The program runs as main.py in /workspace, its current directory. `files` are written there first; `return_files` are sent back afterwards.\n")
	if s.info.Files.Enabled {
		fmt.Fprintf(&b, "- Files kept in jaild's file store (listed as resources jaild://files/FILE_ID) go into `files` by file_id, without base64; return_files_as \"store\" puts returned files there, for large outputs or files to reuse.\n")
	}
	inImage := ""
	if s.multiImage() {
		inImage = " in the default image (another image's are noted above if they differ)"
	}
	fmt.Fprintf(&b, "- Limits of each call%s: %s of wall-clock time (timeout_seconds, at most %s), %d MB of memory, %d processes and threads, %d MB per file written, %s each of stdout and stderr.%s\n",
		inImage, seconds(d.TimeoutMs), seconds(m.TimeoutMs), d.MemoryMB, d.Pids, d.FileSizeMB, bytesString(d.OutputBytes), inSession)
	fmt.Fprintf(&b, "- A run that fails (an exception, a non-zero exit, the time or memory limit) is a result with isError set, its message, the exception and stderr: fix the code and call again.")
	return b.String()
}

const lintDescription = `Lint Python code with ruff, without running it, and return its findings: rule code, message, line and column, whether ruff has a safe fix, and a link to the rule's documentation.
All rules are on by default except a few stylistic ones; select and ignore take ruff rule codes or prefixes (such as F, E501, D) and each replaces its default. A syntax error is a finding with the code invalid-syntax. No findings means the code is clean.`

const formatDescription = `Format Python code with ruff's formatter (the Black style), without running it, and return the formatted code. Code that cannot be parsed is an error that says where.`

// seconds renders a millisecond limit for a model: "10 s", "1.5 s".
func seconds(ms int64) string {
	return fmt.Sprintf("%g s", (time.Duration(ms) * time.Millisecond).Seconds())
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func (s *Server) run(ctx context.Context, creq *sdk.CallToolRequest, in RunInput) (*sdk.CallToolResult, *RunOutput, error) {
	if in.SessionID != "" {
		if in.Image != "" {
			return nil, nil, fmt.Errorf("image: a session's calls run in the image it was opened in (%s's image); leave image out with session_id", OpenSessionTool)
		}
		return s.runInSession(ctx, creq, in)
	}
	req, err := executeRequest(in)
	if err != nil {
		return nil, nil, err
	}
	var resp *api.ExecuteResponse
	if p := startProgress(ctx, creq); p != nil {
		resp, err = s.client.ExecuteStream(ctx, req, p.event)
		p.finish()
	} else {
		resp, err = s.client.Execute(ctx, req)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("jaild did not run the code: %w", err)
	}
	return runResult(resp, nil)
}

// executeRequest maps run_python's arguments to the daemon's request. The
// daemon validates everything else, with messages that name the fields,
// which run_python shares with the API (files[i].path, return_files).
func executeRequest(in RunInput) (*api.ExecuteRequest, error) {
	req := &api.ExecuteRequest{Code: in.Code, ReturnFiles: in.ReturnFiles, ReturnFilesAs: in.ReturnFilesAs, Files: filesIn(in.Files), Image: in.Image}
	if in.Stdin != "" {
		req.Stdin = &in.Stdin
	}
	if in.TimeoutSeconds != 0 {
		ms, err := timeoutMs(in.TimeoutSeconds)
		if err != nil {
			return nil, err
		}
		req.Limits = &api.Limits{TimeoutMs: &ms}
	}
	return req, nil
}

func filesIn(files []FileInput) []api.FileIn {
	var in []api.FileIn
	for _, f := range files {
		in = append(in, api.FileIn{Path: f.Path, ContentB64: f.ContentB64, FileID: f.FileID})
	}
	return in
}

func (s *Server) lint(ctx context.Context, _ *sdk.CallToolRequest, in LintInput) (*sdk.CallToolResult, *LintOutput, error) {
	resp, err := s.client.Lint(ctx, &api.LintRequest{Code: in.Code, Select: in.Select, Ignore: in.Ignore, Image: in.Image})
	if err != nil {
		return nil, nil, fmt.Errorf("jaild did not lint the code: %w", err)
	}
	out := &LintOutput{Diagnostics: resp.Diagnostics}
	if out.Diagnostics == nil {
		out.Diagnostics = []api.Diagnostic{}
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: lintText(out.Diagnostics)}}}, out, nil
}

func (s *Server) format(ctx context.Context, _ *sdk.CallToolRequest, in FormatInput) (*sdk.CallToolResult, *FormatOutput, error) {
	resp, err := s.client.Format(ctx, &api.FormatRequest{Code: in.Code, Image: in.Image})
	if err != nil {
		return nil, nil, fmt.Errorf("jaild did not format the code: %w", err)
	}
	out := &FormatOutput{Code: resp.Code, Changed: resp.Changed}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: resp.Code}}}, out, nil
}
