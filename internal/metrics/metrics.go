// Package metrics is jaild's Prometheus instrumentation: one private
// registry with the daemon's counters, histograms and gauges, fed by the
// server at the end of each request and read from the daemon's state at
// scrape time, and served in the text exposition format.
//
// Every label has a bounded set of values: operations, run statuses and
// error classes are closed enums of the code; no run id, session id or
// uid is ever a label.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The operations that run code, as the label operation names them.
const (
	OpExecute        = "execute"
	OpSessionExecute = "session_execute"
	OpLint           = "lint"
	OpFormat         = "format"
)

// Pool is the warm pool's state (see run.PoolStats).
type Pool struct {
	Size, Ready, PlainSize, PlainReady int
	// Refill and PlainRefill time the creations of each kind of jail.
	Refill, PlainRefill Refills
}

// Refills time the creations of one kind of warm jail: a histogram (see
// pool.Refills) and the creations that failed.
type Refills struct {
	Count   uint64             // jails made
	Sum     float64            // seconds they took together
	Buckets map[float64]uint64 // upper bound in seconds → jails made within it (cumulative)
	Failed  uint64
}

// Jails are the jail engine's counts (see jail.JailCounts).
type Jails struct {
	Alive                                  int64
	TeardownFailures, Swept, EgressRefused uint64
}

// Sources are the daemon's state read at each scrape. A nil source has
// no gauges (Store is nil when the file store is disabled).
type Sources struct {
	Admission func() (running, queued int)
	Pool      func() Pool
	Sessions  func() (live, running int)
	// SessionMemory is the memory limits of the sessions live and being
	// made, and their bound.
	SessionMemory func() (reserved, limit int64)
	// SessionTotals are the sessions made and ended (by reason) since the
	// start; SessionEndReasons every reason there is (another one is
	// counted as "other", so the label stays bounded).
	SessionTotals     func() (created uint64, ended map[string]uint64)
	SessionEndReasons []string
	Store             func() (bytes int64, files int)
	Memory            func() (inUse, budget int64)
	Jails             func() Jails
	// Images are the images served now (at most 33: the default and
	// config.MaxImages more, so the labels stay bounded).
	Images func() []Image
	// Reload is the outcome of the last reload (SIGHUP) and when the
	// configuration last loaded (the start, or the last good reload).
	Reload func() (ok bool, lastSuccess time.Time)
	// TLSRefused counts the TLS listener's refused handshakes.
	TLSRefused func() uint64
}

// Image is an image the daemon serves.
type Image struct {
	Name, Digest string
	Default      bool
}

// Run is what the server knows of a run at its end.
type Run struct {
	Status string // the run's status (spec.Status)
	Warm   bool   // served by a warm jail
	// Pooled: the run could have been served by the pool (a one-shot
	// run; a session's call runs in the session's jail), so it counts
	// as a hit or a miss.
	Pooled bool
	// QueueWait is the time spent in admission; JailStart the time to
	// have a jail ready (0: not measured, for a session's call);
	// Duration the run's own wall time; Total the whole request's.
	QueueWait, JailStart, Duration, Total time.Duration
	// EgressSent and EgressReceived are the run's network traffic.
	EgressSent, EgressReceived uint64
}

// Metrics holds the registry and the instruments the server feeds.
// Its methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	runs            *prometheus.CounterVec
	rejections      *prometheus.CounterVec
	queueWait       *prometheus.HistogramVec
	jailStart       *prometheus.HistogramVec
	runDuration     *prometheus.HistogramVec
	requestDuration *prometheus.HistogramVec
	poolHits        prometheus.Counter
	poolMisses      prometheus.Counter
	egress          *prometheus.CounterVec
	connRefused     *prometheus.CounterVec
	commands        *prometheus.CounterVec
	commandBytes    *prometheus.CounterVec
	terminalBytes   *prometheus.CounterVec
	portBytes       *prometheus.CounterVec
}

// Buckets in seconds. Queue waits are bounded by admission.queue_wait
// (seconds); a warm jail is taken in microseconds and a cold one starts
// in tens of milliseconds; runs last up to the timeout maxima (minutes).
var (
	queueBuckets = []float64{0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
	startBuckets = []float64{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}
	runBuckets   = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}
)

// statuses are spec.Status's values, created at zero so that a rate over
// them has a series from the start.
var statuses = []string{"ok", "error", "timeout", "memory_limit", "cpu_limit", "output_limit", "killed"}

// New returns the daemon's metrics over src, with the Go runtime's and
// the process's collectors.
func New(src Sources) *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jaild_runs_total",
			Help: "Runs that ended with a result, by operation, status and whether a warm jail served them.",
		}, []string{"operation", "status", "warm"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jaild_rejections_total",
			Help: "Requests refused or failed without a result, by operation and error type (busy, rate_limited, invalid_argument, ...).",
		}, []string{"operation", "reason"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jaild_queue_wait_seconds", Help: "Time a run waited for admission.", Buckets: queueBuckets,
		}, []string{"operation"}),
		jailStart: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jaild_jail_start_seconds", Help: "Time to have a jail ready for a one-shot run: taken from the warm pool or started cold.", Buckets: startBuckets,
		}, []string{"warm"}),
		runDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jaild_run_duration_seconds", Help: "Wall time of the code's run in its jail.", Buckets: runBuckets,
		}, []string{"operation"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jaild_request_duration_seconds", Help: "Total time of a request that ran, from its arrival to its result.", Buckets: runBuckets,
		}, []string{"operation"}),
		poolHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jaild_pool_hits_total", Help: "One-shot runs served by a warm jail.",
		}),
		poolMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "jaild_pool_misses_total", Help: "One-shot runs that needed a cold jail.",
		}),
		egress: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jaild_egress_bytes_total", Help: "Network traffic of runs with egress, by direction (sent: from the jail).",
		}, []string{"direction"}),
		connRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jaild_connections_refused_total",
			Help: "Connections to the TLS listener or metrics_listen closed by their bounds, by listener (tls, metrics) and reason (evicted: silent, closed to make room; full: no room; max_connections; client_connections).",
		}, []string{"listener", "reason"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jaild_session_commands_total",
			Help: "Commands run in sessions, by kind (foreground, background, terminal) and status (background and terminal: started, or how a terminal's shell ended).",
		}, []string{"kind", "status"}),
		commandBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jaild_session_command_output_bytes_total",
			Help: "Output of foreground session commands returned to callers, by kind (stdout, stderr).",
		}, []string{"kind"}),
		terminalBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jaild_session_terminal_bytes_total",
			Help: "Bytes relayed through sessions' terminals, by direction (sent: typed into the jail; received: its output).",
		}, []string{"direction"}),
		portBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jaild_session_port_bytes_total",
			Help: "Bytes proxied to sessions' ports, by direction (sent: to the jail; received: from it).",
		}, []string{"direction"}),
	}
	m.reg.MustRegister(m.runs, m.rejections, m.queueWait, m.jailStart, m.runDuration, m.requestDuration,
		m.poolHits, m.poolMisses, m.egress, m.connRefused, m.commands, m.commandBytes, m.terminalBytes, m.portBytes,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, op := range []string{OpExecute, OpSessionExecute, OpLint, OpFormat} {
		for _, st := range statuses {
			m.runs.WithLabelValues(op, st, "false")
			m.runs.WithLabelValues(op, st, "true")
		}
	}
	m.egress.WithLabelValues("sent")
	m.egress.WithLabelValues("received")
	for _, st := range statuses {
		m.commands.WithLabelValues("foreground", st)
	}
	m.commands.WithLabelValues("background", "started")
	m.commands.WithLabelValues("terminal", "started")
	m.terminalBytes.WithLabelValues("sent")
	m.terminalBytes.WithLabelValues("received")
	m.commandBytes.WithLabelValues("stdout")
	m.commandBytes.WithLabelValues("stderr")
	m.portBytes.WithLabelValues("sent")
	m.portBytes.WithLabelValues("received")
	m.gauges(src)
	return m
}

func (m *Metrics) gauges(src Sources) {
	gauge := func(name, help string, f func() float64) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
	}
	if f := src.Admission; f != nil {
		gauge("jaild_admission_running", "Runs holding an admission slot.", func() float64 { r, _ := f(); return float64(r) })
		gauge("jaild_admission_queued", "Runs waiting for an admission slot.", func() float64 { _, q := f(); return float64(q) })
	}
	if f := src.Pool; f != nil {
		gauge("jaild_pool_size", "Target number of preloaded warm jails.", func() float64 { return float64(f().Size) })
		gauge("jaild_pool_ready", "Preloaded warm jails ready to serve a run.", func() float64 { return float64(f().Ready) })
		gauge("jaild_pool_plain_size", "Target number of plain warm jails (lint, format, commands).", func() float64 { return float64(f().PlainSize) })
		gauge("jaild_pool_plain_ready", "Plain warm jails ready to serve a run.", func() float64 { return float64(f().PlainReady) })
		m.reg.MustRegister(refillCollector(f))
	}
	if f := src.Sessions; f != nil {
		gauge("jaild_sessions_live", "Sessions not ended (idle or running a call).", func() float64 { l, _ := f(); return float64(l) })
		gauge("jaild_sessions_running", "Sessions running a call.", func() float64 { _, r := f(); return float64(r) })
	}
	if f := src.SessionMemory; f != nil {
		gauge("jaild_sessions_memory_reserved_bytes", "Memory limits of the sessions live and being made, all callers' (sessions.max_memory_total_mb bounds it).", func() float64 { r, _ := f(); return float64(r) })
		gauge("jaild_sessions_memory_limit_bytes", "The bound on the memory limits of all live sessions (sessions.max_memory_total_mb).", func() float64 { _, l := f(); return float64(l) })
	}
	if f := src.SessionTotals; f != nil {
		m.reg.MustRegister(&sessionTotals{f: f, reasons: src.SessionEndReasons,
			created: prometheus.NewDesc("jaild_sessions_created_total", "Sessions made.", nil, nil),
			ended:   prometheus.NewDesc("jaild_sessions_ended_total", "Sessions ended, by reason (deleted, idle_timeout, expired, jail_ended, ...; other for any reason not listed).", []string{"reason"}, nil),
		})
	}
	if f := src.Store; f != nil {
		gauge("jaild_store_bytes", "Bytes of the files in the file store.", func() float64 { b, _ := f(); return float64(b) })
		gauge("jaild_store_files", "Files in the file store.", func() float64 { _, n := f(); return float64(n) })
	}
	if f := src.Jails; f != nil {
		gauge("jaild_jails_alive", "Jails that exist now: runs', sessions' and warm ones.", func() float64 { return float64(f().Alive) })
		counter := func(name, help string, v func() float64) {
			m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, v))
		}
		counter("jaild_jail_teardown_failures_total", "Jail teardowns that failed or overran their deadline (their host id range stays out of use until they end).", func() float64 { return float64(f().TeardownFailures) })
		counter("jaild_sweep_jails_total", "Jails of a predecessor (a killed daemon) removed by the start-up sweep.", func() float64 { return float64(f().Swept) })
		counter("jaild_egress_refused_packets_total", "Packets of runs with egress refused: to a denied destination, to the host other than the run's resolver, past the run's connection bound or outside its allowlist. A refused UDP datagram is one; a refused TCP connection is its SYN and any retry.", func() float64 { return float64(f().EgressRefused) })
	}
	if f := src.Images; f != nil {
		m.reg.MustRegister(&imageInfo{f: f, desc: prometheus.NewDesc("jaild_image_info",
			"1 for each image served, with its name, its verified digest and whether it is the default.", []string{"image", "digest", "default"}, nil)})
	}
	if f := src.Reload; f != nil {
		gauge("jaild_config_last_reload_successful", "Whether the last reload (SIGHUP) of the configuration was applied (1) or refused (0); 1 before any.", func() float64 {
			if ok, _ := f(); ok {
				return 1
			}
			return 0
		})
		gauge("jaild_config_last_reload_success_timestamp_seconds", "When the configuration was last applied: the start, or the last successful reload.", func() float64 {
			_, at := f()
			return float64(at.UnixNano()) / 1e9
		})
	}
	if f := src.TLSRefused; f != nil {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "jaild_tls_handshake_failures_total",
			Help: "Connections to the TLS listener refused at the handshake: no client certificate, one the client CA did not sign, expired, matching no client, TLS below 1.3, plain HTTP, or too slow."},
			func() float64 { return float64(f()) }))
	}
	if f := src.Memory; f != nil {
		gauge("jaild_memory_budget_in_use_bytes", "Bytes of the memory budget reserved by requests in flight.", func() float64 { u, _ := f(); return float64(u) })
		gauge("jaild_memory_budget_bytes", "The memory budget for requests in flight (memory_budget_mb).", func() float64 { _, b := f(); return float64(b) })
	}
}

// ConnRefused counts a connection a listener's bounds closed.
func (m *Metrics) ConnRefused(listener, reason string) {
	m.connRefused.WithLabelValues(listener, reason).Inc()
}

// Ran counts a run that ended with a result.
func (m *Metrics) Ran(op string, r Run) {
	warm := strconv.FormatBool(r.Warm)
	m.runs.WithLabelValues(op, r.Status, warm).Inc()
	m.queueWait.WithLabelValues(op).Observe(r.QueueWait.Seconds())
	m.runDuration.WithLabelValues(op).Observe(r.Duration.Seconds())
	m.requestDuration.WithLabelValues(op).Observe(r.Total.Seconds())
	if r.Pooled {
		if r.Warm {
			m.poolHits.Inc()
		} else {
			m.poolMisses.Inc()
		}
	}
	if r.JailStart > 0 {
		m.jailStart.WithLabelValues(warm).Observe(r.JailStart.Seconds())
	}
	if r.EgressSent > 0 {
		m.egress.WithLabelValues("sent").Add(float64(r.EgressSent))
	}
	if r.EgressReceived > 0 {
		m.egress.WithLabelValues("received").Add(float64(r.EgressReceived))
	}
}

// Command counts a session command: a foreground one that ended (its
// status and output bytes) or a background one started (status
// "started").
func (m *Metrics) Command(kind, status string, stdout, stderr int) {
	m.commands.WithLabelValues(kind, status).Inc()
	if stdout > 0 {
		m.commandBytes.WithLabelValues("stdout").Add(float64(stdout))
	}
	if stderr > 0 {
		m.commandBytes.WithLabelValues("stderr").Add(float64(stderr))
	}
}

// TerminalBytes counts the bytes of one terminal connection.
func (m *Metrics) TerminalBytes(sent, received int64) {
	if sent > 0 {
		m.terminalBytes.WithLabelValues("sent").Add(float64(sent))
	}
	if received > 0 {
		m.terminalBytes.WithLabelValues("received").Add(float64(received))
	}
}

// PortBytes counts the bytes of one proxied request to a session's port.
func (m *Metrics) PortBytes(sent, received int64) {
	if sent > 0 {
		m.portBytes.WithLabelValues("sent").Add(float64(sent))
	}
	if received > 0 {
		m.portBytes.WithLabelValues("received").Add(float64(received))
	}
}

// Refused counts a request of op that ended with an error of the class
// named reason (errdefs.Classify's name).
func (m *Metrics) Refused(op, reason string) {
	m.rejections.WithLabelValues(op, reason).Inc()
}

// Gatherer is the registry, for tests and other exporters.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorHandling: promhttp.ContinueOnError})
}

// refillCollector exports the warm pool's own histograms of creation
// times, by kind of jail, and its failed creations.
func refillCollector(f func() Pool) prometheus.Collector {
	return &poolRefills{f: f,
		hist:   prometheus.NewDesc("jaild_pool_refill_seconds", "Time to make one warm jail for the pool, by kind (preloaded: the interpreter with modules imported; plain: for lint, format and commands).", []string{"kind"}, nil),
		failed: prometheus.NewDesc("jaild_pool_refill_failures_total", "Warm jails the pool failed to make, by kind.", []string{"kind"}, nil),
	}
}

type poolRefills struct {
	f            func() Pool
	hist, failed *prometheus.Desc
}

func (c *poolRefills) Describe(ch chan<- *prometheus.Desc) { ch <- c.hist; ch <- c.failed }

func (c *poolRefills) Collect(ch chan<- prometheus.Metric) {
	p := c.f()
	for kind, r := range map[string]Refills{"preloaded": p.Refill, "plain": p.PlainRefill} {
		ch <- prometheus.MustNewConstHistogram(c.hist, r.Count, r.Sum, r.Buckets, kind)
		ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, float64(r.Failed), kind)
	}
}

// sessionTotals exports the session table's own counts.
type sessionTotals struct {
	f              func() (uint64, map[string]uint64)
	reasons        []string
	created, ended *prometheus.Desc
}

func (c *sessionTotals) Describe(ch chan<- *prometheus.Desc) { ch <- c.created; ch <- c.ended }

func (c *sessionTotals) Collect(ch chan<- prometheus.Metric) {
	created, ended := c.f()
	ch <- prometheus.MustNewConstMetric(c.created, prometheus.CounterValue, float64(created))
	out := map[string]uint64{"other": 0}
	for _, r := range c.reasons {
		out[r] = 0
	}
	for r, n := range ended {
		if _, ok := out[r]; ok {
			out[r] += n
		} else {
			out["other"] += n
		}
	}
	for r, n := range out {
		ch <- prometheus.MustNewConstMetric(c.ended, prometheus.CounterValue, float64(n), r)
	}
}

// imageInfo exports one jaild_image_info series per image served.
type imageInfo struct {
	f    func() []Image
	desc *prometheus.Desc
}

func (c *imageInfo) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *imageInfo) Collect(ch chan<- prometheus.Metric) {
	for _, im := range c.f() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, im.Name, im.Digest, strconv.FormatBool(im.Default))
	}
}
