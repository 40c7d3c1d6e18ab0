package bench

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Table renders the report as Markdown, every figure with its ratio to
// bare python3 where one exists.
func (r *Report) Table() string {
	var b strings.Builder
	if len(r.Latency) == 0 { // paused sessions only (-pause), or sessions only (-sessions)
		fmt.Fprintf(&b, "Measured %s on %s.\n", r.When, r.Host)
		if r.Sessions.Call.P50 > 0 {
			r.sessionsTable(&b)
		}
		r.Pause.table(&b)
		return b.String()
	}
	fmt.Fprintf(&b, "Measured %s on %s, %d sequential runs per latency figure (ms, p50 / p95 / p99; ×: ratio to bare python3's p50).\n\n", r.When, r.Host, r.Iterations)
	b.WriteString("| workload | bare python3 (chroot) | jaild cold | jaild warm |\n| --- | --- | --- | --- |\n")
	for _, row := range r.Latency {
		bare := "n/a"
		ratio := func(s Stat) string { return "" }
		if row.Bare != nil {
			bare = stat(*row.Bare)
			base := row.Bare.P50
			ratio = func(s Stat) string { return fmt.Sprintf(" (×%.2f)", s.P50/base) }
		}
		fmt.Fprintf(&b, "| %s | %s | %s%s | %s%s |\n", row.Workload, bare, stat(row.Cold), ratio(row.Cold), stat(row.Warm), ratio(row.Warm))
	}
	r.cpuTable(&b)
	if len(r.Throughput) == 0 { // a quick run
		return b.String()
	}
	b.WriteString("\nThroughput of `print(1)` (runs/s; ×: ratio to bare python3 at the same concurrency):\n\n")
	b.WriteString("| concurrency | bare python3 | jaild cold | jaild warm |\n| --- | --- | --- | --- |\n")
	for _, t := range r.Throughput {
		fmt.Fprintf(&b, "| %d | %.1f | %.1f (×%.2f) | %.1f (×%.2f) |\n", t.Concurrency, t.Bare, t.Cold, t.Cold/t.Bare, t.Warm, t.Warm/t.Bare)
	}
	var jails []string
	for _, v := range r.WarmJailBytes {
		jails = append(jails, fmt.Sprintf("%.1f", float64(v)/(1<<20)))
	}
	r.sessionsTable(&b)
	fmt.Fprintf(&b, "\nDaemon RSS (warm pool running): %.1f MiB. Memory charged to each idle warm jail (cgroup; plain ones first, then preloaded): %s MiB.\n",
		float64(r.DaemonRSSBytes)/(1<<20), strings.Join(jails, ", "))
	r.Pause.table(&b)
	r.Files.table(&b)
	if len(r.Images) > 0 {
		b.WriteString("\nImages: `print(1)` in each (ms, p50 / p95 / p99; ×: ratio to bare python3 in the same image), a warm pool that preloads nothing, and the image's size on disk:\n\n")
		b.WriteString("| image | size | bare python3 | jaild cold | jaild warm |\n| --- | --- | --- | --- | --- |\n")
		for _, im := range r.Images {
			fmt.Fprintf(&b, "| %s | %.0f MB | %s | %s (×%.2f) | %s (×%.2f) |\n", im.Name, float64(im.SizeBytes)/1e6,
				stat(im.Bare), stat(im.Cold), im.Cold.P50/im.Bare.P50, stat(im.Warm), im.Warm.P50/im.Bare.P50)
		}
	}
	return b.String()
}

func (r *Report) cpuTable(b *strings.Builder) {
	c := r.CPU
	fmt.Fprintf(b, "\nCPU per `print(1)` run (ms of user+system time; %d runs back to back in each mode, until the daemon is at rest again; "+
		"starter: the benchmark's fork and exec for bare python3, the daemon for jaild; started: python3, or each jail's processes, "+
		"counted when reaped; rest: the kernel's threads and everything else on the machine):\n\n", c.Bare.Runs)
	b.WriteString("| mode | total | beyond bare python3 | starter | started | client | rest |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, m := range []struct {
		name string
		c    CPU
	}{{"bare python3", c.Bare}, {"jaild cold", c.Cold}, {"jaild warm", c.Warm}} {
		fmt.Fprintf(b, "| %s | %.1f | %+.1f | %.1f | %.1f | %.1f | %.1f |\n", m.name, m.c.Total, m.c.Total-c.Bare.Total, m.c.Starter, m.c.Started, m.c.Client, m.c.Rest)
	}
}

func (f Files) table(b *strings.Builder) {
	b.WriteString("\nFiles, on the warm daemon (ms p50; codec: the client's JSON and base64 work within inline, Go's encoding/json; " +
		"RSS: growth of the daemon's peak RSS during the runs, MiB). Returned: the run writes random bytes; inline is `content_b64` " +
		"in the response, decoded; store is `return_files_as: \"store\"`, then `GET /v1/files/{id}` (its `DELETE` untimed).\n\n")
	b.WriteString("| returned file | run alone (not returned) | inline (codec) | store | RSS inline / store |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range f.Return {
		fmt.Fprintf(b, "| %s | %.1f | %s | %.1f | %s |\n", r.size(), r.Alone.P50, r.inline("inline"), r.Store.P50, r.rss())
	}
	b.WriteString("\nUploaded: the run checks the file's size; inline is `content_b64` in the request, encoded; store is `POST /v1/files`, " +
		"then execute with its `file_id` (its `DELETE` untimed); the last column runs with a file already stored.\n\n")
	b.WriteString("| uploaded file | inline (codec) | store (upload + run) | run with the stored file | RSS inline / store |\n| --- | --- | --- | --- | --- |\n")
	for _, r := range f.Upload {
		fmt.Fprintf(b, "| %s | %s | %.1f | %.1f | %s |\n", r.size(), r.inline("body"), r.Store.P50, r.Alone.P50, r.rss())
	}
}

func (r FileRow) size() string { return fmt.Sprintf("%d MiB (%d runs)", r.SizeBytes>>20, r.Iterations) }

// inline is the inline p50 with its codec part, or the refusal with the
// cap (what) that the daemon's message names in bytes.
func (r FileRow) inline(what string) string {
	if r.Inline == nil {
		if m := regexp.MustCompile(`(\d+) bytes`).FindStringSubmatch(r.Refused); m != nil {
			if n, _ := strconv.ParseInt(m[1], 10, 64); n > 0 && n%(1<<20) == 0 {
				return fmt.Sprintf("refused (%s cap %d MiB)", what, n>>20)
			}
		}
		return "refused (" + r.Refused + ")"
	}
	return fmt.Sprintf("%.1f (%.1f)", r.Inline.P50, r.InlineCodecMs)
}

func (r FileRow) rss() string {
	in := "-"
	if r.Inline != nil {
		in = fmt.Sprintf("%.1f", float64(r.InlineRSSGrowth)/(1<<20))
	}
	return fmt.Sprintf("%s / %.1f", in, float64(r.StoreRSSGrowth)/(1<<20))
}

func stat(s Stat) string { return fmt.Sprintf("%.1f / %.1f / %.1f", s.P50, s.P95, s.P99) }

// sessionsTable is the sessions' latencies, one paragraph.
func (r *Report) sessionsTable(b *strings.Builder) {
	se := r.Sessions
	fmt.Fprintf(b, "\nSessions (ms, p50 / p95 / p99): create %s cold, %s with a warm jail; a call of `x + 1` in a live session %s; a foreground `echo hi` command in it %s; a GET from python's http.server, run as a background command, through the port proxy %s, the same GET made inside the session %s; a terminal opened to its shell's prompt %s, a key typed into it to its echo %s.\n",
		stat(se.CreateCold), stat(se.CreateWarm), stat(se.Call), stat(se.Command), stat(se.PortProxy), stat(se.PortInJail), stat(se.TerminalOpen), stat(se.TerminalEcho))
}
