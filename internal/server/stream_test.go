package server

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

// chunked runs data through a textChunker cut at the given points.
func chunked(data []byte, cuts []int) string {
	var c textChunker
	var out strings.Builder
	prev := 0
	for _, at := range cuts {
		if at < prev || at > len(data) {
			continue
		}
		out.WriteString(c.add(data[prev:at], false))
		prev = at
	}
	out.WriteString(c.add(data[prev:], true))
	return out.String()
}

func TestTextChunkerMatchesToValidUTF8(t *testing.T) {
	cases := [][]byte{
		[]byte("héllo wörld ✓ 😀\n"),
		{0xff, 0xfe, 'a', 0xff, 0xc3}, // invalid runs, a cut sequence at the end
		[]byte("\xe2\x9c"),            // an incomplete sequence alone
		[]byte("a\xed\xa0\x80b"),      // a surrogate: three invalid bytes, one U+FFFD
		[]byte("\xef\xbf\xbd\xff"),    // a real U+FFFD then an invalid byte
		[]byte("\xf0\x9f\x98"),        // a cut 4-byte sequence
	}
	for _, data := range cases {
		want := strings.ToValidUTF8(string(data), "\uFFFD")
		for cut := 0; cut <= len(data); cut++ {
			for cut2 := cut; cut2 <= len(data); cut2++ {
				if got := chunked(data, []int{cut, cut2}); got != want {
					t.Fatalf("%q cut at %d,%d: got %q, want %q", data, cut, cut2, got, want)
				}
			}
		}
	}
}

func FuzzTextChunker(f *testing.F) {
	f.Add([]byte("a\xffb\xe2\x9c\x93"), uint8(1), uint8(3))
	f.Add([]byte("\xff\xff\xff"), uint8(1), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, a, b uint8) {
		want := strings.ToValidUTF8(string(data), "\uFFFD")
		cuts := []int{int(a) % (len(data) + 1), int(b) % (len(data) + 1)}
		if cuts[0] > cuts[1] {
			cuts[0], cuts[1] = cuts[1], cuts[0]
		}
		if got := chunked(data, cuts); got != want {
			t.Fatalf("%q cut at %v: got %q, want %q", data, cuts, got, want)
		}
	})
}

// inlineResponse is what the response was before bulk: every content in
// the value itself.
func bulkResponse(stdout, stderr, file, fig []byte) (*api.ExecuteResponse, *bulkSet, *api.ExecuteResponse) {
	bulk := newBulkSet()
	resp := &api.ExecuteResponse{
		RunID: "r", Status: "ok", Stdout: bulk.addText(stdout), Stderr: bulk.addText(stderr),
		Files:   []api.FileOut{{Path: "a.bin", SizeBytes: int64(len(file)), ContentB64: bulk.add(file)}, {Path: "gone", Error: "no such file"}},
		Figures: []api.Figure{{Name: "figure-1.png", ContentB64: bulk.add(fig)}},
	}
	want := *resp
	want.Stdout = strings.ToValidUTF8(string(stdout), "\uFFFD")
	want.Stderr = strings.ToValidUTF8(string(stderr), "\uFFFD")
	want.Files = []api.FileOut{{Path: "a.bin", SizeBytes: int64(len(file)), ContentB64: base64.StdEncoding.EncodeToString(file)}, {Path: "gone", Error: "no such file"}}
	want.Figures = []api.Figure{{Name: "figure-1.png", ContentB64: base64.StdEncoding.EncodeToString(fig)}}
	return resp, bulk, &want
}

func checkBulk(t *testing.T, stdout, stderr, file, fig []byte) {
	t.Helper()
	resp, bulk, want := bulkResponse(stdout, stderr, file, fig)
	var buf bytes.Buffer
	if err := writeBulkJSON(&buf, resp, bulk); err != nil {
		t.Fatal(err)
	}
	wantJSON, err := marshalNoEscape(want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), wantJSON) {
		t.Fatalf("streamed JSON differs from the whole one:\n got %.300s\nwant %.300s", buf.Bytes(), wantJSON)
	}
}

func TestWriteBulkJSON(t *testing.T) {
	big := bytes.Repeat([]byte("x\x00\xff\"\\<é\n"), 20000) // past one slice of writeJSONText
	checkBulk(t, []byte("hello\n"), nil, []byte{0, 1, 2}, []byte("\x89PNG"))
	checkBulk(t, big, big[3:], big, big[:7])
	checkBulk(t, nil, nil, nil, nil)
	// Output that looks like a placeholder of another response is output.
	other := newBulkSet()
	fake := []byte(other.add([]byte("x")))
	checkBulk(t, fake, []byte("\x00jaild-bulk-"), fake, nil)
}

func FuzzWriteBulkJSON(f *testing.F) {
	f.Add([]byte("out\xff"), []byte("err"), []byte{0, 1})
	f.Fuzz(func(t *testing.T, stdout, stderr, file []byte) {
		checkBulk(t, stdout, stderr, file, stdout)
	})
}

// readSSE parses a stream of SSE events as a browser would (one data line
// each here), back into api.Events.
func readSSE(t *testing.T, data []byte) []api.Event {
	t.Helper()
	var out []api.Event
	var cur api.Event
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			out = append(out, cur)
			cur = api.Event{}
		case strings.HasPrefix(line, "id: "):
			cur.ID, _ = strconv.ParseInt(line[4:], 10, 64)
		case strings.HasPrefix(line, "event: "):
			cur.Event = line[7:]
		case strings.HasPrefix(line, "data: "):
			if cur.Data != nil {
				t.Fatalf("two data lines in one event")
			}
			cur.Data = json.RawMessage(line[6:])
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	return out
}

func FuzzEventWriter(f *testing.F) {
	f.Add("line one\nline two\r\n", true)
	f.Add("\x00\xff\u2028", false)
	f.Fuzz(func(t *testing.T, text string, sse bool) {
		var buf bytes.Buffer
		ew := &eventWriter{w: &buf, sse: sse}
		want := []api.EventText{{Text: strings.ToValidUTF8(text, "\uFFFD")}, {Text: "second"}}
		for _, e := range want {
			if err := ew.write(api.EventStdout, e, nil); err != nil {
				t.Fatal(err)
			}
		}
		var events []api.Event
		if sse {
			events = readSSE(t, buf.Bytes())
		} else {
			for line := range strings.SplitSeq(strings.TrimSuffix(buf.String(), "\n"), "\n") {
				var e api.Event
				if err := json.Unmarshal([]byte(line), &e); err != nil {
					t.Fatalf("NDJSON line %q: %v", line, err)
				}
				events = append(events, e)
			}
		}
		if len(events) != len(want) {
			t.Fatalf("%d events, want %d: %q", len(events), len(want), buf.String())
		}
		for i, e := range events {
			var got api.EventText
			if err := json.Unmarshal(e.Data, &got); err != nil {
				t.Fatal(err)
			}
			if e.ID != int64(i+1) || e.Event != api.EventStdout || !reflect.DeepEqual(got, want[i]) {
				t.Fatalf("event %d: %+v %q, want id %d stdout %q", i, e, got.Text, i+1, want[i].Text)
			}
		}
	})
}

func TestStreamFormat(t *testing.T) {
	for accept, want := range map[string]string{
		"":                                 "",
		"application/json":                 "",
		"application/x-ndjson":             api.MediaNDJSON,
		"text/event-stream":                api.MediaSSE,
		"text/event-stream; charset=utf-8": api.MediaSSE,
		"application/json, text/event-stream;q=0.5": api.MediaSSE,
		"application/x-ndjson, text/event-stream":   api.MediaNDJSON,
		"*/*":     "",
		";;;,,, ": "",
	} {
		if got := streamFormat(accept); got != want {
			t.Errorf("Accept %q: %q, want %q", accept, got, want)
		}
	}
}

// A run alternating tiny writes to its two streams queues about its bytes:
// past maxSegments, segments of about maxEventText each, each stream's
// bytes in order, and the queue allocates little more than it holds.
func TestLiveStreamQueueBounded(t *testing.T) {
	const perStream = 4 << 20
	l := newLiveStream(httptest.NewRecorder(), false, func() {}, pace{time.Minute, 256 << 10})
	var want [3]bytes.Buffer
	want[1].Grow(perStream)
	want[2].Grow(perStream)
	var rec [8]byte
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 2 * perStream / len(rec) {
		v := i / 2 // "%07d\n" without allocating
		for d := 6; d >= 0; d-- {
			rec[d] = byte('0' + v%10)
			v /= 10
		}
		rec[7] = '\n'
		l.output(1+i%2, rec[:])
		want[1+i%2].Write(rec[:])
	}
	runtime.ReadMemStats(&after)
	if n, bound := len(l.queue), maxSegments+2*(perStream/maxEventText+1); n > bound {
		t.Errorf("%d segments queued, want at most %d", n, bound)
	}
	held := 0
	var got [3]bytes.Buffer
	for _, seg := range l.queue {
		got[seg.stream].Write(seg.data)
		held += cap(seg.data)
	}
	for s := 1; s <= 2; s++ {
		if !bytes.Equal(got[s].Bytes(), want[s].Bytes()) {
			t.Errorf("stream %d: %d bytes queued, out of order or lost", s, got[s].Len())
		}
	}
	// Held: the bytes, the first maxSegments tiny segments' rounding,
	// and the last segment of each stream not yet full.
	if bound := 2*perStream + maxSegments*16 + 2*maxEventText; held > bound {
		t.Errorf("the queue holds %d bytes of capacity for %d bytes, want at most %d", held, 2*perStream, bound)
	}
	// Allocated while queueing (the want buffers were grown before):
	// the segments' bytes and the queue's slice of segment headers.
	if alloc, bound := after.TotalAlloc-before.TotalAlloc, uint64(2*perStream)*5/4; alloc > bound {
		t.Errorf("queueing %d bytes allocated %d, want at most %d", 2*perStream, alloc, bound)
	}

	// Past maxSegments, chunks of sizes that do not divide a segment (1
	// byte on one stream, 32 KiB + 1 on the other) leave no segment
	// part-empty but the last of each stream.
	l = newLiveStream(httptest.NewRecorder(), false, func() {}, pace{time.Minute, 256 << 10})
	total := 0
	for range maxSegments {
		l.output(1+total%2, rec[:1])
		total++
	}
	small, big := []byte{'s'}, bytes.Repeat([]byte{'b'}, 32<<10+1)
	for total < 2*perStream {
		l.output(1, small)
		l.output(2, big)
		total += len(small) + len(big)
	}
	held = 0
	for _, seg := range l.queue {
		held += cap(seg.data)
	}
	if bound := total + maxSegments*16 + 2*maxEventText; held > bound {
		t.Errorf("odd-sized chunks: the queue holds %d bytes of capacity for %d bytes, want at most %d", held, total, bound)
	}
}
