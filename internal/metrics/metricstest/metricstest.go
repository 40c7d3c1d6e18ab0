// Package metricstest reads a Prometheus text exposition into samples that
// tests compare: a scrape before and after a scripted mix of requests, and
// the exact change of every counter between them.
package metricstest

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Samples maps a series, written as Key writes it, to its value. A
// histogram gives its _count and _sum series; a summary only its _count
// and _sum.
type Samples map[string]float64

// Key writes a series as name{label="value",...} with the labels sorted
// by name; labels are name, value pairs.
func Key(name string, labels ...string) string {
	if len(labels) == 0 {
		return name
	}
	type pair struct{ n, v string }
	var ps []pair
	for i := 0; i+1 < len(labels); i += 2 {
		ps = append(ps, pair{labels[i], labels[i+1]})
	}
	slices.SortFunc(ps, func(a, b pair) int { return strings.Compare(a.n, b.n) })
	var b strings.Builder
	b.WriteString(name + "{")
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(p.n + "=" + strconv.Quote(p.v))
	}
	b.WriteByte('}')
	return b.String()
}

// Parse reads the text exposition format.
func Parse(r io.Reader) (Samples, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	s := Samples{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName(), l.GetValue())
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				s[Key(name, labels...)] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				s[Key(name, labels...)] = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				s[Key(name, labels...)] = m.GetUntyped().GetValue()
			case dto.MetricType_HISTOGRAM:
				s[Key(name+"_count", labels...)] = float64(m.GetHistogram().GetSampleCount())
				s[Key(name+"_sum", labels...)] = m.GetHistogram().GetSampleSum()
			case dto.MetricType_SUMMARY:
				s[Key(name+"_count", labels...)] = float64(m.GetSummary().GetSampleCount())
				s[Key(name+"_sum", labels...)] = m.GetSummary().GetSampleSum()
			}
		}
	}
	return s, nil
}

// Names returns the metric family names in s (histograms by their _count
// and _sum series).
func (s Samples) Names() map[string]bool {
	out := map[string]bool{}
	for k := range s {
		name, _, _ := strings.Cut(k, "{")
		out[name] = true
	}
	return out
}

// Delta returns, for every series of after whose name starts with one of
// prefixes, how much it moved since before (a series absent from before
// counts from 0); series that did not move are left out.
func Delta(before, after Samples, prefixes ...string) Samples {
	d := Samples{}
	for k, v := range after {
		if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			continue
		}
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}

// Diff describes how got differs from want, "" if they are equal.
func Diff(got, want Samples) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			out = append(out, fmt.Sprintf("%s moved by %g, want %g", k, got[k], want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s moved by %g, want no change", k, got[k]))
		}
	}
	return strings.Join(out, "\n")
}
