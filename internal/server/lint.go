package server

import (
	"net/http"
	"strings"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/policy"
	"github.com/jaild/jaild/internal/ruff"
	"github.com/jaild/jaild/internal/run/spec"
)

func (s *Server) lint(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	who := callerOf(r)
	var req api.LintRequest
	mem := s.newLease(who)
	defer mem.release()
	s.budgetBody(r, mem)
	err := s.decode(w, r, &req)
	if err == nil {
		err = policy.Code(req.Code)
	}
	if err == nil {
		err = ruff.CheckRules("select", req.Select)
	}
	if err == nil {
		err = ruff.CheckRules("ignore", req.Ignore)
	}
	var image string
	if err == nil {
		image, err = s.ruffImage(req.Image)
	}
	if err != nil {
		s.audit.refused(who, "lint", err)
		return err
	}
	args := ruff.CheckArgs(req.Select, req.Ignore)
	jr := &spec.Request{Command: args, Stdin: []byte(req.Code), Env: policy.RuffEnv(), Limits: s.policy.RuffLimits(), Image: image}
	res, queued, err := s.run(r.Context(), who, jr)
	s.setQuotaHeader(w, who)
	if err != nil {
		s.audit.refused(who, "lint", err)
		return err
	}
	s.audit.ran(who, "lint", req.Code, jr.Limits, res, queued, time.Since(start))
	if err := ruffFailed(res); err != nil {
		return err
	}
	diags, err := ruff.Diagnostics(res.Stdout)
	if err != nil {
		return err // the daemon's fault: internal
	}
	out := api.LintResponse{Diagnostics: diags}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ruffFailed turns a ruff run that did not complete into an error.
func ruffFailed(res *spec.Result) error {
	if res.Status == spec.StatusOK {
		return nil
	}
	switch res.Status {
	case spec.StatusTimeout, spec.StatusMemoryLimit, spec.StatusOutputLimit, spec.StatusCPULimit:
		return errdefs.New(errdefs.ErrInvalidArgument, "ruff hit a limit (%s); try smaller code", res.Status)
	}
	first, _, _ := strings.Cut(strings.TrimSpace(strings.ToValidUTF8(string(res.Stderr), "?")), "\n")
	return errdefs.New(errdefs.ErrInternal, "ruff failed (%s, exit %d): %s", res.Status, res.ExitCode, first)
}

func (s *Server) format(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	who := callerOf(r)
	var req api.FormatRequest
	mem := s.newLease(who)
	defer mem.release()
	s.budgetBody(r, mem)
	err := s.decode(w, r, &req)
	if err == nil {
		err = policy.Code(req.Code)
	}
	var image string
	if err == nil {
		image, err = s.ruffImage(req.Image)
	}
	if err != nil {
		s.audit.refused(who, "format", err)
		return err
	}
	jr := &spec.Request{Command: ruff.FormatArgs(), Stdin: []byte(req.Code), Env: policy.RuffEnv(), Limits: s.policy.RuffLimits(), Image: image}
	res, queued, err := s.run(r.Context(), who, jr)
	s.setQuotaHeader(w, who)
	if err != nil {
		s.audit.refused(who, "format", err)
		return err
	}
	s.audit.ran(who, "format", req.Code, jr.Limits, res, queued, time.Since(start))
	if res.Status == spec.StatusError && res.ExitCode == 2 {
		// ruff format exits 2 on code it cannot parse.
		first, _, _ := strings.Cut(strings.TrimSpace(strings.ToValidUTF8(string(res.Stderr), "?")), "\n")
		return errdefs.New(errdefs.ErrInvalidArgument, "code cannot be formatted: %s", first)
	}
	if err := ruffFailed(res); err != nil {
		return err
	}
	formatted := string(res.Stdout)
	writeJSON(w, http.StatusOK, api.FormatResponse{Code: formatted, Changed: formatted != req.Code})
	return nil
}
