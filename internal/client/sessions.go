package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/jaild/jaild/internal/api"
)

// CreateSession opens a session (POST /v1/sessions).
func (c *Client) CreateSession(ctx context.Context, req *api.SessionCreateRequest) (*api.Session, error) {
	if req == nil {
		req = &api.SessionCreateRequest{}
	}
	return callChecked(ctx, c, http.MethodPost, "/v1/sessions", req, "session_id", func(r *api.Session) bool { return r.SessionID != "" })
}

// SessionExecute runs code in a session (POST /v1/sessions/{id}/execute).
func (c *Client) SessionExecute(ctx context.Context, id string, req *api.SessionExecuteRequest) (*api.SessionExecuteResponse, error) {
	path := "/v1/sessions/" + url.PathEscape(id) + "/execute"
	return callChecked(ctx, c, http.MethodPost, path, req, "status", func(r *api.SessionExecuteResponse) bool { return r.Status != "" })
}

// InterruptSession sends SIGINT to a session's call in progress.
func (c *Client) InterruptSession(ctx context.Context, id string) (*api.SessionInterruptResponse, error) {
	return callAs[api.SessionInterruptResponse](ctx, c, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/interrupt", struct{}{})
}

// Session describes one session (GET /v1/sessions/{id}).
func (c *Client) Session(ctx context.Context, id string) (*api.Session, error) {
	return callAs[api.Session](ctx, c, http.MethodGet, "/v1/sessions/"+url.PathEscape(id), nil)
}

// Sessions lists the caller's sessions (an admin's: everyone's).
func (c *Client) Sessions(ctx context.Context) (*api.SessionList, error) {
	return callAs[api.SessionList](ctx, c, http.MethodGet, "/v1/sessions", nil)
}

// DeleteSession ends a session at once (DELETE /v1/sessions/{id}).
func (c *Client) DeleteSession(ctx context.Context, id string) (*api.Session, error) {
	return callAs[api.Session](ctx, c, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil)
}

// PauseSession pauses a session to disk (POST /v1/sessions/{id}/pause).
func (c *Client) PauseSession(ctx context.Context, id string) (*api.SessionPauseResponse, error) {
	return callAs[api.SessionPauseResponse](ctx, c, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/pause", struct{}{})
}

// ForkSession makes count sessions of a session's state (POST
// /v1/sessions/{id}/fork).
func (c *Client) ForkSession(ctx context.Context, id string, count int) (*api.SessionForkResponse, error) {
	return callAs[api.SessionForkResponse](ctx, c, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/fork", api.SessionForkRequest{Count: count})
}

// SnapshotSession takes a snapshot of a session, which goes on (POST
// /v1/sessions/{id}/snapshots).
func (c *Client) SnapshotSession(ctx context.Context, id string) (*api.Snapshot, error) {
	return callChecked(ctx, c, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/snapshots", struct{}{}, "snapshot_id", func(r *api.Snapshot) bool { return r.SnapshotID != "" })
}

// RestoreSession rolls a session back to one of its snapshots (POST
// /v1/sessions/{id}/restore).
func (c *Client) RestoreSession(ctx context.Context, id, snapshotID string) (*api.SessionPauseResponse, error) {
	return callAs[api.SessionPauseResponse](ctx, c, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/restore", api.SessionRestoreRequest{SnapshotID: snapshotID})
}

// DeleteSnapshot deletes a snapshot (DELETE /v1/snapshots/{id}).
func (c *Client) DeleteSnapshot(ctx context.Context, id string) (*api.Snapshot, error) {
	return callAs[api.Snapshot](ctx, c, http.MethodDelete, "/v1/snapshots/"+url.PathEscape(id), nil)
}
