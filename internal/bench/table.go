package bench

import (
	"fmt"
	"strings"
)

// Table renders the report as Markdown, every figure with its ratio to
// bare python3 where one exists.
func (r *Report) Table() string {
	var b strings.Builder
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
	b.WriteString("\nThroughput of `print(1)` (runs/s; ×: ratio to bare python3 at the same concurrency):\n\n")
	b.WriteString("| concurrency | bare python3 | jaild cold | jaild warm |\n| --- | --- | --- | --- |\n")
	for _, t := range r.Throughput {
		fmt.Fprintf(&b, "| %d | %.1f | %.1f (×%.2f) | %.1f (×%.2f) |\n", t.Concurrency, t.Bare, t.Cold, t.Cold/t.Bare, t.Warm, t.Warm/t.Bare)
	}
	var jails []string
	for _, v := range r.WarmJailBytes {
		jails = append(jails, fmt.Sprintf("%.1f", float64(v)/(1<<20)))
	}
	se := r.Sessions
	fmt.Fprintf(&b, "\nSessions (ms, p50 / p95 / p99): create %s cold, %s with a warm jail; a call of `x + 1` in a live session %s.\n",
		stat(se.CreateCold), stat(se.CreateWarm), stat(se.Call))
	fmt.Fprintf(&b, "\nDaemon RSS (warm pool running): %.1f MiB. Memory charged to each idle warm jail (cgroup; plain ones first, then preloaded): %s MiB.\n",
		float64(r.DaemonRSSBytes)/(1<<20), strings.Join(jails, ", "))
	return b.String()
}

func stat(s Stat) string { return fmt.Sprintf("%.1f / %.1f / %.1f", s.P50, s.P95, s.P99) }
