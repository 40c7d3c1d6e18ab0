//go:build !unit

package run

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/run/spec"
)

// A session's commands: a foreground one with its output and exit; a
// background one runs while the session is idle (its CPU counted), blocks
// a pause, and once it is killed the session is frozen between calls
// again, its group gone with everything it started.
func TestSessionCommands(t *testing.T) {
	ss := newTestSession(t)
	call(t, ss, "x = 7")
	fg := &spec.Command{Argv: []string{"/bin/sh", "-c", "echo $((6*7)); echo e >&2; exit 4"}, Timeout: 10 * time.Second, OutputBytes: 1 << 20}
	r, err := ss.RunCommand(context.Background(), fg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != spec.StatusError || r.ExitCode != 4 || string(r.Stdout) != "42\n" || string(r.Stderr) != "e\n" {
		t.Errorf("foreground: %+v stdout %q stderr %q", r, r.Stdout, r.Stderr)
	}
	bg, err := ss.StartCommand(&spec.Command{Argv: []string{"/bin/sh", "-c", "setsid sh -c 'while :; do :; done' & while :; do :; done"}, Background: true})
	if err != nil {
		t.Fatal(err)
	}
	j := ss.st.j
	a := j.Stats().CPU
	time.Sleep(500 * time.Millisecond)
	b := j.Stats().CPU
	if used := b - a; used < 100*time.Millisecond {
		t.Errorf("a background command used %v of CPU in 500 ms while the session was idle", used)
	}
	if _, err := ss.Pause(nil); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), bg.ID) {
		t.Errorf("pause with a background command: %v", err)
	}
	if r := call(t, ss, "print(x)"); string(r.Stdout) != "7\n" {
		t.Errorf("a call beside a background command: %q", r.Stdout)
	}
	// The session's CPU is its jail's: the interpreter's and the
	// command's together, at least what the jail had used before.
	if c := ss.CPU(); c < b {
		t.Errorf("the session's CPU %v, less than its jail's %v a moment before", c, b)
	}
	killed, err := ss.KillCommand(bg.ID)
	if err != nil {
		t.Fatal(err)
	}
	if killed.State != spec.CommandExited || killed.Status != spec.StatusKilled || killed.CPU <= 0 {
		t.Errorf("killed: %+v", killed)
	}
	if pids, err := j.GroupPids(bg.ID); err == nil {
		t.Errorf("the command's group is left, with %v", pids)
	}
	a = j.Stats().CPU
	time.Sleep(500 * time.Millisecond)
	if used := j.Stats().CPU - a; used > 50*time.Millisecond {
		t.Errorf("after its last command the idle session used %v of CPU in 500 ms (not frozen)", used)
	}
}
