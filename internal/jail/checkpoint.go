package jail

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
)

// Checkpoints: a jail's processes, memory and workspace written to disk
// by CRIU through libcontainer's Checkpoint, and restored by its Restore
// into a new jail of its own (its own host id range, cgroup, run
// directory). The layout of a checkpoint directory, written to a
// temporary name, fsynced and renamed (a kill at any moment leaves the
// old checkpoint or the new one, never a half):
//
//	images/         CRIU's images (libcontainer's descriptors.json among them)
//	workspace.tar   the jail's tmpfs: the workspace, /tmp and MetaDir
//	meta.json       CheckpointInfo
//	digest          HMAC-SHA256 of all of the above with the engine's key
//
// A restore verifies the digest first: a checkpoint changed on disk is
// refused. CRIU restores a user namespace with the id map it dumped; the
// restore rewrites the map (in a scratch copy of the images: the
// checkpoint itself is never changed) to the new jail's host id range.
//
// libcontainer hands CRIU the new pipes of fds 0-2 only. A jail's extra
// files (the runner's job and records pipes, init's control and status
// pipes) are pipes too: CRIU replaces them (--inherit-fd, keyed by the
// old pipe's inode) with fds that a wrapper of criu, first on the
// daemon's PATH while a restore runs, opens from the daemon's own fds
// before it executes the real criu. Restores are one at a time
// (criuMu): the wrapper's instructions are one file.

// CheckpointInfo is what a checkpoint records beside CRIU's images.
type CheckpointInfo struct {
	// Image is the name of the jail's image ("" the default one).
	Image string `json:"image"`
	// Limits are the jail's limits at the checkpoint.
	Limits Limits `json:"limits"`
	// IDBase is the host id of the jail's uid 0 when it was dumped.
	IDBase uint32 `json:"id_base"`
	// Pipes are the CRIU keys ("pipe:[inode]") of the jail's extra files,
	// fd 3 onwards.
	Pipes []string `json:"pipes"`
	// Bytes is the checkpoint's size on disk.
	Bytes int64 `json:"bytes"`
	// Created is when it was written.
	Created time.Time `json:"created"`
	// Record is the caller's, kept with the checkpoint and signed with it
	// (at most MaxCheckpointRecord bytes of JSON): what it needs to adopt
	// the checkpoint after a restart (ReadCheckpointInfo).
	Record json.RawMessage `json:"record,omitempty"`
}

// MaxCheckpointRecord bounds CheckpointInfo.Record.
const MaxCheckpointRecord = 64 << 10

// Checkpoint errors. A checkpoint that CRIU cannot make (what the jail
// holds: a socket to the outside, io_uring, ...) is ErrCheckpointRefused,
// and the jail keeps running.
var (
	ErrCheckpointsOff     = errdefs.New(errdefs.ErrUnavailable, "checkpoints are not available on this host")
	ErrCheckpointRefused  = errors.New("the jail's state cannot be checkpointed")
	ErrCheckpointTampered = errors.New("checkpoint does not verify")
	ErrRestoreFailed      = errors.New("CRIU could not restore the checkpoint")
)

const (
	imagesName    = "images"
	workspaceName = "workspace.tar"
	metaName      = "meta.json"
	metaSigName   = "meta.sig" // HMAC of meta.json alone: ReadCheckpointInfo
	digestName    = "digest"
	criuConfName  = "criu.conf"
)

// criuMu serializes every CRIU run of this process: the wrapper's
// inherit file and PATH are the process's.
var criuMu sync.Mutex

// criuSetup is the CRIU of an engine: the wrapper's directory.
type criuSetup struct {
	real string // the configured criu program
	dir  string // holds the wrapper "criu" and, during a restore, "inherit"
	yard string // CRIU's cgroup yard (cgroupYard)
	conf string // every jail's CRIU configuration (criuConfFor)
}

// setupCRIU writes the wrapper of criu into Config.CRIUWrapperDir (RunDir/criu).
func (e *Engine) setupCRIU() error {
	if e.cfg.CRIU == "" {
		return nil
	}
	if !filepath.IsAbs(e.cfg.CRIU) {
		return fmt.Errorf("jail config: CRIU must be an absolute path, got %q", e.cfg.CRIU)
	}
	if len(e.cfg.CheckpointKey) < 32 {
		return errors.New("jail config: CheckpointKey must have at least 32 bytes")
	}
	dir := e.cfg.CRIUWrapperDir
	if dir == "" {
		dir = filepath.Join(e.cfg.RunDir, "criu")
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("jail config: CRIUWrapperDir must be an absolute path, got %q", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	if strings.ContainsAny(dir+e.cfg.CRIU, "'\n") {
		return fmt.Errorf("jail config: CRIU path %q or RunDir holds a quote", e.cfg.CRIU)
	}
	if err := writeFileSync(filepath.Join(dir, "criu"), []byte(criuWrapper(dir, e.cfg.CRIU)), 0o700); err != nil {
		return err
	}
	// A restore's instructions left by a predecessor killed during one.
	if err := os.Remove(filepath.Join(dir, "inherit")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	yard, err := cgroupYard(filepath.Join(e.cfg.RunDir, "criu-yard"))
	if err != nil {
		return err
	}
	e.criu = &criuSetup{real: e.cfg.CRIU, dir: dir, yard: yard, conf: criuConfFor(yard)}
	// libcontainer runs "criu" found on PATH, which skips what cannot be
	// executed (a noexec mount): then another criu would run. No
	// checkpoints then (the probe says why), rather than that.
	if err := e.withCRIU("", func() error {
		p, err := exec.LookPath("criu")
		if err != nil || p != filepath.Join(dir, "criu") {
			return fmt.Errorf("the criu wrapper in %s cannot be executed (a noexec mount?): criu on PATH is %q", dir, p)
		}
		return nil
	}); err != nil {
		e.log.Error("no checkpoints", "err", err)
		e.criu, e.criuErr = nil, err
	}
	return nil
}

// criuWrapper is the script "criu" in dir that runs real. A restore's
// extra files (the "inherit" file in dir, present during a restore) are
// opened only for libcontainer's own "criu swrk 3": the restore, whose
// socket is fd 3 (and 4, 5 what libcontainer passes). Every other run,
// go-criu's version check among them, gets its socket at the number it
// has in the daemon ("criu swrk N"), which may be one of 6..9: the
// inherited files must not take its place. Out of the restore proper,
// criu's stderr (else /dev/null) goes to a file of the daemon's: what it
// says before its log is open (earlyCRIUError). A restore's fd 2 is the
// new jail's stderr, which CRIU hands on to the restored processes
// (libcontainer's inherit-fd): it stays as it is.
func criuWrapper(dir, real string) string {
	return "#!/bin/sh\n# jaild's criu (internal/jail/checkpoint.go): a restore's inherited fds, then criu.\n" +
		"if [ \"$1 $2 $#\" = 'swrk 3 2' ] && [ -f '" + dir + "/inherit' ]; then . '" + dir + "/inherit'; else exec 2>'" + dir + "/stderr'; fi\n" +
		"exec '" + real + "' \"$@\"\n"
}

// withCRIU runs f with the engine's wrapper first on PATH, one CRIU run
// of the process at a time.
func (e *Engine) withCRIU(inherit string, f func() error) error {
	if e.criu == nil {
		return ErrCheckpointsOff
	}
	criuMu.Lock()
	defer criuMu.Unlock()
	path := os.Getenv("PATH")
	_ = os.Setenv("PATH", e.criu.dir+":"+path)
	defer os.Setenv("PATH", path) //nolint:errcheck // restoring what it was
	file := filepath.Join(e.criu.dir, "inherit")
	if inherit != "" {
		if err := writeFileSync(file, []byte(inherit), 0o600); err != nil {
			return err
		}
		defer os.Remove(file)
	}
	return f()
}

// Checkpoint writes the jail's state to dir (which must not exist): its
// processes and memory (CRIU), and its tmpfs (the workspace, /tmp,
// MetaDir). extra are the host's ends of the jail's extra files, fd 3
// onwards, in order, whose pipes a restore replaces. The jail is frozen
// first (its files are copied while nothing of it runs) and ends with
// the dump: its first process is then seen ended (Done) and the caller
// Destroys it. When the checkpoint cannot be made, nothing is left in
// dir's place and the jail is left frozen, running as before once
// thawed; errors of what the jail holds wrap ErrCheckpointRefused.
func (j *Jail) Checkpoint(dir string, extra []*os.File, record []byte) (CheckpointInfo, error) {
	return j.checkpoint(dir, extra, record, false)
}

// Snapshot writes a checkpoint of the jail to dir, as Checkpoint does,
// and leaves the jail running (thawed: its caller freezes it again when
// it was frozen): a checkpoint to restore elsewhere (forks) or later
// (snapshots), any number of times.
func (j *Jail) Snapshot(dir string, extra []*os.File, record []byte) (CheckpointInfo, error) {
	return j.checkpoint(dir, extra, record, true)
}

func (j *Jail) checkpoint(dir string, extra []*os.File, record []byte, leaveRunning bool) (_ CheckpointInfo, retErr error) {
	e := j.e
	if e.criu == nil {
		return CheckpointInfo{}, ErrCheckpointsOff
	}
	if len(record) > MaxCheckpointRecord || (len(record) > 0 && !json.Valid(record)) {
		return CheckpointInfo{}, fmt.Errorf("checkpoint record: %d bytes, not JSON of at most %d", len(record), MaxCheckpointRecord)
	}
	info := CheckpointInfo{Image: j.image.name, Limits: j.Limits(), IDBase: j.idBase, Created: time.Now().UTC(), Record: record}
	for _, f := range extra {
		key, err := pipeKey(f)
		if err != nil {
			return CheckpointInfo{}, err
		}
		info.Pipes = append(info.Pipes, key)
	}
	if err := j.Freeze(); err != nil {
		return CheckpointInfo{}, fmt.Errorf("freeze: %w", err)
	}
	tmp := dir + ".tmp-" + randHex(6)
	if err := os.Mkdir(tmp, 0o711); err != nil {
		return CheckpointInfo{}, err
	}
	defer func() {
		if retErr != nil {
			_ = os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o711); err != nil { // umask-proof; see Restore
		return CheckpointInfo{}, err
	}
	if _, err := saveTree(j.runDir, filepath.Join(tmp, workspaceName), j.idBase, j.Limits().WorkspaceBytes); err != nil {
		return CheckpointInfo{}, err
	}
	images := filepath.Join(tmp, imagesName)
	if err := os.Mkdir(images, 0o711); err != nil {
		return CheckpointInfo{}, err
	}
	// CRIU's configuration (the jail's org.criu.config label), written
	// when CRIU runs, not at every jail's start.
	if err := writeFileSync(filepath.Join(j.runDir, criuConfName), []byte(e.criu.conf), 0o600); err != nil {
		return CheckpointInfo{}, err
	}
	work := filepath.Join(tmp, "log")
	// Cgroups "soft", with a yard of the host's own hierarchies
	// (criuConfFor): CRIU records the jail's cgroup namespace, so that a
	// restored process sees its jail's cgroups as "/" (with "ignore" it saw
	// the host's paths: S53), and mounts no cgroup file system, which
	// would reset the host's hierarchy options (favordynmods, nsdelegate).
	// libcontainer puts the restoring criu in the new jail's cgroups, with
	// its limits.
	err := e.withCRIU("", func() error {
		return j.c.Checkpoint(&libcontainer.CriuOpts{
			ImagesDirectory:   images,
			WorkDirectory:     work,
			ManageCgroupsMode: "soft",
			TcpEstablished:    true,
			FileLocks:         true,
			LeaveRunning:      leaveRunning,
		})
	})
	if err != nil {
		_ = j.Freeze() // as it was: CRIU thaws what it froze
		if _, serr := os.Stat(filepath.Join(work, "dump.log")); serr != nil {
			return CheckpointInfo{}, fmt.Errorf("checkpoint: %w%s", err, e.earlyCRIUError()) // CRIU did not get to its log
		}
		return CheckpointInfo{}, fmt.Errorf("%w: %s", ErrCheckpointRefused, e.redact(criuReason(work, "dump.log"), dir))
	}
	_ = os.RemoveAll(work)
	if err := e.sealCheckpoint(tmp, images, &info); err != nil {
		return CheckpointInfo{}, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return CheckpointInfo{}, err
	}
	return info, syncDir(filepath.Dir(dir))
}

// sealCheckpoint finishes a checkpoint's temporary directory tmp once
// CRIU has written its images: the images made readable to the restore,
// the size and record in meta.json, its signature, the digest of every
// file, all fsynced, so that the rename that follows publishes a whole
// checkpoint or none.
func (e *Engine) sealCheckpoint(tmp, images string, info *CheckpointInfo) error {
	var err error
	// CRIU writes its images with the daemon's umask (systemd's unit:
	// 0077), and its restore reads some of them from within the new jail's
	// user namespace (as the jail's host uid 0): they are made readable,
	// and the checkpoint directory (0700, root's) is what keeps them the
	// daemon's only.
	if err := chmodFiles(images, 0o644); err != nil {
		return err
	}
	if info.Bytes, err = dirBytes(tmp); err != nil {
		return err
	}
	meta, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(tmp, metaName), meta, 0o600); err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(tmp, metaSigName), []byte(metaSig(e.cfg.CheckpointKey, meta)), 0o600); err != nil {
		return err
	}
	sum, err := digestDir(tmp, e.cfg.CheckpointKey, true)
	if err != nil {
		return err
	}
	if err := writeFileSync(filepath.Join(tmp, digestName), []byte(sum), 0o600); err != nil {
		return err
	}
	return syncDir(tmp)
}

// CheckpointKey returns the key kept in the file path (0600), made once
// (32 random bytes, written to a temporary file, fsynced and renamed) when
// there is none: the engine's Config.CheckpointKey.
func CheckpointKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	switch {
	case err == nil && len(key) >= 32:
		return key, nil
	case err == nil:
		return nil, fmt.Errorf("checkpoint key %s has %d bytes, fewer than 32", path, len(key))
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if err := writeFileSync(path, key, 0o600); err != nil {
		return nil, err
	}
	return key, syncDir(filepath.Dir(path))
}

// metaSig is the HMAC of a checkpoint's meta.json, apart from the digest
// of all its files.
func metaSig(key, meta []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("jaild checkpoint meta\x00"))
	mac.Write(meta)
	return hex.EncodeToString(mac.Sum(nil))
}

// ReadCheckpointInfo returns the record of the checkpoint in dir having
// verified it alone (its signature, not the images': Restore verifies
// them all), cheap enough for every paused session at start-up. A
// checkpoint cut short, or not of this key, is ErrCheckpointTampered.
func (e *Engine) ReadCheckpointInfo(dir string) (CheckpointInfo, error) {
	if len(e.cfg.CheckpointKey) < 32 {
		return CheckpointInfo{}, ErrCheckpointsOff
	}
	meta, err := readBounded(filepath.Join(dir, metaName), MaxCheckpointRecord+64<<10)
	if err != nil {
		return CheckpointInfo{}, fmt.Errorf("%w: %v", ErrCheckpointTampered, err)
	}
	sig, err := readBounded(filepath.Join(dir, metaSigName), 128)
	if err != nil {
		return CheckpointInfo{}, fmt.Errorf("%w: %v", ErrCheckpointTampered, err)
	}
	if !hmac.Equal(sig, []byte(metaSig(e.cfg.CheckpointKey, meta))) {
		return CheckpointInfo{}, ErrCheckpointTampered
	}
	if _, err := os.Lstat(filepath.Join(dir, digestName)); err != nil {
		return CheckpointInfo{}, fmt.Errorf("%w: %v", ErrCheckpointTampered, err)
	}
	var info CheckpointInfo
	if err := json.Unmarshal(meta, &info); err != nil {
		return CheckpointInfo{}, fmt.Errorf("%w: %v", ErrCheckpointTampered, err)
	}
	return info, nil
}

// readBounded reads the regular file path, not following a link, failing
// past max bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", filepath.Base(path))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s has more than %d bytes", filepath.Base(path), limit)
	}
	return b, err
}

// ReadCheckpoint verifies the checkpoint in dir and returns its record.
func (e *Engine) ReadCheckpoint(dir string) (CheckpointInfo, error) {
	if e.criu == nil {
		return CheckpointInfo{}, ErrCheckpointsOff
	}
	want, err := os.ReadFile(filepath.Join(dir, digestName))
	if err != nil {
		return CheckpointInfo{}, fmt.Errorf("%w: %v", ErrCheckpointTampered, err)
	}
	got, err := digestDir(dir, e.cfg.CheckpointKey, false)
	if err != nil {
		return CheckpointInfo{}, fmt.Errorf("%w: %v", ErrCheckpointTampered, err)
	}
	if !hmac.Equal([]byte(got), want) {
		return CheckpointInfo{}, ErrCheckpointTampered
	}
	var info CheckpointInfo
	b, err := os.ReadFile(filepath.Join(dir, metaName))
	if err != nil {
		return CheckpointInfo{}, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return CheckpointInfo{}, fmt.Errorf("%w: %v", ErrCheckpointTampered, err)
	}
	return info, nil
}

// Restore makes a new jail from the checkpoint in dir: a jail of sp
// (whose Image must be the checkpoint's) whose processes are the
// checkpoint's, running, with p's files in place of the pipes the
// checkpoint's jail had (p.Stdin, p.Stdout, p.Stderr and p.ExtraFiles in
// the order of CheckpointInfo.Pipes). p.Args and p.Env are unused. The
// checkpoint is verified first and left as it is (it can be restored
// again).
func (e *Engine) Restore(sp Spec, dir string, p Process) (_ *Jail, retErr error) {
	info, err := e.ReadCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	if len(p.ExtraFiles) != len(info.Pipes) || len(p.ExtraFiles) > 4 {
		return nil, fmt.Errorf("restore: %d extra files for a checkpoint of %d", len(p.ExtraFiles), len(info.Pipes))
	}
	j, err := e.Create(sp)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			j.Destroy()
		}
	}()
	if err := restoreTree(filepath.Join(dir, workspaceName), j.runDir, j.idBase, j.Limits().WorkspaceBytes); err != nil {
		return nil, fmt.Errorf("restore workspace: %w", err)
	}
	scratch := filepath.Join(dir, ".restore-"+j.id)
	if err := linkImages(filepath.Join(dir, imagesName), scratch, info.IDBase, j.idBase); err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	defer os.RemoveAll(scratch + "-log")
	inherit, conf, err := e.restoreFiles(p.ExtraFiles, info.Pipes)
	if err != nil {
		return nil, err
	}
	if err := writeFileSync(filepath.Join(j.runDir, criuConfName), []byte(conf), 0o600); err != nil {
		return nil, err
	}
	proc := &libcontainer.Process{Init: true, Stdin: p.Stdin, Stdout: p.Stdout, Stderr: p.Stderr}
	j.mu.Lock()
	j.started = true
	j.mu.Unlock()
	err = e.withCRIU(inherit, func() error {
		return j.c.Restore(proc, &libcontainer.CriuOpts{
			ImagesDirectory:   scratch,
			WorkDirectory:     scratch + "-log",
			ManageCgroupsMode: "soft",
			TcpEstablished:    true,
			FileLocks:         true,
		})
	})
	// The wrapper opened p's files by their fds: keep them open till now.
	for _, f := range p.ExtraFiles {
		runtime.KeepAlive(f)
	}
	if err != nil {
		j.exit = Exit{Code: -1, Err: err}
		close(j.done)
		if _, serr := os.Stat(filepath.Join(scratch+"-log", "restore.log")); serr != nil {
			return nil, fmt.Errorf("restore: %w%s", err, e.earlyCRIUError()) // CRIU did not get to its log
		}
		return nil, fmt.Errorf("%w: %s", ErrRestoreFailed, e.redact(criuReason(scratch+"-log", "restore.log"), dir))
	}
	j.holdMountNamespace(proc)
	go func() {
		ps, err := proc.Wait()
		j.exit = exitOf(ps, err)
		close(j.done)
	}()
	// libcontainer's Restore leaves the container without its first
	// process's start time, so that it deems it stopped (no Signal, no
	// Destroy of a running jail); loaded anew from its state, it has it.
	c, err := libcontainer.Load(e.stateDir, j.id)
	if err != nil {
		j.Kill()
		return nil, fmt.Errorf("load restored jail: %w", err)
	}
	j.c = c
	state, err := j.c.State()
	if err != nil {
		return nil, fmt.Errorf("jail state: %w", err)
	}
	j.mu.Lock()
	j.cgroups = state.CgroupPaths
	j.mu.Unlock()
	return j, nil
}

// restoreFiles returns, for a restore with the extra files extra in
// place of the checkpoint's pipes, the wrapper's script that opens them
// and the CRIU configuration that maps them. They go on fds 6.. of criu
// (0-2 are stdio, 3 its socket, 4 and 5 the namespaces libcontainer may
// pass), opened by the wrapper from this process's fds.
func (e *Engine) restoreFiles(extra []*os.File, pipes []string) (inheritScript, criuConf string, _ error) {
	var inherit, conf strings.Builder
	inherit.WriteString("# a restore: fd 2 stays the new jail stderr\n") // the file's presence is what the wrapper tests
	conf.WriteString(e.criu.conf)
	for i, f := range extra {
		fd := 6 + i
		rc, err := f.SyscallConn()
		if err != nil {
			return "", "", err
		}
		redir, num := "<", uintptr(0)
		if err := rc.Control(func(d uintptr) {
			num = d
			if fl, err := unix.FcntlInt(d, unix.F_GETFL, 0); err == nil && fl&unix.O_ACCMODE == unix.O_WRONLY {
				redir = ">"
			}
		}); err != nil {
			return "", "", err
		}
		fmt.Fprintf(&inherit, "exec %d%s/proc/%d/fd/%d\n", fd, redir, os.Getpid(), num)
		fmt.Fprintf(&conf, "inherit-fd fd[%d]:%s\n", fd, pipes[i])
	}
	return inherit.String(), conf.String(), nil
}

// criuConfFor is every jail's CRIU configuration (libcontainer passes it
// by the org.criu.config label): a jail's network namespace is locked with
// nftables, as the host may have no iptables; and CRIU's cgroup yard is the
// host's hierarchies as they are mounted (yard), so that CRIU mounts no
// cgroup file system of its own: a cgroup2 mount applies its options to
// the hierarchy, and would reset the host's (favordynmods, nsdelegate,
// memory_recursiveprot).
func criuConfFor(yard string) string {
	return "network-lock nftables\ncgroup-yard " + yard + "\n"
}

// cgroupYard makes the yard CRIU wants, "<yard>/<controllers>" for each
// hierarchy and "<yard>/unified" for cgroup2, of the host's mounts: on
// cgroup v1 (and hybrid) /sys/fs/cgroup is laid out so; on v2 the yard is
// dir, whose "unified" is a symbolic link to /sys/fs/cgroup (CRIU opens
// it as a directory). No mount: nothing to leave behind, and a removal of
// dir removes the link, never a cgroup.
func cgroupYard(dir string) (string, error) {
	if CgroupMode() != "v2" {
		return "/sys/fs/cgroup", nil
	}
	return dir, makeYard(dir, cgroupView)
}

// makeYard lays out the cgroup v2 yard dir for a daemon whose cgroup view
// is view ("" for none).
func makeYard(dir, view string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	unified := filepath.Join(dir, "unified")
	// CRIU names a cgroup as /proc/PID/cgroup does, from the hierarchy's
	// root, and looks it up beneath the yard. In a cgroup view
	// (EnterCgroupView: the daemon's own cgroup, B, mounted at
	// /sys/fs/cgroup), the yard's "unified" is a directory whose path B
	// leads, through a symlink in its last step, to /sys/fs/cgroup: the
	// hierarchy's names as CRIU reads them, under the view's root. Else it
	// is a symlink to /sys/fs/cgroup.
	link, target := unified, "/sys/fs/cgroup"
	if view != "" && view != "/" {
		link = filepath.Join(unified, filepath.Clean("/"+view))
	}
	if got, err := os.Readlink(link); err == nil && got == target {
		return nil
	}
	if err := os.RemoveAll(unified); err != nil { // a link or a layout of another view: never what it points to
		return err
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o700); err != nil {
		return err
	}
	return os.Symlink(target, link)
}

// pipeKey is CRIU's name of the pipe f is an end of.
func pipeKey(f *os.File) (string, error) {
	var st unix.Stat_t
	// Through SyscallConn: Fd would make a pollable file blocking.
	rc, err := f.SyscallConn()
	if err != nil {
		return "", err
	}
	if cerr := rc.Control(func(fd uintptr) { err = unix.Fstat(int(fd), &st) }); cerr != nil {
		return "", cerr
	}
	if err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return "", fmt.Errorf("extra file %s is not a pipe", f.Name())
	}
	return "pipe:[" + strconv.FormatUint(st.Ino, 10) + "]", nil
}

// criuReason is the first error CRIU logged, for the daemon's log and the
// caller's reason, without CRIU's source locations.
func criuReason(dir, file string) string {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return "criu left no log"
	}
	var last string
	for _, l := range strings.Split(string(b), "\n") {
		if i := strings.Index(l, "Error ("); i >= 0 && !strings.Contains(l, "RLIMIT_NOFILE for self") {
			msg := l[i:]
			if k := strings.Index(msg, "): "); k >= 0 {
				msg = msg[k+3:]
			}
			if last == "" {
				last = strings.TrimSpace(msg) // the first: the cause, the rest its consequences
			}
		}
	}
	if last == "" {
		return "criu failed"
	}
	return last
}

// earlyCRIUError is the last line criu wrote to its stderr (the wrapper's
// file), for the daemon's log: ": criu said ..." or "".
func (e *Engine) earlyCRIUError() string {
	b, err := os.ReadFile(filepath.Join(e.criu.dir, "stderr"))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		for _, p := range []string{e.cfg.RunDir, filepath.Dir(filepath.Dir(e.cfg.CRIU))} {
			last = strings.ReplaceAll(last, p, "…")
		}
		return "; criu said: " + last
	}
	return ""
}

// redact takes the engine's and the checkpoint's host paths out of a
// reason that callers may see.
func (e *Engine) redact(reason, dir string) string {
	for _, p := range []string{filepath.Dir(dir), e.cfg.RunDir} {
		reason = strings.ReplaceAll(reason, p, "…")
	}
	return reason
}

// linkImages makes scratch a copy of images (hard links) whose user
// namespace image maps the jail's ids from newBase instead of oldBase.
func linkImages(images, scratch string, oldBase, newBase uint32) error {
	if err := os.Mkdir(scratch, 0o711); err != nil {
		return err
	}
	if err := os.Chmod(scratch, 0o711); err != nil {
		return err
	}
	ents, err := os.ReadDir(images)
	if err != nil {
		return err
	}
	for _, ent := range ents {
		name := ent.Name()
		if !ent.Type().IsRegular() {
			return fmt.Errorf("%w: %s is not a regular file", ErrCheckpointTampered, name)
		}
		src, dst := filepath.Join(images, name), filepath.Join(scratch, name)
		if strings.HasPrefix(name, "userns-") && strings.HasSuffix(name, ".img") {
			b, err := os.ReadFile(src)
			if err != nil {
				return err
			}
			out, err := remapUserns(b, oldBase, newBase)
			if err != nil {
				return err
			}
			if err := os.WriteFile(dst, out, 0o600); err != nil {
				return err
			}
			continue
		}
		if err := os.Link(src, dst); err != nil {
			return err
		}
	}
	return nil
}

// digestDir is the HMAC of every file beneath dir but the digest: each
// one's relative name, size and contents, in lexical order. fsync also
// fsyncs each file (a checkpoint being written).
func digestDir(dir string, key []byte, fsync bool) (string, error) {
	mac := hmac.New(sha256.New, key)
	var names []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case d.IsDir():
			if strings.HasPrefix(d.Name(), ".restore-") {
				return filepath.SkipDir
			}
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", rel)
		case rel == digestName:
			return nil
		}
		names = append(names, rel)
		return nil
	})
	if err != nil {
		return "", err
	}
	slices.Sort(names)
	// With fsync, each file's fsync runs while the digest reads on: the
	// write-back and the hash overlap (a checkpoint is mostly one large
	// pages image). The files are closed once their fsyncs are done.
	var syncs sync.WaitGroup
	errs := make([]error, len(names))
	var open []*os.File
	defer func() {
		syncs.Wait()
		for _, f := range open {
			f.Close()
		}
	}()
	for i, rel := range names {
		f, err := os.OpenFile(filepath.Join(dir, rel), os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return "", err
		}
		open = append(open, f)
		if fsync {
			syncs.Go(func() { errs[i] = f.Sync() })
		}
		fmt.Fprintf(mac, "%s\x00", rel)
		n, err := io.Copy(mac, f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(mac, "\x00%d\x00", n)
	}
	syncs.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return hex.EncodeToString(mac.Sum(nil)), nil
}

// chmodFiles sets the mode of the regular files in dir (not beneath).
func chmodFiles(dir string, mode os.FileMode) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, ent := range ents {
		if ent.Type().IsRegular() {
			if err := os.Chmod(filepath.Join(dir, ent.Name()), mode); err != nil {
				return err
			}
		}
	}
	return nil
}

func dirBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return n, err
}

func writeFileSync(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ProbeCheckpoint checkpoints and restores a jail of its own, with the
// image's /bin/sh, and checks that the restored shell has what it had
// (a variable, a file in /tmp, its working directory, a pipe beyond
// stdio) in a new jail of its own ids. nil means this host can
// checkpoint jails; the error says why not. dir is a scratch directory
// of the caller's, on the file system checkpoints will use.
func (e *Engine) ProbeCheckpoint(dir string, timeout time.Duration) (retErr error) {
	if e.criuErr != nil {
		return fmt.Errorf("%w: %v", ErrCheckpointsOff, e.criuErr)
	}
	if e.criu == nil {
		return ErrCheckpointsOff
	}
	deadline := time.Now().Add(timeout)
	spec := Spec{Limits: DefaultLimits()}
	spec.Limits.MemoryBytes = 128 << 20
	spec.Limits.WorkspaceBytes = 1 << 20
	spec.Limits.Pids = 8
	// A counter kept in the shell, answered on fd 3.
	script := `n=0; echo probe > /tmp/f; cd /tmp; while read l; do n=$((n+1)); echo "$n $l $(cat f) $(pwd)" >&3; done`
	j, err := e.Create(spec)
	if err != nil {
		return err
	}
	defer j.Destroy()
	p, err := newProbePipes()
	if err != nil {
		return err
	}
	defer p.close()
	if err := j.Start(Process{Args: []string{"/bin/sh", "-c", script}, Env: []string{"PATH=/usr/bin:/bin"},
		Stdin: p.inR, Stdout: p.nullW, Stderr: p.nullW, ExtraFiles: []*os.File{p.outW}}); err != nil {
		return err
	}
	p.closeChild()
	if err := p.ask("a", "1 a probe /tmp", deadline); err != nil {
		return fmt.Errorf("before the checkpoint: %w", err)
	}
	cp := filepath.Join(dir, "probe-"+randHex(6))
	defer os.RemoveAll(cp)
	if _, err := j.Checkpoint(cp, []*os.File{p.outR}, []byte(`{"probe":true}`)); err != nil {
		return err
	}
	if info, err := e.ReadCheckpointInfo(cp); err != nil || string(info.Record) != `{"probe":true}` {
		return fmt.Errorf("the checkpoint's record does not read back: %v", err)
	}
	select {
	case <-j.Done():
	case <-time.After(time.Until(deadline)):
		return errors.New("the checkpointed jail did not end")
	}
	// j keeps its host id range until the end: the restore must get
	// another.
	oldBase := j.idBase
	q, err := newProbePipes()
	if err != nil {
		return err
	}
	defer q.close()
	r, err := e.Restore(spec, cp, Process{Stdin: q.inR, Stdout: q.nullW, Stderr: q.nullW, ExtraFiles: []*os.File{q.outW}})
	if err != nil {
		return err
	}
	defer r.Destroy()
	q.closeChild()
	if err := q.ask("b", "2 b probe /tmp", deadline); err != nil {
		return fmt.Errorf("after the restore: %w", err)
	}
	if r.idBase == oldBase {
		return errors.New("the restored jail has the checkpoint's host ids")
	}
	return nil
}

type probePipes struct{ inR, inW, outR, outW, nullW *os.File }

func newProbePipes() (*probePipes, error) {
	p := &probePipes{}
	var err error
	if p.inR, p.inW, err = os.Pipe(); err != nil {
		return nil, err
	}
	if p.outR, p.outW, err = os.Pipe(); err != nil {
		p.close()
		return nil, err
	}
	if p.nullW, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

func (p *probePipes) closeChild() {
	for _, f := range []*os.File{p.inR, p.outW, p.nullW} {
		f.Close()
	}
}

func (p *probePipes) close() {
	for _, f := range []*os.File{p.inR, p.inW, p.outR, p.outW, p.nullW} {
		if f != nil {
			f.Close()
		}
	}
}

// ask writes line and reads the answer, which must be want.
func (p *probePipes) ask(line, want string, deadline time.Time) error {
	if _, err := p.inW.WriteString(line + "\n"); err != nil {
		return err
	}
	_ = p.outR.SetReadDeadline(deadline)
	buf := make([]byte, 0, 256)
	one := make([]byte, 1)
	for len(buf) < 256 {
		n, err := p.outR.Read(one)
		if err != nil {
			return fmt.Errorf("no answer: %w", err)
		}
		if n == 1 && one[0] == '\n' {
			break
		}
		buf = append(buf, one[:n]...)
	}
	if string(buf) != want {
		return fmt.Errorf("answered %q, want %q", buf, want)
	}
	return nil
}
