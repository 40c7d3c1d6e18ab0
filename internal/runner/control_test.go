package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"
)

func TestParseReport(t *testing.T) {
	good := map[string]Report{
		"started":    {Kind: ReportStarted},
		"exit 0 0":   {Kind: ReportExit},
		"exit 3 0":   {Kind: ReportExit, Code: 3},
		"exit 255 0": {Kind: ReportExit, Code: 255},
		"exit -1 9":  {Kind: ReportExit, Code: -1, Signal: 9},
		"exit -1 64": {Kind: ReportExit, Code: -1, Signal: 64},
	}
	for line, want := range good {
		if got, err := ParseReport([]byte(line)); err != nil || got != want {
			t.Errorf("ParseReport(%q) = %+v, %v; want %+v", line, got, err, want)
		}
	}
	for _, line := range []string{
		"", "start", "started ", " started", "Started", "started\r", "exit", "exit 0", "exit 0 0 0",
		"exit  0 0", "exit 0  0", "exit 0 0 ", "exit\t0 0", "EXIT 0 0", "exited 0 0",
		"exit 256 0", "exit -2 0", "exit 0 65", "exit 0 -1", "exit +1 0", "exit 01 0", "exit -0 0",
		"exit 0x1 0", "exit 1e2 0", "exit 99999999999999999999 0", "exit 0 9999", "exit - 0", "exit 0 0\n",
		"exit 0 0\x00", "exit ٣ 0", "started" + strings.Repeat(" ", MaxReportBytes),
	} {
		if got, err := ParseReport([]byte(line)); !errors.Is(err, ErrBadReport) {
			t.Errorf("ParseReport(%q) = %+v, %v; want ErrBadReport", line, got, err)
		}
	}
}

// The commands are one byte each, in the order sent; once init is gone
// (the pipe's read end closed) a command is an error, not a signal.
func TestControlCommands(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	c := NewControl(w, strings.NewReader(""))
	for _, send := range []func() error{c.SessionMode, c.Interrupt, c.Kill, c.Restart} {
		if err := send(); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, 16)
	n, err := r.Read(got)
	if err != nil || string(got[:n]) != "sikr" {
		t.Fatalf("init read %q, %v; want \"sikr\"", got[:n], err)
	}
	r.Close()
	if err := c.Kill(); err == nil {
		t.Error("a command with no reader succeeded")
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestControlReports(t *testing.T) {
	read := func(c *Control) ([]Report, error) {
		var reps []Report
		for {
			rep, err := c.ReadReport()
			if err != nil {
				return reps, err
			}
			reps = append(reps, rep)
		}
	}
	want := []Report{{Kind: ReportExit, Code: 1}, {Kind: ReportStarted}, {Kind: ReportExit, Code: -1, Signal: 9}}
	for name, r := range map[string]io.Reader{
		"whole":      strings.NewReader("exit 1 0\nstarted\nexit -1 9\n"),
		"bytewise":   iotest.OneByteReader(strings.NewReader("exit 1 0\nstarted\nexit -1 9\n")),
		"with error": iotest.DataErrReader(strings.NewReader("exit 1 0\nstarted\nexit -1 9\n")),
	} {
		c := NewControl(io.Discard, r)
		reps, err := read(c)
		if fmt.Sprint(reps) != fmt.Sprint(want) || !errors.Is(err, io.EOF) {
			t.Errorf("%s: %+v, %v; want %+v and io.EOF", name, reps, err, want)
		}
	}

	for _, c := range []struct {
		name, data string
		reps       int
		err        error
	}{
		{"cut off", "started\nexit 1", 1, io.ErrUnexpectedEOF},
		{"malformed", "started\nexit x y\nstarted\n", 1, ErrBadReport},
		{"empty line", "\nstarted\n", 0, ErrBadReport},
		{"at the bound", "started" + strings.Repeat(" ", MaxReportBytes-len("started")-1) + "\n", 0, ErrBadReport},
		{"endless", "started\n" + strings.Repeat("x", 1<<20), 1, ErrBadReport},
	} {
		cr := &countingReader{r: strings.NewReader(c.data)}
		ctl := NewControl(io.Discard, cr)
		reps, err := read(ctl)
		if len(reps) != c.reps || !errors.Is(err, c.err) {
			t.Errorf("%s: %d reports, %v; want %d and %v", c.name, len(reps), err, c.reps, c.err)
		}
		// An error is for good, and nothing past the bound was read.
		if _, again := ctl.ReadReport(); !errors.Is(again, c.err) {
			t.Errorf("%s: after %v the next read gave %v", c.name, err, again)
		}
		if cr.n > len("started\n")+MaxReportBytes {
			t.Errorf("%s: read %d bytes", c.name, cr.n)
		}
	}
}

// FuzzParseReport: init's reports come from the jail. Whatever the bytes,
// the parser accepts only what init writes (it prints back the same), and
// the channel's reader neither panics nor reads past its bound.
func FuzzParseReport(f *testing.F) {
	for _, s := range []string{"started", "exit 0 0", "exit -1 9", "exit 256 0", "exit 01 0", "exit -0 0", "exit 1 2 3"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rep, err := ParseReport(data)
		switch {
		case err != nil:
			if !errors.Is(err, ErrBadReport) {
				t.Fatalf("error %v not of class ErrBadReport", err)
			}
		case rep.Kind == ReportStarted:
			if string(data) != "started" || rep.Code != 0 || rep.Signal != 0 {
				t.Fatalf("%q parsed as %+v", data, rep)
			}
		case rep.Kind == ReportExit:
			if fmt.Sprintf("exit %d %d", rep.Code, rep.Signal) != string(data) || rep.Code < -1 || rep.Code > 255 || rep.Signal < 0 || rep.Signal > 64 {
				t.Fatalf("%q parsed as %+v", data, rep)
			}
		default:
			t.Fatalf("%q parsed as %+v", data, rep)
		}

		cr := &countingReader{r: bytes.NewReader(data)}
		c := NewControl(io.Discard, cr)
		consumed := 0 // the reports' bytes, newlines included
		for {
			rep, err := c.ReadReport()
			if err != nil {
				break
			}
			i := bytes.IndexByte(data[consumed:], '\n')
			if i < 0 || rep.Kind != ReportStarted && rep.Kind != ReportExit {
				t.Fatalf("report %+v after %d bytes of %q", rep, consumed, data)
			}
			consumed += i + 1
		}
		if cr.n > consumed+MaxReportBytes {
			t.Fatalf("read %d bytes; the reports took %d", cr.n, consumed)
		}
	})
}
