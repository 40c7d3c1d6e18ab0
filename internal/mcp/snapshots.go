package mcp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Snapshots (issue 28) for models: snapshot_session saves a session's
// state and lets it go on; restore_session rolls the session back to it;
// open_session's from_snapshot starts a new session from it. A snapshot
// belongs to the MCP connection that took it, as its sessions do, and is
// deleted when the connection closes.
const (
	SnapshotSessionTool = "snapshot_session"
	RestoreSessionTool  = "restore_session"
	snapshotPrefix      = "snap-" // the daemon's snapshot ids
)

// SnapshotSessionInput is the arguments of snapshot_session.
type SnapshotSessionInput struct {
	SessionID string `json:"session_id" jsonschema:"the session to snapshot, as open_session returned it"`
}

// SnapshotOutput is snapshot_session's structured result.
type SnapshotOutput struct {
	SnapshotID string `json:"snapshot_id" jsonschema:"pass it to restore_session (with the same session_id) to roll the session back to this point, or to open_session as from_snapshot"`
	SessionID  string `json:"session_id" jsonschema:"the session it was taken of"`
	CreatedAt  string `json:"created_at" jsonschema:"when it was taken, RFC 3339"`
	Bytes      int64  `json:"bytes" jsonschema:"its size on the daemon's disk"`
	ExpiresAt  string `json:"expires_at,omitempty" jsonschema:"when the daemon deletes it at the latest, RFC 3339"`
}

// RestoreSessionInput is the arguments of restore_session.
type RestoreSessionInput struct {
	SessionID  string `json:"session_id" jsonschema:"the session to roll back, as open_session returned it"`
	SnapshotID string `json:"snapshot_id" jsonschema:"a snapshot of that session, as snapshot_session returned it"`
}

func (s *Server) addSnapshotTools() error {
	err := addTool(s, &sdk.Tool{
		Name:  SnapshotSessionTool,
		Title: "Snapshot a Python session",
		Description: fmt.Sprintf("Save a session's whole state (variables, imports, open files, /workspace and /tmp) as a snapshot, and let the session go on: before a risky step, call it, then %s brings the session back to this point (any number of times), and %s with from_snapshot opens a new session from it. "+
			"Snapshots are deleted when this MCP connection closes.", RestoreSessionTool, OpenSessionTool),
		Annotations: hints(false, false, false),
	}, s.snapshotSession, func(in *jsonschema.Schema) { nonEmpty(in, "session_id") })
	if err != nil {
		return err
	}
	return addTool(s, &sdk.Tool{
		Name:  RestoreSessionTool,
		Title: "Roll a Python session back to a snapshot",
		Description: fmt.Sprintf("Roll a session back to one of its snapshots (from %s): its variables, imports and files become the snapshot's, and whatever it did since is gone. "+
			"Its session_id stays the same; the snapshot is kept.", SnapshotSessionTool),
		Annotations: hints(false, true, true),
	}, s.restoreSession, func(in *jsonschema.Schema) { nonEmpty(in, "session_id", "snapshot_id") })
}

func (s *Server) snapshotSession(ctx context.Context, req *sdk.CallToolRequest, in SnapshotSessionInput) (*sdk.CallToolResult, *SnapshotOutput, error) {
	if err := s.reachable(req.Session, in.SessionID); err != nil {
		return nil, nil, err
	}
	sn, err := s.client.SnapshotSession(ctx, in.SessionID)
	if err != nil {
		return nil, nil, fmt.Errorf("jaild did not take the snapshot: %w", err)
	}
	if !strings.HasPrefix(sn.SnapshotID, snapshotPrefix) {
		// Not an id endOne would know for a snapshot's: nothing is
		// deleted in its name.
		return nil, nil, fmt.Errorf("jaild answered a malformed snapshot id %q", sn.SnapshotID)
	}
	if !s.owned.add(req.Session, sn.SnapshotID) {
		// The server is shutting down: nothing would delete it.
		err := s.endSessions(context.WithoutCancel(ctx), []string{sn.SnapshotID})
		return nil, nil, errors.Join(errors.New("the MCP server is shutting down; the snapshot was deleted"), err)
	}
	out := &SnapshotOutput{SnapshotID: sn.SnapshotID, SessionID: sn.SessionID, CreatedAt: sn.CreatedAt.UTC().Format(time.RFC3339), Bytes: sn.Bytes}
	text := fmt.Sprintf("snapshot_id: %s\nSession %s goes on; %s with this snapshot_id brings it back to this point.", out.SnapshotID, in.SessionID, RestoreSessionTool)
	if sn.ExpiresAt != nil {
		out.ExpiresAt = sn.ExpiresAt.UTC().Format(time.RFC3339)
		text += fmt.Sprintf(" The snapshot is kept until %s at the latest (in %s).", out.ExpiresAt, approx(time.Until(*sn.ExpiresAt)))
	}
	return textResult(text), out, nil
}

func (s *Server) restoreSession(ctx context.Context, req *sdk.CallToolRequest, in RestoreSessionInput) (*sdk.CallToolResult, *SessionInfo, error) {
	if err := s.reachable(req.Session, in.SessionID); err != nil {
		return nil, nil, err
	}
	// The daemon rolls a session back only to a snapshot of its own.
	resp, err := s.client.RestoreSession(ctx, in.SessionID, in.SnapshotID)
	if err != nil {
		return nil, nil, fmt.Errorf("jaild did not roll the session back: %w", err)
	}
	out := sessionInfo(&resp.Session)
	return textResult(fmt.Sprintf("Session %s is back as it was in snapshot %s: what it did since is gone. Go on with run_python and the same session_id.", out.SessionID, in.SnapshotID)), out, nil
}

// fromSnapshot checks open_session's from_snapshot: a snapshot taken in
// this connection (or any of the caller's, for a server of all sessions).
func (s *Server) fromSnapshot(req *sdk.CallToolRequest, in OpenSessionInput) error {
	if in.FromSnapshot == "" || s.allSessions || s.owned.owns(req.Session, in.FromSnapshot) {
		return nil
	}
	return fmt.Errorf("from_snapshot: there is no snapshot %s in this MCP connection: only those taken here with %s can be used", in.FromSnapshot, SnapshotSessionTool)
}

// endOne deletes the session or snapshot id, for endSessions.
func (s *Server) endOne(ctx context.Context, id string) error {
	if kindOf(id) == "snapshot" {
		_, err := s.client.DeleteSnapshot(ctx, id)
		return err
	}
	_, err := s.client.DeleteSession(ctx, id)
	return err
}

// kindOf names what id is: a session or a snapshot.
func kindOf(id string) string {
	if strings.HasPrefix(id, snapshotPrefix) {
		return "snapshot"
	}
	return "session"
}
