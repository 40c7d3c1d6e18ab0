package tests

import (
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jaild/jaild/internal/api"
)

// privStateCode reports the kernel's view of the process's privileges.
const privStateCode = `import json, os
st = {l.split(':')[0]: l.split(':', 1)[1].strip() for l in open('/proc/self/status')}
print(json.dumps({k: st.get(k) for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp')} |
                 {'uid_map': open('/proc/self/uid_map').read().split(), 'gid_map': open('/proc/self/gid_map').read().split(),
                  'ids': [os.getuid(), os.geteuid(), os.getgid(), os.getegid()], 'groups': os.getgroups()}))
`

func checkPrivState(t *testing.T, r *api.ExecuteResponse) string {
	wantStatus(t, r, "ok")
	got := outJSON(t, r)
	obs := sameValues(t, got, []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}, "0000000000000000")
	obs += "; " + sameValues(t, got, []string{"NoNewPrivs"}, "1") + "; " + sameValues(t, got, []string{"Seccomp"}, "2")
	m, _ := got["uid_map"].([]any)
	var host uint64
	if len(m) == 3 {
		host, _ = strconv.ParseUint(fmt.Sprint(m[1]), 10, 32)
	}
	if len(m) != 3 || fmt.Sprint(m[0]) != "0" || fmt.Sprint(m[2]) != "65536" || !inJailRange(host) || (host-testIDBase)%65536 != 0 ||
		fmt.Sprint(got["gid_map"]) != fmt.Sprint(got["uid_map"]) {
		t.Errorf("uid_map %v gid_map %v, want the same one non-root range of 65536 host ids at %d+slot*65536", got["uid_map"], got["gid_map"], testIDBase)
	}
	if fmt.Sprint(got["ids"]) != "[1000 1000 1000 1000]" || strings.Contains(fmt.Sprint(got["groups"]), " 0") || fmt.Sprint(got["groups"]) == "[0]" {
		t.Errorf("ids %v groups %v", got["ids"], got["groups"])
	}
	return obs + "; uid/gid map [0 host_id_base+slot*65536 65536]; uid 1000, no group 0"
}

// rlimitCode tries to raise every hard rlimit (to infinity and by one)
// and prints [soft, hard, outcome] per limit.
const rlimitCode = `import json, resource
res = {}
for n in ('RLIMIT_NOFILE', 'RLIMIT_NPROC', 'RLIMIT_CPU', 'RLIMIT_FSIZE', 'RLIMIT_AS', 'RLIMIT_STACK', 'RLIMIT_CORE', 'RLIMIT_MEMLOCK', 'RLIMIT_MSGQUEUE'):
    r = getattr(resource, n)
    s, h = resource.getrlimit(r)
    out = 'refused'
    for want in ((resource.RLIM_INFINITY, resource.RLIM_INFINITY), (h + 1, h + 1)):
        try: resource.setrlimit(r, want); out = 'RAISED'
        except (ValueError, OSError): pass
    res[n] = [s, h, out]
print(json.dumps(res))
`

// checkRlimits: nothing can be raised, and the hard limits are the
// request's (timeout 5 s, pids 40, file size 32 MiB): a warm jail must
// have lowered them from the pool's.
func checkRlimits(t *testing.T, r *api.ExecuteResponse) string {
	wantStatus(t, r, "ok")
	got := outJSON(t, r)
	want := map[string]string{"RLIMIT_NPROC": "[40 40 refused]", "RLIMIT_FSIZE": fmt.Sprintf("[%d %d refused]", 32<<20, 32<<20),
		"RLIMIT_CPU": "[6 7 refused]", "RLIMIT_CORE": "[0 0 refused]", "RLIMIT_NOFILE": "[1024 1024 refused]", "RLIMIT_MSGQUEUE": "[0 0 refused]"}
	for _, k := range sortedKeys(got) {
		v := fmt.Sprint(got[k])
		if strings.Contains(v, "RAISED") {
			t.Errorf("%s raised: %s", k, v)
		}
		if w, ok := want[k]; ok && v != w {
			t.Errorf("%s = %s, want %s", k, v, w)
		}
	}
	return "no hard limit can be raised (9 limits); the request's limits hold: NPROC 40, FSIZE 32 MiB, CPU 6/7 s, NOFILE 1024, CORE 0"
}

var rlimitReq = api.ExecuteRequest{Limits: &api.Limits{TimeoutMs: ptr(int64(5000)), Pids: ptr(int64(40)), FileSizeMB: ptr(int64(32)), MemoryMB: ptr(int64(256))}}

// coldReq asks for more memory than the pool's jails were made for (the
// callers' maximum, 2048 MB), so the run gets a jail created for it.
func coldReq(limits *api.Limits) api.ExecuteRequest {
	l := api.Limits{}
	if limits != nil {
		l = *limits
	}
	l.MemoryMB = ptr(int64(4096))
	return api.ExecuteRequest{Limits: &l}
}

// hostListener listens on the host's loopback and counts connections.
type hostListener struct {
	ln       []net.Listener
	accepted atomic.Int64
	port     int
}

func listenHost(t *testing.T, network string, addrs ...string) *hostListener {
	t.Helper()
	hl := &hostListener{}
	for _, a := range addrs {
		if hl.port != 0 && network == "tcp" {
			host, _, _ := net.SplitHostPort(a)
			a = net.JoinHostPort(host, strconv.Itoa(hl.port))
		}
		ln, err := net.Listen(network, a)
		if err != nil {
			if strings.HasPrefix(a, "[::1]") {
				continue // no IPv6 on this host
			}
			t.Fatal(err)
		}
		if tcp, ok := ln.Addr().(*net.TCPAddr); ok {
			hl.port = tcp.Port
		}
		hl.ln = append(hl.ln, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				hl.accepted.Add(1)
				c.Close()
			}
		}()
	}
	return hl
}

func (hl *hostListener) close() {
	for _, l := range hl.ln {
		l.Close()
	}
}

func privilegeCases() []hcase {
	return []hcase{
		{id: "C01", cat: catPriv, title: "privilege state (warm jail)",
			expect: "CapInh/Prm/Eff/Bnd/Amb all 0, NoNewPrivs 1, Seccomp 2; one non-zero host uid range, never 0 0 4294967295",
			code:   privStateCode, check: checkPrivState},
		{id: "C01c", cat: catPriv, title: "privilege state (a jail created for the request)",
			expect: "the same as C01: a cold jail is the same jail",
			code:   privStateCode, req: coldReq(nil), check: checkPrivState},
		{id: "C02", cat: catPriv, title: "become root: setuid binaries, sudo, setuid(0) and friends",
			expect: "no setuid/setgid file in the image; every command fails; setuid/setresuid/setgid/setgroups fail with EPERM; euid stays 1000",
			code: `import json, os, stat, subprocess
res = {}
for cmd in (['su', '-c', 'id'], ['mount', '-t', 'tmpfs', 'x', '/tmp'], ['ping', '-c1', '127.0.0.1'], ['sudo', 'id'], ['newuidmap', '1', '0', '0', '1']):
    try: rc = subprocess.run(cmd, capture_output=True, timeout=5, input=b'').returncode; res[cmd[0]] = 'exit %d' % rc
    except Exception as e: res[cmd[0]] = type(e).__name__
suid = []
for top in ('/usr', '/bin', '/sbin', '/opt', '/etc', '/lib'):
    for root, dirs, files in os.walk(top):
        for f in files:
            try: m = os.lstat(os.path.join(root, f)).st_mode
            except OSError: continue
            if stat.S_ISREG(m) and m & (stat.S_ISUID | stat.S_ISGID): suid.append(os.path.join(root, f))
res['setuid files'] = len(suid)
for name, fn in (('setuid(0)', lambda: os.setuid(0)), ('setresuid(0,0,0)', lambda: os.setresuid(0, 0, 0)),
                 ('setgid(0)', lambda: os.setgid(0)), ('setgroups([0])', lambda: os.setgroups([0]))):
    try: fn(); res[name] = 'ROOT'
    except OSError as e: res[name] = e.errno
res['euid'] = os.geteuid()
print(json.dumps(res))
`,
			req: api.ExecuteRequest{Limits: &api.Limits{TimeoutMs: ptr(int64(30000))}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				var cmds []string
				for _, c := range []string{"su", "mount", "ping", "sudo", "newuidmap"} {
					v := fmt.Sprint(got[c])
					if v == "exit 0" {
						t.Errorf("%s succeeded", c)
					}
					cmds = append(cmds, c+" "+v)
				}
				obs := strings.Join(cmds, ", ") + "; " + sameValues(t, got, []string{"setuid files"}, "0")
				obs += "; " + sameValues(t, got, []string{"setuid(0)", "setresuid(0,0,0)", "setgid(0)", "setgroups([0])"}, "1") + " (EPERM)"
				return obs + "; " + sameValues(t, got, []string{"euid"}, "1000")
			}},
		{id: "C03", cat: catPriv, title: "raise hard rlimits (warm jail, limits lowered by the runner)",
			expect: "no limit can be raised; the hard limits are the request's, not the pool's higher ones",
			code:   rlimitCode, req: rlimitReq, check: checkRlimits},
		{id: "C03c", cat: catPriv, title: "raise hard rlimits (a jail created for the request)",
			expect: "the same as C03",
			code:   rlimitCode, req: coldReq(rlimitReq.Limits), check: checkRlimits},
		{id: "C04", cat: catPriv, noNet: true, title: "network egress, the metadata service, DNS and UDP (a run that did not ask for network)",
			expect: "only lo; ENETUNREACH for outside addresses (IPv4, IPv6, UDP); ECONNREFUSED on 127.0.0.1, the jail's own loopback; no name resolution",
			code: `import errno, json, socket
res = {'ifaces': [n for _, n in socket.if_nameindex()]}
for name, fam, addr in (('1.1.1.1:53', socket.AF_INET, ('1.1.1.1', 53)), ('169.254.169.254:80', socket.AF_INET, ('169.254.169.254', 80)),
                        ('[2606:4700:4700::1111]:53', socket.AF_INET6, ('2606:4700:4700::1111', 53)), ('127.0.0.1:22', socket.AF_INET, ('127.0.0.1', 22))):
    s = socket.socket(fam, socket.SOCK_STREAM); s.settimeout(2)
    try: s.connect(addr); res[name] = 'CONNECTED'
    except OSError as e: res[name] = errno.errorcode.get(e.errno, str(e))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try: u.sendto(b'x', ('1.1.1.1', 53)); res['udp 1.1.1.1:53'] = 'SENT'
except OSError as e: res['udp 1.1.1.1:53'] = errno.errorcode.get(e.errno, str(e))
try: socket.getaddrinfo('example.com', 80); res['dns'] = 'RESOLVED'
except socket.gaierror: res['dns'] = 'gaierror'
print(json.dumps(res))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				obs := sameValues(t, got, []string{"ifaces"}, "[lo]")
				obs += "; " + sameValues(t, got, []string{"1.1.1.1:53", "169.254.169.254:80", "[2606:4700:4700::1111]:53", "udp 1.1.1.1:53"}, "ENETUNREACH")
				obs += "; " + sameValues(t, got, []string{"127.0.0.1:22"}, "ECONNREFUSED")
				return obs + "; " + sameValues(t, got, []string{"dns"}, "gaierror")
			}},
		{id: "C05", cat: catPriv, title: "the host's loopback: a TCP service listening on the host's 127.0.0.1 and ::1",
			expect: "the jail's 127.0.0.1 is its own: ECONNREFUSED, and the host's listener sees no connection",
			run: func(t *testing.T, h *hostile) string {
				hl := listenHost(t, "tcp", "127.0.0.1:0", "[::1]:0")
				defer hl.close()
				port := strconv.Itoa(hl.port)
				r := h.exec(t, api.ExecuteRequest{Env: map[string]string{"HOSTPORT": port}, Code: `import errno, json, os, socket
res = {}
for fam, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):
    s = socket.socket(fam); s.settimeout(2)
    try: s.connect((host, int(os.environ['HOSTPORT']))); res[host] = 'CONNECTED'
    except OSError as e: res[host] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(res))
`})
				wantStatus(t, r, "ok")
				obs := sameValues(t, outJSON(t, r), []string{"127.0.0.1", "::1"}, "ECONNREFUSED")
				if n := hl.accepted.Load(); n != 0 {
					t.Errorf("the host's listener accepted %d connections from the jail", n)
				}
				return obs + "; the host listener accepted 0 connections"
			}},
		{id: "C06", cat: catPriv, title: "reach the daemon's socket or any other host socket (paths and abstract names)",
			expect: "host socket paths do not exist in the jail (ENOENT); a host abstract socket is in another network namespace (ECONNREFUSED)",
			run: func(t *testing.T, h *hostile) string {
				abstract := "jaild-hostile-" + randHex(6)
				hl := listenHost(t, "unix", "@"+abstract)
				defer hl.close()
				r := h.exec(t, api.ExecuteRequest{Env: map[string]string{"DAEMON_SOCK": h.d.Socket, "ABSTRACT": abstract}, Code: `import errno, json, os, socket
def conn(addr):
    s = socket.socket(socket.AF_UNIX)
    try: s.connect(addr); return 'CONNECTED'
    except OSError as e: return errno.errorcode.get(e.errno, str(e))
print(json.dumps({'daemon socket': conn(os.environ['DAEMON_SOCK']), '/run/jaild/jaild.sock': conn('/run/jaild/jaild.sock'),
                  '/run/systemd/private': conn('/run/systemd/private'), '/var/run/docker.sock': conn('/var/run/docker.sock'),
                  'host abstract socket': conn('\0' + os.environ['ABSTRACT'])}))
`})
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				obs := sameValues(t, got, []string{"daemon socket", "/run/jaild/jaild.sock", "/run/systemd/private", "/var/run/docker.sock"}, "ENOENT")
				obs += "; " + sameValues(t, got, []string{"host abstract socket"}, "ECONNREFUSED")
				if n := hl.accepted.Load(); n != 0 {
					t.Errorf("the host's abstract socket accepted %d connections", n)
				}
				return obs
			}},
		{id: "C07", cat: catPriv, title: "cgroup v1 release_agent and uevent_helper",
			expect: "no sysfs in the jail (/sys is empty), so no release_agent to write; mounting a cgroup hierarchy fails with EPERM",
			code: `import ctypes, errno, json, os
res = {'/sys entries': len(os.listdir('/sys'))}
for p in ('/sys/fs/cgroup/memory/release_agent', '/sys/fs/cgroup/release_agent', '/sys/kernel/uevent_helper'):
    try: open(p, 'w').write('/tmp/x'); res[p] = 'WROTE'
    except OSError as e: res[p] = errno.errorcode.get(e.errno, str(e))
L = ctypes.CDLL(None, use_errno=True)
os.makedirs('/tmp/cg', exist_ok=True)
res['mount cgroup memory'] = 'MOUNTED' if L.mount(b'cgroup', b'/tmp/cg', b'cgroup', 0, b'memory') == 0 else errno.errorcode.get(ctypes.get_errno())
res['mount cgroup2'] = 'MOUNTED' if L.mount(b'cgroup2', b'/tmp/cg', b'cgroup2', 0, None) == 0 else errno.errorcode.get(ctypes.get_errno())
print(json.dumps(res))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				obs := sameValues(t, got, []string{"/sys entries"}, "0")
				obs += "; " + sameValues(t, got, []string{"/sys/fs/cgroup/memory/release_agent", "/sys/fs/cgroup/release_agent", "/sys/kernel/uevent_helper"}, "ENOENT")
				return obs + "; " + sameValues(t, got, []string{"mount cgroup memory", "mount cgroup2"}, "EPERM")
			}},
		{id: "C08", cat: catPriv, title: "open any /proc/*/exe for writing (CVE-2019-5736)",
			expect: "no /proc/<pid>/exe can be opened for writing; pid 1 is the jail's init from the image, not a host binary (or, in a jail that may become a session, not even readable: init is non-dumpable)",
			code: `import errno, json, os
opened, errs = [], set()
for p in [x for x in os.listdir('/proc') if x.isdigit()] + ['self', 'thread-self']:
    for mode in (os.O_WRONLY, os.O_RDWR, os.O_WRONLY | os.O_TRUNC):
        try: os.close(os.open(f'/proc/{p}/exe', mode)); opened.append(p)
        except OSError as e: errs.add(errno.errorcode.get(e.errno, str(e.errno)))
try: pid1 = os.readlink('/proc/1/exe')
except OSError as e: pid1 = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps({'opened': opened, 'errnos': sorted(errs), 'pid1 exe': pid1}))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				if fmt.Sprint(got["opened"]) != "[]" {
					t.Errorf("opened for writing: %v", got["opened"])
				}
				errnos, _ := got["errnos"].([]any)
				for _, e := range errnos {
					switch e {
					case "ETXTBSY", "EACCES", "EROFS", "EPERM":
					default:
						t.Errorf("unexpected errno %v", e)
					}
				}
				// A warm or session jail's init is non-dumpable: its exe
				// link is not even readable.
				if exe := fmt.Sprint(got["pid1 exe"]); exe != "/opt/jaild/init" && exe != "EACCES" {
					t.Errorf("pid 1 runs %s", exe)
				}
				// Which of the refusals a run meets depends on whether its
				// jail is warm (init non-dumpable: EACCES) or cold, so the
				// report names the allowed set, not this run's.
				return "none opened (each refused: EACCES, EROFS, ETXTBSY or EPERM); pid 1 exe is /opt/jaild/init or unreadable (a warm jail's init is non-dumpable)"
			}},
		{id: "C09", cat: catPriv, title: "host kernel knobs through /proc: core_pattern, modprobe, drop_caches, sysrq-trigger, binfmt_misc",
			expect: "/proc/sys is read-only (EROFS), sysrq-trigger is masked by /dev/null, binfmt_misc is absent; the host's core_pattern is unchanged",
			run: func(t *testing.T, h *hostile) string {
				before, _ := os.ReadFile("/proc/sys/kernel/core_pattern")
				r := h.exec(t, api.ExecuteRequest{Code: `import errno, json, os
res = {}
for p in ('/proc/sys/kernel/core_pattern', '/proc/sys/kernel/modprobe', '/proc/sys/vm/drop_caches', '/proc/sys/kernel/hostname', '/proc/sysrq-trigger', '/proc/sys/fs/binfmt_misc/register'):
    try:
        st = os.stat(p)
        if st.st_rdev == os.makedev(1, 3): res[p] = 'masked'; continue
        with open(p, 'w') as f: f.write('|/tmp/x')
        res[p] = 'WROTE'
    except OSError as e: res[p] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(res))
`})
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				// Which files exist depends on the kernel's configuration
				// (modprobe, sysrq-trigger); none may be writable.
				obs := sameValues(t, got, []string{"/proc/sys/kernel/core_pattern", "/proc/sys/vm/drop_caches", "/proc/sys/kernel/hostname"}, "EROFS")
				for _, k := range []string{"/proc/sys/kernel/modprobe", "/proc/sysrq-trigger", "/proc/sys/fs/binfmt_misc/register"} {
					switch v := fmt.Sprint(got[k]); v {
					case "EROFS", "ENOENT", "EACCES", "masked":
					default:
						t.Errorf("%s: %s", k, v)
					}
				}
				obs += "; modprobe: read-only or absent; sysrq-trigger: masked or absent; binfmt_misc: absent"
				if after, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); string(after) != string(before) {
					t.Errorf("the host's core_pattern changed: %q -> %q", before, after)
				}
				return obs + "; host core_pattern unchanged"
			}},
		{id: "C10", cat: catPriv, title: "the filter, no_new_privs and empty capabilities survive execve",
			expect: "a shell started from the code has Seccomp 2, NoNewPrivs 1 and no capabilities",
			code: `import json, subprocess
out = subprocess.run(['/bin/sh', '-c', 'grep -E "^(Seccomp|NoNewPrivs|CapEff|CapBnd):" /proc/self/status'], capture_output=True, text=True).stdout
print(json.dumps(dict(l.split(':\t') for l in out.strip().split('\n'))))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				return sameValues(t, got, []string{"Seccomp"}, "2") + "; " + sameValues(t, got, []string{"NoNewPrivs"}, "1") + "; " +
					sameValues(t, got, []string{"CapEff", "CapBnd"}, "0000000000000000")
			}},
		{id: "C11", cat: catPriv, title: "execute files from /dev/shm, /jaild, /tmp and the workspace",
			expect: "/dev/shm and /jaild are noexec (EACCES); /tmp and the workspace allow running one's own scripts, by design (same uid, same filter)",
			code: `import errno, json, os, subprocess
res = {}
for d in ('/dev/shm', '/jaild', '/tmp', '/workspace'):
    p = d + '/t.sh'
    open(p, 'w').write('#!/bin/sh\necho ran\n'); os.chmod(p, 0o755)
    try: res[d] = subprocess.run([p], capture_output=True, text=True).stdout.strip() or 'no output'
    except OSError as e: res[d] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(res))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				return sameValues(t, got, []string{"/dev/shm", "/jaild"}, "EACCES") + "; " + sameValues(t, got, []string{"/tmp", "/workspace"}, "ran")
			}},
		{id: "C12", cat: catPriv, title: "give a file to another user or group",
			expect: "chown and chgrp to any other id fail with EPERM",
			code: `import errno, json, os
open('f', 'w').close()
res = {}
for name, fn in (('chown 0:0', lambda: os.chown('f', 0, 0)), ('chown 1001:1001', lambda: os.chown('f', 1001, 1001)), ('chgrp 0', lambda: os.chown('f', -1, 0))):
    try: fn(); res[name] = 'ok'
    except OSError as e: res[name] = errno.errorcode.get(e.errno, str(e))
print(json.dumps(res))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				return sameValues(t, outJSON(t, r), []string{"chown 0:0", "chown 1001:1001", "chgrp 0"}, "EPERM")
			}},
		{id: "C13", cat: catPriv, title: "signal the daemon and the test process by their host pids",
			expect: "host pids do not exist in the jail's pid namespace: kill and pidfd_open fail with ESRCH",
			run: func(t *testing.T, h *hostile) string {
				pids := []string{strconv.Itoa(h.d.Cmd.Process.Pid), strconv.Itoa(os.Getpid())}
				sort.Strings(pids)
				r := h.exec(t, api.ExecuteRequest{Env: map[string]string{"HOSTPIDS": strings.Join(pids, ",")}, Code: `import ctypes, errno, json, os, signal
L = ctypes.CDLL(None, use_errno=True)
res = {}
for i, p in enumerate(os.environ['HOSTPIDS'].split(',')):
    try: os.kill(int(p), signal.SIGKILL); res['kill host pid %d' % i] = 'SENT'
    except OSError as e: res['kill host pid %d' % i] = errno.errorcode.get(e.errno, str(e))
    fd = L.syscall(434, int(p), 0)
    res['pidfd_open host pid %d' % i] = 'OPENED' if fd >= 0 else errno.errorcode.get(ctypes.get_errno())
print(json.dumps(res))
`})
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				return sameValues(t, got, sortedKeys(got), "ESRCH") + "; both processes alive"
			}},
	}
}
