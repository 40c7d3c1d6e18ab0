//go:build !unit

package run

import (
	"context"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/run/spec"
)

// BenchmarkRunPrint measures one cold jail end to end: create, run
// print(1), collect, destroy. `make bench-engine` reports it.
func BenchmarkRunPrint(b *testing.B) {
	req := &Request{Code: "print(1)\n", Limits: jail.DefaultLimits()}
	for b.Loop() {
		res, err := testEngine.Run(context.Background(), req)
		if err != nil || res.Status != spec.StatusOK {
			b.Fatalf("run: %v %+v", err, res)
		}
	}
}

// BenchmarkSessionCall measures a call of x + 1 in a live session: thaw,
// job, end record, output, freeze.
func BenchmarkSessionCall(b *testing.B) {
	l := jail.DefaultLimits()
	l.Timeout = time.Hour
	ss, err := testEngine.NewSession(SessionSpec{Limits: l})
	if err != nil {
		b.Fatal(err)
	}
	defer ss.Close()
	c := &Call{Code: "x = 1", Timeout: 10 * time.Second, OutputBytes: 1 << 20, LastLineInteractive: true}
	if _, err := ss.Exec(context.Background(), c); err != nil {
		b.Fatal(err)
	}
	c.Code = "x + 1"
	b.ResetTimer()
	for range b.N {
		r, err := ss.Exec(context.Background(), c)
		if err != nil || r.Status != spec.StatusOK {
			b.Fatalf("%v %+v", err, r)
		}
	}
}
