//go:build !unit

package jail

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A restored jail is checkpointed and restored again (its first process,
// a shell, is dumpable; a session's non-dumpable init executes itself
// afresh after a restore for this: internal/run).
func TestCheckpointTwice(t *testing.T) {
	sp := Spec{Limits: DefaultLimits()}
	j, err := testEngine.Create(sp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Destroy)
	p, _ := newProbePipes()
	t.Cleanup(p.close)
	if err := j.Start(Process{Args: []string{"/bin/sh", "-c", `n=0; while read l; do n=$((n+1)); echo "$n" >&3; done`}, Env: []string{"PATH=/usr/bin:/bin"},
		Stdin: p.inR, Stdout: p.nullW, Stderr: p.nullW, ExtraFiles: []*os.File{p.outW}}); err != nil {
		t.Fatal(err)
	}
	p.closeChild()
	dl := time.Now().Add(20 * time.Second)
	if err := p.ask("a", "1", dl); err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "cp")
	if _, err := j.Checkpoint(cp, []*os.File{p.outR}); err != nil {
		t.Fatal(err)
	}
	<-j.Done()
	q, _ := newProbePipes()
	t.Cleanup(q.close)
	r, err := testEngine.Restore(sp, cp, Process{Stdin: q.inR, Stdout: q.nullW, Stderr: q.nullW, ExtraFiles: []*os.File{q.outW}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Destroy)
	q.closeChild()
	if err := q.ask("b", "2", dl); err != nil {
		t.Fatal(err)
	}
	cp2 := filepath.Join(t.TempDir(), "cp2")
	if _, err := r.Checkpoint(cp2, []*os.File{q.outR}); err != nil {
		t.Fatalf("second checkpoint: %v", err)
	}
	<-r.Done()
	q2, _ := newProbePipes()
	t.Cleanup(q2.close)
	r2, err := testEngine.Restore(sp, cp2, Process{Stdin: q2.inR, Stdout: q2.nullW, Stderr: q2.nullW, ExtraFiles: []*os.File{q2.outW}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r2.Destroy)
	q2.closeChild()
	if err := q2.ask("c", "3", dl); err != nil {
		t.Fatal(err)
	}
}
