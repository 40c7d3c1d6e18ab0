package runner

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/jaild/jaild/internal/run/spec"
)

func TestParseRecords(t *testing.T) {
	data := []byte(`garbage
{"type":"exception","exc_type":"Fake","message":"forged by user code","line":1}
{"type":"exception","exc_type":"` + strings.Repeat("T", 1000) + `","message":"x","line":99}
{"type":"result","repr":"42"}
{"type":"exception","exc_type":"ZeroDivisionError","message":"division by zero","line":3}
{"type":"exception","exc_type":"","message":"ignored"}
` + "\xff\xfe not json\n")
	recs := ParseRecords(data, 3)
	exc, res := recs.Exception, recs.Result
	if exc == nil || exc.Type != "ZeroDivisionError" || exc.Line != 3 || exc.Message != "division by zero" {
		t.Errorf("exception = %+v, want the last well-formed record", exc)
	}
	if res == nil || *res != "42" {
		t.Errorf("result = %v, want 42", res)
	}
	exc = ParseRecords([]byte(`{"type":"exception","exc_type":"`+strings.Repeat("T", 1000)+`","message":"`+strings.Repeat("m", 10000)+`","line":99}`), 3).Exception
	if exc == nil || len(exc.Type) > maxExcTypeBytes || len(exc.Message) > maxExcMsgBytes || exc.Line != 0 {
		t.Errorf("oversized record not bounded: type %d bytes, message %d bytes, line %d", len(exc.Type), len(exc.Message), exc.Line)
	}
}

func TestClip(t *testing.T) {
	s := strings.Repeat("é", 100) // 2 bytes each
	got := clip(s, 51)
	if len(got) > 51 || !strings.HasSuffix(got, truncationMarker) || !strings.HasPrefix(got, "éé") {
		t.Errorf("clip = %q (%d bytes)", got, len(got))
	}
	if clip("short", 10) != "short" {
		t.Error("clip changed a short string")
	}
}

func TestCapture(t *testing.T) {
	calls := 0
	c := &Capture{Limit: 10, OnOverflow: func() { calls++ }}
	c.Drain(strings.NewReader(strings.Repeat("x", 100000)))
	if len(c.Buf) != 10 || !c.Truncated || calls != 1 {
		t.Errorf("capture: %d bytes, truncated=%v, overflow calls=%d", len(c.Buf), c.Truncated, calls)
	}
	c = &Capture{Limit: 10}
	c.Drain(strings.NewReader("0123456789"))
	if string(c.Buf) != "0123456789" || c.Truncated {
		t.Errorf("capture at exactly the limit: %q truncated=%v", c.Buf, c.Truncated)
	}
}

// FuzzParseRecords: the runner's side channel is written by user code too;
// whatever it holds, what comes out is bounded.
func FuzzParseRecords(f *testing.F) {
	f.Add([]byte(`{"type":"exception","exc_type":"E","message":"m","line":2}` + "\n" + `{"type":"result","repr":"1"}`))
	f.Add([]byte("\xff\n{\n{\"type\":\"result\",\"repr\":null}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs := ParseRecords(data, 10)
		exc, res := recs.Exception, recs.Result
		if exc != nil && (len(exc.Type) > maxExcTypeBytes || len(exc.Message) > maxExcMsgBytes || exc.Line < 0 || exc.Line > 10 || exc.Type == "") {
			t.Fatalf("unbounded exception %+v", exc)
		}
		if recs.Signal < 0 || recs.Signal > 64 {
			t.Fatalf("signal %d", recs.Signal)
		}
		if res != nil && len(*res) > maxResultBytes {
			t.Fatalf("unbounded result of %d bytes", len(*res))
		}
	})
}

type failAfter struct {
	got []byte
	n   int
}

func (w *failAfter) Write(p []byte) (int, error) {
	if len(w.got)+len(p) > w.n {
		return 0, errors.New("consumer gone")
	}
	w.got = append(w.got, p...)
	return len(p), nil
}

// A live sink sees exactly the bytes that are kept, and one that fails is
// detached without stopping the capture.
func TestCaptureSink(t *testing.T) {
	sink := &bytes.Buffer{}
	c := &Capture{Limit: 5, Sink: sink}
	c.Drain(strings.NewReader("hello, world"))
	if sink.String() != "hello" || string(c.Buf) != "hello" || !c.Truncated {
		t.Errorf("sink %q, buffer %q, truncated %v", sink, c.Buf, c.Truncated)
	}
	f := &failAfter{n: 3}
	c = &Capture{Limit: 1 << 20, Sink: f}
	c.Drain(iotest.OneByteReader(strings.NewReader("abcdef")))
	if string(c.Buf) != "abcdef" || string(f.got) != "abc" || c.SinkErr == nil {
		t.Errorf("buffer %q, sink got %q, err %v", c.Buf, f.got, c.SinkErr)
	}
}

func TestEncodeJob(t *testing.T) {
	b := EncodeJob(Job{Code: "print('a\nb')\n", More: true})
	if bytes.Count(b, []byte("\n")) != 1 || b[len(b)-1] != '\n' || !bytes.Contains(b, []byte(`"more":true`)) {
		t.Errorf("frame %q", b)
	}
	if bytes.Contains(EncodeJob(Job{Code: "1"}), []byte("more")) {
		t.Error("a last job says more")
	}
}

func TestParseJobRecords(t *testing.T) {
	data := []byte(`{"type":"result","repr":"41"}
{"type":"end","status":0}
{"type":"exception","exc_type":"ZeroDivisionError","message":"division by zero","line":1}
{"type":"end","status":1}
{"type":"end","status":"x"}
{"type":"exception","exc_type":"E","message":"last","line":3}
`)
	jobs := ParseJobRecords(data, []int{1, 1, 2})
	if len(jobs) != 3 {
		t.Fatalf("%d jobs: %+v", len(jobs), jobs)
	}
	if !jobs[0].Ended || jobs[0].Status != 0 || jobs[0].Result == nil || *jobs[0].Result != "41" || jobs[0].Exception != nil {
		t.Errorf("job 0: %+v", jobs[0])
	}
	if !jobs[1].Ended || jobs[1].Status != 1 || jobs[1].Exception == nil || jobs[1].Exception.Line != 1 {
		t.Errorf("job 1: %+v", jobs[1])
	}
	// The last job has no end record; its line 3 is beyond its 2 lines.
	if jobs[2].Ended || jobs[2].Exception == nil || jobs[2].Exception.Line != 0 {
		t.Errorf("job 2: %+v", jobs[2])
	}
	// CRLF lines split at the same places.
	crlf := ParseJobRecords(bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n")), []int{1, 1, 2})
	if len(crlf) != 3 || !crlf[1].Ended || crlf[1].Exception == nil || crlf[2].Exception == nil {
		t.Errorf("CRLF records: %+v", crlf)
	}
	if n := len(ParseJobRecords(nil, nil)); n != 0 {
		t.Errorf("no records gave %d jobs", n)
	}
}

// FuzzParseJobRecords: however the records are split, every job's are
// bounded.
func FuzzParseJobRecords(f *testing.F) {
	f.Add([]byte("{\"type\":\"end\",\"status\":0}\n{\"type\":\"end\",\"status\":1}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, r := range ParseJobRecords(data, []int{5}) {
			if e := r.Exception; e != nil && (len(e.Type) > maxExcTypeBytes || len(e.Message) > maxExcMsgBytes || e.Line > 5) {
				t.Fatalf("unbounded %+v", e)
			}
			if r.Status < 0 || r.Status > 255 {
				t.Fatalf("status %d", r.Status)
			}
		}
	})
}

func TestParseRecordsOutputs(t *testing.T) {
	data := []byte(`{"type":"display","name":"output-1.json"}
{"type":"result","repr":"forged","name":"output-9.json"}
{"type":"figure","name":"figure-1.png","text":"` + strings.Repeat("F", 1000) + `"}
{"type":"display","name":"../etc/passwd"}
{"type":"display","name":"output-01.json"}
{"type":"display","name":"output-1.json"}
{"type":"figure","name":"figure-1.png","text":"again"}
{"type":"figure","name":"output-2.json"}
{"type":"display","name":"output-2.json"}
{"type":"result","repr":"R","name":"figure-2.png"}
`)
	recs := ParseRecords(data, 1)
	var got []string
	for _, o := range recs.Outputs {
		got = append(got, o.Type+" "+o.Name+o.Figure)
	}
	want := "display_data output-1.json|display_data figure-1.png|display_data output-2.json|execute_result "
	if strings.Join(got, "|") != want {
		t.Errorf("outputs %q\nwant %q", strings.Join(got, "|"), want)
	}
	if len(recs.Outputs[1].Text) > maxFigureTextBytes {
		t.Errorf("figure text of %d bytes", len(recs.Outputs[1].Text))
	}
	if recs.Result == nil || *recs.Result != "R" {
		t.Errorf("result %v", recs.Result)
	}
	var many bytes.Buffer
	for i := range 100 {
		many.WriteString(`{"type":"display","name":"output-` + strings.Repeat("1", 1) + string(rune('0'+i%10)) + string(rune('0'+i/10)) + `.json"}` + "\n")
	}
	if n := len(ParseRecords(many.Bytes(), 1).Outputs); n != spec.MaxOutputs {
		t.Errorf("%d outputs kept of 100, want %d", n, spec.MaxOutputs)
	}
	for name, ok := range map[string]bool{"output-1.json": true, "output-123456.json": true, "output-0.json": false, "output-1234567.json": false, "output-.json": false, "output-1.png": false, "output-x.json": false} {
		if OutputName(name, false) != ok {
			t.Errorf("OutputName(%q) = %v", name, !ok)
		}
	}
	if !OutputName("figure-3.png", true) || OutputName("figure-3.json", true) {
		t.Error("OutputName for figures")
	}
}
