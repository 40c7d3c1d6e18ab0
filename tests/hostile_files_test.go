package tests

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jaild/jaild/internal/api"
)

// filesByPath indexes a response's files; two entries with one path are an
// error of their own (see A06b).
func filesByPath(r *api.ExecuteResponse) map[string]api.FileOut {
	m := map[string]api.FileOut{}
	for _, f := range r.Files {
		m[f.Path] = f
	}
	return m
}

func content(t *testing.T, f api.FileOut) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(f.ContentB64)
	if err != nil {
		t.Errorf("%s: bad base64: %v", f.Path, err)
	}
	return string(b)
}

// noHostContent checks that no returned file holds host data: the host's
// /etc/shadow or passwd, or the daemon's environment (its canary).
func noHostContent(t *testing.T, h *hostile, r *api.ExecuteResponse) {
	t.Helper()
	shadow, _ := os.ReadFile("/etc/shadow")
	for _, f := range r.Files {
		c := content(t, f)
		if c == "" {
			continue
		}
		if strings.Contains(c, h.secret) || strings.Contains(c, "root:") || (len(shadow) > 0 && strings.Contains(c, string(shadow[:min(len(shadow), 32)]))) {
			t.Errorf("%s came back with host content: %.200q", f.Path, c)
		}
	}
}

// skipped checks that each path is reported without content and with an
// error containing why.
func skipped(t *testing.T, r *api.ExecuteResponse, why string, paths ...string) string {
	t.Helper()
	m := filesByPath(r)
	for _, p := range paths {
		f, ok := m[p]
		if !ok || f.ContentB64 != "" || !strings.Contains(f.Error, why) {
			t.Errorf("%s: %+v, want it reported as %q without content (all files: %+v)", p, f, why, r.Files)
		}
	}
	return strings.Join(paths, ", ") + ": reported as " + why + ", no content"
}

func fileCases() []hcase {
	return []hcase{
		{id: "A01", cat: catFiles, title: "symlinks to a host secret and to /proc/self/environ among the returned files",
			expect: "neither is returned with content; both are reported as skipped symlinks (resolved on the host, /proc/self would be the daemon's)",
			code:   "import os; os.makedirs('out', exist_ok=True)\nos.symlink('/etc/shadow', 'out/shadow.txt'); os.symlink('/proc/self/environ', 'out/env.txt')\n",
			req:    api.ExecuteRequest{ReturnFiles: []string{"out/*"}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				return skipped(t, r, "symlink", "out/env.txt", "out/shadow.txt")
			}},
		{id: "A02", cat: catFiles, title: "relative escape and a symlink to / among the returned files",
			expect: "no host content, and the daemon does not traverse out/root",
			code:   "import os; os.makedirs('out/d', exist_ok=True)\nos.symlink('../../../../../../etc/passwd', 'out/d/p'); os.symlink('/', 'out/root')\n",
			req:    api.ExecuteRequest{ReturnFiles: []string{"out/**"}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				for _, f := range r.Files {
					if strings.HasPrefix(f.Path, "out/root/") {
						t.Errorf("the daemon walked through out/root: %s", f.Path)
					}
				}
				return skipped(t, r, "symlink", "out/d/p", "out/root") + "; nothing below out/root"
			}},
		{id: "A03", cat: catFiles, title: "hardlink from the rootfs into the workspace",
			expect: "EXDEV: the workspace is a separate tmpfs",
			code:   "import os\ntry: os.link('/usr/bin/python3', 'py'); print('LINKED')\nexcept OSError as e: print(e.errno)\n",
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if r.Stdout != "18\n" {
					t.Errorf("stdout %q, want 18 (EXDEV)", r.Stdout)
				}
				return "link(2) fails with errno " + strings.TrimSpace(r.Stdout) + " (EXDEV)"
			}},
		{id: "A04", cat: catFiles, title: "FIFO, socket and device node among the returned files",
			expect: "mknod fails with EPERM; the daemon does not block on the FIFO, skips what is not a regular file, and answers promptly",
			code: "import os, socket, stat; os.makedirs('out', exist_ok=True)\nos.mkfifo('out/fifo'); socket.socket(socket.AF_UNIX).bind('out/sock')\n" +
				"try: os.mknod('out/null', stat.S_IFCHR | 0o666, os.makedev(1, 3))\nexcept OSError as e: print('mknod', e.errno)\n",
			req: api.ExecuteRequest{ReturnFiles: []string{"out/*"}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if r.Stdout != "mknod 1\n" {
					t.Errorf("stdout %q, want mknod 1 (EPERM)", r.Stdout)
				}
				if r.Usage.DurationMs > 10000 {
					t.Errorf("run took %d ms", r.Usage.DurationMs)
				}
				return "mknod: EPERM; " + skipped(t, r, "fifo", "out/fifo") + "; " + skipped(t, r, "socket", "out/sock")
			}},
		{id: "A05a", cat: catFiles, title: "a sparse 1 TiB file, and a small sparse file among the returned files",
			expect: "RLIMIT_FSIZE refuses even a sparse 1 TiB file (EFBIG); a sparse file is reported, never read",
			code: "import json, os\nres = {}\nopen('huge.bin', 'w').close()\ntry: os.truncate('huge.bin', 1 << 40); res['1TiB'] = 'ok'\nexcept OSError as e: res['1TiB'] = e.errno\n" +
				"open('sparse.bin', 'w').close(); os.truncate('sparse.bin', 8 << 20)\nprint(json.dumps(res))\n",
			req: api.ExecuteRequest{ReturnFiles: []string{"sparse.bin"}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				return "truncate to 1 TiB: " + sameValues(t, got, []string{"1TiB"}, "27") + " (EFBIG); " + skipped(t, r, "sparse file", "sparse.bin")
			}},
		{id: "A05b", cat: catFiles, title: "a 1000-deep directory tree with a matching file at the bottom",
			expect: "the daemon answers promptly; the depth cap applies and a match beyond it is reported, not silently dropped",
			code:   "import os\np = ''\nfor _ in range(1000):\n    p += 'a/'; os.mkdir(p)\nopen(p + 'f', 'w').write('deep')\nopen('a/a/a/f', 'w').write('shallow')\n",
			req:    api.ExecuteRequest{ReturnFiles: []string{"**/f"}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				m := filesByPath(r)
				if f := m["a/a/a/f"]; content(t, f) != "shallow" {
					t.Errorf("a/a/a/f: %+v", f)
				}
				deep := "a/" + strings.Repeat("a/", 999) + "f"
				reported := false
				for _, f := range r.Files {
					if f.Path == deep || (f.Error != "" && strings.Contains(f.Error, "deep")) {
						reported = true
					}
				}
				if !reported {
					t.Errorf("the match at depth 1000 was neither returned nor reported (files: %d entries)", len(r.Files))
					return "shallow match returned; the match at depth 1000 was silently dropped (no entry says the walk was cut)"
				}
				return "shallow match returned; the match beyond the depth cap is reported"
			}},
		{id: "A05c", cat: catFiles, title: "100,000 files in the workspace, all requested back",
			expect: "file creation stops at the workspace's inode cap (ENOSPC); at most 256 files are returned and the rest reported; the daemon stays responsive",
			code:   "n = 0\nerr = None\nfor i in range(100_000):\n    try: open(f'f{i}', 'w').close(); n += 1\n    except OSError as e: err = e.errno; break\nprint(n, err)\n",
			req:    api.ExecuteRequest{ReturnFiles: []string{"**"}, Limits: &api.Limits{TimeoutMs: ptr(int64(60000))}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				var n, errno int
				if _, err := fmt.Sscan(r.Stdout, &n, &errno); err != nil || errno != 28 || n < 10000 || n > 16384 {
					t.Errorf("stdout %q, want ENOSPC (28) near the 16384-inode cap", r.Stdout)
				}
				returned, capped := 0, 0
				for _, f := range r.Files {
					switch {
					case f.Error == "":
						returned++
					case strings.Contains(f.Error, "more than 256 files"):
						capped++
					}
				}
				if returned != 256 || capped != len(r.Files)-256 {
					t.Errorf("%d returned, %d reported past the cap, %d entries", returned, capped, len(r.Files))
				}
				return "ENOSPC at the inode cap; 256 files returned, every other match reported as past the 256-file cap"
			}},
		{id: "A05d", cat: catFiles, title: "one file over 16 MiB and five of 15 MiB among the returned files",
			expect: "the file over 16 MiB is reported, not read; the 64 MiB total cap stops the fifth 15 MiB file",
			code:   "open('big.bin', 'wb').write(b'x' * (17 << 20))\nfor i in range(5): open(f'm{i}.bin', 'wb').write(b'y' * (15 << 20))\n",
			req:    api.ExecuteRequest{ReturnFiles: []string{"*.bin"}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				m := filesByPath(r)
				for i := range 4 {
					if f := m[fmt.Sprintf("m%d.bin", i)]; f.Error != "" || f.SizeBytes != 15<<20 {
						t.Errorf("m%d.bin: size %d error %q", i, f.SizeBytes, f.Error)
					}
				}
				return skipped(t, r, "larger than 16777216 bytes", "big.bin") + "; m0–m3 returned; " + skipped(t, r, "exceed 67108864 bytes in total", "m4.bin")
			}},
		{id: "A06", cat: catFiles, title: "hostile file names: invalid UTF-8, newline, leading dash, 255 bytes, RTL override",
			expect: "every name comes back as a well-formed JSON string (or the file is rejected); no decoding crash, no JSON or log injection",
			code:   "for n in (b'\\xc3.txt', b'a\\nb.txt', b'-rf', b'x' * 255, b'..\\xe2\\x80\\xae.txt'):\n    open(n, 'wb').write(b'1')\n",
			// "*" skips names that start with a dot, as a shell does.
			req: api.ExecuteRequest{ReturnFiles: []string{"*", ".*"}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				m := filesByPath(r)
				for _, p := range []string{"a\nb.txt", "-rf", strings.Repeat("x", 255), "..\u202e.txt"} {
					if f, ok := m[p]; !ok || content(t, f) != "1" {
						t.Errorf("%q: %+v (files %+v)", p, f, r.Files)
					}
				}
				for _, f := range r.Files {
					if !utf8.ValidString(f.Path) {
						t.Errorf("invalid UTF-8 in a returned path: %q", f.Path)
					}
				}
				bad, ok := m["\uFFFD.txt"]
				switch {
				case ok && bad.Error != "" && bad.ContentB64 == "":
					return "newline, dash, 255-byte and U+202E names returned verbatim as JSON strings; the invalid UTF-8 name is reported (shown with U+FFFD), not returned"
				case ok && content(t, bad) == "1":
					return "all 5 returned as valid JSON strings; newline, dash and U+202E names verbatim, invalid UTF-8 replaced by U+FFFD"
				}
				t.Errorf("the invalid UTF-8 name: %+v", bad)
				return "the invalid UTF-8 name is missing"
			}},
		{id: "A06b", cat: catFiles, title: "two names that differ only in invalid UTF-8 bytes",
			expect: "the two files stay distinguishable (escaped or encoded names, or rejected): a client must never get two files under one name",
			code:   "for n in (b'\\xc3.txt', b'\\xc4.txt'): open(n, 'wb').write(n)\n",
			req:    api.ExecuteRequest{ReturnFiles: []string{"*.txt"}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				seen := map[string]int{}
				rejected := 0
				for _, f := range r.Files {
					if f.Error != "" {
						rejected++ // reported, not returned: nothing to confuse
						continue
					}
					seen[f.Path]++
				}
				var dup []string
				for p, n := range seen {
					if n > 1 {
						dup = append(dup, fmt.Sprintf("%q ×%d", p, n))
					}
				}
				if len(dup) > 0 {
					t.Errorf("returned files share a path: %v", dup)
					return "both returned under the same path " + strings.Join(dup, ", ") + " (U+FFFD replacement is lossy)"
				}
				if rejected == len(r.Files) {
					return "both reported as not valid UTF-8, neither returned"
				}
				return fmt.Sprintf("%d returned under distinct names", len(r.Files)-rejected)
			}},
		{id: "A07", cat: catFiles, title: "a detached process swaps a returned file for a symlink to /etc/shadow in a loop",
			expect: "files are collected after every process of the run is dead: the file is returned as the run's own data or reported as a symlink, never host content",
			run: func(t *testing.T, h *hostile) string {
				r := h.exec(t, api.ExecuteRequest{Code: swapCode, ReturnFiles: []string{"out/*"}})
				wantStatus(t, r, "ok")
				noHostContent(t, h, r)
				for _, f := range r.Files {
					if f.Error == "" && content(t, f) != "regular" {
						t.Errorf("%s: %q", f.Path, content(t, f))
					}
					if f.Error != "" && !strings.Contains(f.Error, "symlink") {
						t.Errorf("%s: %q", f.Path, f.Error)
					}
				}
				return "no host content; out/ holds only the run's own file or a reported symlink"
			}},
		{id: "A08", cat: catFiles, title: "setuid and setgid bits on an output file",
			expect: "the jail may set them on its own file, but the workspace and /tmp are mounted nosuid and nodev, and the API returns no mode bits",
			code: `import json, os, subprocess
os.makedirs('out', exist_ok=True)
open('out/x', 'w').write('#!/bin/sh\nid -u\n')
os.chmod('out/x', 0o6755)
flags = lambda p: {'nosuid': bool(os.statvfs(p).f_flag & os.ST_NOSUID), 'nodev': bool(os.statvfs(p).f_flag & os.ST_NODEV)}
print(json.dumps({'mode': oct(os.stat('out/x').st_mode & 0o7777), 'workspace': flags('/workspace'), 'tmp': flags('/tmp'),
                  'euid_of_exec': subprocess.run(['./out/x'], capture_output=True, text=True).stdout.strip()}))
`,
			req: api.ExecuteRequest{ReturnFiles: []string{"out/x"}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				got := outJSON(t, r)
				if fmt.Sprint(got["workspace"]) != "map[nodev:true nosuid:true]" || fmt.Sprint(got["tmp"]) != "map[nodev:true nosuid:true]" {
					t.Errorf("mount flags: workspace %v tmp %v", got["workspace"], got["tmp"])
				}
				if got["euid_of_exec"] != "1000" {
					t.Errorf("the setuid file ran as uid %v", got["euid_of_exec"])
				}
				if f := filesByPath(r)["out/x"]; f.Error != "" || !strings.HasPrefix(content(t, f), "#!/bin/sh") {
					t.Errorf("out/x: %+v", f)
				}
				return fmt.Sprintf("chmod %v allowed; workspace and /tmp nosuid,nodev; it runs as uid 1000; returned as bytes only", got["mode"])
			}},
		pathCase("A09a", "files-in path ../../etc/cron.d/x", `{"code":"1","files":[{"path":"../../etc/cron.d/x","content_b64":"eA=="}]}`, "files[0].path"),
		pathCase("A09b", "files-in path /etc/x", `{"code":"1","files":[{"path":"/etc/x","content_b64":"eA=="}]}`, "files[0].path"),
		pathCase("A09c", "files-in path a/../../b", `{"code":"1","files":[{"path":"a/../../b","content_b64":"eA=="}]}`, "files[0].path"),
		pathCase("A09d", "files-in path with a NUL byte", `{"code":"1","files":[{"path":"a\u0000b","content_b64":"eA=="}]}`, "files[0].path"),
		pathCase("A09e", "files-in empty path", `{"code":"1","files":[{"path":"","content_b64":"eA=="}]}`, "files[0].path"),
		pathCase("A09f", "files-in path of 10,000 characters", `{"code":"1","files":[{"path":"`+strings.Repeat("x", 10000)+`","content_b64":"eA=="}]}`, "files[0].path"),
		pathCase("A09g", "files-in duplicate paths", `{"code":"1","files":[{"path":"a","content_b64":"eA=="},{"path":"a","content_b64":"eQ=="}]}`, "files[1].path"),
		pathCase("A09h", "files-in path 33 components deep", `{"code":"1","files":[{"path":"`+strings.Repeat("a/", 32)+`a","content_b64":""}]}`, "files[0].path"),
		pathCase("A09i", "1001 files-in entries", `{"code":"1","files":[`+strings.Repeat(`{"path":"x","content_b64":""},`, 1000)+`{"path":"y","content_b64":""}]}`, "files: has 1001 entries"),
		pathCase("A10a", "requested output path ../../etc/shadow", `{"code":"1","return_files":["../../etc/shadow"]}`, "return_files[0]"),
		pathCase("A10b", "requested output path /proc/self/environ", `{"code":"1","return_files":["/proc/self/environ"]}`, "return_files[0]"),
		pathCase("A10c", "requested output pattern **/../../etc", `{"code":"1","return_files":["**/../../etc"]}`, "return_files[0]"),
		pathCase("A10d", "requested output pattern with a malformed glob", `{"code":"1","return_files":["a/[z"]}`, "return_files[0]"),
		{id: "A11", cat: catFiles, title: "writes to the rootfs, and persistence into the next run",
			expect: "EROFS for every path, and the next run sees a pristine image",
			run: func(t *testing.T, h *hostile) string {
				paths := []string{"/usr/lib/python3/dist-packages/evil.pth", "/etc/profile.d/x.sh", "/hello", "/usr/lib/python3.13/os.py"}
				code := "import json\nres = {}\nfor p in " + pyList(paths) + ":\n    try: open(p, 'a').write('import os'); res[p] = 'WROTE'\n    except OSError as e: res[p] = e.errno\nprint(json.dumps(res))\n"
				r := h.exec(t, api.ExecuteRequest{Code: code})
				wantStatus(t, r, "ok")
				obs := sameValues(t, outJSON(t, r), paths, "30") + " (EROFS)"
				r = h.exec(t, api.ExecuteRequest{Code: "import json, os\nprint(json.dumps({p: os.path.exists(p) for p in " + pyList(paths[:3]) + "} | {'os.py': open('/usr/lib/python3.13/os.py').read().endswith('import os')}))\n"})
				got := outJSON(t, r)
				return obs + "; next run: " + sameValues(t, got, append(paths[:3:3], "os.py"), "false")
			}},
		{id: "A12", cat: catFiles, title: "user code forges and floods the runner's record channel (fd 4)",
			expect: "records are validated and clipped (type ≤ 256 B, message ≤ 4 KiB, line only within the code, result ≤ 64 KiB); a forged exit record cannot turn exit 0 into a signal; garbage is ignored",
			code: `import os, json
def w(o): os.write(4, (o if isinstance(o, bytes) else json.dumps(o).encode()) + b'\n')
w({"type": "exception", "exc_type": "Forged" * 100, "message": "m" * 50000, "line": 10**9})
w({"type": "result", "repr": "r" * 150000})
w({"type": "figure", "name": "../../../etc/shadow"})
w({"type": "exit", "signal": 9})
w(b'\xff\xfe not json')
w(b'{"type": "exception", "exc_type": "' + b'T' * 100000)
w(b'x' * (1 << 20))
print('done')
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if r.Signal != nil || r.ExitCode == nil || *r.ExitCode != 0 {
					t.Errorf("exit %v signal %v: a forged exit record changed the outcome", deref(r.ExitCode), deref(r.Signal))
				}
				if e := r.Error; e != nil && (len(e.Type) > 256 || len(e.Message) > 4096 || e.Line != nil) {
					t.Errorf("forged exception not clipped: type %d B, message %d B, line %v", len(e.Type), len(e.Message), deref(e.Line))
				}
				if r.Result != nil && len(*r.Result) > 64<<10+len("…") {
					t.Errorf("result of %d bytes", len(*r.Result))
				}
				if len(r.Figures) != 0 {
					t.Errorf("figures %+v", r.Figures)
				}
				return "exit 0 kept; forged exception clipped (type ≤ 256 B, message ≤ 4 KiB, line null); result ≤ 64 KiB; no figure; garbage ignored"
			}},
		{id: "A13", cat: catFiles, title: "a 10 MiB repr as the interactive result",
			expect: "the result is cut to 64 KiB (marked); stdout keeps the whole repr within output_bytes",
			code:   "'x' * (10 << 20)\n",
			req:    api.ExecuteRequest{LastLineInteractive: true, Limits: &api.Limits{OutputBytes: ptr(int64(16 << 20))}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if r.Result == nil || len(*r.Result) > 64<<10+len("…") || !strings.HasPrefix(*r.Result, "'xxx") {
					t.Errorf("result: %d bytes", len(deref2(r.Result)))
				}
				if len(r.Stdout) != 10<<20+3 {
					t.Errorf("stdout %d bytes, want the repr and a newline", len(r.Stdout))
				}
				return "result cut to ≤ 64 KiB; stdout has the full 10 MiB repr"
			}},
		{id: "A14", cat: catFiles, title: "forged figures: a symlink, a FIFO, a non-PNG and an oversized file in the figures directory",
			expect: "only a well-formed PNG of at most 8 MiB is returned; links and special files are not followed or opened blocking; the run ends promptly",
			code: `import os, struct, zlib
d = '/jaild/figures'
os.symlink('/etc/shadow', d + '/figure-1.png')
os.mkfifo(d + '/figure-2.png')
open(d + '/figure-3.png', 'w').write('not a png')
def chunk(t, b): return struct.pack('>I', len(b)) + t + b + struct.pack('>I', zlib.crc32(t + b))
png = b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', 1, 1, 8, 0, 0, 0, 0)) + chunk(b'IDAT', zlib.compress(b'\x00\x00')) + chunk(b'IEND', b'')
open(d + '/figure-4.png', 'wb').write(png)
with open(d + '/figure-5.png', 'wb') as f: f.write(png); f.write(b'\0' * (9 << 20))
print(sorted(os.listdir(d)))
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				var names []string
				for _, f := range r.Figures {
					names = append(names, f.Name)
				}
				if strings.Join(names, ",") != "figure-4.png" {
					t.Errorf("figures %v, want only figure-4.png", names)
				}
				if r.Usage.DurationMs > 10000 {
					t.Errorf("run took %d ms", r.Usage.DurationMs)
				}
				return "returned figures: " + strings.Join(names, ", ") + "; the symlink, FIFO, non-PNG and 9 MiB file were ignored"
			}},
		{id: "A17", cat: catFiles, title: "forged rich outputs: output-N.json files in the figures directory that are a symlink to /etc/shadow, a FIFO, 9 MiB, nested 100,000 deep, a PNG that is not one, a 200-byte MIME type, HTML as a list, 10,000 types; forged display and result records naming them and ../../etc/shadow",
			expect: "links and special files are not followed or opened blocking; oversized and malformed files are left out; a value that breaks its type's rule is dropped and the rest kept; at most 32 types per output; the run ends promptly",
			code: `import os, json, base64
d = '/jaild/figures'
def w(o): os.write(4, json.dumps(o).encode() + b'\n')
os.symlink('/etc/shadow', d + '/output-1.json')
os.mkfifo(d + '/output-2.json')
open(d + '/output-3.json', 'w').write('{"data": {"text/plain": "' + 'x' * (9 << 20) + '"}}')
open(d + '/output-4.json', 'w').write('[' * 100000)
open(d + '/output-5.json', 'w').write(json.dumps({"data": {"image/png": base64.b64encode(b"GIF89a").decode(), "x" * 200 + "/y": "v", "text/html": ["<b>", "</b>"], "text/plain": "five"}}))
open(d + '/output-6.json', 'w').write(json.dumps({"data": {f"text/x-{i}": "v" for i in range(10000)}}))
open(d + '/output-7.json', 'w').write(json.dumps({"data": {"text/plain": "seven"}, "metadata": {"m": "x" * (100 << 10)}}))
for n in range(1, 8):
    w({"type": "display", "name": f"output-{n}.json"})
w({"type": "display", "name": "../../etc/shadow"})
w({"type": "result", "repr": "forged", "name": "output-1.json"})
print('done')
`,
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				var got []string
				for _, o := range r.Outputs {
					var plain string
					_ = json.Unmarshal(o.Data["text/plain"], &plain)
					got = append(got, fmt.Sprintf("%s %d types %q metadata %d", o.OutputType, len(o.Data), plain, len(o.Metadata)))
				}
				want := []string{`display_data 1 types "five" metadata 0`, `display_data 32 types "" metadata 0`, `display_data 1 types "seven" metadata 0`, `execute_result 1 types "forged" metadata 0`}
				if !slices.Equal(got, want) {
					t.Errorf("outputs %q\nwant %q", got, want)
				}
				if r.Usage.DurationMs > 10000 {
					t.Errorf("run took %d ms", r.Usage.DurationMs)
				}
				return "outputs: output-5's text/plain alone, output-6 with 32 of its types, output-7 with its oversized metadata as {}, and the forged result as text; the link, FIFO, 9 MiB and nested files were left out"
			}},
		{id: "A15", cat: catFiles, title: "symlink loops and directory symlinks under a ** pattern",
			expect: "the walk does not follow links or loop; links are reported as symlinks; the real file is returned",
			code:   "import os\nos.symlink('loop', 'loop')\nos.makedirs('d/e')\nos.symlink('..', 'd/e/up'); os.symlink('/', 'd/root'); os.symlink('d', 'd2')\nopen('d/e/f.txt', 'w').write('ok')\n",
			req:    api.ExecuteRequest{ReturnFiles: []string{"**"}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				if f := filesByPath(r)["d/e/f.txt"]; content(t, f) != "ok" {
					t.Errorf("d/e/f.txt: %+v", f)
				}
				if len(r.Files) != 5 {
					t.Errorf("%d entries: %+v", len(r.Files), r.Files)
				}
				return skipped(t, r, "symlink", "d/e/up", "d/root", "d2", "loop") + "; d/e/f.txt returned"
			}},
		{id: "A16", cat: catFiles, title: "literal return paths through symlinked directories (etc -> /etc, me -> /proc/self)",
			expect: "nothing is read through the links: both are reported as missing",
			code:   "import os\nos.symlink('/etc', 'etc'); os.symlink('/proc/self', 'me')\n",
			req:    api.ExecuteRequest{ReturnFiles: []string{"etc/passwd", "me/environ"}},
			check: func(t *testing.T, r *api.ExecuteResponse) string {
				wantStatus(t, r, "ok")
				return skipped(t, r, "no such file", "etc/passwd", "me/environ")
			}},
	}
}

func deref2(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// pyList renders strings as a Python list literal.
func pyList(items []string) string {
	var q []string
	for _, s := range items {
		q = append(q, fmt.Sprintf("%q", s))
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// pathCase: a request with a hostile path is refused before anything is
// created, with the one error shape naming the field, and nothing appears
// on the host.
func pathCase(id, title, body, mentions string) hcase {
	return hcase{id: id, cat: catFiles, title: title,
		expect: "400 invalid_argument naming " + mentions + "; nothing is written anywhere",
		run: func(t *testing.T, h *hostile) string {
			before := dirNames("/etc/cron.d")
			status, e := h.errorCall(t, "POST", "/v1/execute", body)
			if status != 400 || e.Error.Type != "invalid_argument" || !strings.Contains(e.Error.Message, mentions) {
				t.Errorf("HTTP %d %+v, want 400 invalid_argument mentioning %q", status, e.Error, mentions)
			}
			for _, p := range []string{"/etc/x", "/b", "/etc/cron.d/x"} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s exists on the host", p)
				}
			}
			if d := diff(before, dirNames("/etc/cron.d")); d != "" {
				t.Errorf("/etc/cron.d changed: %s", d)
			}
			return fmt.Sprintf("HTTP %d %s naming %s", status, e.Error.Type, mentions)
		}}
}

// swapCode (A07) leaves a detached process that swaps out/data.txt for a
// symlink to /etc/shadow and back as fast as it can.
const swapCode = `import os, time
os.makedirs('out', exist_ok=True)
open('out/data.txt', 'w').write('regular')
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            try:
                os.rename('out/data.txt', 'out/tmp'); os.symlink('/etc/shadow', 'out/data.txt')
                os.unlink('out/data.txt'); os.rename('out/tmp', 'out/data.txt')
            except OSError: pass
    os._exit(0)
time.sleep(0.5)
print('main done')
`
