//go:build !unit

package run

import (
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/runner"
)

// One runner in a real jail takes several jobs in order, ends each with
// an "end" record, and keeps the user's globals, imports and files between
// them; the last job ends the process as a single run does. (Sessions
// build on this.)
func TestRunnerTakesManyJobs(t *testing.T) {
	l := jail.DefaultLimits()
	st, err := testEngine.start("", l, nil, nil, nil, nil, false, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Destroy()
	codes := []string{
		"import math\nx = 41\nopen('kept.txt', 'w').write('kept')",
		"1/0",
		"print(x + 1, round(math.pi, 2), open('kept.txt').read())",
	}
	var frames []byte
	for i, c := range codes {
		frames = append(frames, runner.EncodeJob(runner.Job{Code: c, Filename: "main.py", FiguresDir: figuresDir,
			Rlimits: l.RlimitsByName(), More: i < len(codes)-1})...)
	}
	go feed(st.p.jobW, frames)
	go feed(st.p.stdinW, nil)
	var stdout, stderr, records []byte
	var wg sync.WaitGroup
	wg.Go(func() { stdout, _ = io.ReadAll(io.LimitReader(st.p.stdoutR, 1<<20)) })
	wg.Go(func() { stderr, _ = io.ReadAll(io.LimitReader(st.p.stderrR, 1<<20)) })
	wg.Go(func() { records, _ = io.ReadAll(io.LimitReader(st.p.recR, 1<<20)) })
	select {
	case <-st.j.Done():
	case <-time.After(60 * time.Second):
		st.j.Kill()
		t.Fatal("the runner did not end")
	}
	st.j.KillAll()
	wg.Wait()
	if x := st.j.Exit(); x.Code != 0 || x.Signal != 0 {
		t.Errorf("exit %+v; stderr %s", x, stderr)
	}
	if string(stdout) != "42 3.14 kept\n" {
		t.Errorf("stdout %q; stderr %s", stdout, stderr)
	}
	if !strings.Contains(string(stderr), "ZeroDivisionError") || strings.Contains(string(stderr), "runner.py") {
		t.Errorf("stderr %s", stderr)
	}
	jobs := runner.ParseJobRecords(records, []int{3, 1, 1})
	if len(jobs) != 2 || !jobs[0].Ended || jobs[0].Status != 0 || jobs[0].Exception != nil ||
		!jobs[1].Ended || jobs[1].Status != 1 || jobs[1].Exception == nil || jobs[1].Exception.Type != "ZeroDivisionError" || jobs[1].Exception.Line != 1 {
		t.Errorf("records %q parsed as %+v", records, jobs)
	}
}
