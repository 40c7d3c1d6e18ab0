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
	j, p := shellJail(t, sp, `n=0; while read l; do n=$((n+1)); echo "$n" >&3; done`)
	dl := time.Now().Add(20 * time.Second)
	if err := p.ask("a", "1", dl); err != nil {
		t.Fatal(err)
	}
	// Every jail is held until the test's end (Cleanup): each restore gets
	// other host ids.
	cur, curPipes := j, p
	for i, line := range []string{"b", "c"} {
		cp := filepath.Join(t.TempDir(), "cp")
		if _, err := cur.Checkpoint(cp, []*os.File{curPipes.outR}, nil); err != nil {
			t.Fatalf("checkpoint %d: %v", i+1, err)
		}
		<-cur.Done()
		cur, curPipes = restoreShell(t, sp, cp)
		if err := curPipes.ask(line, string(rune('2'+i)), dl); err != nil {
			t.Fatalf("after restore %d: %v", i+1, err)
		}
	}
}
