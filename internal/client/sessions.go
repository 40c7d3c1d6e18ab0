package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"

	"github.com/jaild/jaild/internal/api"
)

// CreateSession opens a session (POST /v1/sessions).
func (c *Client) CreateSession(ctx context.Context, req *api.SessionCreateRequest) (*api.Session, error) {
	if req == nil {
		req = &api.SessionCreateRequest{}
	}
	var resp api.Session
	if err := c.call(ctx, http.MethodPost, "/v1/sessions", req, &resp); err != nil {
		return nil, err
	}
	if resp.SessionID == "" {
		return nil, errors.New("jaild POST /v1/sessions: malformed response: no session_id")
	}
	return &resp, nil
}

// SessionExecute runs code in a session (POST /v1/sessions/{id}/execute).
func (c *Client) SessionExecute(ctx context.Context, id string, req *api.SessionExecuteRequest) (*api.SessionExecuteResponse, error) {
	var resp api.SessionExecuteResponse
	path := "/v1/sessions/" + url.PathEscape(id) + "/execute"
	if err := c.call(ctx, http.MethodPost, path, req, &resp); err != nil {
		return nil, err
	}
	if resp.Status == "" {
		return nil, errors.New("jaild POST " + path + ": malformed response: no status")
	}
	return &resp, nil
}

// InterruptSession sends SIGINT to a session's call in progress.
func (c *Client) InterruptSession(ctx context.Context, id string) (*api.SessionInterruptResponse, error) {
	var resp api.SessionInterruptResponse
	if err := c.call(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/interrupt", struct{}{}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Session describes one session (GET /v1/sessions/{id}).
func (c *Client) Session(ctx context.Context, id string) (*api.Session, error) {
	var resp api.Session
	if err := c.call(ctx, http.MethodGet, "/v1/sessions/"+url.PathEscape(id), nil, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Sessions lists the caller's sessions (an admin's: everyone's).
func (c *Client) Sessions(ctx context.Context) (*api.SessionList, error) {
	var resp api.SessionList
	if err := c.call(ctx, http.MethodGet, "/v1/sessions", nil, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// DeleteSession ends a session at once (DELETE /v1/sessions/{id}).
func (c *Client) DeleteSession(ctx context.Context, id string) (*api.Session, error) {
	var resp api.Session
	if err := c.call(ctx, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id), nil, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}
