package run

import (
	"context"
	"io"
	"log/slog"
	"math"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
	"github.com/jaild/jaild/internal/runner"
	"github.com/jaild/jaild/internal/workspace"
)

// execute hands the job to a started jail and collects what it produced.
func (s *Service) execute(ctx context.Context, st *started, req *Request) (*Result, error) {
	j, p := st.j, st.p
	res := &Result{ID: j.ID(), ExitCode: -1}
	var (
		once     sync.Once
		overflow = make(chan struct{})
	)
	stdout := &runner.Capture{Limit: req.Limits.OutputBytes, OnOverflow: func() { once.Do(func() { close(overflow) }) }}
	stderr := &runner.Capture{Limit: req.Limits.OutputBytes, OnOverflow: stdout.OnOverflow}
	attachOutput(req.Output, stdout, stderr)
	records := &runner.Capture{Limit: runner.MaxRecordBytes}
	base := j.Stats()
	var readers sync.WaitGroup
	readers.Go(func() { stdout.Drain(p.stdoutR) })
	readers.Go(func() { stderr.Drain(p.stderrR) })
	// Python code, or a command (lint, format): in a jail of its own it
	// is the jail's process; in a warm jail the runner executes it.
	code := req.Command == nil
	if p.recR != nil {
		readers.Go(func() { records.Drain(p.recR) })
		job := runner.Job{
			Code: req.Code, Filename: "main.py", LastLineInteractive: req.LastLineInteractive,
			FiguresDir: figuresDir, MaxFigures: workspace.MaxFigures, MaxOutputs: workspace.MaxOutputs, Env: req.Env, Rlimits: req.Limits.RlimitsByName(),
		}
		if !code {
			job = runner.Job{Exec: req.Command, Filename: "main.py", Env: req.Env, Rlimits: req.Limits.RlimitsByName()}
		}
		go feed(p.jobW, runner.EncodeJob(job))
	}
	go feed(p.stdinW, req.Stdin)

	start := time.Now()
	timer := time.NewTimer(req.Limits.Timeout)
	defer timer.Stop()
	var outputLimit bool
wait:
	for {
		select {
		case <-j.Done():
			break wait
		case <-timer.C:
			res.TimedOut = true
			j.Kill()
		case <-overflow:
			overflow = nil
			outputLimit = true
			j.Kill()
		case <-ctx.Done():
			res.Cancelled = true
			j.Kill()
		}
	}
	res.Duration = time.Since(start)
	ended := j.Exit()
	if ended.Err != nil {
		s.log.Error("wait for jail", "id", j.ID(), "err", ended.Err)
	}
	res.ExitCode, res.Signal = ended.Code, ended.Signal // Code is -1 after a signal

	// The run is over when its cgroup is empty, not when its first process
	// exits. The kernel kills and reaps the rest of the pid namespace
	// before its init's exit is seen, so the cgroup is normally empty at
	// once; stragglers are killed.
	j.KillAll()
	readers.Wait()

	res.Network = j.NetworkUsage()
	after := j.Stats()
	res.CPUTime = after.CPU - base.CPU
	res.PeakMemoryBytes = after.PeakMemoryBytes
	res.OOMKilled = after.OOMKills > base.OOMKills
	res.Stdout, res.StdoutTruncated = stdout.Buf, stdout.Truncated
	res.Stderr, res.StderrTruncated = stderr.Buf, stderr.Truncated
	if p.recR != nil {
		recs := runner.ParseRecords(records.Buf, strings.Count(req.Code, "\n")+1)
		// The jail's init (pid 1) cannot die by the signal that killed the
		// runner (or the command it executed); it exits 128+N and says N.
		// Believe it only when both agree (user code could forge the
		// record, but only about itself).
		if recs.Signal > 0 && res.Signal == 0 && res.ExitCode == 128+recs.Signal {
			res.Signal, res.ExitCode = recs.Signal, -1
		}
		if code {
			res.Exception, res.ResultRepr = recs.Exception, recs.Result
			figs := filepath.Join(j.MetaHostDir(), "figures")
			res.Figures = workspace.ReadFigures(figs)
			res.Outputs = workspace.ReadOutputs(figs, recs.Outputs, res.Figures, res.ResultRepr)
		}
	}
	if len(req.ReturnFiles) > 0 {
		files, err := collect(j, req.ReturnFiles, req.Hooks, s.log)
		if err != nil {
			s.log.Warn("collect files", "id", j.ID(), "err", err)
			files = append(files, workspace.File{Path: ".", Error: "workspace could not be read completely"})
		}
		res.Files = files
	}
	res.Status = status(res, outputLimit, time.Duration(req.Limits.RlimitsByName()["RLIMIT_CPU"][0])*time.Second)
	return res, nil
}

// collect reads back the files of j's workspace that match patterns, into
// memory or, with h.Store, into the file store; only call it once no
// process of the jail runs.
func collect(j *jail.Jail, patterns []string, h Hooks, log *slog.Logger) ([]workspace.File, error) {
	d, err := workspace.Open(j.WorkDir())
	if err != nil {
		return nil, err
	}
	defer d.Close()
	if h.Store != nil {
		return d.CollectWith(patterns, storeTaker(h.Store, log))
	}
	return d.Collect(patterns)
}

// storeTaker streams each file into the store under its base name; only
// the workspace's size bounds them (the store has its own bounds).
func storeTaker(sink FileSink, log *slog.Logger) workspace.Taker {
	return workspace.Taker{MaxFileBytes: math.MaxInt64, MaxTotalBytes: math.MaxInt64, Take: func(rel string, f *os.File, size int64) workspace.File {
		if !utf8.ValidString(rel) {
			// The response cannot name it (JSON is UTF-8; the server
			// reports such a path, never returns it): a stored copy would
			// be a file the caller was never told of (hostile case T06).
			return workspace.File{Path: rel, Size: size, Error: "not stored: the path is not valid UTF-8"}
		}
		id, sum, err := sink.Put(path.Base(rel), io.LimitReader(f, size), size)
		if err != nil {
			why := "not stored: " + err.Error()
			if _, class := errdefs.Classify(err); class == errdefs.ErrInternal.Error() {
				log.Error("store a returned file", "path", rel, "err", err)
				why = "not stored: the daemon could not store it (see its log)"
			}
			return workspace.File{Path: rel, Size: size, Error: why}
		}
		return workspace.File{Path: rel, Size: size, FileID: id, SHA256: sum}
	}}
}

// attachOutput makes o the consumer of two captures' kept bytes, instead
// of their buffers; a nil o changes nothing.
func attachOutput(o OutputFunc, stdout, stderr *runner.Capture) {
	if o == nil {
		return
	}
	stdout.Discard, stdout.Sink = true, outputWriter{o, 1}
	stderr.Discard, stderr.Sink = true, outputWriter{o, 2}
}

type outputWriter struct {
	o      OutputFunc
	stream int
}

func (w outputWriter) Write(p []byte) (int, error) {
	w.o(w.stream, p)
	return len(p), nil
}

// status decides the run's status from what happened, most specific first.
// cpuSoft is the run's RLIMIT_CPU soft limit: a process that reaches it
// gets SIGXCPU, but the jail's pid 1 (a command run in a jail of its own)
// is spared that signal and dies by the SIGKILL of the hard limit a second
// later, having used at least the soft limit.
func status(r *Result, outputLimit bool, cpuSoft time.Duration) Status {
	switch {
	case r.TimedOut:
		return spec.StatusTimeout
	case r.OOMKilled:
		return spec.StatusMemoryLimit
	case outputLimit:
		return spec.StatusOutputLimit
	case r.Cancelled:
		return spec.StatusKilled
	case r.Signal == int(unix.SIGXCPU), r.Signal == int(unix.SIGKILL) && cpuSoft > 0 && r.CPUTime >= cpuSoft:
		return spec.StatusCPULimit
	case r.Signal != 0:
		return spec.StatusKilled
	case r.ExitCode == 0:
		return spec.StatusOK
	}
	return spec.StatusError
}
