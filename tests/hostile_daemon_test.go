package tests

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

// rawExchange writes req on a fresh connection and reads until the daemon
// answers or closes, for at most limit. It returns the response's status
// line ("" if the daemon closed without one) and how long that took.
func (h *hostile) rawExchange(t *testing.T, req string, limit time.Duration) (status string, body string, took time.Duration) {
	t.Helper()
	c, err := net.Dial("unix", h.d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(start.Add(limit))
	data, _ := io.ReadAll(c)
	took = time.Since(start)
	if line, rest, ok := strings.Cut(string(data), "\r\n"); ok {
		status = line
		_, body, _ = strings.Cut(rest, "\r\n\r\n")
	}
	return status, body, took
}

// unprivileged is a tiny program run as uid 65534: it opens n connections
// to a socket, prints how many it holds (or the first dial error) and
// keeps them open for a while. It is built from source at test time.
const unprivilegedSrc = `package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

func main() {
	n, _ := strconv.Atoi(os.Args[2])
	hold, _ := time.ParseDuration(os.Args[3])
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("unix", os.Args[1], 5*time.Second)
		if err != nil {
			fmt.Println("dial error:", err)
			break
		}
		conns = append(conns, c)
	}
	fmt.Println("held", len(conns))
	time.Sleep(hold)
}
`

var (
	helperOnce sync.Once
	helperPath string
	helperErr  error
)

// unprivilegedHelper builds the helper once, into a directory uid 65534
// can read.
func unprivilegedHelper(t *testing.T) string {
	t.Helper()
	helperOnce.Do(func() {
		dir, err := os.MkdirTemp("", "jaild-helper-")
		if err != nil {
			helperErr = err
			return
		}
		os.Chmod(dir, 0o755)
		src := filepath.Join(dir, "main.go")
		if helperErr = os.WriteFile(src, []byte(unprivilegedSrc), 0o644); helperErr != nil {
			return
		}
		helperPath = filepath.Join(dir, "holdconns")
		cmd := exec.Command("go", "build", "-o", helperPath, src)
		cmd.Env = append(os.Environ(), "GO111MODULE=off", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			helperErr = fmt.Errorf("build the helper: %v\n%s", err, out)
		}
	})
	if helperErr != nil {
		t.Fatal(helperErr)
	}
	return helperPath
}

// holdConns runs the helper as uid 65534 and returns once it holds its
// connections (or failed), with its first output line.
func holdConns(t *testing.T, socket string, n int, hold time.Duration) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(unprivilegedHelper(t), socket, strconv.Itoa(n), hold.String())
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	return cmd, strings.TrimSpace(line)
}

// errCase: a body the daemon must refuse with the one error shape.
func errCase(id, title, method, path, body string, status int, typ, mentions string) hcase {
	return hcase{id: id, cat: catDaemon, title: title,
		expect: fmt.Sprintf("%d %s naming %s; the daemon stays up", status, typ, mentions),
		run: func(t *testing.T, h *hostile) string {
			var b any
			if body != "" {
				b = body
			}
			got, e := h.errorCall(t, method, path, b)
			if got != status || e.Error.Type != typ || !strings.Contains(e.Error.Message, mentions) {
				t.Errorf("HTTP %d %+v, want %d %s mentioning %q", got, e.Error, status, typ, mentions)
			}
			return fmt.Sprintf("HTTP %d %s naming %s", got, e.Error.Type, mentions)
		}}
}

func daemonCases() []hcase {
	cases := []hcase{
		{id: "H01", cat: catDaemon, title: "slowloris: 100 connections sending their headers a byte at a time, while another client runs code",
			expect: "the other client is served at normal speed; the daemon closes every slow connection at its header deadline",
			run:    runSlowloris},
		{id: "H01b", cat: catDaemon, title: "one unprivileged uid opens 1100 idle connections, then another client calls the daemon",
			expect: "one caller cannot take every connection slot: another client is answered within 3 s",
			run:    runConnSlots},
		{id: "H02a", cat: catDaemon, title: "a 1 GiB code string, streamed",
			expect: "413 too_large after at most max_body_bytes (4 MiB) is read; the daemon's RSS stays flat",
			run:    runHugeBody},
		errCase("H02b", "truncated JSON body", "POST", "/v1/execute", `{"code":`, 400, "invalid_argument", "truncated"),
		errCase("H02c", "body of bytes \\xff\\xfe\\x00", "POST", "/v1/execute", "\xff\xfe\x00", 400, "invalid_argument", "JSON"),
		errCase("H02d", "[ nested 100,000 deep", "POST", "/v1/execute", strings.Repeat("[", 100000), 400, "invalid_argument", "body"),
		errCase("H02e", "a number out of range: timeout_ms 1e999", "POST", "/v1/execute", `{"code":"print(1)","limits":{"timeout_ms":1e999}}`, 400, "invalid_argument", "limits.timeout_ms"),
		errCase("H02f", "an unknown field", "POST", "/v1/execute", `{"code":"print(1)","nope":1}`, 400, "invalid_argument", "nope"),
		errCase("H02g", "trailing garbage after the object", "POST", "/v1/execute", `{"code":"print(1)"} {"code":"import os"}`, 400, "invalid_argument", "trailing"),
		{id: "H02h", cat: catDaemon, title: "a chunked body that never ends, while another client runs code",
			expect: "the daemon gives up at its read deadline (read_timeout 5 s) with a 4xx or a close; the other client is served meanwhile",
			run: func(t *testing.T, h *hostile) string {
				return h.stalledBody(t, "POST /v1/execute HTTP/1.1\r\nHost: jaild\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n", "1\r\n \r\n")
			}},
		{id: "H02i", cat: catDaemon, title: "a 100 KiB request header",
			expect: "431 and a close, at once",
			run: func(t *testing.T, h *hostile) string {
				status, _, took := h.rawExchange(t, "GET /v1/health HTTP/1.1\r\nHost: jaild\r\nX-Flood: "+strings.Repeat("a", 100<<10)+"\r\n\r\n", 10*time.Second)
				if !strings.Contains(status, " 431 ") || took > 5*time.Second {
					t.Errorf("status line %q after %v", status, took)
				}
				return status
			}},
		{id: "H02j", cat: catDaemon, title: "Content-Length 100, 10 bytes sent, then silence, while another client runs code",
			expect: "the daemon gives up at its read deadline with a 4xx or a close; the other client is served meanwhile",
			run: func(t *testing.T, h *hostile) string {
				return h.stalledBody(t, "POST /v1/execute HTTP/1.1\r\nHost: jaild\r\nContent-Length: 100\r\n\r\n{\"code\":\"", "")
			}},
		errCase("H02k", "a JSON string instead of an object", "POST", "/v1/execute", `"print(1)"`, 400, "invalid_argument", "body"),
		errCase("H02l", "a JSON null body", "POST", "/v1/execute", `null`, 400, "invalid_argument", "code"),
		errCase("H02m", "an empty body", "POST", "/v1/execute", ``, 400, "invalid_argument", "body is empty"),
		{id: "H03", cat: catDaemon, title: "500 concurrent execute requests of time.sleep(5)",
			expect: "at most max_concurrent (2) run at once; the rest are queued within bounds or answered 503 busy with Retry-After; every accepted run completes; no EMFILE",
			run:    runBurst},
		{id: "H03b", cat: catDaemon, title: "500 concurrent GET /v1/info",
			expect: "every one is answered 200",
			run: func(t *testing.T, h *hostile) string {
				var wg sync.WaitGroup
				var ok atomic.Int64
				client := burstClient(h.d)
				for range 500 {
					wg.Go(func() {
						resp, err := client.Get("http://jaild/v1/info")
						if err == nil {
							if resp.StatusCode == 200 {
								ok.Add(1)
							}
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					})
				}
				wg.Wait()
				client.CloseIdleConnections()
				if ok.Load() != 500 {
					t.Errorf("%d of 500 answered 200", ok.Load())
				}
				return fmt.Sprintf("%d of 500 answered 200", ok.Load())
			}},
		{id: "H04", cat: catDaemon, title: "the client disconnects mid-run",
			expect: "the run is killed within about a second (bound: 2.5 s) and cleaned up",
			run:    runDisconnect},
		{id: "H05", cat: catDaemon, title: "kill -9 of the daemon with two runs in flight and one queued, then a restart",
			expect: "the start-up sweep removes every leftover: processes, cgroups, mounts, state and run directories; the restarted daemon serves",
			run:    runCrashRestart},
		{id: "H06a", cat: catDaemon, title: "an unprivileged uid connects to a socket with the default-like mode 0600",
			expect: "EACCES from the socket's permissions",
			run: func(t *testing.T, h *hostile) string {
				d := startDaemon(t, daemontest.Options{Config: "socket_mode = \"0600\"\n"})
				defer func() {
					if err := d.Stop(); err != nil {
						t.Error(err)
					}
				}()
				cmd, line := holdConns(t, d.Socket, 1, 0)
				cmd.Wait()
				if !strings.Contains(line, "permission denied") {
					t.Errorf("uid 65534 on a 0600 socket: %q", line)
				}
				return "uid 65534: connect: permission denied"
			}},
		{id: "H06b", cat: catDaemon, title: "an unprivileged uid on an open socket",
			expect: "SO_PEERCRED identifies it as uid 65534, not an admin: the callers' maxima apply (a higher limit is refused), and its quota is reported",
			run: func(t *testing.T, h *hostile) string {
				status, _, body := curlAs(t, h.d.Socket, "GET", "/v1/info", "")
				var info api.Info
				if err := json.Unmarshal(body, &info); err != nil || status != 200 || info.Caller.UID != 65534 || info.Caller.Admin {
					t.Errorf("info as uid 65534: HTTP %d caller %+v (%v)", status, info.Caller, err)
				}
				status, _, body = curlAs(t, h.d.Socket, "POST", "/v1/execute", `{"code":"print(1)","limits":{"memory_mb":4096}}`)
				if status != 400 || !strings.Contains(string(body), "above the maximum of 2048") {
					t.Errorf("memory_mb 4096 as uid 65534: HTTP %d %s", status, body)
				}
				status, hdr, body := curlAs(t, h.d.Socket, "POST", "/v1/execute", `{"code":"print(1)"}`)
				var r api.ExecuteResponse
				json.Unmarshal(body, &r)
				h.noteRun(r.RunID)
				if status != 200 || r.Stdout != "1\n" || hdr.Get(api.QuotaHeader) == "" {
					t.Errorf("print(1) as uid 65534: HTTP %d quota %q %s", status, hdr.Get(api.QuotaHeader), body)
				}
				return "caller uid 65534, admin false; memory_mb 4096 refused (maximum 2048); runs with a quota header"
			}},
		errCase("H07a", "a negative limit", "POST", "/v1/execute", `{"code":"print(1)","limits":{"timeout_ms":-5}}`, 400, "invalid_argument", "limits.timeout_ms"),
		errCase("H07b", "a zero limit", "POST", "/v1/execute", `{"code":"print(1)","limits":{"memory_mb":0}}`, 400, "invalid_argument", "limits.memory_mb"),
		errCase("H07c", "a huge limit (10^18 pids)", "POST", "/v1/execute", `{"code":"print(1)","limits":{"pids":1000000000000000000}}`, 400, "invalid_argument", "above the maximum"),
		errCase("H07d", "a limit of the wrong type", "POST", "/v1/execute", `{"code":"print(1)","limits":{"pids":"many"}}`, 400, "invalid_argument", "limits.pids"),
		errCase("H07e", "a fractional limit", "POST", "/v1/execute", `{"code":"print(1)","limits":{"timeout_ms":1.5}}`, 400, "invalid_argument", "limits.timeout_ms"),
		errCase("H07f", "an unknown limit (cpu_ms)", "POST", "/v1/execute", `{"code":"print(1)","limits":{"cpu_ms":5}}`, 400, "invalid_argument", "cpu_ms"),
		errCase("H07g", "a limit past int64 (2^63)", "POST", "/v1/execute", `{"code":"print(1)","limits":{"memory_mb":9223372036854775808}}`, 400, "invalid_argument", "limits.memory_mb"),
		{id: "H08", cat: catDaemon, title: "lint with a hostile pyproject.toml, ruff.toml and user config next to the code",
			expect: "ruff runs --isolated in a fresh jail: no configuration is read (plain ruff in the same workspace obeys it), and nothing persists into /v1/lint",
			run:    runHostileRuffConfig},
		rootfsCase("H09a", "/dev/null is a symlink", "/dev is not empty"),
		rootfsCase("H09b", "/proc is a symlink", "/proc"),
		rootfsCase("H09c", "/dev is a symlink", "/dev"),
		errCase("H10a", "code of 1 MiB + 1 byte", "POST", "/v1/execute", `{"code":"`+strings.Repeat("#", 1<<20+1)+`"}`, 400, "invalid_argument", "maximum is 1048576"),
		errCase("H10b", "code with a NUL byte", "POST", "/v1/execute", `{"code":"print(1)\u0000"}`, 400, "invalid_argument", "NUL"),
		errCase("H10c", "empty code", "POST", "/v1/execute", `{"code":""}`, 400, "invalid_argument", "code"),
		errCase("H10d", "65 return_files patterns", "POST", "/v1/execute", `{"code":"1","return_files":[`+strings.TrimSuffix(strings.Repeat(`"a",`, 65), ",")+`]}`, 400, "invalid_argument", "return_files"),
		errCase("H10e", "65 env variables", "POST", "/v1/execute", `{"code":"1","env":{`+envVars(65)+`}}`, 400, "invalid_argument", "64"),
		errCase("H10f", "env LD_PRELOAD", "POST", "/v1/execute", `{"code":"1","env":{"LD_PRELOAD":"/tmp/x.so"}}`, 400, "invalid_argument", "LD_PRELOAD"),
		errCase("H10g", "env PYTHONSTARTUP", "POST", "/v1/execute", `{"code":"1","env":{"PYTHONSTARTUP":"/tmp/x.py"}}`, 400, "invalid_argument", "PYTHONSTARTUP"),
		errCase("H10h", "env PATH override", "POST", "/v1/execute", `{"code":"1","env":{"PATH":"/tmp"}}`, 400, "invalid_argument", "PATH"),
		errCase("H10i", "env value with a NUL byte", "POST", "/v1/execute", `{"code":"1","env":{"A":"x\u0000y"}}`, 400, "invalid_argument", "NUL"),
		errCase("H10j", "env value of 4097 bytes", "POST", "/v1/execute", `{"code":"1","env":{"A":"`+strings.Repeat("v", 4097)+`"}}`, 400, "invalid_argument", "4096"),
		errCase("H10k", "a body over max_body_bytes", "POST", "/v1/execute", `{"code":"`+strings.Repeat("x", 5<<20)+`"}`, 413, "too_large", "4194304"),
		{id: "H11", cat: catDaemon, title: "2000 connections opened and dropped without a request",
			expect: "the daemon keeps serving and its fds return to the baseline",
			run: func(t *testing.T, h *hostile) string {
				for range 2000 {
					c, err := net.Dial("unix", h.d.Socket)
					if err != nil {
						t.Fatal(err)
					}
					c.Close()
				}
				h.print1(t)
				return "served afterwards; fds back to the baseline (leak checks)"
			}},
		{id: "H12a", cat: catDaemon, title: "path traversal in the URL: GET /v1/info/../../etc/passwd",
			expect: "404 not_found in the one error shape",
			run: func(t *testing.T, h *hostile) string {
				status, body, _ := h.rawExchange(t, "GET /v1/info/../../etc/passwd HTTP/1.1\r\nHost: jaild\r\nConnection: close\r\n\r\n", 10*time.Second)
				var e api.ErrorBody
				json.Unmarshal([]byte(body), &e)
				if !strings.Contains(status, " 404 ") || e.Error.Type != "not_found" || strings.Contains(body, "root:") {
					t.Errorf("%q %q", status, body)
				}
				return status + ", " + e.Error.Type
			}},
		errCase("H12b", "a wrong method: DELETE /v1/execute", "DELETE", "/v1/execute", "", 405, "method_not_allowed", "POST"),
		{id: "H13", cat: catDaemon, title: "a return_files pattern of 31 ** components over a 12-deep directory",
			expect: "collection stays bounded: the response arrives within seconds, with the daemon idle again",
			run:    runGlobBomb},
		{id: "H12c", cat: catDaemon, title: "a garbage request line",
			expect: "400 and a close",
			run: func(t *testing.T, h *hostile) string {
				status, _, took := h.rawExchange(t, "\x00\xffGARBAGE / HTTP/9.9\r\n\r\n", 10*time.Second)
				if !strings.Contains(status, " 400 ") || took > 5*time.Second {
					t.Errorf("status %q after %v", status, took)
				}
				return status
			}},
	}
	return cases
}

// caseDaemon starts a daemon of a case's own, whose jails the leak checks
// take for the case's while it runs (h.extraParents); end, which the case
// defers, forgets them and stops the daemon if the case has not.
func (h *hostile) caseDaemon(t *testing.T) (d *daemon, cg *jailCgroups, end func()) {
	t.Helper()
	d = startDaemon(t, daemontest.Options{})
	cg, err := cgroupsOf(d)
	if err != nil {
		t.Fatal(err)
	}
	h.extraParents = []string{cg.rel}
	return d, cg, func() {
		h.extraParents = nil
		_ = d.Stop() // a no-op after the case's own Stop, whose error it checked
	}
}

// runGlobBomb runs against a daemon of its own: if matching backtracks
// without bound, that daemon is pinned, so it is killed and swept after.
func runGlobBomb(t *testing.T, h *hostile) string {
	d, _, end := h.caseDaemon(t)
	defer end()
	pattern := strings.Repeat("**/", 31) + "nomatch"
	body, _ := json.Marshal(api.ExecuteRequest{Code: "import os\nos.makedirs('a/' * 12)\nopen('a/' * 12 + 'f', 'w').close()", ReturnFiles: []string{pattern}})
	client := burstClient(d)
	client.Timeout = 30 * time.Second
	start := time.Now()
	resp, err := client.Post("http://jaild/v1/execute", "application/json", bytes.NewReader(body))
	var obs string
	if err == nil {
		resp.Body.Close()
		obs = fmt.Sprintf("HTTP %d within 30 s", resp.StatusCode)
	} else {
		cpu := func() int64 {
			f := strings.Fields(string(must(os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.Cmd.Process.Pid)))))
			u, _ := strconv.ParseInt(f[13], 10, 64)
			s, _ := strconv.ParseInt(f[14], 10, 64)
			return u + s
		}
		c0 := cpu()
		time.Sleep(3 * time.Second)
		busy := float64(cpu()-c0) / 100 / 3 // clock ticks of 10 ms
		t.Errorf("no response %v after the request (%v); the daemon is %.0f%% busy", time.Since(start).Round(time.Second), err, busy*100)
		obs = "no response within 30 s, and the daemon keeps a core busy matching one file name against the pattern (exponential backtracking over **)"
	}
	// Kill it (a pinned daemon would never stop), restart to sweep, stop.
	d.Kill()
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(); err != nil {
		t.Error(err)
	}
	return obs
}

func must[T any](v T, _ error) T { return v }

func envVars(n int) string {
	var kv []string
	for i := range n {
		kv = append(kv, fmt.Sprintf(`"V%d":"x"`, i))
	}
	return strings.Join(kv, ",")
}

// burstClient makes a new connection per request (no pooling limits).
func burstClient(d *daemon) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", d.Socket)
		},
		MaxIdleConnsPerHost: 1,
	}}
}

func runSlowloris(t *testing.T, h *hostile) string {
	const n = 100
	var closed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range n {
		c, err := net.Dial("unix", h.d.Socket)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "POST /v1/execute HTTP/1.1\r\nHost: jaild\r\nX-Slow: ")
		wg.Go(func() {
			defer c.Close()
			done := make(chan struct{})
			go func() { io.Copy(io.Discard, c); close(done) }() // EOF: the daemon closed it
			for {
				select {
				case <-done:
					closed.Add(1)
					return
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
					c.Write([]byte("a"))
				}
			}
		})
	}
	start := time.Now()
	r := h.print1(t)
	h.noteRun(r.RunID)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("print(1) took %v with %d slow connections open", took, n)
	}
	// The daemon's header deadline is 10 s.
	deadline := time.Now().Add(25 * time.Second)
	for closed.Load() < n && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if closed.Load() != n {
		t.Errorf("%d of %d slow connections closed by the daemon within 25 s", closed.Load(), n)
	}
	return fmt.Sprintf("print(1) served meanwhile; %d of %d slow connections closed by the daemon", closed.Load(), n)
}

func runConnSlots(t *testing.T, h *hostile) string {
	cmd, line := holdConns(t, h.d.Socket, 1100, 15*time.Second)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if line != "held 1100" {
		t.Fatalf("helper: %q", line)
	}
	time.Sleep(500 * time.Millisecond) // let the daemon accept what it will
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://jaild/v1/health", nil)
	start := time.Now()
	resp, err := burstClient(h.d).Do(req)
	if err != nil {
		t.Errorf("with 1100 connections held by uid 65534, another client got no answer within 3 s: %v", err)
		return "another client got no answer within 3 s: one uid holding connections takes every slot (1024, global)"
	}
	resp.Body.Close()
	t.Logf("answered in %v", time.Since(start))
	return fmt.Sprintf("another client answered HTTP %d within 3 s", resp.StatusCode)
}

func runHugeBody(t *testing.T, h *hostile) string {
	c, err := net.Dial("unix", h.d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = 1 << 30
	fmt.Fprintf(c, "POST /v1/execute HTTP/1.1\r\nHost: jaild\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{\"code\":\"", size+len(`{"code":""}`))
	var sent atomic.Int64
	go func() {
		chunk := bytes.Repeat([]byte("x"), 1<<20)
		for sent.Load() < size {
			n, err := c.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	var e api.ErrorBody
	json.Unmarshal(body, &e)
	if resp.StatusCode != 413 || e.Error.Type != "too_large" {
		t.Errorf("HTTP %d %s", resp.StatusCode, body)
	}
	if s := sent.Load(); s > 64<<20 {
		t.Errorf("the daemon read %d MiB before refusing", s>>20)
	}
	return fmt.Sprintf("HTTP %d %s before 64 MiB of the 1 GiB were sent", resp.StatusCode, e.Error.Type)
}

// stalledBody sends a request whose body never completes and checks that
// the daemon gives up at its read deadline while serving others.
func (h *hostile) stalledBody(t *testing.T, head, trickle string) string {
	c, err := net.Dial("unix", h.d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	io.WriteString(c, head)
	stop := make(chan struct{})
	defer close(stop)
	if trickle != "" {
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Second):
					if _, err := io.WriteString(c, trickle); err != nil {
						return
					}
				}
			}
		}()
	}
	r := h.print1(t)
	h.noteRun(r.RunID)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	data, _ := io.ReadAll(c)
	took := time.Since(start)
	status, _, _ := strings.Cut(string(data), "\r\n")
	if took > 20*time.Second || (status != "" && !strings.Contains(status, " 4")) {
		t.Errorf("after %v: %q", took, status)
	}
	if status == "" {
		status = "a close"
	}
	return "print(1) served meanwhile; the daemon ended the stalled request with " + status
}

func runBurst(t *testing.T, h *hostile) string {
	const n = 500
	statuses := make([]int, n)
	retry := make([]string, n)
	bodies := make([]api.ExecuteResponse, n)
	client := burstClient(h.d)
	var maxRunning atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			var info api.Info
			resp, err := client.Get("http://jaild/v1/info")
			if err != nil {
				continue
			}
			json.NewDecoder(resp.Body).Decode(&info)
			resp.Body.Close()
			if v := int64(info.Capacity.Running); v > maxRunning.Load() {
				maxRunning.Store(v)
			}
		}
	}()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := client.Post("http://jaild/v1/execute", "application/json",
				strings.NewReader(`{"code":"import time\ntime.sleep(5)\nprint(`+strconv.Itoa(i)+`)"}`))
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			statuses[i], retry[i] = resp.StatusCode, resp.Header.Get("Retry-After")
			data, _ := io.ReadAll(resp.Body)
			if resp.StatusCode == 200 {
				if err := strictJSON(data, &bodies[i]); err != nil {
					t.Errorf("request %d: %v", i, err)
				}
				h.noteRun(bodies[i].RunID)
			}
		})
	}
	wg.Wait()
	close(stop)
	client.CloseIdleConnections()
	ok, busy := checkBurst(t, statuses, bodies, retry)
	if ok < 2 || ok > 4+4 || busy != n-ok || maxRunning.Load() > 2 {
		t.Errorf("%d ok, %d busy, at most %d running at once", ok, busy, maxRunning.Load())
	}
	return fmt.Sprintf("at most %d running at once; the accepted runs completed ok; every other request 503 busy with Retry-After", maxRunning.Load())
}

func runDisconnect(t *testing.T, h *hostile) string {
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://jaild/v1/execute",
		strings.NewReader(`{"code":"open('started', 'w').close()\nimport time\ntime.sleep(60)","limits":{"timeout_ms":60000}}`))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := burstClient(h.d).Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	id := h.waitMarker(t, "started")
	h.noteRun(id)
	procs := filepath.Join(h.cg.memory, id, "cgroup.procs")
	start := time.Now()
	cancel()
	<-done
	for {
		b, err := os.ReadFile(procs)
		if err != nil || len(bytes.TrimSpace(b)) == 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("the run's processes were gone %v after the disconnect", took)
	if took > 2500*time.Millisecond {
		t.Errorf("the run died %v after the disconnect, want about a second", took)
		return fmt.Sprintf("the run died only %v after the disconnect", took.Round(100*time.Millisecond))
	}
	return "the run's processes are gone within 2.5 s of the disconnect"
}

// sweepLeft names something a restarted daemon's sweep has not removed
// yet: a live cgroup of one of cgIDs, a run or state directory or a mount
// of one of dirIDs, or a jail process outside the live jails' cgroups;
// "" when nothing is left.
func (h *hostile) sweepLeft(d *daemon, cg *jailCgroups, cgIDs, dirIDs []string) string {
	why := ""
	live := cg.live()
	for _, id := range cgIDs {
		if live[id] {
			why = "cgroup " + id
		}
	}
	for _, id := range dirIDs {
		for _, sub := range []string{"runs", "state"} {
			if _, err := os.Lstat(filepath.Join(d.Dir, "run", sub, id)); err == nil {
				why = sub + "/" + id
			}
		}
		for _, m := range mountinfo() {
			if strings.Contains(m.point, id) {
				why = "mount " + m.point
			}
		}
	}
	if bad := h.jailProcsOutside(); len(bad) > 0 {
		why = strings.Join(bad, "; ")
	}
	return why
}

func runCrashRestart(t *testing.T, h *hostile) string {
	d, cg, end := h.caseDaemon(t)
	defer end()
	runs := filepath.Join(d.Dir, "run", "runs")
	for i := range 3 {
		go func() {
			body := fmt.Sprintf(`{"code":"open('m%d', 'w').close()\nimport time\ntime.sleep(120)","limits":{"timeout_ms":120000},"files":[{"path":"in/data.txt","content_b64":"aGVsbG8="}]}`, i)
			if resp, err := burstClient(d).Post("http://jaild/v1/execute", "application/json", strings.NewReader(body)); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitFor(t, 30*time.Second, "two runs to start", func() bool {
		m, _ := filepath.Glob(filepath.Join(runs, "*", "work", "m*"))
		return len(m) == 2
	})
	old := cg.live()
	oldDirs := dirNames(runs)
	if err := d.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.Exited()
	if len(dirNames(runs)) == 0 || len(jailPids()) == 0 {
		t.Fatalf("after kill -9 the runs should be orphaned")
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	var why string
	waitFor(t, 60*time.Second, "the sweep", func() bool {
		why = h.sweepLeft(d, cg, sortedKeys(old), oldDirs)
		return why == ""
	})
	var r api.ExecuteResponse
	if status, _ := d.call(t, "POST", "/v1/execute", `{"code":"print(1)"}`, &r); status != 200 || r.Stdout != "1\n" {
		t.Errorf("after restart: HTTP %d %+v", status, r)
	}
	if err := d.Stop(); err != nil {
		t.Error(err)
	}
	obs := fmt.Sprintf("%d orphaned jails swept at restart (processes, cgroups, mounts, state, run dirs); print(1) served", len(old))
	var left []string
	for _, p := range cg.parents {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("cgroup directory %s left after a clean stop", p)
			rel, _ := filepath.Rel("/sys/fs/cgroup", p)
			left = append(left, strings.SplitN(rel, "/", 2)[0])
		}
	}
	for _, m := range mountinfo() {
		if strings.HasPrefix(m.point, d.Dir) {
			t.Errorf("mount %s left after a clean stop", m.point)
			left = append(left, "mount "+m.point)
		}
	}
	if len(left) > 0 {
		return obs + "; after a clean stop the daemon's jail cgroup directory is left in: " + strings.Join(left, ", ")
	}
	return obs + "; nothing left after a clean stop"
}

func runHostileRuffConfig(t *testing.T, h *hostile) string {
	const code = "import os\n\n\ndef f():\n    return 1\n"
	hostile := "line-length = 10\nextend = \"/etc/passwd\"\n[lint]\nselect = [\"E501\"]\n"
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	r := h.exec(t, api.ExecuteRequest{Code: `import os, subprocess
os.makedirs('/tmp/.config/ruff', exist_ok=True)
open('/tmp/.config/ruff/ruff.toml', 'w').write(open('ruff.toml').read())
def ruff(*args):
    p = subprocess.run(['ruff', 'check', '--no-cache', '--output-format', 'concise', *args, '--stdin-filename', 'main.py', '-'],
                       input=open('main.py').read(), capture_output=True, text=True)
    return p.stdout + p.stderr
print('PLAIN', ruff())
print('ISOLATED', ruff('--isolated', '--select', 'ALL'))
`, Files: []api.FileIn{{Path: "main.py", ContentB64: b64(code)}, {Path: "pyproject.toml", ContentB64: b64("[tool.ruff]\n" + strings.ReplaceAll(hostile, "[lint]", "[tool.ruff.lint]"))}, {Path: "ruff.toml", ContentB64: b64(hostile)}, {Path: ".ruff.toml", ContentB64: b64(hostile)}}, Limits: &api.Limits{TimeoutMs: ptr(int64(30000))}})
	wantStatus(t, r, "ok")
	plain, isolated, _ := strings.Cut(r.Stdout, "ISOLATED")
	if strings.Contains(isolated, "E501") || !strings.Contains(isolated, "F401") {
		t.Errorf("ruff --isolated obeyed the workspace's configuration:\n%s", isolated)
	}
	if !strings.Contains(plain, "E501") && !strings.Contains(plain, "passwd") {
		t.Errorf("control: plain ruff did not read the hostile configuration:\n%s", plain)
	}
	var lr api.LintResponse
	if status, _ := h.d.call(t, "POST", "/v1/lint", api.LintRequest{Code: code}, &lr); status != 200 {
		t.Fatalf("lint: HTTP %d", status)
	}
	var codes []string
	for _, d := range lr.Diagnostics {
		codes = append(codes, d.Code)
	}
	if strings.Contains(strings.Join(codes, " "), "E501") || !strings.Contains(strings.Join(codes, " "), "F401") {
		t.Errorf("/v1/lint diagnostics %v", codes)
	}
	return "plain ruff in that workspace obeys the hostile config; ruff --isolated and /v1/lint do not (F401 found, no E501 at line-length 10)"
}

// rootfsCase: the daemon refuses to start on an image whose tree is
// hostile (cf. runc CVE-2025-31133), and leaves nothing mounted.
func rootfsCase(id, what, mentions string) hcase {
	return hcase{id: id, cat: catDaemon, title: "start the daemon on a rootfs where " + what,
		expect: "jaild refuses to start, naming the path; nothing stays mounted (a valid image of the same shape starts)",
		run: func(t *testing.T, h *hostile) string {
			dir := t.TempDir()
			if id == "H09a" {
				// Control: the same tiny image without the defect starts.
				if log, served, _ := startOnImage(t, tinyImage(t, filepath.Join(dir, "ok"), "")); !served {
					t.Fatalf("a valid tiny image was refused:\n%s", log)
				}
			}
			log, served, mounts := startOnImage(t, tinyImage(t, filepath.Join(dir, "bad"), id))
			if served || !strings.Contains(log, mentions) {
				t.Errorf("the daemon on a rootfs where %s: served %v\n%s", what, served, log)
			}
			if len(mounts) > 0 {
				t.Errorf("left mounted: %v", mounts)
			}
			line := strings.TrimSpace(log)
			if i := strings.LastIndex(line, "\n"); i >= 0 {
				line = line[i+1:]
			}
			if _, msg, ok := strings.Cut(line, "invalid rootfs image: "); ok {
				line = msg
			}
			return "refused to start: " + line + "; nothing left mounted"
		}}
}

// tinyImage builds a minimal image (squashfs and manifest) of the shape
// the daemon validates, with the defect of case id.
func tinyImage(t *testing.T, dir, id string) string {
	t.Helper()
	tree := filepath.Join(dir, "tree")
	for _, d := range []string{"dev", "proc", "sys", "tmp", "workspace", "jaild", "etc", "usr/bin", "opt/jaild"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"etc/hostname", "etc/hosts", "etc/machine-id", "etc/passwd", "opt/jaild/runner.py", "opt/jaild/init"} {
		if err := os.WriteFile(filepath.Join(tree, f), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	switch id {
	case "H09a":
		os.Symlink("/dev/null", filepath.Join(tree, "dev", "null"))
	case "H09b":
		os.Remove(filepath.Join(tree, "proc"))
		os.Symlink("/", filepath.Join(tree, "proc"))
	case "H09c":
		os.Remove(filepath.Join(tree, "dev"))
		os.Symlink("/", filepath.Join(tree, "dev"))
	}
	img := filepath.Join(dir, "rootfs.squashfs")
	if out, err := exec.Command("mksquashfs", tree, img, "-noappend", "-quiet", "-no-progress").CombinedOutput(); err != nil {
		t.Fatalf("mksquashfs: %v\n%s", err, out)
	}
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	m, _ := json.Marshal(map[string]any{"schema": 1, "name": "tiny", "recipe_digest": "sha256:" + strings.Repeat("0", 64),
		"image_digest": "sha256:" + hex.EncodeToString(sum[:]), "image_size_bytes": len(data), "python_version": "3.13.0",
		"debian_suite": "none", "packages": []any{}, "python_packages": map[string]string{}, "runner": "/opt/jaild/runner.py", "init": "/opt/jaild/init", "built_at": "2026-01-01T00:00:00Z"})
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), m, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startOnImage starts jaild on an image without a warm pool, and reports
// its log, whether it served, and the mounts it left in its directory.
// A daemon that serves is stopped at once.
func startOnImage(t *testing.T, image string) (log string, served bool, mounts []string) {
	t.Helper()
	d, err := prepareDaemon(daemontest.Options{Tune: func(cfg string) string {
		return strings.Replace(cfg, fmt.Sprintf("image = %q", imageDir), fmt.Sprintf("image = %q", image), 1)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(d.Dir)
	if err := d.Start(); err == nil {
		served = true
		if err := d.Stop(); err != nil {
			t.Error(err)
		}
	}
	for _, m := range mountinfo() {
		if strings.HasPrefix(m.point, d.Dir+"/") {
			mounts = append(mounts, m.point)
		}
	}
	return d.Log.String(), served, mounts
}
