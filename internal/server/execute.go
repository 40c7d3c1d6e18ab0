package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/policy"
	"github.com/jaild/jaild/internal/run/spec"
)

func (s *Server) execute(w http.ResponseWriter, r *http.Request) error {
	var req api.ExecuteRequest
	o, err := s.begin(w, r, "execute", &req)
	if err != nil {
		return err
	}
	defer o.done()
	who, start, mem, fail := o.who, o.start, o.mem, o.fail
	jr, err := s.jailRequest(&req, who)
	if err != nil {
		return fail(err)
	}
	defer policy.CloseFiles(jr.Files)
	if err := s.reserveRun(r.Context(), mem, jr.Limits.OutputBytes, len(jr.ReturnFiles) > 0 && jr.Store == nil); err != nil {
		return fail(err)
	}
	if format := streamFormat(r.Header.Get("Accept")); format != "" {
		return s.executeStream(w, r, format, o, &req, jr)
	}
	res, queued, err := s.run(r.Context(), who, jr)
	s.setQuotaHeader(w, who)
	if err != nil {
		return fail(err)
	}
	mem.shrinkRun(resultBytes(res, 0))
	bulk := newBulkSet()
	resp := response(res, jr.Limits, bulk)
	s.audit.ran(who, "execute", req.Code, jr.Limits, res, queued, time.Since(start))
	s.writeBulk(w, http.StatusOK, resp, bulk)
	return nil
}

// executeStream runs jr with its events streamed in format (see
// api/stream.go). Errors before the run starts are ordinary error
// responses; after, an error event ends the stream.
func (s *Server) executeStream(w http.ResponseWriter, r *http.Request, format string, o *op, req *api.ExecuteRequest, jr *spec.Request) error {
	who, start := o.who, o.start
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	live := newLiveStream(w, format == api.MediaSSE, cancel, s.pace())
	began := false
	jr.Output = live.output
	jr.OnStart = func(id string, warm bool) {
		began = true
		s.setQuotaHeader(w, who)
		live.begin(w, format, api.EventStartData{RunID: id, Warm: warm})
	}
	res, queued, err := s.run(ctx, who, jr)
	if err != nil {
		o.mem.shrinkRun(live.queued())
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
	o.mem.shrinkRun(resultBytes(res, live.queued()))
	if !began { // an engine that ran without saying so: the stream starts now
		jr.OnStart(res.ID, res.Warm)
	}
	bulk := newBulkSet()
	events := finalEvents(res, bulk, nil)
	resp := response(res, jr.Limits, bulk)
	events = append(events, finalEvent{api.EventDone, resp, bulk})
	if err := live.end(events); err != nil {
		s.log.Info("streamed execute: client stopped reading", "run_id", res.ID, "err", err)
	}
	return nil
}

// finalEvents are the events of a run's end before done: its figures,
// exception, and its outputs in order (display, and result for the
// execute_result; count is a session call's number). The figures and
// outputs are taken out of res (done does not repeat them).
func finalEvents(res *spec.Result, bulk *bulkSet, count *int) []finalEvent {
	var out []finalEvent
	for _, f := range res.Figures {
		out = append(out, finalEvent{api.EventFigure, api.Figure{Name: f.Name, ContentB64: bulk.add(f.Data)}, bulk})
	}
	res.Figures = nil
	if e := execError(res.Exception); e != nil {
		out = append(out, finalEvent{api.EventException, e, nil})
	}
	result := false
	for _, o := range res.Outputs {
		w := wireOutput(o, bulk, count)
		if o.Type == spec.OutputResult && res.ResultRepr != nil {
			result = true
			out = append(out, finalEvent{api.EventResult, api.EventResultData{Repr: *res.ResultRepr, Data: w.Data, Metadata: w.Metadata}, bulk})
			continue
		}
		out = append(out, finalEvent{api.EventDisplay, w, bulk})
	}
	res.Outputs = nil
	if res.ResultRepr != nil && !result {
		out = append(out, finalEvent{api.EventResult, api.EventResultData{Repr: *res.ResultRepr}, nil})
	}
	return out
}

// wireOutput is o on the wire, its bytes and texts as bulk's
// placeholders; count, when set, is an execute_result's execution_count.
func wireOutput(o spec.Output, bulk *bulkSet, count *int) api.Output {
	out := api.Output{OutputType: o.Type, Data: make(map[string]json.RawMessage, len(o.Data)), Metadata: map[string]json.RawMessage{}}
	for _, v := range o.Data {
		var s string
		switch {
		case v.JSON != nil:
			out.Data[v.Type] = v.JSON
			continue
		case v.Bytes != nil:
			s = bulk.add(v.Bytes)
		default:
			s = bulk.addText(v.Text)
		}
		raw, _ := json.Marshal(s) // a string: Marshal cannot fail
		out.Data[v.Type] = raw
	}
	if o.Metadata != nil && json.Unmarshal(o.Metadata, &out.Metadata) != nil {
		out.Metadata = map[string]json.RawMessage{}
	}
	if o.Type == spec.OutputResult && count != nil {
		n := *count
		out.ExecutionCount = &n
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
	if err := mem.acquire(ctx, n, s.cfg.Admission.QueueWait.Duration, "the run (its output caps, figures and returned files)"); err != nil {
		return err
	}
	mem.run += n
	return nil
}

// resultBytes is what a run's result holds of what reserveRun reserved:
// its captured output, returned files and figures (queued: output a
// stream has not sent yet). The lease shrinks to it once the run ends.
func resultBytes(res *spec.Result, queued int64) int64 {
	n := int64(len(res.Stdout)+len(res.Stderr)) + queued
	for _, f := range res.Files {
		n += int64(len(f.Data))
	}
	for _, f := range res.Figures {
		n += int64(len(f.Data))
	}
	for _, o := range res.Outputs { // a figure's counts twice: conservative
		for _, v := range o.Data {
			n += v.Size()
		}
		n += int64(len(o.Metadata))
	}
	return n
}

// jailRequest validates an execute request into the run service's.
func (s *Server) jailRequest(req *api.ExecuteRequest, who peer.Caller) (*spec.Request, error) {
	if err := policy.RunCode(req.Code); err != nil {
		return nil, err
	}
	im, err := s.image(req.Image)
	if err != nil {
		return nil, err
	}
	return s.policy.Execute(req, im.Name, who, s.resolvers(im.Name, who))
}

// resolvers are what policy needs of the daemon's state for a request of
// who in image.
func (s *Server) resolvers(image string, who peer.Caller) policy.Resolvers {
	return policy.Resolvers{
		Defaults: s.imgCfg.Load().ImageDefaults(image),
		Sink:     func(as string) (spec.FileSink, error) { return s.returnSink(as, who) },
		Open:     func(id string) (spec.File, error) { return s.storedFile(id, who) },
	}
}

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
		Outputs:         []api.Output{},
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
	for _, o := range res.Outputs {
		out.Outputs = append(out.Outputs, wireOutput(o, bulk, nil))
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
