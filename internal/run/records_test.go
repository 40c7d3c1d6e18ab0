package run

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// Once drained reports true, every line written to the pipe before has
// been passed on, whatever the reader was doing when the wait began.
func TestRecordsPipeDrained(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := newRecordsPipe(r)
	if err != nil {
		t.Fatal(err)
	}
	var got []string // passed on, with p.mu held
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.readLines(func(l []byte) { got = append(got, string(l)) })
	}()
	stop := make(chan struct{})
	sent := 0
	for round := range 300 {
		// A burst of records, each in one write, and sometimes a long
		// one that fills more than the reader's first read.
		for i := range 1 + round%7 {
			line := fmt.Sprintf(`{"type": "start", "call": %d}`, sent)
			if i == 3 {
				line = fmt.Sprintf(`{"n": %d, "pad": "%0*d"}`, sent, 3000+round, 0)
			}
			if _, err := w.Write([]byte(line + "\n")); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		n := -1
		if !p.drained(5*time.Second, stop, func() { n = len(got) }) {
			t.Fatalf("round %d: not drained", round)
		}
		if n != sent {
			t.Fatalf("round %d: %d lines passed on when drained, %d written", round, n, sent)
		}
	}
	// A line cut off is not passed on: the pipe is drained all the same.
	if _, err := w.Write([]byte(`{"type": "st`)); err != nil {
		t.Fatal(err)
	}
	n := -1
	if !p.drained(5*time.Second, stop, func() { n = len(got) }) || n != sent {
		t.Fatalf("a cut-off line: %d passed on, %d whole lines written", n, sent)
	}
	// The writers gone, the reader ends: everything was passed on.
	w.Close()
	<-done
	if !p.drained(5*time.Second, stop, func() {}) {
		t.Error("not drained at the pipe's end")
	}
	// The pipe closed (the session going): no answer, and no wait for one.
	r.Close()
	if p.drained(time.Hour, stop, func() { t.Error("drained ran its func on a closed pipe") }) {
		t.Error("drained on a closed pipe")
	}
}

// Without a reader the pipe never drains: drained gives up at its bound
// or at stop.
func TestRecordsPipeNotDrained(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	p, err := newRecordsPipe(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if p.drained(20*time.Millisecond, nil, func() { t.Error("ran") }) {
		t.Error("drained with a line left in the pipe")
	}
	stop := make(chan struct{})
	close(stop)
	if p.drained(time.Hour, stop, func() { t.Error("ran") }) {
		t.Error("drained after stop")
	}
}
