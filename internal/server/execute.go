package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jaild/jaild/internal/allowlist"
	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/run/spec"
)

// Bounds on request fields (the body cap bounds them all as well).
const (
	maxCodeBytes  = 1 << 20
	maxStdinBytes = 16 << 20
)

func (s *Server) execute(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	who := callerOf(r)
	fail := func(err error) error {
		s.audit.refused(who, "execute", err)
		return err
	}
	mem := s.newLease(who)
	defer mem.release()
	s.budgetBody(r, mem)
	var req api.ExecuteRequest
	if err := s.decode(w, r, &req); err != nil {
		return fail(err)
	}
	jr, err := s.jailRequest(&req, who)
	if err != nil {
		return fail(err)
	}
	defer closeFiles(jr.Files)
	if err := s.reserveRun(r.Context(), mem, jr.Limits.OutputBytes, len(jr.ReturnFiles) > 0 && jr.Store == nil); err != nil {
		return fail(err)
	}
	if format := streamFormat(r.Header.Get("Accept")); format != "" {
		return s.executeStream(w, r, format, who, &req, jr, start)
	}
	res, queued, err := s.run(r.Context(), who, jr)
	s.setQuotaHeader(w, who)
	if err != nil {
		return fail(err)
	}
	bulk := newBulkSet()
	resp := response(res, jr.Limits, bulk)
	s.audit.ran(who, "execute", req.Code, jr.Limits, res, queued, time.Since(start))
	writeBulk(w, http.StatusOK, resp, bulk)
	return nil
}

// executeStream runs jr with its events streamed in format (see
// api/stream.go). Errors before the run starts are ordinary error
// responses; after, an error event ends the stream.
func (s *Server) executeStream(w http.ResponseWriter, r *http.Request, format string, who peer.Caller, req *api.ExecuteRequest, jr *spec.Request, start time.Time) error {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	live := newLiveStream(w, format == api.MediaSSE, cancel)
	began := false
	jr.Output = live.output
	jr.OnStart = func(id string, warm bool) {
		began = true
		s.setQuotaHeader(w, who)
		live.begin(w, format, api.EventStartData{RunID: id, Warm: warm})
	}
	res, queued, err := s.run(ctx, who, jr)
	if err != nil {
		s.audit.refused(who, "execute", err)
		if !began {
			s.setQuotaHeader(w, who)
			return err
		}
		// The stream's head is out: the error is its last event, and a
		// failed write of it only means the client is gone.
		_ = live.end([]finalEvent{s.errorEvent(r, err)})
		return nil
	}
	s.audit.ran(who, "execute", req.Code, jr.Limits, res, queued, time.Since(start))
	if !began { // an engine that ran without saying so: the stream starts now
		jr.OnStart(res.ID, res.Warm)
	}
	bulk := newBulkSet()
	events := finalEvents(res, bulk)
	resp := response(res, jr.Limits, bulk)
	events = append(events, finalEvent{api.EventDone, resp, bulk})
	if err := live.end(events); err != nil {
		s.log.Info("streamed execute: client stopped reading", "run_id", res.ID, "err", err)
	}
	return nil
}

// finalEvents are the events of a run's end before done: its figures,
// exception and result. The figures are taken out of res (done does not
// repeat them).
func finalEvents(res *spec.Result, bulk *bulkSet) []finalEvent {
	var out []finalEvent
	for _, f := range res.Figures {
		out = append(out, finalEvent{api.EventFigure, api.Figure{Name: f.Name, ContentB64: bulk.add(f.Data)}, bulk})
	}
	res.Figures = nil
	if e := execError(res.Exception); e != nil {
		out = append(out, finalEvent{api.EventException, e, nil})
	}
	if res.ResultRepr != nil {
		out = append(out, finalEvent{api.EventResult, api.EventResultData{Repr: *res.ResultRepr}, nil})
	}
	return out
}

// errorEvent is the error event of a request that failed after its
// stream began: the body writeError would have sent.
func (s *Server) errorEvent(r *http.Request, err error) finalEvent {
	_, body := s.errorBody(r, err)
	return finalEvent{api.EventError, body, nil}
}

// budgetBody makes reading r's body reserve, in mem, the memory decoding
// it may take (bodyFactor times each chunk, as it arrives).
func (s *Server) budgetBody(r *http.Request, mem *lease) {
	r.Body = struct {
		io.Reader
		io.Closer
	}{&budgetedBody{r: r.Body, l: mem, ctx: r.Context(), wait: s.cfg.Admission.QueueWait.Duration}, r.Body}
}

// reserveRun reserves a run's worst case: both output captures, its
// figures, and its returned files when they come inline.
func (s *Server) reserveRun(ctx context.Context, mem *lease, outputBytes int64, inlineFiles bool) error {
	n := 2*outputBytes + spec.MaxFiguresTotalBytes
	if inlineFiles {
		n += spec.MaxReturnTotalBytes
	}
	return mem.acquire(ctx, n, s.cfg.Admission.QueueWait.Duration, "the run (its output caps, figures and returned files)")
}

// closeFiles closes the store files a request opened (each once; several
// entries may share one).
func closeFiles(files []spec.File) {
	done := map[*os.File]bool{}
	for _, f := range files {
		if f.Src != nil && !done[f.Src] {
			done[f.Src] = true
			f.Src.Close()
		}
	}
}

// maxFileIDs bounds the stored files one request opens: each holds a
// descriptor until the run ends.
const maxFileIDs = 100

// run admits the request and runs it in a jail. The run is killed when the
// client goes away (r.Context is cancelled) or when the daemon aborts.
func (s *Server) run(ctx context.Context, who peer.Caller, jr *spec.Request) (*spec.Result, time.Duration, error) {
	qstart := time.Now()
	release, err := s.admit(ctx, who)
	if err != nil {
		if ctx.Err() != nil {
			return nil, 0, errdefs.New(errdefs.ErrUnavailable, "client went away while queued")
		}
		return nil, 0, err
	}
	defer release()
	queued := time.Since(qstart)
	res, err := s.engine.Run(ctx, jr)
	if err != nil {
		// Classified errors keep their class; the rest are the daemon's.
		return nil, queued, fmt.Errorf("run failed: %w", err)
	}
	return res, queued, nil
}

func (s *Server) setQuotaHeader(w http.ResponseWriter, who peer.Caller) {
	if n := s.adm.QuotaRemaining(who); n >= 0 {
		w.Header().Set(api.QuotaHeader, strconv.FormatInt(n, 10))
	}
}

func invalid(format string, args ...any) error {
	return errdefs.New(errdefs.ErrInvalidArgument, format, args...)
}

// jailRequest validates an execute request into the engine's typed form.
func (s *Server) jailRequest(req *api.ExecuteRequest, who peer.Caller) (*spec.Request, error) {
	if err := checkRunCode(req.Code); err != nil {
		return nil, err
	}
	im, err := s.image(req.Image)
	if err != nil {
		return nil, err
	}
	limits, err := s.limits(req.Limits, who, im.Name)
	if err != nil {
		return nil, err
	}
	jr := &spec.Request{Code: req.Code, LastLineInteractive: req.LastLineInteractive, Env: req.Env, Limits: limits, Image: im.Name}
	if req.Stdin != nil {
		if len(*req.Stdin) > maxStdinBytes {
			return nil, errdefs.Field("stdin", "is %d bytes; the maximum is %d", len(*req.Stdin), maxStdinBytes)
		}
		jr.Stdin = []byte(*req.Stdin)
	}
	if err := checkPatterns(req.ReturnFiles); err != nil {
		return nil, err
	}
	jr.ReturnFiles = req.ReturnFiles
	if jr.Store, err = s.returnSink(req.ReturnFilesAs, who); err != nil {
		return nil, err
	}
	if err := spec.ValidateEnv(req.Env); err != nil {
		return nil, err // a field error of env already
	}
	if jr.Network, err = s.network(req, who); err != nil {
		return nil, err
	}
	// Last: stored files are opened here, and nothing after may fail.
	if jr.Files, err = s.decodeFiles(req.Files, limits.WorkspaceBytes, who); err != nil {
		return nil, err
	}
	return jr, nil
}

// checkRunCode checks code to run: checkCode, and not empty.
func checkRunCode(code string) error {
	if code == "" {
		return errdefs.Field("code", "is required and must not be empty")
	}
	return checkCode(code)
}

// decodeFiles validates files and decodes their contents, at most
// workspace bytes in total; a file_id opens the caller's stored file (the
// caller closes it: closeFiles).
func (s *Server) decodeFiles(files []api.FileIn, workspaceBytes int64, who peer.Caller) (_ []spec.File, err error) {
	if len(files) > spec.MaxFiles {
		return nil, errdefs.Field("files", "has %d entries; the maximum is %d", len(files), spec.MaxFiles)
	}
	var out []spec.File
	defer func() {
		if err != nil {
			closeFiles(out)
		}
	}()
	seen := map[string]bool{}
	opened := map[string]spec.File{}
	var total int64
	for i, f := range files {
		if err := spec.ValidatePath(f.Path); err != nil {
			return nil, errdefs.InField(fmt.Sprintf("files[%d].path", i), err)
		}
		if seen[f.Path] {
			return nil, errdefs.Field(fmt.Sprintf("files[%d].path", i), "duplicate path %q", f.Path)
		}
		seen[f.Path] = true
		var rf spec.File
		switch {
		case f.FileID != "" && f.ContentB64 != "":
			return nil, errdefs.Field(fmt.Sprintf("files[%d]", i), "has both content_b64 and file_id; give one")
		case f.FileID != "":
			field := fmt.Sprintf("files[%d].file_id", i)
			if s.files == nil {
				return out, errdefs.Field(field, "needs the file store, which is disabled on this daemon (files.enabled in its configuration)")
			}
			if prev, ok := opened[f.FileID]; ok {
				rf = prev // one descriptor per stored file: written one at a time
			} else {
				if len(opened) == maxFileIDs {
					return out, errdefs.Field("files", "names more than %d different file_id", maxFileIDs)
				}
				if rf, err = s.storedFile(f.FileID, who); err != nil {
					if _, class := errdefs.Classify(err); class == errdefs.ErrInternal.Error() {
						return out, err // the daemon's, not the caller's
					}
					return out, errdefs.InField(field, err)
				}
				opened[f.FileID] = rf
			}
			out = append(out, rf) // closed on error from here on
		default:
			data, err := base64.StdEncoding.DecodeString(f.ContentB64)
			if err != nil {
				return nil, errdefs.Field(fmt.Sprintf("files[%d].content_b64", i), "not valid standard base64: %v", err)
			}
			rf = spec.File{Data: data}
			out = append(out, rf)
		}
		out[len(out)-1].Path = f.Path
		total += out[len(out)-1].Size + int64(len(rf.Data))
		if total > workspaceBytes {
			return out, errdefs.Field("files", "%d bytes in total, more than the workspace size of %d bytes", total, workspaceBytes)
		}
	}
	// A file cannot also be a directory of another.
	for i, f := range files {
		for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
			if seen[dir] {
				return out, errdefs.Field(fmt.Sprintf("files[%d].path", i), "%q is inside %q, which is a file of this request", f.Path, dir)
			}
		}
	}
	return out, nil
}

func checkPatterns(patterns []string) error {
	if len(patterns) > spec.MaxPatterns {
		return errdefs.Field("return_files", "has %d entries; the maximum is %d", len(patterns), spec.MaxPatterns)
	}
	for i, p := range patterns {
		if err := spec.ValidatePattern(p); err != nil {
			return errdefs.InField(fmt.Sprintf("return_files[%d]", i), err)
		}
	}
	return nil
}

// network resolves a request's network and allow_hosts against the
// daemon's policy.
func (s *Server) network(req *api.ExecuteRequest, who peer.Caller) (*spec.Network, error) {
	switch req.Network {
	case "", api.NetworkNone:
		if len(req.AllowHosts) > 0 {
			return nil, invalid(`allow_hosts needs "network": "internet"`)
		}
		return nil, nil
	case api.NetworkInternet:
	default:
		return nil, errdefs.Field("network", `must be "none" or "internet", got %q`, req.Network)
	}
	pol := s.cfg.Network
	if !pol.Enabled {
		return nil, errdefs.New(errdefs.ErrForbidden, `"network": "internet" refused: this daemon has network egress disabled (network.enabled in its configuration)`)
	}
	if !who.Network {
		return nil, errdefs.New(errdefs.ErrForbidden, `"network": "internet" refused: %s is not allowed network egress (%s)`, who.Who(), networkHint(who, pol.AllowGroup))
	}
	list := req.AllowHosts
	if len(list) == 0 {
		list = pol.AllowHosts
	}
	allow, err := allowlist.ParseList(list)
	if err != nil {
		return nil, errdefs.Field("allow_hosts", "%v", err)
	}
	if len(pol.AllowHosts) > 0 && !who.Admin {
		ceiling, _ := allowlist.ParseList(pol.AllowHosts) // validated with the config
		for _, a := range allow {
			if !slices.Contains(ceiling, a) {
				return nil, errdefs.New(errdefs.ErrForbidden, "allow_hosts: %q is not among the destinations this daemon allows (%s)", a, strings.Join(pol.AllowHosts, ", "))
			}
		}
	}
	return &spec.Network{Allow: allow}, nil
}

// limits resolves a request's limits: the defaults of its image for what
// it leaves out,
// and a clear refusal, naming the field and the bound, for a value below 1
// or above the caller's maxima. A caller can never raise a limit.
func (s *Server) limits(in *api.Limits, who peer.Caller, image string) (spec.Limits, error) {
	d, m := s.imgCfg.Load().ImageDefaults(image), s.cfg.Maxima
	if who.Admin {
		m = s.cfg.AdminMaxima
	}
	v := d
	if in != nil {
		fields := []struct {
			name     string
			req      *int64
			dst, max *int64
		}{
			{"timeout_ms", in.TimeoutMs, &v.TimeoutMs, &m.TimeoutMs},
			{"memory_mb", in.MemoryMB, &v.MemoryMB, &m.MemoryMB},
			{"pids", in.Pids, &v.Pids, &m.Pids},
			{"file_size_mb", in.FileSizeMB, &v.FileSizeMB, &m.FileSizeMB},
			{"output_bytes", in.OutputBytes, &v.OutputBytes, &m.OutputBytes},
		}
		for _, f := range fields {
			if f.req == nil {
				continue
			}
			switch {
			case *f.req < 1:
				return spec.Limits{}, errdefs.Field("limits."+f.name, "must be at least 1, got %d", *f.req)
			case *f.req > *f.max:
				return spec.Limits{}, errdefs.Field("limits."+f.name, "%d is above the maximum of %d for this caller", *f.req, *f.max)
			}
			*f.dst = *f.req
		}
	}
	return EngineLimits(v), nil
}

// EngineLimits turns wire limits into the engine's, deriving the limits a
// caller does not set (workspace, address space, ...) from the defaults.
func EngineLimits(v config.Limits) spec.Limits {
	l := spec.DefaultLimits()
	l.Timeout = time.Duration(v.TimeoutMs) * time.Millisecond
	l.MemoryBytes = v.MemoryMB << 20
	l.Pids = v.Pids
	l.FileSizeBytes = v.FileSizeMB << 20
	l.OutputBytes = v.OutputBytes
	// The workspace must hold at least one file of the largest size allowed.
	l.WorkspaceBytes = max(l.WorkspaceBytes, l.FileSizeBytes)
	// RLIMIT_AS is no memory limit (the cgroup is); it stops absurd mappings
	// and must stay well above memory_mb.
	l.AddressSpaceBytes = max(l.AddressSpaceBytes, 4*l.MemoryBytes)
	return l
}

// response maps an engine result to the wire, with one actionable line in
// message. Output is returned as text: invalid UTF-8 becomes U+FFFD.
//
// The output, files and figures are placeholders of bulk: write the
// response with writeBulk (or writeBulkJSON), which streams them.
func response(res *spec.Result, l spec.Limits, bulk *bulkSet) *api.ExecuteResponse {
	out := &api.ExecuteResponse{
		RunID:           res.ID,
		Image:           res.Image,
		Status:          string(res.Status),
		Stdout:          bulk.addText(res.Stdout),
		Stderr:          bulk.addText(res.Stderr),
		StdoutTruncated: res.StdoutTruncated,
		StderrTruncated: res.StderrTruncated,
		TimedOut:        res.TimedOut,
		OOMKilled:       res.OOMKilled,
		Result:          res.ResultRepr,
		Files:           []api.FileOut{},
		Figures:         []api.Figure{},
		Usage: api.Usage{
			DurationMs:      res.Duration.Milliseconds(),
			CPUMs:           res.CPUTime.Milliseconds(),
			PeakMemoryBytes: res.PeakMemoryBytes,
			Warm:            res.Warm,
		},
	}
	if n := res.Network; n != nil {
		out.Network = &api.NetworkUsage{BytesSent: n.BytesSent, BytesReceived: n.BytesReceived}
	}
	if res.Signal != 0 {
		sig := res.Signal
		out.Signal = &sig
	} else {
		code := res.ExitCode
		out.ExitCode = &code
	}
	out.Error = execError(res.Exception)
	for _, f := range res.Files {
		fo := api.FileOut{Path: f.Path, SizeBytes: f.Size, Error: f.Error, FileID: f.FileID, SHA256: f.SHA256}
		if !utf8.ValidString(f.Path) {
			// JSON carries only valid UTF-8, and replacing bytes could give
			// two files one name: report such a file, never return it.
			fo.Path = strings.ToValidUTF8(f.Path, "\uFFFD")
			fo.Error = "file name is not valid UTF-8 (shown with U+FFFD); not returned"
		}
		if fo.Error == "" {
			fo.ContentB64 = bulk.add(f.Data)
		}
		out.Files = append(out.Files, fo)
	}
	for _, f := range res.Figures {
		out.Figures = append(out.Figures, api.Figure{Name: f.Name, ContentB64: bulk.add(f.Data)})
	}
	out.Message = message(res, l)
	return out
}

// execError is the wire form of an exception; nil for none.
func execError(e *spec.Exception) *api.ExecError {
	if e == nil {
		return nil
	}
	out := &api.ExecError{Type: e.Type, Message: e.Message}
	if e.Line > 0 {
		line := e.Line
		out.Line = &line
	}
	return out
}

func message(res *spec.Result, l spec.Limits) string {
	switch res.Status {
	case spec.StatusOK:
		return ""
	case spec.StatusTimeout:
		return "Execution terminated after " + humanDuration(l.Timeout) + " (the time limit)"
	case spec.StatusMemoryLimit:
		return fmt.Sprintf("Memory limit of %d MB exceeded; the process was killed", l.MemoryBytes>>20)
	case spec.StatusOutputLimit:
		return fmt.Sprintf("Output limit of %d bytes exceeded; the process was killed", l.OutputBytes)
	case spec.StatusCPULimit:
		return "CPU time limit exceeded; the process was killed"
	case spec.StatusKilled:
		if res.Cancelled {
			return "Execution cancelled"
		}
		return fmt.Sprintf("Process killed by signal %d (%s)", res.Signal, signalName(res.Signal))
	}
	if e := res.Exception; e != nil {
		if e.Message == "" {
			return e.Type
		}
		first, _, _ := strings.Cut(e.Message, "\n")
		return e.Type + ": " + first
	}
	return fmt.Sprintf("Process exited with code %d", res.ExitCode)
}

func humanDuration(d time.Duration) string {
	if d%time.Second == 0 {
		n := int64(d / time.Second)
		if n == 1 {
			return "1 second"
		}
		return strconv.FormatInt(n, 10) + " seconds"
	}
	return d.String()
}

func signalName(sig int) string {
	names := map[int]string{6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ", 7: "SIGBUS", 8: "SIGFPE", 4: "SIGILL"}
	if n, ok := names[sig]; ok {
		return n
	}
	return "signal " + strconv.Itoa(sig)
}

// networkHint says how a caller gets egress.
func networkHint(who peer.Caller, group string) string {
	if who.Client != "" {
		return "its [[tls.clients]] entry needs network = true"
	}
	return fmt.Sprintf("it needs to be in group %q, or an admin", group)
}
