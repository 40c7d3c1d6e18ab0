package runner

import (
	"bufio"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

func newTestStream(t *testing.T) (*Stream, *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	s := NewStream(r)
	go s.Run()
	return s, w
}

// A call's share of a session's output is what was written while its
// capture was attached, taken whole at Sync; what comes between calls is
// no call's.
func TestStreamSync(t *testing.T) {
	s, w := newTestStream(t)
	one := &Capture{Limit: 1 << 20}
	s.Attach(one)
	big := strings.Repeat("x", 100<<10) // more than a pipe holds and a read takes
	go func() { _, _ = io.WriteString(w, "one\n"+big) }()
	for deadline := time.Now().Add(10 * time.Second); kept(s, one) < len(big) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // the writer is done once the rest fits the pipe
	}
	if _, err := io.WriteString(w, "tail"); err != nil {
		t.Fatal(err)
	}
	s.Sync(10 * time.Second)
	s.Attach(nil)
	if got := string(one.Buf); got != "one\n"+big+"tail" {
		t.Fatalf("call one got %d bytes, want %d", len(got), len("one\n"+big+"tail"))
	}

	if _, err := io.WriteString(w, "between calls"); err != nil {
		t.Fatal(err)
	}
	s.Sync(10 * time.Second)
	two := &Capture{Limit: 1 << 20}
	s.Attach(two)
	if _, err := io.WriteString(w, "two"); err != nil {
		t.Fatal(err)
	}
	s.Sync(10 * time.Second)
	if string(two.Buf) != "two" {
		t.Errorf("call two got %q", two.Buf)
	}
}

// Sync returns at once when the pipe has ended, and within its wait when
// a writer never stops.
func TestStreamSyncBounded(t *testing.T) {
	s, w := newTestStream(t)
	w.Close()
	start := time.Now()
	s.Sync(10 * time.Second)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Sync of an ended pipe took %v", d)
	}

	s, w = newTestStream(t)
	c := &Capture{Limit: 1 << 10}
	s.Attach(c)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		chunk := []byte(strings.Repeat("y", 4<<10))
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}()
	for deadline := time.Now().Add(10 * time.Second); !truncated(s, c) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	start = time.Now()
	s.Sync(200 * time.Millisecond)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Sync with an endless writer took %v", d)
	}
	s.Attach(nil)
	if len(c.Buf) != 1<<10 || !c.Truncated {
		t.Errorf("capture kept %d bytes, truncated %v", len(c.Buf), c.Truncated)
	}
}

func kept(s *Stream, c *Capture) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(c.Buf)
}

func truncated(s *Stream, c *Capture) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return c.Truncated
}

func TestReadBoundedLine(t *testing.T) {
	const limit = 20
	long := strings.Repeat("z", 100)
	in := "short\n" + long + "\n" + strings.Repeat("a", limit) + "\n" + strings.Repeat("b", limit+1) + "\nlast"
	r := bufio.NewReaderSize(strings.NewReader(in), 16) // smaller than a line: several reads make one
	var got []string
	var err error
	for err == nil {
		var line []byte
		line, err = ReadBoundedLine(r, limit)
		got = append(got, string(line))
	}
	want := []string{"short", "", strings.Repeat("a", limit), "", "last"}
	if strings.Join(got, "|") != strings.Join(want, "|") || !errors.Is(err, io.EOF) {
		t.Errorf("lines %q, %v; want %q and io.EOF", got, err, want)
	}
	// A last line without its newline has the same bound (found by the
	// fuzzer).
	r = bufio.NewReaderSize(strings.NewReader(strings.Repeat("c", limit+1)), 16)
	if line, err := ReadBoundedLine(r, limit); len(line) != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("last line of %d bytes: %q, %v", limit+1, line, err)
	}
}

// FuzzReadBoundedLine: a session's records pipe is written by user code;
// every line handed on is bounded and whole.
func FuzzReadBoundedLine(f *testing.F) {
	f.Add([]byte("{\"type\":\"end\",\"status\":0,\"call\":1}\n" + strings.Repeat("x", 40) + "\nend"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReaderSize(strings.NewReader(string(data)), 16)
		for range len(data) + 1 {
			line, err := ReadBoundedLine(r, 32)
			if len(line) > 32 || strings.Contains(string(line), "\n") {
				t.Fatalf("line %q", line)
			}
			if err != nil {
				return
			}
		}
		t.Fatal("more lines than bytes")
	})
}
