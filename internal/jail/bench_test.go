package jail

import (
	"context"
	"testing"
)

// BenchmarkRunPrint measures one cold jail end to end: create, run
// print(1), collect, destroy. `make bench-engine` reports it.
func BenchmarkRunPrint(b *testing.B) {
	req := &Request{Code: "print(1)\n", Limits: DefaultLimits()}
	for b.Loop() {
		res, err := testEngine.Run(context.Background(), req)
		if err != nil || res.Status != StatusOK {
			b.Fatalf("run: %v %+v", err, res)
		}
	}
}
