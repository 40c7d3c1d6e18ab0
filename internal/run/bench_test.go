package run

import (
	"context"
	"testing"

	"github.com/jaild/jaild/internal/jail"
)

// BenchmarkRunPrint measures one cold jail end to end: create, run
// print(1), collect, destroy. `make bench-engine` reports it.
func BenchmarkRunPrint(b *testing.B) {
	req := &Request{Code: "print(1)\n", Limits: jail.DefaultLimits()}
	for b.Loop() {
		res, err := testEngine.Run(context.Background(), req)
		if err != nil || res.Status != StatusOK {
			b.Fatalf("run: %v %+v", err, res)
		}
	}
}
