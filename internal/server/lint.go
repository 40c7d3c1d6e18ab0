package server

import (
	"net/http"
	"strings"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/ruff"
	"github.com/jaild/jaild/internal/run/spec"
)

// ruffLimits are the limits of a lint or format jail: ruff is fast, and
// its output is bounded by the diagnostics of at most maxCodeBytes of code.
func (s *Server) ruffLimits() spec.Limits {
	l := EngineLimits(s.cfg.Defaults)
	l.Timeout = 20 * time.Second
	l.OutputBytes = 32 << 20
	l.Pids = max(l.Pids, 32) // ruff's threads (ruffEnv), and init's
	return l
}

// ruffEnv bounds ruff's threads: its thread pool would start one per CPU
// of the host, and a host with as many CPUs as the run's pids limit would
// fail every lint (one piece of code needs few anyway).
func ruffEnv() map[string]string { return map[string]string{"RAYON_NUM_THREADS": "4"} }

func checkCode(code string) error {
	if len(code) > maxCodeBytes {
		return errdefs.Field("code", "is %d bytes; the maximum is %d", len(code), maxCodeBytes)
	}
	if strings.IndexByte(code, 0) >= 0 {
		return errdefs.Field("code", "contains a NUL byte")
	}
	return nil
}

func (s *Server) lint(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	who := callerOf(r)
	var req api.LintRequest
	mem := s.newLease(who)
	defer mem.release()
	s.budgetBody(r, mem)
	err := s.decode(w, r, &req)
	if err == nil {
		err = checkCode(req.Code)
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
	jr := &spec.Request{Command: args, Stdin: []byte(req.Code), Env: ruffEnv(), Limits: s.ruffLimits(), Image: image}
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
		err = checkCode(req.Code)
	}
	var image string
	if err == nil {
		image, err = s.ruffImage(req.Image)
	}
	if err != nil {
		s.audit.refused(who, "format", err)
		return err
	}
	jr := &spec.Request{Command: ruff.FormatArgs(), Stdin: []byte(req.Code), Env: ruffEnv(), Limits: s.ruffLimits(), Image: image}
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
		return invalid("code cannot be formatted: %s", first)
	}
	if err := ruffFailed(res); err != nil {
		return err
	}
	formatted := string(res.Stdout)
	writeJSON(w, http.StatusOK, api.FormatResponse{Code: formatted, Changed: formatted != req.Code})
	return nil
}
