// Package bench measures jaild against bare python3, in one run on one
// machine: latency percentiles per workload, throughput at several
// concurrencies, daemon RSS and memory per warm jail, every figure also as
// a ratio to bare python3 started in the same rootfs (chroot); and files
// moved in and out of runs, inline against through the file store.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/daemontest"
)

// Config configures a benchmark run.
type Config struct {
	Jaild    string // path of the jaild binary
	ImageDir string // rootfs image directory
	Profile  string // seccomp profile
	Iter     int    // sequential runs per latency measurement
	PoolSize int    // warm jails kept by the warm daemon
	// Quick limits the run to print(1): its latency, back to back, and
	// its CPU per run (for comparing two builds quickly).
	Quick bool
	// PauseOnly limits the run to paused sessions.
	PauseOnly bool
	// SessionsOnly limits the run to the sessions' latencies (create, a
	// call, a command) and memory.
	SessionsOnly bool
	// Images are the images to time print(1) in, by name (each a
	// directory like ImageDir); none: the per-image table is left out.
	Images map[string]string
}

// Workload is one thing to time.
type Workload struct {
	Name     string `json:"name"`
	Endpoint string `json:"endpoint"` // /v1/execute or /v1/lint
	Body     []byte `json:"-"`
	Code     string `json:"-"` // for bare python3 (empty: not comparable)
}

// Stat is a latency distribution.
type Stat struct {
	P50, P95, P99 float64 // milliseconds
}

// Row is one workload measured in each mode.
type Row struct {
	Workload string `json:"workload"`
	Bare     *Stat  `json:"bare_python3,omitempty"`
	Cold     Stat   `json:"jaild_cold"`
	Warm     Stat   `json:"jaild_warm"`
}

// Throughput is print(1) runs per second at a concurrency.
type Throughput struct {
	Concurrency int     `json:"concurrency"`
	Bare        float64 `json:"bare_python3"`
	Cold        float64 `json:"jaild_cold"`
	Warm        float64 `json:"jaild_warm"`
}

// Report is the result of a run.
type Report struct {
	When           string       `json:"when"`
	Host           string       `json:"host"`
	Iterations     int          `json:"iterations"`
	Latency        []Row        `json:"latency"`
	Throughput     []Throughput `json:"throughput"`
	CPU            CPUs         `json:"cpu_per_run"`
	DaemonRSSBytes uint64       `json:"daemon_rss_bytes"`
	// WarmJailBytes is the memory charged to each idle warm jail's cgroup,
	// smallest first: plain jails, then preloaded ones.
	WarmJailBytes []uint64 `json:"idle_warm_jail_bytes"`
	Sessions      Sessions `json:"sessions"`
	Pause         Pause    `json:"paused_sessions"`
	Files         Files    `json:"files"`
	Images        []Image  `json:"images,omitempty"`
}

// Image is print(1) in one image: bare python3 in a chroot of it, and a
// daemon serving it cold and with a warm pool that preloads nothing; and
// the image's size on disk.
type Image struct {
	Name      string `json:"name"`
	SizeBytes int64  `json:"size_bytes"`
	Bare      Stat   `json:"bare_python3"`
	Cold      Stat   `json:"jaild_cold"`
	Warm      Stat   `json:"jaild_warm"`
}

// Sessions are the latencies of stateful sessions: POST /v1/sessions
// (its DELETE untimed) with and without a warm pool, and a call of x + 1
// in a live session.
type Sessions struct {
	CreateCold Stat `json:"create_cold"`
	CreateWarm Stat `json:"create_warm"`
	Call       Stat `json:"call_x_plus_1"`
	// Command is a foreground `echo hi` command in the same live session
	// (POST .../commands, timed by the client).
	Command Stat `json:"command_echo"`
	// PortProxy is a GET of a small file from python's http.server run
	// as a background command, through the daemon's port proxy, to its
	// response's head (timed by the client); PortInJail the same GET made
	// inside the session (a foreground command of python timing its own
	// requests): the proxy's cost is the difference.
	PortProxy  Stat `json:"port_proxy_get"`
	PortInJail Stat `json:"port_in_jail_get"`
	// TerminalOpen is GET .../pty to the shell's first prompt (the
	// WebSocket's handshake, the session thawed, the shell started);
	// TerminalEcho a key typed into the terminal to its echo back (the
	// WebSocket both ways, the pty, bash's line editor).
	TerminalOpen Stat `json:"terminal_open"`
	TerminalEcho Stat `json:"terminal_echo"`
}

func workloads() []Workload {
	lines := make([]string, 0, 300)
	for i := 0; i < 100; i++ {
		lines = append(lines, fmt.Sprintf("def f%d(x):", i), fmt.Sprintf("    y = x * %d", i), "    return y")
	}
	lint, _ := json.Marshal(map[string]string{"code": strings.Join(lines, "\n") + "\n"})
	exec := func(name, code string, extra string) Workload {
		body, _ := json.Marshal(map[string]any{"code": code})
		if extra != "" {
			body = []byte(extra)
		}
		return Workload{Name: name, Endpoint: "/v1/execute", Body: body, Code: code}
	}
	pandas := `import pandas as pd; print(pd.DataFrame({"a": range(1000)}).a.sum())`
	cpu := "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.2: pass\n"
	file := "open('out.bin', 'wb').write(b'x' * (1 << 20))\n"
	fileBody, _ := json.Marshal(map[string]any{"code": file, "return_files": []string{"out.bin"}})
	return []Workload{
		exec("print(1)", "print(1)", ""),
		exec("pandas snippet", pandas, ""),
		exec("200 ms CPU loop", cpu, ""),
		exec("return a 1 MiB file", file, string(fileBody)),
		{Name: "lint 300 lines", Endpoint: "/v1/lint", Body: lint},
	}
}

// Run performs the whole benchmark: bare python3 in a chroot of the
// image, a daemon without a pool (cold) and one with (warm), measured
// side by side in each phase.
func Run(ctx context.Context, cfg Config, log io.Writer) (*Report, error) {
	host, _ := os.Hostname()
	b := &bench{ctx: ctx, cfg: cfg, log: log, rep: &Report{When: time.Now().UTC().Format(time.RFC3339), Host: host, Iterations: cfg.Iter}}
	var err error
	if b.bare, err = newChroot(cfg.ImageDir); err != nil {
		return nil, err
	}
	defer b.bare.close()
	if b.cold, err = startDaemon(cfg, cfg.ImageDir, 0, false); err != nil {
		return nil, err
	}
	defer b.cold.stop()
	if b.warm, err = startDaemon(cfg, cfg.ImageDir, cfg.PoolSize, false); err != nil {
		return nil, err
	}
	defer b.warm.stop()
	// Filling the pool (numpy and pandas imports) must not overlap the
	// first measurements.
	b.warm.waitReady(ctx)
	phases := []func() error{b.latency, b.backToBack, b.cpu}
	if cfg.PauseOnly {
		phases = []func() error{b.pause}
	} else if cfg.SessionsOnly {
		phases = []func() error{b.sessionsAndMemory}
	} else if !cfg.Quick {
		phases = append(phases, b.throughput, b.sessionsAndMemory, b.pause, b.files, b.images)
	}
	for _, phase := range phases {
		if err := phase(); err != nil {
			return nil, err
		}
	}
	return b.rep, nil
}

// bench is one run of the benchmark: what it measures against and what it
// found so far.
type bench struct {
	ctx        context.Context
	cfg        Config
	log        io.Writer
	rep        *Report
	bare       *chroot
	cold, warm *daemon
}

// print1 is the print(1) workload.
func print1() Workload { return workloads()[0] }

// latency times each workload, one request at a time, bare, cold and
// warm (print(1) alone with Quick).
func (b *bench) latency() error {
	for _, w := range workloads() {
		if b.cfg.Quick && w.Name != "print(1)" {
			continue
		}
		fmt.Fprintf(b.log, "latency: %s\n", w.Name)
		row := Row{Workload: w.Name}
		var err error
		if w.Code != "" {
			s, err := measure(b.cfg.Iter, func() error { return b.bare.python(w.Code) })
			if err != nil {
				return fmt.Errorf("bare %s: %w", w.Name, err)
			}
			row.Bare = &s
		}
		if row.Cold, err = measure(b.cfg.Iter, func() error { return b.cold.call(w) }); err != nil {
			return fmt.Errorf("cold %s: %w", w.Name, err)
		}
		// Timed from request to response once a warm jail is ready: the
		// refill between requests is not part of a request's latency.
		if row.Warm, err = measureAfter(b.cfg.Iter, func() { b.warm.waitReady(b.ctx) }, func() error { return b.warm.call(w) }); err != nil {
			return fmt.Errorf("warm %s: %w", w.Name, err)
		}
		b.rep.Latency = append(b.rep.Latency, row)
	}
	return nil
}

// backToBack times print(1) from one client, the next request as soon as
// the last answered, the warm pool refilling as it can (the latency rows
// wait for a full pool before each warm request).
func (b *bench) backToBack() error {
	fmt.Fprintln(b.log, "latency: print(1) back to back")
	p := print1()
	row := Row{Workload: "print(1) back to back"}
	bare, err := measure(b.cfg.Iter, func() error { return b.bare.python(p.Code) })
	if err != nil {
		return fmt.Errorf("bare back to back: %w", err)
	}
	row.Bare = &bare
	if row.Cold, err = measure(b.cfg.Iter, func() error { return b.cold.call(p) }); err != nil {
		return fmt.Errorf("cold back to back: %w", err)
	}
	b.warm.waitReady(b.ctx)
	if row.Warm, err = measure(b.cfg.Iter, func() error { return b.warm.call(p) }); err != nil {
		return fmt.Errorf("warm back to back: %w", err)
	}
	b.rep.Latency = append(b.rep.Latency, row)
	return nil
}

// cpu measures the CPU each print(1) run costs, bare, cold and warm.
func (b *bench) cpu() error {
	fmt.Fprintln(b.log, "CPU per run: print(1)")
	var err error
	if b.rep.CPU.Bare, err = measureCPU(b.ctx, 2*b.cfg.Iter, b.bare, nil); err != nil {
		return fmt.Errorf("CPU, bare: %w", err)
	}
	if b.rep.CPU.Cold, err = measureCPU(b.ctx, 2*b.cfg.Iter, nil, b.cold); err != nil {
		return fmt.Errorf("CPU, cold: %w", err)
	}
	if b.rep.CPU.Warm, err = measureCPU(b.ctx, 2*b.cfg.Iter, nil, b.warm); err != nil {
		return fmt.Errorf("CPU, warm: %w", err)
	}
	return nil
}

// throughput runs print(1) at several concurrencies.
func (b *bench) throughput() error {
	p := print1()
	for _, c := range []int{1, 2, 8, 32} {
		fmt.Fprintf(b.log, "throughput: concurrency %d\n", c)
		n := max(4*c, 24)
		t := Throughput{Concurrency: c}
		var err error
		if t.Bare, err = throughput(c, n, func() error { return b.bare.python(p.Code) }); err != nil {
			return err
		}
		if t.Cold, err = throughput(c, n, func() error { return b.cold.call(p) }); err != nil {
			return err
		}
		b.warm.waitReady(b.ctx)
		if t.Warm, err = throughput(c, n, func() error { return b.warm.call(p) }); err != nil {
			return err
		}
		b.rep.Throughput = append(b.rep.Throughput, t)
	}
	return nil
}

// sessionsAndMemory times sessions, then reads the warm daemon's RSS and
// its pool's jails' memory.
func (b *bench) sessionsAndMemory() error {
	fmt.Fprintln(b.log, "sessions")
	var err error
	if b.rep.Sessions, err = sessions(b.ctx, b.cfg.Iter, b.cold, b.warm); err != nil {
		return err
	}
	b.warm.waitReady(b.ctx)
	b.rep.DaemonRSSBytes = procStatus(b.warm.Pid(), "VmRSS:")
	// Only the pool's jails: the sessions' are torn down in the background.
	name := "bench-" + filepath.Base(b.warm.Dir)
	for deadline := time.Now().Add(30 * time.Second); len(warmJailMemory(name)) > 2*b.cfg.PoolSize && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	b.rep.WarmJailBytes = warmJailMemory(name)
	return nil
}

// files moves files inline and through the store. It comes after the RSS
// above: the heap the daemon keeps after moving 100 MiB files must not
// count in it.
func (b *bench) files() error {
	fmt.Fprintln(b.log, "files: inline and through the store")
	var err error
	b.rep.Files, err = benchFiles(b.ctx, b.cfg.Iter, b.warm)
	return err
}

// images times print(1) in each image, one daemon at a time (the cold and
// warm daemons stopped first).
func (b *bench) images() error {
	b.cold.stop()
	b.warm.stop()
	for _, name := range slices.Sorted(maps.Keys(b.cfg.Images)) {
		fmt.Fprintf(b.log, "image %s: print(1)\n", name)
		im, err := benchImage(b.ctx, b.cfg, name, b.cfg.Images[name])
		if err != nil {
			return fmt.Errorf("image %s: %w", name, err)
		}
		b.rep.Images = append(b.rep.Images, im)
	}
	return nil
}

// benchImage times print(1) in one image, one daemon at a time.
func benchImage(ctx context.Context, cfg Config, name, dir string) (Image, error) {
	im := Image{Name: name}
	fi, err := os.Stat(filepath.Join(dir, "rootfs.squashfs"))
	if err != nil {
		return im, err
	}
	im.SizeBytes = fi.Size()
	print1 := workloads()[0]
	bare, err := newChroot(dir)
	if err != nil {
		return im, err
	}
	defer bare.close()
	if im.Bare, err = measure(cfg.Iter, func() error { return bare.python(print1.Code) }); err != nil {
		return im, fmt.Errorf("bare: %w", err)
	}
	cold, err := startDaemon(cfg, dir, 0, true)
	if err != nil {
		return im, err
	}
	defer cold.stop()
	if im.Cold, err = measure(cfg.Iter, func() error { return cold.call(print1) }); err != nil {
		return im, fmt.Errorf("cold: %w", err)
	}
	cold.stop()
	warm, err := startDaemon(cfg, dir, 1, true)
	if err != nil {
		return im, err
	}
	defer warm.stop()
	warm.waitReady(ctx)
	if im.Warm, err = measureAfter(cfg.Iter, func() { warm.waitReady(ctx) }, func() error { return warm.call(print1) }); err != nil {
		return im, fmt.Errorf("warm: %w", err)
	}
	return im, nil
}

// sessions times session creation on both daemons and calls in one live
// session of the warm one.
func sessions(ctx context.Context, n int, cold, warm *daemon) (Sessions, error) {
	var out Sessions
	var err error
	var id string
	create := func(d *daemon) func() error {
		return func() error {
			var e error
			id, e = d.createSession()
			return e
		}
	}
	end := func(d *daemon) func() {
		return func() {
			if id != "" {
				d.deleteSession(id)
				id = ""
			}
		}
	}
	if out.CreateCold, err = measureAfter(n, end(cold), create(cold)); err != nil {
		return out, fmt.Errorf("session create (cold): %w", err)
	}
	end(cold)()
	if out.CreateWarm, err = measureAfter(n, func() { end(warm)(); warm.waitReady(ctx) }, create(warm)); err != nil {
		return out, fmt.Errorf("session create (warm): %w", err)
	}
	end(warm)()
	warm.waitReady(ctx)
	if id, err = warm.createSession(); err != nil {
		return out, err
	}
	defer end(warm)()
	if err := warm.sessionCall(id, "x = 1"); err != nil {
		return out, err
	}
	if out.Call, err = measure(n, func() error { return warm.sessionCall(id, "x + 1") }); err != nil {
		return out, err
	}
	if out.Command, err = measure(n, func() error {
		_, err := warm.postJSON("/v1/sessions/"+id+"/commands", `{"cmd": "echo hi"}`, http.StatusOK, "command_id")
		return err
	}); err != nil {
		return out, err
	}
	if out.PortProxy, out.PortInJail, err = warm.portLatency(id, n); err != nil {
		return out, err
	}
	out.TerminalOpen, out.TerminalEcho, err = warm.terminalLatency(ctx, id, n)
	return out, err
}

// terminalLatency times n terminals opened to their shell's prompt, and
// n keys typed into one to their echo.
func (d *daemon) terminalLatency(ctx context.Context, id string, n int) (open, echo Stat, err error) {
	c := client.New(d.Socket)
	defer c.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	// until reads the terminal until its output holds want.
	until := func(t *client.Terminal, want string) error {
		var seen []byte
		for !bytes.Contains(seen, []byte(want)) {
			out, exit, err := t.Next(ctx)
			if err != nil {
				return err
			}
			if exit != nil {
				return fmt.Errorf("the shell ended (%s) before %q", exit.Status, want)
			}
			seen = append(seen, out...)
		}
		return nil
	}
	var term *client.Terminal
	if open, err = measureAfter(n, func() {
		if term != nil {
			_ = term.Close()
			term = nil
		}
	}, func() error {
		var err error
		if term, err = c.Terminal(ctx, id, client.TerminalOptions{}); err != nil {
			return err
		}
		return until(term, "$ ")
	}); err != nil {
		return open, echo, fmt.Errorf("terminal open: %w", err)
	}
	defer func() {
		if term != nil {
			_ = term.Close()
		}
	}()
	i := 0
	echo, err = measureAfter(n, func() {
		if i%50 == 0 {
			_ = term.Send(ctx, []byte{0x15}) // Ctrl-U: an empty line again
		}
	}, func() error {
		key := string(rune('a' + i%26))
		i++
		if err := term.Send(ctx, []byte(key)); err != nil {
			return err
		}
		return until(term, key)
	})
	if err != nil {
		return open, echo, fmt.Errorf("terminal echo: %w", err)
	}
	return open, echo, nil
}

// inJailGets is a foreground command's program: n GETs of
// http://127.0.0.1:8000/f.txt from inside the session, each timed to its
// response's head; it prints their times in ms, sorted, space-separated.
const inJailGets = `import http.client, sys, time
n = int(sys.argv[1])
ts = []
for _ in range(n):
    c = http.client.HTTPConnection('127.0.0.1', 8000)
    t = time.perf_counter()
    c.request('GET', '/f.txt')
    r = c.getresponse()
    ts.append((time.perf_counter() - t) * 1000)
    r.read()
    c.close()
print(' '.join('%.3f' % x for x in sorted(ts)))
`

// portLatency starts python's http.server in session id as a background
// command and times n GETs through the port proxy and n inside the jail.
func (d *daemon) portLatency(id string, n int) (proxy, inJail Stat, err error) {
	if err := d.sessionCall(id, "open('f.txt', 'w').write('x' * 100)"); err != nil {
		return proxy, inJail, err
	}
	cid, err := d.postJSON("/v1/sessions/"+id+"/commands", `{"argv": ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"], "background": true}`, http.StatusAccepted, "command_id")
	if err != nil {
		return proxy, inJail, err
	}
	defer d.del("/v1/sessions/" + id + "/commands/" + cid)
	get := func() error {
		resp, err := d.Client.Get("http://jaild/v1/sessions/" + id + "/ports/8000/f.txt")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET through the port proxy: HTTP %d", resp.StatusCode)
		}
		return nil
	}
	for deadline := time.Now().Add(30 * time.Second); get() != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			return proxy, inJail, errors.New("the session's http.server did not answer within 30 s")
		}
	}
	if proxy, err = measure(n, get); err != nil {
		return proxy, inJail, err
	}
	body, _ := json.Marshal(map[string]any{"argv": []string{"python3", "-c", inJailGets, strconv.Itoa(n)}, "timeout_ms": 60000})
	resp, err := d.Client.Post("http://jaild/v1/sessions/"+id+"/commands", "application/json", bytes.NewReader(body))
	if err != nil {
		return proxy, inJail, err
	}
	defer resp.Body.Close()
	var r struct {
		Status, Stdout, Stderr string
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "ok" {
		return proxy, inJail, fmt.Errorf("the in-jail GETs: %v %+v", err, r)
	}
	var ds []float64
	for _, f := range strings.Fields(r.Stdout) {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return proxy, inJail, fmt.Errorf("the in-jail GETs printed %q", r.Stdout)
		}
		ds = append(ds, v)
	}
	return proxy, stats(ds), nil
}

func (d *daemon) createSession() (string, error) { return d.createSessionWith("{}") }

// createSessionWith creates a session with body, a POST /v1/sessions.
func (d *daemon) createSessionWith(body string) (string, error) {
	resp, err := d.Client.Post("http://jaild/v1/sessions", "application/json", strings.NewReader(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var s struct {
		ID string `json:"session_id"`
	}
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(answer, &s) != nil || s.ID == "" {
		return "", fmt.Errorf("create session: HTTP %d: %.300s", resp.StatusCode, answer)
	}
	return s.ID, nil
}

func (d *daemon) deleteSession(id string) {
	req, _ := http.NewRequest(http.MethodDelete, "http://jaild/v1/sessions/"+id, nil)
	if resp, err := d.Client.Do(req); err == nil {
		resp.Body.Close()
	}
}

func (d *daemon) sessionCall(id, code string) error {
	body, _ := json.Marshal(map[string]string{"code": code})
	resp, err := d.Client.Post("http://jaild/v1/sessions/"+id+"/execute", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"status":"ok"`)) {
		return fmt.Errorf("session call: HTTP %d: %.300s", resp.StatusCode, b)
	}
	return nil
}

func measure(n int, f func() error) (Stat, error) { return measureAfter(n, func() {}, f) }

// measureAfter times f n times, calling the untimed setup before each.
func measureAfter(n int, setup func(), f func() error) (Stat, error) {
	var ds []float64
	for i := 0; i < n; i++ {
		setup()
		start := time.Now()
		if err := f(); err != nil {
			return Stat{}, err
		}
		ds = append(ds, float64(time.Since(start).Microseconds())/1000)
	}
	slices.Sort(ds)
	pct := func(p float64) float64 { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return Stat{P50: pct(0.50), P95: pct(0.95), P99: pct(0.99)}, nil
}

func throughput(conc, n int, f func() error) (float64, error) {
	var wg sync.WaitGroup
	jobs := make(chan struct{}, n)
	for i := 0; i < n; i++ {
		jobs <- struct{}{}
	}
	close(jobs)
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for i := 0; i < conc; i++ {
		wg.Go(func() {
			for range jobs {
				if err := f(); err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), firstErr
}

// chroot runs bare python3 in the mounted image.
type chroot struct{ dir string }

func newChroot(imageDir string) (*chroot, error) {
	dir, err := os.MkdirTemp("", "jailbench-root-")
	if err != nil {
		return nil, err
	}
	c := &chroot{dir: dir}
	cmds := [][]string{
		{"mount", "-t", "squashfs", "-o", "loop,ro", filepath.Join(imageDir, "rootfs.squashfs"), dir},
		{"mount", "-t", "tmpfs", "tmpfs", dir + "/tmp"},
		{"mount", "-t", "proc", "proc", dir + "/proc"},
		{"mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", dir + "/dev"},
		{"touch", dir + "/dev/null"},
		{"mount", "--bind", "/dev/null", dir + "/dev/null"},
	}
	for _, a := range cmds {
		if out, err := exec.Command(a[0], a[1:]...).CombinedOutput(); err != nil {
			c.close()
			return nil, fmt.Errorf("%v: %v: %s", a, err, out)
		}
	}
	return c, nil
}

func (c *chroot) python(code string) error {
	cmd := exec.Command("/usr/bin/python3", "-c", code)
	cmd.SysProcAttr = &unix.SysProcAttr{Chroot: c.dir}
	cmd.Dir = "/tmp" // writable, like the workspace
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", "MPLBACKEND=Agg"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	return nil
}

func (c *chroot) close() {
	_ = exec.Command("umount", "-R", c.dir).Run()
	_ = os.Remove(c.dir)
}

// daemon is a jaild started for the benchmark.
type daemon struct {
	*daemontest.Daemon
	pool int
}

// startDaemon starts jaild on image with a warm pool of pool jails of each
// kind; noPreload: the preloaded ones import nothing (an image without
// numpy and pandas).
func startDaemon(cfg Config, image string, pool int, noPreload bool) (*daemon, error) {
	preload := ""
	if noPreload {
		preload = "preimport = []\n"
	}
	d, err := daemontest.Start(daemontest.Options{
		Binary: cfg.Jaild, Image: image, Profile: cfg.Profile, Name: "bench", DirPrefix: "jb",
		DirMode: 0o711, // jails reach run_dir as an unprivileged uid
		Config: fmt.Sprintf(`socket_group = ""
host_id_base = %d
[admission]
max_concurrent = 32
queue_size = 256
queue_wait = "60s"
rate_per_minute = 0
daily_quota = 0

[sessions]
# A parent and its fork into 4 (the paused sessions' phase).
max_per_uid = 8
`, 1_500_000_000+pool*70000),
		Pool: pool, PoolConfig: preload, Conns: 64,
		Ready: func(d *daemontest.Daemon) bool {
			status, _, err := d.Get("/v1/health")
			return err == nil && status != 0
		},
	})
	if err != nil {
		return nil, fmt.Errorf("jaild did not start: %w", err)
	}
	return &daemon{Daemon: d, pool: pool}, nil
}

func (d *daemon) call(w Workload) error {
	resp, err := d.Client.Post("http://jaild"+w.Endpoint, "application/json", bytes.NewReader(w.Body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)
	}
	if w.Endpoint == "/v1/execute" && !bytes.Contains(body, []byte(`"status":"ok"`)) {
		return fmt.Errorf("run failed: %.300s", body)
	}
	return nil
}

// waitReady waits (up to a minute) until the warm pool is full (both
// kinds), so that a sequential measurement times the warm path, not the
// refill.
func (d *daemon) waitReady(ctx context.Context) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(10 * time.Millisecond) {
		if full, err := d.poolState(); full || err != nil {
			return // full, or the daemon is gone: the next request says so
		}
	}
}

func (d *daemon) stop() { _ = d.Stop() }

// procStatus reads a size field of /proc/PID/status ("VmRSS:") in bytes.
func procStatus(pid int, key string) uint64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == key {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// warmJailMemory lists, smallest first, the memory charged to each idle
// warm jail's cgroup (cgroup v1 memory.usage_in_bytes or v2
// memory.current).
func warmJailMemory(name string) []uint64 {
	own, _ := os.ReadFile("/proc/self/cgroup")
	var files []string
	for _, line := range strings.Split(string(own), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[1] == "memory":
			files, _ = filepath.Glob(filepath.Join("/sys/fs/cgroup/memory", parts[2], name, "*", "memory.usage_in_bytes"))
		case parts[0] == "0" && len(files) == 0:
			files, _ = filepath.Glob(filepath.Join("/sys/fs/cgroup", parts[2], name, "*", "memory.current"))
		}
	}
	var out []uint64
	for _, f := range files {
		b, _ := os.ReadFile(f)
		v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
