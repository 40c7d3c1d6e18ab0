package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

// pid1Cmdline is a jail's pid 1 running the runner, as /proc/1/cmdline
// shows it (arguments joined by spaces).
var pid1Cmdline = regexp.MustCompile(`^/opt/jaild/init (--seccomp-fd [0-9]+ )?/usr/bin/python3 `)

// execAsync starts an execute request and returns a channel for its
// response.
func (h *hostile) execAsync(t *testing.T, req any) <-chan *api.ExecuteResponse {
	ch := make(chan *api.ExecuteResponse, 1)
	go func() {
		var r api.ExecuteResponse
		status, _ := h.d.call(t, "POST", "/v1/execute", req, &r)
		if status != 200 {
			t.Errorf("execute: HTTP %d", status)
		}
		h.noteRun(r.RunID)
		ch <- &r
	}()
	return ch
}

// waitMarker waits until a run creates the file name in its workspace
// (the host sees it in the run's directory) and returns the run's id. Runs
// use it to say "I am ready" without any channel between jails.
func (h *hostile) waitMarker(t *testing.T, name string) string {
	t.Helper()
	var id string
	waitFor(t, 30*time.Second, "a run to create "+name, func() bool {
		m, _ := filepath.Glob(filepath.Join(h.d.Dir, "run", "runs", "*", "work", name))
		if len(m) > 0 {
			id = filepath.Base(filepath.Dir(filepath.Dir(m[0])))
			return true
		}
		return false
	})
	return id
}

func leakCases() []hcase {
	return []hcase{
		{id: "D01", cat: catLeaks, title: "masked and read-only /proc and /sys paths",
			expect: "each is empty, absent or refused; /proc/kallsyms reads empty (no addresses)",
			code: `import errno, json, os
res = {}
for p in ('/proc/kcore', '/proc/keys', '/proc/timer_list', '/proc/sched_debug', '/proc/interrupts', '/proc/kallsyms', '/proc/latency_stats',
          '/proc/acpi', '/proc/scsi', '/proc/kmsg', '/sys/firmware', '/sys/devices/virtual/powercap', '/sys/class/dmi'):
    try: res[p] = 'dir %d' % len(os.listdir(p)) if os.path.isdir(p) else 'file %d' % len(open(p, 'rb').read(4096))
    except OSError as e: res[p] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(res))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				// Which of them exist depends on the kernel's configuration;
				// none may have content.
				for _, k := range sortedKeys(got) {
					switch v := fmt.Sprint(got[k]); v {
					case "dir 0", "file 0", "ENOENT", "EACCES", "EPERM":
					default:
						t.Errorf("%s: %s, want empty, absent or refused", k, v)
					}
				}
				return fmt.Sprintf("all %d paths empty or absent; kallsyms: %v", len(got), got["/proc/kallsyms"])
			}},
		{id: "D02", cat: catLeaks, title: "pid and cgroup visibility",
			expect: "only the jail's processes (pid 1 is the jail's init, pid 2 the runner), and every /proc/self/cgroup line is the root of the jail's cgroup namespace",
			code: `import json, os
print(json.dumps({'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), 'cgroup': open('/proc/self/cgroup').read().strip().split('\n'),
                  'pid1': open('/proc/1/cmdline', 'rb').read().replace(b'\0', b' ').decode(), 'ppid': os.getppid()}))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				pids, _ := got["pids"].([]any)
				if len(pids) != 2 || fmt.Sprint(pids[0]) != "1" || fmt.Sprint(got["ppid"]) != "1" {
					t.Errorf("pids %v ppid %v: want pid 1 and the runner, its child", pids, got["ppid"])
				}
				for _, l := range got["cgroup"].([]any) {
					if !strings.HasSuffix(fmt.Sprint(l), ":/") {
						t.Errorf("cgroup line %v", l)
					}
				}
				// The init is told where the jail's filter is (--seccomp-fd N)
				// where it loads it itself.
				if p1 := fmt.Sprint(got["pid1"]); !pid1Cmdline.MatchString(p1) || !strings.Contains(p1, "import runner") {
					t.Errorf("pid 1 is %s", p1)
				}
				return fmt.Sprintf("%d processes: pid 1 (the jail's init) and the runner, its child; all cgroup paths /", len(pids))
			}},
		{id: "D03", cat: catLeaks, title: "host paths in /proc/self/mountinfo and /proc/mounts",
			expect: "no host path (the daemon's state directory, the image location, the run id) is visible",
			run: func(t *testing.T, h *hostile) string {
				r := h.exec(t, api.ExecuteRequest{Code: "print(open('/proc/self/mountinfo').read()); print(open('/proc/mounts').read())"})
				wantStatus(t, r, "ok")
				image, _ := filepath.EvalSymlinks(imageDir)
				for _, s := range []string{h.d.Dir, filepath.Base(h.d.Dir), image, imageDir, "/var/cache/jaild", "/run/jaild", "runs/", r.RunID} {
					if strings.Contains(r.Stdout, s) {
						t.Errorf("mountinfo mentions %q:\n%s", s, r.Stdout)
					}
				}
				return "none of the daemon's directory, the image path or the run id appears"
			}},
		{id: "D04", cat: catLeaks, title: "environment and secrets: os.environ, /proc/1/environ, /proc/self/environ",
			expect: "only the allowlisted variables; the daemon's environment (a canary secret), LISTEN_FDS and NOTIFY_SOCKET never reach the jail; pid 1's environ is the same or unreadable",
			run: func(t *testing.T, h *hostile) string {
				r := h.exec(t, api.ExecuteRequest{Code: `import json, os
def env(p):
    try: return open(p, 'rb').read().decode(errors='replace')
    except OSError as e: return 'E%d' % e.errno
print(json.dumps({'env': sorted(os.environ), 'pid1': env('/proc/1/environ'), 'self': env('/proc/self/environ')}))
`})
				wantStatus(t, r, "ok")
				if strings.Contains(r.Stdout, h.secret) || strings.Contains(r.Stderr, h.secret) {
					t.Errorf("the daemon's canary reached the jail")
				}
				allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "LC_ALL": true, "TZ": true, "MPLBACKEND": true, "MPLCONFIGDIR": true,
					"OPENBLAS_NUM_THREADS": true, "OMP_NUM_THREADS": true, "MKL_NUM_THREADS": true, "NUMEXPR_NUM_THREADS": true, "VECLIB_MAXIMUM_THREADS": true}
				got := outJSON(t, r)
				env, _ := got["env"].([]any)
				for _, k := range env {
					if !allowed[fmt.Sprint(k)] {
						t.Errorf("os.environ holds %v", k)
					}
				}
				for _, k := range []string{"pid1", "self"} {
					if v := fmt.Sprint(got[k]); k == "pid1" && v == "E13" {
						continue // EACCES: a warm or session jail's init is non-dumpable
					}
					for _, kv := range strings.Split(fmt.Sprint(got[k]), "\x00") {
						name, _, _ := strings.Cut(kv, "=")
						if name != "" && !allowed[name] && name != "JAILD_PREIMPORT" {
							t.Errorf("%s environ holds %s", k, name)
						}
					}
				}
				return fmt.Sprintf("%d allowlisted variables only; pid 1's environ holds no more (or is unreadable: a warm jail's init is non-dumpable); no canary", len(env))
			}},
		{id: "D05", cat: catLeaks, title: "host identifiers: machine-id, boot_id, DMI ids, hostname",
			expect: "none equals the host's: the jail has the image's machine-id, its own hostname, and no way to read the host's boot_id or DMI ids",
			run: func(t *testing.T, h *hostile) string {
				r := h.exec(t, api.ExecuteRequest{Code: `import json, os, socket
def rd(p):
    try: return open(p).read().strip()
    except OSError as e: return 'E%d' % e.errno
print(json.dumps({'machine-id': rd('/etc/machine-id'), 'dbus machine-id': rd('/var/lib/dbus/machine-id'), 'boot_id': rd('/proc/sys/kernel/random/boot_id'),
                  'product_uuid': rd('/sys/class/dmi/id/product_uuid'), 'board_serial': rd('/sys/devices/virtual/dmi/id/board_serial'),
                  'hostname': socket.gethostname(), 'nodename': os.uname().nodename}))
`})
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				read := func(p string) string { b, _ := os.ReadFile(p); return strings.TrimSpace(string(b)) }
				hostname, _ := os.Hostname()
				host := map[string]string{"machine-id": read("/etc/machine-id"), "dbus machine-id": read("/etc/machine-id"),
					"boot_id": read("/proc/sys/kernel/random/boot_id"), "hostname": hostname, "nodename": hostname}
				var parts []string
				for _, k := range []string{"machine-id", "dbus machine-id", "boot_id", "hostname", "nodename"} {
					switch v := fmt.Sprint(got[k]); {
					case v == host[k]:
						t.Errorf("the jail reads the host's %s", k)
						parts = append(parts, k+": THE HOST'S")
					case v == "" || strings.HasPrefix(v, "E"):
						parts = append(parts, k+": unreadable")
					default:
						parts = append(parts, k+": its own")
					}
				}
				// No sysfs in the jail: the DMI ids cannot be read at all.
				obs := strings.Join(parts, ", ") + "; " + sameValues(t, got, []string{"product_uuid", "board_serial"}, "E2") + " (ENOENT)"
				return obs
			}},
		{id: "D06", cat: catLeaks, title: "/dev sanity",
			expect: "only null, zero, full, random, urandom and tty (no block device, no kmsg, mem, loop, tun, fuse or kvm); /dev/tty has no terminal (ENXIO)",
			code: `import errno, json, os, stat
devs = {}
for root, dirs, files in os.walk('/dev'):
    for n in files + dirs:
        p = os.path.join(root, n)
        st = os.lstat(p)
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            devs[p] = ('c' if stat.S_ISCHR(st.st_mode) else 'b') + '%d:%d' % (os.major(st.st_rdev), os.minor(st.st_rdev))
res = {'devices': devs}
for p in ('/dev/tty', '/dev/kmsg', '/dev/mem', '/dev/sda', '/dev/loop0', '/dev/net/tun', '/dev/fuse', '/dev/kvm', '/dev/console'):
    try: os.close(os.open(p, os.O_RDWR)); res[p] = 'OPENED'
    except OSError as e: res[p] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(res))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				allowed := map[string]string{"/dev/null": "c1:3", "/dev/zero": "c1:5", "/dev/full": "c1:7", "/dev/random": "c1:8", "/dev/urandom": "c1:9", "/dev/tty": "c5:0", "/dev/ptmx": "c5:2"}
				devs, _ := got["devices"].(map[string]any)
				var names []string
				for p, v := range devs {
					if allowed[p] != v {
						t.Errorf("device %s (%v) in the jail", p, v)
					}
					names = append(names, filepath.Base(p))
				}
				sort.Strings(names)
				obs := "devices: " + strings.Join(names, ", ") + "; " + sameValues(t, got, []string{"/dev/tty"}, "ENXIO")
				return obs + "; " + sameValues(t, got, []string{"/dev/kmsg", "/dev/mem", "/dev/sda", "/dev/loop0", "/dev/net/tun", "/dev/fuse", "/dev/kvm", "/dev/console"}, "ENOENT")
			}},
		{id: "D07", cat: catLeaks, title: "cross-run channel through files: /dev/shm, POSIX shared memory, /tmp, the workspace, /jaild",
			expect: "the next run finds none of the previous run's files",
			run: func(t *testing.T, h *hostile) string {
				paths := []string{"/dev/shm/mark", "/tmp/mark", "/workspace/mark", "/jaild/mark", "/dev/shm/psm_jaild"}
				r := h.exec(t, api.ExecuteRequest{Code: "from multiprocessing import shared_memory\nshm = shared_memory.SharedMemory(name='psm_jaild', create=True, size=4096)\nshm.buf[:4] = b'mark'\n" +
					"for p in " + pyList(paths[:4]) + ": open(p, 'w').write('mark')\nimport os\nprint(sorted(os.listdir('/dev/shm')))\n"})
				wantStatus(t, r, "ok")
				r = h.exec(t, api.ExecuteRequest{Code: "import json, os\nprint(json.dumps({p: os.path.exists(p) for p in " + pyList(paths) + "}))\n"})
				wantStatus(t, r, "ok")
				return "next run: " + sameValues(t, outJSON(t, r), paths, "false")
			}},
		{id: "D08", cat: catLeaks, title: "cross-run channel through SysV IPC: a segment, a semaphore set and a queue left behind",
			expect: "they live in the run's IPC namespace: the next run and the host see none of them",
			run: func(t *testing.T, h *hostile) string {
				const key = 0x4a41494c
				code := fmt.Sprintf(`import ctypes, errno, json
L = ctypes.CDLL(None, use_errno=True)
def err(r): return r if r >= 0 else errno.errorcode.get(ctypes.get_errno())
print(json.dumps({'shm': err(L.shmget(%d, 1 << 20, 0o1666)), 'sem': err(L.semget(%d, 1, 0o1666)), 'msg': err(L.msgget(%d, 0o1666))}))
`, key, key, key)
				r := h.exec(t, api.ExecuteRequest{Code: code})
				wantStatus(t, r, "ok")
				for k, v := range outJSON(t, r) {
					if _, isNum := v.(json.Number); !isNum {
						t.Errorf("creating the %s failed: %v", k, v)
					}
				}
				r = h.exec(t, api.ExecuteRequest{Code: strings.ReplaceAll(strings.ReplaceAll(code, "0o1666", "0"), "1 << 20", "0")})
				wantStatus(t, r, "ok")
				obs := "next run: " + sameValues(t, outJSON(t, r), []string{"shm", "sem", "msg"}, "ENOENT")
				for _, o := range sysvIPC() {
					if strings.Contains(o, "key "+strconv.Itoa(key)+" ") {
						t.Errorf("host has %s", o)
					}
				}
				return obs + "; the host's /proc/sysvipc has none"
			}},
		{id: "D09", cat: catLeaks, title: "cross-run channel through a file lock on a shared rootfs inode (two concurrent runs)",
			expect: "a run cannot observe another run's flock on a read-only image file: the second run gets the lock",
			run: func(t *testing.T, h *hostile) string {
				a := h.execAsync(t, api.ExecuteRequest{Code: `import fcntl, time
f = open('/usr/lib/python3.13/os.py', 'rb'); fcntl.flock(f, fcntl.LOCK_EX)
open('locked', 'w').close()
time.sleep(6)`})
				h.waitMarker(t, "locked")
				r := h.exec(t, api.ExecuteRequest{Code: `import fcntl
f = open('/usr/lib/python3.13/os.py', 'rb')
try: fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB); print('GOT')
except OSError as e: print('BLOCKED', e.errno)`})
				<-a
				wantStatus(t, r, "ok")
				if r.Stdout != "GOT\n" {
					t.Errorf("second run: %q: it sees the first run's lock, a channel between runs", r.Stdout)
					return "the second run's flock(LOCK_EX|LOCK_NB) fails with EWOULDBLOCK while the first holds it: a channel between concurrent runs"
				}
				return "the second run gets the lock"
			}},
		{id: "D10", cat: catLeaks, title: "another run's activity through inotify on the shared rootfs (two concurrent runs)",
			expect: "a run watching image directories sees no event caused by another run (which modules it imports, which files it reads)",
			run: func(t *testing.T, h *hostile) string {
				watcher := h.execAsync(t, api.ExecuteRequest{Code: `import ctypes, os, struct, time
L = ctypes.CDLL(None, use_errno=True)
fd = L.inotify_init1(os.O_NONBLOCK)
if fd < 0:
    print('denied', ctypes.get_errno())
    open('watching', 'w').close(); time.sleep(5); raise SystemExit  # the marker lives as long as the jail
for d in (b'/usr/lib/python3.13', b'/usr/lib/python3.13/__pycache__'):
    L.inotify_add_watch(fd, d, 0x20 | 0x01)  # IN_OPEN | IN_ACCESS
open('watching', 'w').close()
time.sleep(5)
names = set()
while True:
    try: data = os.read(fd, 65536)
    except BlockingIOError: break
    i = 0
    while i < len(data):
        wd, mask, cookie, n = struct.unpack_from('iIII', data, i)
        names.add(data[i + 16:i + 16 + n].rstrip(b'\0').decode(errors='replace'))
        i += 16 + n
print(sorted(x for x in names if 'imaplib' in x))`})
				h.waitMarker(t, "watching")
				victim := h.exec(t, api.ExecuteRequest{Code: "import imaplib"})
				wantStatus(t, victim, "ok")
				r := <-watcher
				wantStatus(t, r, "ok")
				if strings.TrimSpace(r.Stdout) == "denied 1" {
					return "inotify is denied to every run (EPERM): nothing can watch the image"
				}
				if strings.TrimSpace(r.Stdout) != "[]" {
					t.Errorf("the watcher saw the other run open %s", strings.TrimSpace(r.Stdout))
					return "the watching run sees the other run open " + strings.TrimSpace(r.Stdout) + ": another run's activity leaks"
				}
				return "the watching run sees no event of the other run"
			}},
		{id: "D10b", cat: catLeaks, title: "another run's activity through dnotify (fcntl F_NOTIFY) on a shared image directory (two concurrent runs)",
			expect: "a run watching an image directory gets no notification caused by another run reading files there",
			run: func(t *testing.T, h *hostile) string {
				// Two windows: a quiet one (no other run reads the directory)
				// as the control, then one in which another run imports a
				// module from it.
				watcher := h.execAsync(t, api.ExecuteRequest{Code: `import errno, fcntl, os, signal, time
hits = []
signal.signal(signal.SIGIO, lambda *a: hits.append(1))
fd = os.open('/usr/lib/python3.13/xmlrpc/__pycache__', os.O_RDONLY)
try: fcntl.fcntl(fd, fcntl.F_NOTIFY, fcntl.DN_ACCESS | fcntl.DN_MULTISHOT)
except OSError as e: print('denied', errno.errorcode.get(e.errno)); open('window2', 'w').close(); time.sleep(3); raise SystemExit
time.sleep(2.5)
quiet = len(hits)
open('window2', 'w').close()
time.sleep(3)
print(quiet, len(hits) - quiet)`})
				h.waitMarker(t, "window2")
				victim := h.exec(t, api.ExecuteRequest{Code: "import xmlrpc.client"})
				wantStatus(t, victim, "ok")
				r := <-watcher
				wantStatus(t, r, "ok")
				out := strings.TrimSpace(r.Stdout)
				if strings.HasPrefix(out, "denied") {
					return "F_NOTIFY is refused (" + strings.TrimPrefix(out, "denied ") + ")"
				}
				var quiet, during int
				fmt.Sscan(out, &quiet, &during)
				if quiet != 0 || during != 0 {
					t.Errorf("the watcher got %d notifications in the quiet window and %d while another run imported xmlrpc.client", quiet, during)
					return fmt.Sprintf("the watching run gets SIGIO when another run reads files in the directory (%s in the quiet window): another run's activity leaks", map[bool]string{true: "none", false: "some also"}[quiet == 0])
				}
				return "no notification"
			}},
		{id: "D11", cat: catLeaks, title: "host sockets in the jail's /proc/net (tcp, tcp6, unix)",
			expect: "neither a TCP listener on the host's loopback nor the daemon's Unix socket appears",
			run: func(t *testing.T, h *hostile) string {
				hl := listenHost(t, "tcp", "127.0.0.1:0")
				defer hl.close()
				r := h.exec(t, api.ExecuteRequest{Code: "for p in ('tcp', 'tcp6', 'unix'): print(open('/proc/net/' + p).read())"})
				wantStatus(t, r, "ok")
				port := fmt.Sprintf(":%04X ", hl.port)
				if strings.Contains(r.Stdout, port) || strings.Contains(r.Stdout, h.d.Socket) {
					t.Errorf("/proc/net shows host sockets:\n%s", r.Stdout)
				}
				return "no host listener and no daemon socket in /proc/net/{tcp,tcp6,unix}"
			}},
		{id: "D12", cat: catLeaks, title: "a run in the second image the daemon serves (python-minimal beside the default)",
			expect: "it runs in that image only (none of the default's packages), its mount table names no host path of either image, and the image stays mounted once on the host",
			run: func(t *testing.T, h *hostile) string {
				r := h.exec(t, api.ExecuteRequest{Image: hostileSecondImage, Code: `import importlib.util, json
print(json.dumps({'numpy': importlib.util.find_spec('numpy') is not None, 'mounts': open('/proc/self/mountinfo').read()}))
`})
				wantStatus(t, r, "ok")
				if r.Image != hostileSecondImage {
					t.Errorf("ran in %q, want %s", r.Image, hostileSecondImage)
				}
				got := outJSON(t, r)
				if got["numpy"] != false {
					t.Errorf("numpy importable in %s", hostileSecondImage)
				}
				mounts := fmt.Sprint(got["mounts"])
				second, _ := filepath.EvalSymlinks(filepath.Join(imagesRoot(), hostileSecondImage, "current"))
				def, _ := filepath.EvalSymlinks(imageDir)
				for _, s := range []string{h.d.Dir, second, def, imagesRoot(), "/var/cache/jaild", r.RunID} {
					if strings.Contains(mounts, s) {
						t.Errorf("the run's mountinfo mentions %q:\n%s", s, mounts)
					}
				}
				if n := len(imageMounts(h.d)); n != 1 {
					t.Errorf("%d image mounts of the daemon beside its default, want 1", n)
				}
				return "ran in " + hostileSecondImage + " without numpy; no host path of either image in its mountinfo; one mount of the image on the host"
			}},
	}
}
