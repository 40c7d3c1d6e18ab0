package tests

// Leak checks: after every hostile case, nothing the case's runs created
// may remain, on the host or in the daemon. The warm pool keeps jails
// alive between requests (each single-use), so the checks never expect "no
// jail at all": they follow the case's own run ids, and require that
// everything else belongs to a live pool jail and that the pool holds no
// more jails than its size.

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
	jaillib "github.com/jaild/jaild/internal/jail"
)

// Slack for measurements that are noisy by nature.
//
// The daemon's RSS: a response is built in the daemon's heap (returning
// 64 MiB of files takes about 340 MiB at the peak), and without a memory
// limit the Go runtime keeps freed memory for minutes, so RSS would show
// the peak, not what is still held. The hostile daemon therefore runs
// with GOMEMLIMIT (hostileMemLimit): afterwards the runtime returns freed
// memory to stay under it, and RSS above it means live memory.
const (
	orphanMemorySlack = 16 << 20 // memory charged to dead jails (stats are flushed lazily)
	rssCaseSlack      = 64 << 20 // daemon RSS right after a case, above max(baseline, GOMEMLIMIT)
	rssFlatSlack      = 16 << 20 // daemon RSS at the end of the suite, above the same
	leakWait          = 30 * time.Second
)

// rssCeiling is the bound the daemon's RSS must return under.
func (h *hostile) rssCeiling(slack int64) int64 { return max(h.base.rss, hostileMemLimit) + slack }

// jailCgroups are the directories, one per cgroup hierarchy, that hold a
// daemon's jail cgroups (<daemon's own cgroup>/<cgroup_name>).
type jailCgroups struct {
	parents []string // absolute paths
	memory  string   // the memory hierarchy's parent
	pids    string   // the pids hierarchy's parent
	v2      bool
	rel     string // the parent's path relative to its hierarchy, for /proc/<pid>/cgroup
}

var cgroupNameKey = regexp.MustCompile(`(?m)^cgroup_name = "([^"]+)"`)

// cgroupsOf finds a running daemon's jail cgroup parents from its own
// /proc/<pid>/cgroup, the host's cgroup mounts and its configuration.
func cgroupsOf(d *daemon) (*jailCgroups, error) {
	cfg, err := os.ReadFile(filepath.Join(d.Dir, "jaild.toml"))
	if err != nil {
		return nil, err
	}
	m := cgroupNameKey.FindSubmatch(cfg)
	if m == nil {
		return nil, fmt.Errorf("no cgroup_name in %s", d.Dir)
	}
	name := string(m[1])
	own, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", d.Cmd.Process.Pid))
	if err != nil {
		return nil, err
	}
	mounts := cgroupMounts()
	cg := &jailCgroups{}
	for _, line := range strings.Split(strings.TrimSpace(string(own)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		ctrls, path := parts[1], parts[2]
		if ctrls == "" { // the unified hierarchy
			mp, ok := mounts[""]
			if !ok {
				continue
			}
			// On cgroup v2 the daemon moves itself into a "supervisor"
			// leaf; jails live beside it.
			path = strings.TrimSuffix(path, "/supervisor")
			p := filepath.Join(mp, path, name)
			cg.parents = append(cg.parents, p)
			if _, hasV1Memory := mounts["memory"]; !hasV1Memory {
				cg.v2, cg.memory, cg.pids, cg.rel = true, p, p, filepath.Join(path, name)
			}
			continue
		}
		mp, ok := mounts[ctrls]
		if !ok {
			continue
		}
		p := filepath.Join(mp, path, name)
		cg.parents = append(cg.parents, p)
		switch ctrls {
		case "memory":
			cg.memory, cg.rel = p, filepath.Join(path, name)
		case "pids":
			cg.pids = p
		}
	}
	if cg.memory == "" {
		return nil, fmt.Errorf("no memory cgroup for the daemon (%s)", own)
	}
	return cg, nil
}

// cgroupMounts maps a /proc/<pid>/cgroup controller field ("memory",
// "cpu,cpuacct", "name=systemd", "" for the unified hierarchy) to its
// mount point.
func cgroupMounts() map[string]string {
	out := map[string]string{}
	for _, m := range mountinfo() {
		switch m.fstype {
		case "cgroup2":
			out[""] = m.point
		case "cgroup":
			var ctrls []string
			for _, o := range strings.Split(m.superOpts, ",") {
				switch o {
				case "rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec", "clone_children", "xattr", "nsdelegate", "memory_recursiveprot", "favordynmods":
				default:
					ctrls = append(ctrls, o)
				}
			}
			// /proc/<pid>/cgroup lists controllers in the kernel's order,
			// which is also the order of the super options.
			out[strings.Join(ctrls, ",")] = m.point
		}
	}
	return out
}

type mountEntry struct{ point, fstype, source, superOpts string }

// mountinfo parses the host's (the test process's) mount table.
func mountinfo() []mountEntry {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		a, b := strings.Fields(pre), strings.Fields(post)
		if len(a) < 5 || len(b) < 3 {
			continue
		}
		out = append(out, mountEntry{point: daemontest.UnescapeMount(a[4]), fstype: b[0], source: b[1], superOpts: b[2]})
	}
	return out
}

// live returns the ids of the daemon's jails that exist now (in any
// hierarchy).
func (cg *jailCgroups) live() map[string]bool {
	ids := map[string]bool{}
	for _, p := range cg.parents {
		ents, _ := os.ReadDir(p)
		for _, e := range ents {
			if e.IsDir() {
				ids[e.Name()] = true
			}
		}
	}
	return ids
}

// orphanMemory is the anonymous and shmem/tmpfs memory charged to the
// jails' parent cgroup but to none of its live children: memory of dead
// runs that was never freed (a leaked tmpfs, a SysV segment kept alive,
// a process that escaped its jail's cgroup but not the parent's).
func (cg *jailCgroups) orphanMemory() int64 {
	keys := []string{"total_rss", "total_shmem"}
	if cg.v2 {
		keys = []string{"anon", "shmem"}
	}
	sum := func(dir string) int64 {
		st := kvFile(filepath.Join(dir, "memory.stat"))
		var n int64
		for _, k := range keys {
			n += st[k]
		}
		return n
	}
	n := sum(cg.memory)
	ents, _ := os.ReadDir(cg.memory)
	for _, e := range ents {
		if e.IsDir() {
			n -= sum(filepath.Join(cg.memory, e.Name()))
		}
	}
	return n
}

// kvFile parses "key value" lines.
func kvFile(path string) map[string]int64 {
	out := map[string]int64{}
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			out[f[0]] = v
		}
	}
	return out
}

// snapshot is the host and daemon state the leak checks compare with.
type snapshot struct {
	otherFds []string // daemon fds that belong to no live jail
	rss      int64
	runDir   []string // entries of <daemon dir>/run
	dir      []string // entries of <daemon dir>
	sysvipc  []string
	keys     int      // keys owned by jail uids
	jails    int      // live jails of every test daemon
	images   []string // the daemon's image mounts (run/images/<n>)
}

func (h *hostile) snapshot(t *testing.T) *snapshot {
	t.Helper()
	h.d.Client.CloseIdleConnections()
	pid := h.d.Cmd.Process.Pid
	// Connections just closed by clients take the daemon a moment to
	// close too: wait until its fds are the same three reads in a row.
	fds := daemonOtherFds(pid)
	for stable, deadline := 0, time.Now().Add(10*time.Second); stable < 3 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if cur := daemonOtherFds(pid); diff(fds, cur) == "" {
			stable++
		} else {
			fds, stable = cur, 0
		}
	}
	return &snapshot{
		otherFds: fds,
		rss:      vmRSS(pid),
		runDir:   dirNames(filepath.Join(h.d.Dir, "run")),
		dir:      dirNames(h.d.Dir),
		sysvipc:  sysvIPC(),
		keys:     jailKeys(),
		jails:    len(h.cg.live()) + h.otherDaemonJails(),
		images:   imageMounts(h.d),
	}
}

// otherDaemonJails counts the live jails of the shared daemon (idle, but
// its pool holds jails in the same uid range).
func (h *hostile) otherDaemonJails() int {
	n := 0
	if cg, err := cgroupsOf(shared); err == nil {
		n += len(cg.live())
	}
	return n
}

func dirNames(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func vmRSS(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// daemonOtherFds lists the daemon's open fds that belong to no live jail:
// a jail holds five pipes shared with its processes (seven for one that may
// become a session: init's control and status), a pidfd of its init and
// its mount namespace (held by the daemon until the jail's teardown).
// Everything else (listener, epoll, log pipes, cgroup files, client
// connections) must be back to the baseline after every case.
func daemonOtherFds(pid int) []string {
	held := map[string]bool{}
	jail := map[int]bool{}
	for _, p := range jailPids() {
		jail[p] = true
		for _, target := range fdLinks(p) {
			held[target] = true
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", p)); err == nil {
			held[ns] = true
		}
		// The daemon's lock on the jail's host id range
		// (/run/jaild-ids/<first id>) is the jail's too.
		if uid := procUID(p); inJailRange(uid) {
			first := testIDBase + (uid-testIDBase)/uint64(jaillib.IDsPerJail)*uint64(jaillib.IDsPerJail)
			held[filepath.Join(jaillib.HostIDLockDir, strconv.FormatUint(first, 10))] = true
		}
	}
	var other []string
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil || held[target] {
			continue
		}
		if target == "anon_inode:[pidfd]" {
			info := kvColon(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
			if p, _ := strconv.Atoi(info["Pid"]); jail[p] || p <= 0 { // -1: the process is gone
				continue
			}
		}
		// Fd numbers are reused; compare what they point at.
		other = append(other, target)
	}
	sort.Strings(other)
	return other
}

func fdLinks(pid int) []string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, l)
		}
	}
	return out
}

// kvColon parses "Key:\tvalue" lines.
func kvColon(path string) map[string]string {
	out := map[string]string{}
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}

// sysvIPC lists the host's SysV IPC objects (key and id of every shared
// memory segment, semaphore set and message queue). The test process is
// in the host's IPC namespace.
func sysvIPC() []string {
	var out []string
	for _, kind := range []string{"shm", "sem", "msg"} {
		b, _ := os.ReadFile("/proc/sysvipc/" + kind)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for _, line := range lines[1:] {
			if f := strings.Fields(line); len(f) >= 2 {
				out = append(out, kind+" key "+f[0]+" id "+f[1])
			}
		}
	}
	sort.Strings(out)
	return out
}

// jailKeys counts the kernel keys owned by host uids in the jails' range
// (/proc/key-users lists every user's). Each live jail holds one: its
// session keyring, which libcontainer creates and the kernel collects once
// the jail is gone.
func jailKeys() int {
	b, _ := os.ReadFile("/proc/key-users")
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		uid, err := strconv.ParseUint(strings.TrimSuffix(f[0], ":"), 10, 32)
		if err != nil || !inJailRange(uid) {
			continue
		}
		keys, _, _ := strings.Cut(f[2], "/")
		k, _ := strconv.Atoi(keys)
		n += k
	}
	return n
}

// jailProcsOutside lists processes in the jails' uid range whose memory
// cgroup is not a live jail of a known daemon: a process that left its
// jail, or a jail nobody tracks.
func (h *hostile) jailProcsOutside() []string {
	allowed := []*jailCgroups{h.cg}
	if cg, err := cgroupsOf(shared); err == nil {
		allowed = append(allowed, cg)
	}
	var bad []string
	for _, pid := range jailPids() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			continue // gone
		}
		ok := false
		for _, line := range strings.Split(string(b), "\n") {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			if (h.cg.v2 && parts[1] != "") || (!h.cg.v2 && parts[1] != "memory") {
				continue
			}
			for _, cg := range allowed {
				if strings.HasPrefix(parts[2], cg.rel+"/") {
					ok = true
				}
			}
			for _, p := range h.extraParents {
				if strings.HasPrefix(parts[2], p+"/") {
					ok = true
				}
			}
		}
		if !ok {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			bad = append(bad, fmt.Sprintf("pid %d (%s) in %s", pid, strings.ReplaceAll(string(cmd), "\x00", " "), strings.TrimSpace(string(b))))
		}
	}
	return bad
}

// checkLeaks runs the leak checks after a case; it reports failures with
// t.Errorf and returns them in one line for the report ("" if none).
func (h *hostile) checkLeaks(t *testing.T) string {
	t.Helper()
	var leaks []string
	leak := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		t.Errorf("leak check: %s", msg)
		leaks = append(leaks, msg)
	}
	if !h.d.Running() || h.d.Cmd.Process.Signal(syscall.Signal(0)) != nil {
		leak("the daemon is gone")
		return strings.Join(leaks, "; ")
	}
	h.d.Client.CloseIdleConnections()

	// 0. With egress: no run's link, chain or rule is left.
	if h.netTable != "" {
		var why string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if why = netLeaks(h.netTable, h.netPrefix); why == "" || time.Now().After(deadline) {
				break
			}
		}
		if why != "" {
			leak("network: %s", why)
		}
	}

	// 1. The next print(1) works, at normal speed (generous: the host is
	// shared and the pool may be refilling).
	start := time.Now()
	var p1 struct {
		Status, Stdout string
	}
	status, _ := h.d.call(t, "POST", "/v1/execute", `{"code":"print(1)"}`, &p1)
	if status != 200 || p1.Status != "ok" || p1.Stdout != "1\n" {
		leak("the next print(1) failed: HTTP %d %+v", status, p1)
	} else if d := time.Since(start); d > 15*time.Second {
		leak("the next print(1) took %v", d)
	}
	// 1b. No session is left live: a case deletes every session it opened
	// (root is an admin and lists every caller's).
	var sl api.SessionList
	if status, _ := h.d.call(t, "GET", "/v1/sessions", nil, &sl); status != 200 {
		leak("GET /v1/sessions: HTTP %d", status)
	}
	for _, s := range sl.Sessions {
		if s.State != api.SessionEnded {
			leak("session %s of uid %d is still %s", s.SessionID, s.UID, s.State)
		}
	}
	h.d.Client.CloseIdleConnections()

	h.mu.Lock()
	ids := append([]string(nil), h.runIDs...)
	h.mu.Unlock()
	poolSize := 0
	for _, im := range h.info(t).Images {
		poolSize += im.Pool.Size + im.Pool.PlainSize
	}
	h.d.Client.CloseIdleConnections()
	cur := &snapshot{}
	var why string
	clean := func() bool {
		why = ""
		live := h.cg.live()
		for _, id := range ids {
			if live[id] {
				why = "cgroup of run " + id + " still exists"
				return false
			}
			for _, sub := range []string{"runs", "state"} {
				if _, err := os.Lstat(filepath.Join(h.d.Dir, "run", sub, id)); err == nil {
					why = sub + "/" + id + " still exists"
					return false
				}
			}
		}
		// 2. No jails but the pool's, and nothing outside a live jail.
		if len(live) > poolSize {
			why = fmt.Sprintf("%d jails alive, the pool holds at most %d", len(live), poolSize)
			return false
		}
		if bad := h.jailProcsOutside(); len(bad) > 0 {
			why = "processes in the jails' uid range outside any live jail: " + strings.Join(bad, "; ")
			return false
		}
		for _, sub := range []string{"runs", "state"} {
			for _, name := range dirNames(filepath.Join(h.d.Dir, "run", sub)) {
				if !live[name] {
					why = fmt.Sprintf("%s/%s belongs to no live jail", sub, name)
					return false
				}
			}
		}
		// 3. No mounts but the rootfs and the live jails' run directories.
		for _, m := range mountinfo() {
			rel, err := filepath.Rel(h.d.Dir, m.point)
			if err != nil || strings.HasPrefix(rel, "..") {
				continue
			}
			// A live jail has its run directory (a tmpfs) and its root (an
			// overlay) at run/runs/<id>/root.
			id, isRun := strings.CutPrefix(rel, "run/runs/")
			id, _, _ = strings.Cut(id, "/")
			if rel != "run/rootfs" && !(isRun && live[id]) && !slices.Contains(h.base.images, m.point) {
				why = "host mount " + m.point + " (" + m.fstype + ") belongs to no live jail"
				return false
			}
		}
		// 4. Memory of dead runs is freed.
		if n := h.cg.orphanMemory(); n > orphanMemorySlack {
			why = fmt.Sprintf("%d MiB charged to the jails' parent cgroup but to no live jail", n>>20)
			return false
		}
		// 5. Kernel keys and SysV IPC objects.
		cur.keys, cur.jails = jailKeys(), len(live)+h.otherDaemonJails()
		if cur.keys > cur.jails+1 {
			why = fmt.Sprintf("%d keys owned by jail uids for %d live jails", cur.keys, cur.jails)
			return false
		}
		cur.sysvipc = sysvIPC()
		if d := diff(h.base.sysvipc, cur.sysvipc); d != "" {
			why = "host SysV IPC objects: " + d
			return false
		}
		// 6. No new files in the daemon's directories.
		cur.runDir, cur.dir = dirNames(filepath.Join(h.d.Dir, "run")), dirNames(h.d.Dir)
		if d := diff(h.base.runDir, cur.runDir) + diff(h.base.dir, cur.dir); d != "" {
			why = "daemon directories: " + d
			return false
		}
		// 7. The daemon's fds are back to the baseline (apart from live
		// jails'), and its RSS within noise.
		cur.otherFds = daemonOtherFds(h.d.Cmd.Process.Pid)
		if d := diff(h.base.otherFds, cur.otherFds); d != "" {
			why = "daemon fds: " + d
			return false
		}
		return true
	}
	deadline := time.Now().Add(leakWait)
	for !clean() {
		if time.Now().After(deadline) {
			leak("%s (after %v)", why, leakWait)
			break
		}
		time.Sleep(100 * time.Millisecond)
		h.d.Client.CloseIdleConnections()
	}
	if rss := vmRSS(h.d.Cmd.Process.Pid); rss > h.rssCeiling(rssCaseSlack) {
		leak("daemon RSS %d MiB, over %d MiB (baseline %d MiB, GOMEMLIMIT %d MiB)", rss>>20, h.rssCeiling(rssCaseSlack)>>20, h.base.rss>>20, hostileMemLimit>>20)
	}
	if strings.Contains(h.d.Log.String(), "too many open files") {
		leak("the daemon's log mentions EMFILE")
	}
	if strings.Contains(h.d.Log.String(), "panic:") {
		leak("the daemon's log has a panic")
	}
	return strings.Join(leaks, "; ")
}

// checkFlat runs once after the suite: with the pool full again, the
// daemon's fds are exactly the baseline and its RSS is back within noise.
func (h *hostile) checkFlat(t *testing.T, cases int) {
	t.Helper()
	h.waitPoolFull(t)
	h.d.Client.CloseIdleConnections()
	var cur *snapshot
	deadline := time.Now().Add(60 * time.Second)
	for {
		cur = h.snapshot(t)
		if cur.rss <= h.rssCeiling(rssFlatSlack) && diff(h.base.otherFds, cur.otherFds) == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after %d cases: daemon RSS %d MiB (baseline %d MiB), fds %s", cases, cur.rss>>20, h.base.rss>>20, diff(h.base.otherFds, cur.otherFds))
			break
		}
		time.Sleep(time.Second)
	}
	t.Logf("daemon after %d cases: RSS %d MiB (baseline %d MiB), %d fds besides live jails' (baseline %d)",
		cases, cur.rss>>20, h.base.rss>>20, len(cur.otherFds), len(h.base.otherFds))
}

// diff describes how two sorted multisets differ ("" if equal).
func diff(base, cur []string) string {
	count := map[string]int{}
	for _, s := range base {
		count[s]--
	}
	for _, s := range cur {
		count[s]++
	}
	var added, removed []string
	for s, n := range count {
		for ; n > 0; n-- {
			added = append(added, s)
		}
		for ; n < 0; n++ {
			removed = append(removed, s)
		}
	}
	if len(added)+len(removed) == 0 {
		return ""
	}
	sort.Strings(added)
	sort.Strings(removed)
	return fmt.Sprintf("new %v, gone %v", added, removed)
}

// procUID is a process's real uid (0 when it is gone).
func procUID(pid int) uint64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			uid, _ := strconv.ParseUint(f[1], 10, 32)
			return uid
		}
	}
	return 0
}
