package server

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jaild/jaild/internal/api"
)

// Streaming tunables.
const (
	// flushDelay is how long a chunk of output without a newline waits
	// for more before it is sent.
	flushDelay = 50 * time.Millisecond
	// keepaliveEvery is the silence after which a keepalive is sent.
	keepaliveEvery = 5 * time.Second
	// maxEventText bounds the text of one output event.
	maxEventText = 64 << 10
	// maxSegments bounds the output chunks queued apart (see output): a
	// whole 64 MiB cap in segments of maxEventText is 1024.
	maxSegments = 1024
)

// streamFormat picks the streamed form an Accept header asks for: "" (a
// plain JSON response), api.MediaNDJSON or api.MediaSSE. The first of the
// two media types listed wins; q-values are not weighed (a client lists
// the one it reads).
func streamFormat(accept string) string {
	for part := range strings.SplitSeq(accept, ",") {
		mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mt {
		case api.MediaNDJSON, api.MediaSSE:
			return mt
		}
	}
	return ""
}

// eventWriter writes numbered events in one of the two streamed forms.
// It is not safe for concurrent use.
type eventWriter struct {
	w   io.Writer
	sse bool
	id  int64
}

// write sends one event whose data is v, encoded with bulk (see
// writeBulkJSON).
func (e *eventWriter) write(event string, v any, bulk *bulkSet) error {
	e.id++
	id := strconv.FormatInt(e.id, 10)
	var head, tail string
	if e.sse {
		head, tail = "id: "+id+"\nevent: "+event+"\ndata: ", "\n\n"
	} else {
		head, tail = `{"id":`+id+`,"event":"`+event+`","data":`, "}\n"
	}
	if _, err := io.WriteString(e.w, head); err != nil {
		return err
	}
	if err := writeBulkJSON(e.w, v, bulk); err != nil {
		return err
	}
	_, err := io.WriteString(e.w, tail)
	return err
}

// textChunker turns a stream's bytes, chunk by chunk, into valid UTF-8
// exactly as strings.ToValidUTF8(all, "\uFFFD") would turn the whole: a
// sequence cut by a chunk's end waits for the next, and a run of invalid
// bytes across chunks is one U+FFFD.
type textChunker struct {
	pending []byte // an incomplete sequence at the end of the last chunk
	invalid bool   // the last byte seen was invalid (a run may go on)
}

// add converts p (final: nothing follows) and returns the text.
func (c *textChunker) add(p []byte, final bool) string {
	data := p
	if len(c.pending) > 0 {
		data = append(c.pending, p...)
		c.pending = nil
	}
	var out strings.Builder
	out.Grow(len(data))
	for i := 0; i < len(data); {
		if !final && !utf8.FullRune(data[i:]) {
			c.pending = append([]byte(nil), data[i:]...)
			break
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size == 1 {
			if !c.invalid {
				out.WriteString("\uFFFD")
				c.invalid = true
			}
		} else {
			out.Write(data[i : i+size])
			c.invalid = false
		}
		i += size
	}
	return out.String()
}

// segment is output of one stream, in arrival order.
type segment struct {
	stream int
	data   []byte
}

// liveStream sends a streamed run's events as they happen: output as it
// arrives (at a newline, or flushDelay after the first byte without one),
// keepalives in silence. Output is queued until the writer takes it; the
// queue holds only bytes kept within the run's output cap, so a client
// slower than the run costs at most the cap of each stream, and the run
// never waits for the client (l.mu is never held while writing). A write
// that fails (the client went away, or read slower than its pace allows)
// cancels the run.
//
// The writer is begin, then loop, then end, one after the other: only it
// touches ew, rc, chunkers, err and last.
type liveStream struct {
	ew     *eventWriter
	pw     *paceWriter
	rc     *http.ResponseController
	cancel func() // kills the run

	mu      sync.Mutex
	queue   []segment
	newline bool      // the queue holds a newline: flush now
	first   time.Time // arrival of the oldest queued byte

	unsent atomic.Int64 // bytes of output queued or being sent

	chunkers [3]textChunker
	err      error     // the first write error; the rest is discarded
	last     time.Time // last event written (keepalives)

	wake    chan struct{}
	stop    chan struct{}
	stopped chan struct{}
	begun   bool // begin ran: the head is written and the loop runs
}

func newLiveStream(w http.ResponseWriter, sse bool, cancel func(), p pace) *liveStream {
	rc := http.NewResponseController(w)
	pw := &paceWriter{w: w, rc: rc, pace: p}
	return &liveStream{
		ew: &eventWriter{w: pw, sse: sse}, pw: pw, rc: rc, cancel: cancel,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}),
	}
}

// output queues a chunk of stream (1 stdout, 2 stderr); it never blocks.
func (l *liveStream) output(stream int, p []byte) {
	if stream != 1 && stream != 2 {
		return
	}
	l.mu.Lock()
	l.unsent.Add(int64(len(p)))
	wake := len(l.queue) == 0 // the loop's timer is for a keepalive
	if wake {
		l.first = time.Now()
	}
	n := len(l.queue)
	switch {
	case n > 0 && l.queue[n-1].stream == stream && len(l.queue[n-1].data)+len(p) <= maxEventText:
		l.queue[n-1].data = appendChunk(l.queue[n-1].data, p)
	case n >= maxSegments:
		// A run that alternates tiny writes to both streams would make a
		// segment of each: past maxSegments, a chunk fills its stream's
		// last segment and what is left starts a segment made full-sized,
		// so that the queue past maxSegments holds full segments of
		// maxEventText and allocates about the bytes it holds (one slice
		// grown by append would leave garbage several times the cap). The two streams are two pipes, whose relative order
		// was never exact; each stream's own order is kept.
		// The chunk fills what room its stream's last segment has first,
		// so that every segment of the stream but its last is full.
		if i := l.lastOf(stream); i >= 0 {
			seg := &l.queue[i].data
			room := min(cap(*seg)-len(*seg), len(p))
			*seg = append(*seg, p[:room]...)
			p = p[room:]
		}
		if len(p) > 0 {
			data := make([]byte, len(p), max(len(p), maxEventText))
			copy(data, p)
			l.queue = append(l.queue, segment{stream, data})
		}
	default:
		l.queue = append(l.queue, segment{stream, append([]byte(nil), p...)})
	}
	nl := bytes.IndexByte(p, '\n') >= 0
	l.newline = l.newline || nl
	l.mu.Unlock()
	if nl || wake {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// queued is the output queued and not yet sent (taken by the writer
// included).
func (l *liveStream) queued() int64 { return l.unsent.Load() }

// lastOf is the index of stream's last queued segment, or -1.
func (l *liveStream) lastOf(stream int) int {
	for i := len(l.queue) - 1; i >= 0; i-- {
		if l.queue[i].stream == stream {
			return i
		}
	}
	return -1
}

// appendChunk appends p to a segment's data b, which stays within
// maxEventText: b grows by doubling up to that, never by append's growth
// beyond it, so that a queue of a whole output cap holds about the cap
// (a single growing slice would hold up to 1.25 times it, and leave as
// much again of garbage).
func appendChunk(b, p []byte) []byte {
	if len(b)+len(p) > cap(b) {
		nb := make([]byte, len(b), min(max(2*cap(b), len(b)+len(p)), maxEventText))
		copy(nb, b)
		b = nb
	}
	return append(b, p...)
}

// begin writes the response's head and the start event, and starts
// sending events.
func (l *liveStream) begin(w http.ResponseWriter, contentType string, start api.EventStartData) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx and others: do not buffer
	w.WriteHeader(http.StatusOK)
	l.send(api.EventStart, start, nil)
	l.begun = true
	go l.loop()
}

// send writes one event and flushes it; only the writer calls it, never
// with l.mu held. After a failed write nothing more is written.
func (l *liveStream) send(event string, v any, bulk *bulkSet) {
	if l.err != nil {
		return
	}
	err := l.ew.write(event, v, bulk)
	if err == nil {
		err = l.pw.flush()
	}
	l.last = time.Now()
	if err != nil {
		l.err = err
		l.cancel()
	}
}

func (l *liveStream) loop() {
	defer close(l.stopped)
	t := time.NewTimer(flushDelay)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.wake:
		case <-t.C:
		}
		l.mu.Lock()
		now := time.Now()
		var queue []segment
		if len(l.queue) > 0 && (l.newline || now.Sub(l.first) >= flushDelay) {
			queue = l.take()
		}
		idle := len(l.queue) == 0
		l.mu.Unlock()
		if queue != nil {
			l.flush(queue, false)
		} else if idle && now.Sub(l.last) >= keepaliveEvery {
			l.send(api.EventKeepalive, struct{}{}, nil)
		}
		l.mu.Lock()
		now = time.Now()
		next := keepaliveEvery - now.Sub(l.last)
		if len(l.queue) > 0 {
			next = flushDelay - now.Sub(l.first)
		}
		l.mu.Unlock()
		t.Reset(max(next, time.Millisecond))
	}
}

// take empties the queue and returns what it held; call with l.mu held.
func (l *liveStream) take() []segment {
	queue := l.queue
	l.queue, l.newline = nil, false
	return queue
}

// flush sends queued output (from take) as events; final: nothing
// follows, an incomplete sequence at the end is U+FFFD.
func (l *liveStream) flush(queue []segment, final bool) {
	for i, seg := range queue {
		l.sendText(seg.stream, seg.data, false)
		l.unsent.Add(-int64(len(seg.data)))
		queue[i].data = nil // sent: the collector may have it
	}
	if final {
		for stream := 1; stream <= 2; stream++ {
			l.sendText(stream, nil, true)
		}
	}
}

func (l *liveStream) sendText(stream int, data []byte, final bool) {
	event := api.EventStdout
	if stream == 2 {
		event = api.EventStderr
	}
	for len(data) > 0 || final {
		n := min(len(data), maxEventText)
		text := l.chunkers[stream].add(data[:n], final && n == len(data))
		data = data[n:]
		if text != "" {
			l.send(event, api.EventText{Text: text}, nil)
		}
		if len(data) == 0 {
			return
		}
	}
}

// end stops the live part and sends what is left of the output, every
// event of then (figures, exception, result) and the last one. It
// returns the first write error, if any.
func (l *liveStream) end(events []finalEvent) error {
	close(l.stop)
	if l.begun {
		<-l.stopped
	}
	l.mu.Lock()
	queue := l.take()
	l.mu.Unlock()
	l.flush(queue, true)
	for _, e := range events {
		l.send(e.event, e.data, e.bulk)
	}
	_ = l.rc.SetWriteDeadline(time.Time{}) // the connection may serve another request
	return l.err
}

// pace is how long a response may wait for its client (write_timeout
// and write_min_rate_kib): at most timeout at a time, and in all timeout
// plus the bytes written at rate bytes per second.
type pace struct {
	timeout time.Duration
	rate    int64
}

func (s *Server) pace() pace {
	return pace{s.cfg.WriteTimeout.Duration, s.cfg.WriteMinRateKiB << 10}
}

// paceWriter writes a response within its pace: a client that reads
// slower (a trickle of a few KiB a minute keeps a per-write deadline
// moving for ever) is dropped, its write failing, and with it what its
// request holds of the memory budget. Only the time spent blocked on the
// client counts: a stream that waits for its run's output does not.
type paceWriter struct {
	w  io.Writer
	rc *http.ResponseController
	pace
	written int64         // bytes the client was given
	waited  time.Duration // time spent waiting for it
}

// deadline sets the connection's write deadline for a write of n more
// bytes and returns when the wait began.
func (p *paceWriter) deadline(n int) time.Time {
	allowed := p.timeout + time.Duration(float64(p.written+int64(n))/float64(p.rate)*float64(time.Second)) - p.waited
	now := time.Now()
	_ = p.rc.SetWriteDeadline(now.Add(min(p.timeout, allowed)))
	return now
}

func (p *paceWriter) Write(b []byte) (int, error) {
	start := p.deadline(len(b))
	n, err := p.w.Write(b)
	p.waited += time.Since(start)
	p.written += int64(n)
	return n, err
}

// flush sends what the response writer buffered, within the same pace.
func (p *paceWriter) flush() error {
	start := p.deadline(0)
	err := p.rc.Flush()
	p.waited += time.Since(start)
	return err
}

type finalEvent struct {
	event string
	data  any
	bulk  *bulkSet
}

// bulkSet carries large byte contents (files, figures) of a response
// apart from it: in the value marshalled they are placeholders, and
// writeBulkJSON writes each one's base64 straight from its bytes, so a
// response is never built whole in memory. A placeholder holds a nonce a
// jail cannot guess, so output that looks like one is only output.
type bulkSet struct {
	nonce string
	data  [][]byte
	text  []bool // data[i] is output text, not base64's input
}

func newBulkSet() *bulkSet {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return &bulkSet{nonce: "\x00jaild-bulk-" + hex.EncodeToString(b[:]) + "-"}
}

// add returns the placeholder for data, to put where its base64 goes.
func (b *bulkSet) add(data []byte) string {
	if len(data) == 0 {
		return ""
	}
	b.data = append(b.data, data)
	b.text = append(b.text, false)
	return b.nonce + strconv.Itoa(len(b.data)-1)
}

// addText returns the placeholder for data as text: bytes that are not
// UTF-8 become U+FFFD as strings.ToValidUTF8 makes them.
func (b *bulkSet) addText(data []byte) string {
	if len(data) == 0 {
		return ""
	}
	b.data = append(b.data, data)
	b.text = append(b.text, true)
	return b.nonce + strconv.Itoa(len(b.data)-1)
}

// writeBulkJSON writes v as JSON (no HTML escaping, no newline) with each
// of bulk's placeholders replaced by the base64 of its data.
func writeBulkJSON(w io.Writer, v any, bulk *bulkSet) error {
	out, err := marshalNoEscape(v)
	if err != nil {
		return err
	}
	if bulk == nil || len(bulk.data) == 0 {
		_, err := w.Write(out)
		return err
	}
	// The placeholder as encoding/json writes it, after its opening quote.
	marker, _ := json.Marshal(bulk.nonce)
	marker = marker[1 : len(marker)-1]
	for {
		i := bytes.Index(out, marker)
		if i < 0 {
			_, err := w.Write(out)
			return err
		}
		rest := out[i+len(marker):]
		j := bytes.IndexByte(rest, '"')
		n, err := strconv.Atoi(string(rest[:max(j, 0)]))
		if j < 0 || err != nil || n < 0 || n >= len(bulk.data) {
			return errors.New("bulk JSON: malformed placeholder")
		}
		if _, err := w.Write(out[:i]); err != nil {
			return err
		}
		var err2 error
		if bulk.text[n] {
			err2 = writeJSONText(w, bulk.data[n])
		} else {
			enc := base64.NewEncoder(base64.StdEncoding, w)
			if _, err2 = enc.Write(bulk.data[n]); err2 == nil {
				err2 = enc.Close()
			}
		}
		if err2 != nil {
			return err2
		}
		out = rest[j:] // from the closing quote
	}
}

// writeJSONText writes data as the inside of a JSON string, as
// encoding/json would write strings.ToValidUTF8(data, "\uFFFD"), a slice
// at a time.
func writeJSONText(w io.Writer, data []byte) error {
	var c textChunker
	for len(data) > 0 {
		n := min(len(data), 32<<10)
		text := c.add(data[:n], n == len(data))
		data = data[n:]
		q, err := marshalNoEscape(text)
		if err != nil {
			return err
		}
		if _, err := w.Write(q[1 : len(q)-1]); err != nil {
			return err
		}
	}
	return nil
}

func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
