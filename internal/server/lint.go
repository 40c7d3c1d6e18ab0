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
	var req api.LintRequest
	o, err := s.begin(w, r, "lint", &req)
	if err != nil {
		return err
	}
	defer o.done()
	err = policy.Code(req.Code)
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
		return o.fail(err)
	}
	args := ruff.CheckArgs(req.Select, req.Ignore)
	res, err := s.ruff(w, r, o, args, req.Code, image)
	if err != nil {
		return err
	}
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

// ruff runs ruff's args over code in image for operation o.
func (s *Server) ruff(w http.ResponseWriter, r *http.Request, o *op, args []string, code, image string) (*spec.Result, error) {
	jr := &spec.Request{Command: args, Stdin: []byte(code), Env: policy.RuffEnv(), Limits: s.policy.RuffLimits(), Image: image}
	res, queued, err := s.run(r.Context(), o.who, jr)
	s.setQuotaHeader(w, o.who)
	if err != nil {
		return nil, o.fail(err)
	}
	s.audit.ran(o.who, o.name, code, jr.Limits, res, queued, time.Since(o.start))
	return res, nil
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
	var req api.FormatRequest
	o, err := s.begin(w, r, "format", &req)
	if err != nil {
		return err
	}
	defer o.done()
	err = policy.Code(req.Code)
	var image string
	if err == nil {
		image, err = s.ruffImage(req.Image)
	}
	if err != nil {
		return o.fail(err)
	}
	res, err := s.ruff(w, r, o, ruff.FormatArgs(), req.Code, image)
	if err != nil {
		return err
	}
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
