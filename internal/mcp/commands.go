package mcp

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/jaild/jaild/internal/api"
)

// run_command (issue 29): a shell command line in a session's sandbox,
// beside its Python interpreter (POST /v1/sessions/{id}/commands, in the
// foreground): pip, git, test runners and the like, on the session's
// files.
const RunCommandTool = "run_command"

// RunCommandInput is the arguments of run_command.
type RunCommandInput struct {
	SessionID      string  `json:"session_id" jsonschema:"the session to run it in, as open_session returned it"`
	Command        string  `json:"command" jsonschema:"a shell command line, run by /bin/sh -c in the session's sandbox"`
	Cwd            string  `json:"cwd,omitempty" jsonschema:"its working directory: /workspace (the default), /tmp or a directory beneath them"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit in seconds (default: the session's call timeout); the command and everything it started are killed at it"`
}

// RunCommandOutput is run_command's structured result.
type RunCommandOutput struct {
	Status          string `json:"status" jsonschema:"ok (exit status 0), error (another exit status), timeout, killed, memory_limit or output_limit"`
	ExitCode        *int   `json:"exit_code,omitempty" jsonschema:"its exit status; absent when a signal ended it"`
	Signal          *int   `json:"signal,omitempty" jsonschema:"the signal that ended it"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	DurationMs      int64  `json:"duration_ms"`
}

func (s *Server) addCommandTools() error {
	return addTool(s, &sdk.Tool{
		Name:  RunCommandTool,
		Title: "Run a shell command in a Python session",
		Description: fmt.Sprintf("Run a shell command line (/bin/sh -c) in a session's sandbox, beside its Python interpreter, whose variables it does not touch: pip list, git, pytest, ls and the like. "+
			"It sees the session's files (/workspace, /tmp), runs as the session's user within its limits, and everything it starts ends with it. "+
			"Returns its exit status, stdout and stderr. Open the session with %s first; one command or %s call runs at a time.", OpenSessionTool, RunTool),
		Annotations: hints(false, true, false),
	}, s.runCommand, func(in *jsonschema.Schema) {
		nonEmpty(in, "session_id", "command")
		in.Properties["timeout_seconds"].ExclusiveMinimum = jsonschema.Ptr(0.0)
		in.Properties["timeout_seconds"].Maximum = jsonschema.Ptr(float64(s.maxima().TimeoutMs) / 1000)
	})
}

func (s *Server) runCommand(ctx context.Context, req *sdk.CallToolRequest, in RunCommandInput) (*sdk.CallToolResult, *RunCommandOutput, error) {
	if err := s.reachable(req.Session, in.SessionID); err != nil {
		return nil, nil, err
	}
	cr := api.CommandRequest{Cmd: in.Command, Cwd: in.Cwd}
	if in.TimeoutSeconds != 0 {
		ms, err := timeoutMs(in.TimeoutSeconds)
		if err != nil {
			return nil, nil, err
		}
		cr.TimeoutMs = &ms
	}
	r, err := s.client.RunSessionCommand(ctx, in.SessionID, cr)
	if err != nil {
		return nil, nil, fmt.Errorf("jaild did not run the command: %w", err)
	}
	out := &RunCommandOutput{Status: r.Status, ExitCode: r.ExitCode, Signal: r.Signal, Stdout: r.Stdout, Stderr: r.Stderr,
		StdoutTruncated: r.StdoutTruncated, StderrTruncated: r.StderrTruncated, DurationMs: r.Usage.DurationMs}
	var b strings.Builder
	switch {
	case r.Signal != nil:
		fmt.Fprintf(&b, "status: %s (signal %d)", r.Status, *r.Signal)
	case r.ExitCode != nil:
		fmt.Fprintf(&b, "status: %s (exit status %d)", r.Status, *r.ExitCode)
	default:
		fmt.Fprintf(&b, "status: %s", r.Status)
	}
	for _, st := range []struct {
		name, text string
		cut        bool
	}{{"stdout", r.Stdout, r.StdoutTruncated}, {"stderr", r.Stderr, r.StderrTruncated}} {
		if st.text == "" {
			continue
		}
		fmt.Fprintf(&b, "\n%s:\n%s", st.name, st.text)
		if !strings.HasSuffix(st.text, "\n") {
			b.WriteByte('\n')
		}
		if st.cut {
			fmt.Fprintf(&b, "[%s truncated at the output limit]\n", st.name)
		}
	}
	res := textResult(strings.TrimRight(b.String(), "\n"))
	res.IsError = r.Status != "ok"
	return res, out, nil
}
