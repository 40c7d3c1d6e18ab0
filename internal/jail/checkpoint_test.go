//go:build !unit

package jail

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The engine's own probe: a shell's variable, file in /tmp, working
// directory and a pipe beyond stdio survive a checkpoint and a restore
// into a new jail with other host ids.
// The host's cgroup hierarchies keep their mount options: CRIU is told to
// leave cgroups alone (a cgroup2 mount of its own would reset the
// hierarchy's options, favordynmods and nsdelegate among them).
func TestCheckpointProbe(t *testing.T) {
	before, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := testEngine.ProbeCheckpoint(t.TempDir(), 30*time.Second); err != nil {
		t.Fatalf("probe: %v", err)
	}
	t.Logf("probe took %v", time.Since(start))
	after, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	cgroupLines := func(b []byte) string {
		var out []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, " - cgroup") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	if cgroupLines(before) != cgroupLines(after) {
		t.Errorf("cgroup mounts changed by a checkpoint and a restore:\nbefore %s\nafter  %s", cgroupLines(before), cgroupLines(after))
	}
}

// A restored jail's processes have exactly the isolation of the
// checkpointed ones: the same seccomp program, read back from the kernel,
// no_new_privs, no capabilities, the new jail's host ids (the user
// namespace's map rewritten), and no file but their pipes.
func TestCheckpointRestoredIsolation(t *testing.T) {
	sp := Spec{Limits: DefaultLimits()}
	j, p := shellJail(t, sp, `sleep 1000 & n=0; while read l; do n=$((n+1)); echo "$n" >&3; done`)
	deadline := time.Now().Add(20 * time.Second)
	if err := p.ask("a", "1", deadline); err != nil {
		t.Fatal(err)
	}
	before := jailPID(t, j, "sleep")
	filter := filterOf(t, before)
	fields := []string{"Seccomp", "NoNewPrivs", "CapEff", "CapPrm", "CapBnd", "CapAmb", "Seccomp_filters"}
	want := map[string]string{}
	for _, f := range fields {
		want[f] = statusLine(t, before, f)
	}
	cp := filepath.Join(t.TempDir(), "cp")
	if _, err := j.Checkpoint(cp, []*os.File{p.outR}, nil); err != nil {
		t.Fatal(err)
	}
	<-j.Done()
	r, q := restoreShell(t, sp, cp)
	if err := q.ask("b", "2", deadline); err != nil {
		t.Fatal(err)
	}
	if r.HostUID() == j.HostUID() {
		t.Fatalf("restored into the same host ids %d", r.HostUID())
	}
	after := jailPID(t, r, "sleep") // found by the new range's uid
	if got := filterOf(t, after); !bytes.Equal(got, filter) {
		t.Errorf("restored filter differs: %d bytes, was %d", len(got), len(filter))
	}
	for _, f := range fields {
		if got := statusLine(t, after, f); got != want[f] {
			t.Errorf("%s: %q after the restore, %q before", f, got, want[f])
		}
	}
	if want["Seccomp"] != "2" || want["NoNewPrivs"] != "1" || want["CapEff"] != "0000000000000000" {
		t.Errorf("the checkpointed jail was not isolated to begin with: %v", want)
	}
	// In the new jail's cgroups (with its limits), not the old one's.
	cg, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(after), "cgroup"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (parts[1] == "" || strings.Contains(parts[1], "memory") || strings.Contains(parts[1], "pids") || strings.Contains(parts[1], "freezer")) && !strings.HasSuffix(parts[2], "/"+r.ID()) {
			t.Errorf("restored process's cgroup %q: not the new jail's %s", line, r.ID())
		}
	}
	limitFile := filepath.Join(r.cgroups["memory"], "memory.limit_in_bytes")
	if CgroupMode() == "v2" {
		limitFile = filepath.Join(r.cgroups[""], "memory.max")
	}
	if b, err := os.ReadFile(limitFile); err != nil || strings.TrimSpace(string(b)) != strconv.FormatInt(sp.Limits.MemoryBytes, 10) {
		t.Errorf("the new jail's memory limit: %q %v, want %d", b, err, sp.Limits.MemoryBytes)
	}
	uidMap, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(after), "uid_map"))
	if err != nil {
		t.Fatal(err)
	}
	if f := strings.Fields(string(uidMap)); len(f) != 3 || f[0] != "0" || f[1] != strconv.Itoa(int(r.idBase)) || f[2] != strconv.Itoa(idMapSize) {
		t.Errorf("uid_map %q, want 0 %d %d", uidMap, r.idBase, idMapSize)
	}
	// The shell's files: its stdio and fd 3, pipes or /dev/null, and
	// nothing of the daemon's.
	shell := jailPID(t, r, "sh")
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(shell), "fd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		link, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(shell), "fd", fd.Name()))
		if !strings.HasPrefix(link, "pipe:") && link != "/dev/null" {
			t.Errorf("restored shell's fd %s is %s", fd.Name(), link)
		}
	}
}

// A checkpoint changed on disk, by one byte of its memory or by a file
// more, is refused before anything is restored; so is one signed with
// another key.
func TestCheckpointTampered(t *testing.T) {
	sp := Spec{Limits: DefaultLimits()}
	j, p := shellJail(t, sp, `while read l; do echo "$l" >&3; done`)
	if err := p.ask("a", "a", time.Now().Add(20*time.Second)); err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "cp")
	if _, err := j.Checkpoint(cp, []*os.File{p.outR}, []byte(`{"owner":1000}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := testEngine.ReadCheckpoint(cp); err != nil {
		t.Fatalf("untouched checkpoint: %v", err)
	}
	// The record is read back, its signature alone verified; a record
	// changed (another owner) is refused by both readers.
	if info, err := testEngine.ReadCheckpointInfo(cp); err != nil || string(info.Record) != `{"owner":1000}` {
		t.Fatalf("ReadCheckpointInfo: %s, %v", info.Record, err)
	}
	meta, err := os.ReadFile(filepath.Join(cp, metaName))
	if err != nil {
		t.Fatal(err)
	}
	forged := []byte(strings.Replace(string(meta), `"owner":1000`, `"owner":1001`, 1))
	if err := os.WriteFile(filepath.Join(cp, metaName), forged, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := testEngine.ReadCheckpointInfo(cp); !errors.Is(err, ErrCheckpointTampered) {
		t.Errorf("ReadCheckpointInfo of another owner: %v, want ErrCheckpointTampered", err)
	}
	if _, err := testEngine.ReadCheckpoint(cp); !errors.Is(err, ErrCheckpointTampered) {
		t.Errorf("ReadCheckpoint of another owner: %v, want ErrCheckpointTampered", err)
	}
	if err := os.WriteFile(filepath.Join(cp, metaName), meta, 0o600); err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob(filepath.Join(cp, imagesName, "pages-*.img"))
	if len(pages) == 0 {
		t.Fatal("no pages image")
	}
	b, err := os.ReadFile(pages[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(pages[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	alive := testEngine.alive.Load()
	_, err = testEngine.Restore(sp, cp, Process{Stdin: p.nullW, Stdout: p.nullW, Stderr: p.nullW, ExtraFiles: []*os.File{p.nullW}})
	if !errors.Is(err, ErrCheckpointTampered) {
		t.Errorf("restore of a changed page: %v, want ErrCheckpointTampered", err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(pages[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cp, imagesName, "extra.img"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := testEngine.ReadCheckpoint(cp); !errors.Is(err, ErrCheckpointTampered) {
		t.Errorf("a file more: %v, want ErrCheckpointTampered", err)
	}
	if err := os.Remove(filepath.Join(cp, imagesName, "extra.img")); err != nil {
		t.Fatal(err)
	}
	other := &Engine{criu: testEngine.criu, cfg: Config{CheckpointKey: []byte("another key of thirty-two bytes or more")}}
	if _, err := other.ReadCheckpoint(cp); !errors.Is(err, ErrCheckpointTampered) {
		t.Errorf("another key: %v, want ErrCheckpointTampered", err)
	}
	if n := testEngine.alive.Load(); n != alive {
		t.Errorf("%d jails alive after the refused restore, %d before", n, alive)
	}
}

// shellJail starts a jail whose shell runs script with a pipe beyond
// stdio on fd 3 (probePipes: ask writes a line to its stdin and reads the
// answer on fd 3).
func shellJail(t *testing.T, sp Spec, script string) (*Jail, *probePipes) {
	t.Helper()
	j, err := testEngine.Create(sp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Destroy)
	p, err := newProbePipes()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	if err := j.Start(Process{Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
		Stdin: p.inR, Stdout: p.nullW, Stderr: p.nullW, ExtraFiles: []*os.File{p.outW}}); err != nil {
		t.Fatal(err)
	}
	p.closeChild()
	return j, p
}

// restoreShell restores the checkpoint cp of a shellJail into a new jail
// with new pipes.
func restoreShell(t *testing.T, sp Spec, cp string) (*Jail, *probePipes) {
	t.Helper()
	q, err := newProbePipes()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.close)
	r, err := testEngine.Restore(sp, cp, Process{Stdin: q.inR, Stdout: q.nullW, Stderr: q.nullW, ExtraFiles: []*os.File{q.outW}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Destroy)
	q.closeChild()
	return r, q
}

// A snapshot leaves the jail running, and restores any number of times:
// each restore a jail of its own (its own host ids), all carrying on from
// the snapshot's state independently of one another and of the original.
func TestSnapshotRestoredTwice(t *testing.T) {
	sp := Spec{Limits: DefaultLimits()}
	j, p := shellJail(t, sp, `n=0; while read l; do n=$((n+1)); echo "$n $l" >&3; done`)
	deadline := time.Now().Add(30 * time.Second)
	if err := p.ask("a", "1 a", deadline); err != nil {
		t.Fatal(err)
	}
	if err := j.Freeze(); err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "cp")
	if _, err := j.Snapshot(cp, []*os.File{p.outR}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-j.Done():
		t.Fatal("the snapshotted jail ended")
	default:
	}
	if err := j.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err := p.ask("b", "2 b", deadline); err != nil {
		t.Fatalf("the original after its snapshot: %v", err)
	}
	r1, q1 := restoreShell(t, sp, cp)
	r2, q2 := restoreShell(t, sp, cp)
	if err := q1.ask("c", "2 c", deadline); err != nil {
		t.Fatalf("first restore: %v", err)
	}
	if err := q2.ask("d", "2 d", deadline); err != nil {
		t.Fatalf("second restore: %v", err)
	}
	if err := q1.ask("e", "3 e", deadline); err != nil {
		t.Fatalf("first restore again: %v", err)
	}
	if r1.HostUID() == r2.HostUID() || r1.HostUID() == j.HostUID() {
		t.Errorf("host ids: %d %d and the original's %d", r1.HostUID(), r2.HostUID(), j.HostUID())
	}
}
