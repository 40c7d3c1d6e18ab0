// Package runner is the host's side of the byte protocols with a jail's
// processes: the job the Python runner in the image (rootfs/runner/runner.py)
// reads from fd 3, the JSON-lines records it writes on fd 4, the bounded
// capture of a jail's output streams and, for a session, the sync of its
// long-lived output pipes (Stream) and its init's control channel (fd 5
// commands, fd 6 reports; Control). Everything read here comes from a jail,
// where user code can write to the same pipes, so it is bounded and
// validated. It needs no root and knows nothing of containers: its tests
// run on pipes.
package runner

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/jaild/jaild/internal/run/spec"
)

// Job is one job for the runner. Jobs go on fd 3 one per line (EncodeJob);
// a job without More is the last, and the host closes fd 3 after it. After
// a job with More the runner writes an "end" record and reads the next:
// the user's globals, imports and files persist (see runner.py).
type Job struct {
	Code                string `json:"code"`
	Filename            string `json:"filename"`
	LastLineInteractive bool   `json:"last_line_interactive"`
	FiguresDir          string `json:"figures_dir"`
	MaxFigures          int    `json:"max_figures"`
	// MaxOutputs bounds the job's rich outputs (display() and the last
	// expression's bundle), written as output-N.json in FiguresDir.
	MaxOutputs int               `json:"max_outputs"`
	Env        map[string]string `json:"env,omitempty"`
	// Rlimits are lowered by the runner in the user's process before the
	// code runs: a warm jail was created with higher ones. Only the first
	// job's apply (rlimits can only be lowered).
	Rlimits map[string][2]uint64 `json:"rlimits"`
	// More says another job may follow this one.
	More bool `json:"more,omitempty"`
	// Session marks a call of a session (implies More): a SystemExit ends
	// only the call, Stdin is the call's sys.stdin, CPUSeconds its CPU
	// budget, figures are numbered afresh, and the end record carries
	// Call. See runner.py.
	Session    bool    `json:"session,omitempty"`
	Call       int     `json:"call,omitempty"`
	Stdin      *string `json:"stdin,omitempty"`
	CPUSeconds int     `json:"cpu_s,omitempty"`
	// Exec, when set, runs no code: the runner applies Env and Rlimits and
	// executes this argv in its place (an absolute path first), with fds
	// 0-2 only. Nothing may follow it. See runner.py.
	Exec []string `json:"exec,omitempty"`
	// Records, in a call of a restored session, is the inode of the
	// records pipe the runner's fd 4 now is (a restore gives it a new
	// one): the runner takes that pipe as its records pipe again (runner
	// feature "records"). 0: unchanged.
	Records uint64 `json:"records,omitempty"`
}

// FeatureRecords is the runner feature (rootfs.Manifest.RunnerFeatures)
// of Job.Records: only such an image's sessions can pause.
const FeatureRecords = "records"

// Latin1 carries bytes in a JSON string as the code points 0-255, the form
// of Job.Stdin (the runner encodes them back with latin-1).
func Latin1(b []byte) string {
	r := make([]rune, len(b))
	for i, c := range b {
		r[i] = rune(c)
	}
	return string(r)
}

// MaxJobBytes bounds one job's line on fd 3 (the runner's MAX_JOB_BYTES).
const MaxJobBytes = 64 << 20

// EncodeJob frames j for fd 3: one line of JSON (encoding/json escapes
// every newline inside strings).
func EncodeJob(j Job) []byte {
	b, err := json.Marshal(j)
	if err != nil {
		// Only strings, bools, ints and maps of them: Marshal cannot fail.
		panic("runner: encode job: " + err.Error())
	}
	return append(b, '\n')
}

// Capture reads a stream from the jail into memory, keeping at most Limit
// bytes. When the stream goes past the limit, it marks itself truncated,
// calls OnOverflow once, and keeps draining (and discarding) so that the
// writer is never blocked on a full pipe. Sink, when set, receives every
// kept chunk as it arrives (a live consumer such as a stream); an error
// from it detaches it and is kept in SinkErr. With Discard, kept bytes go
// only to Sink (Buf stays empty): a streamed run holds its output once.
type Capture struct {
	Buf        []byte
	Limit      int64
	Truncated  bool
	OnOverflow func()
	Sink       io.Writer
	SinkErr    error
	Discard    bool
	kept       int64
}

func (c *Capture) send(p []byte) {
	if c.Sink == nil || len(p) == 0 {
		return
	}
	if _, err := c.Sink.Write(p); err != nil {
		c.Sink, c.SinkErr = nil, err
	}
}

// Drain reads r to its end (or first error) into the capture. It never
// fails: what a jail writes is kept up to the limit and the rest dropped.
func (c *Capture) Drain(r io.Reader) {
	chunk := make([]byte, 32<<10)
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			c.Add(chunk[:n])
		}
		if err != nil {
			return
		}
	}
}

// Add takes one chunk of the stream, as Drain does.
func (c *Capture) Add(p []byte) {
	room := c.Limit - c.kept
	if int64(len(p)) > room {
		room = max(room, 0)
		c.keep(p[:room])
		if !c.Truncated {
			c.Truncated = true
			if c.OnOverflow != nil {
				c.OnOverflow()
			}
		}
		return
	}
	c.keep(p)
}

func (c *Capture) keep(p []byte) {
	c.kept += int64(len(p))
	if !c.Discard {
		c.Buf = append(c.Buf, p...)
	}
	c.send(p)
}

// Bounds on the runner's side channel.
const (
	MaxRecordBytes   = 256 << 10 // all records of a job together, and each line
	maxExcTypeBytes  = 256
	maxExcMsgBytes   = 4 << 10
	maxResultBytes   = 64 << 10
	truncationMarker = "…"
)

type record struct {
	Type    string           `json:"type"`
	ExcType string           `json:"exc_type"`
	Message string           `json:"message"`
	Line    *json.RawMessage `json:"line"`
	Repr    *string          `json:"repr"`
	Name    string           `json:"name"`
	Text    string           `json:"text"`
	Signal  int              `json:"signal"`
	Status  *int             `json:"status"`
	Call    int              `json:"call"`
}

// StartOf reports whether line is a session call's start record, with
// its call: the call's code begins, and SIGINT interrupts it from now on.
// Forged, it can only misplace its own session's interrupt.
func StartOf(line []byte) (call int, ok bool) {
	var r record
	if json.Unmarshal(line, &r) != nil || r.Type != "start" || r.Call <= 0 {
		return 0, false
	}
	return r.Call, true
}

// EndOf reports whether line is an end record, with its status and call
// (0 outside sessions). Such a line may be forged by user code: it can
// only misplace its own records.
func EndOf(line []byte) (status, call int, ok bool) {
	var r record
	if json.Unmarshal(line, &r) != nil || r.Type != "end" || r.Status == nil || *r.Status < 0 || *r.Status > 255 {
		return 0, 0, false
	}
	return *r.Status, r.Call, true
}

// Exception is the runner's record of an uncaught exception, validated.
type Exception = spec.Exception

// Records is what the runner reported for one job, validated.
type Records struct {
	Exception *Exception
	Result    *string // repr of the last line's value (last_line_interactive)
	Signal    int     // the user's process died by this signal, by the runner's word
	// Ended says the runner wrote the job's "end" record (a job with
	// More), with Status: 0, 1 for an uncaught exception.
	Ended  bool
	Status int
	// Outputs are the job's rich outputs in the order of their records
	// (display, figure, result), at most spec.MaxOutputs: where to find
	// each, nothing read yet.
	Outputs []spec.OutputRef
}

// FeatureOutputs is the runner feature of rich outputs: display() and
// the output-N.json files their records name.
const FeatureOutputs = "outputs"

const maxFigureTextBytes = 256

// OutputName reports whether name is a rich output's file, output-N.json
// (N from 1, no leading zeros), or with png a figure's, figure-N.png.
func OutputName(name string, png bool) bool {
	prefix, suffix := "output-", ".json"
	if png {
		prefix, suffix = "figure-", ".png"
	}
	num, ok := strings.CutPrefix(name, prefix)
	num, ok2 := strings.CutSuffix(num, suffix)
	if !ok || !ok2 || len(num) == 0 || len(num) > 6 || num[0] == '0' {
		return false
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// addOutput appends ref to out.Outputs unless its file is there already
// or the outputs are full; a later result replaces an earlier one (the
// runner writes its own last).
func (out *Records) addOutput(ref spec.OutputRef) {
	for i, o := range out.Outputs {
		if ref.Type == spec.OutputResult && o.Type == spec.OutputResult {
			out.Outputs = append(out.Outputs[:i], out.Outputs[i+1:]...)
			break
		}
	}
	for _, o := range out.Outputs {
		if (ref.Name != "" && o.Name == ref.Name) || (ref.Figure != "" && o.Figure == ref.Figure) {
			return
		}
	}
	if len(out.Outputs) < spec.MaxOutputs {
		out.Outputs = append(out.Outputs, ref)
	}
}

// ParseRecords decodes the runner's JSON-lines side channel. Its bytes come
// from the jail, where user code can write to the same pipe, so every line
// is validated and bounded and anything malformed is ignored. codeLines
// bounds the exception's line number. The last
// well-formed record of each type wins (the runner writes its own last).
func ParseRecords(data []byte, codeLines int) Records {
	var out Records
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), MaxRecordBytes)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue
		}
		switch r.Type {
		case "exception":
			if r.ExcType == "" {
				continue
			}
			e := &Exception{
				Type:    clip(r.ExcType, maxExcTypeBytes),
				Message: clip(r.Message, maxExcMsgBytes),
			}
			if r.Line != nil {
				var n int
				if json.Unmarshal(*r.Line, &n) == nil && n > 0 && n <= codeLines {
					e.Line = n
				}
			}
			out.Exception = e
		case "result":
			if r.Repr != nil {
				s := clip(*r.Repr, maxResultBytes)
				out.Result = &s
				ref := spec.OutputRef{Type: spec.OutputResult}
				if OutputName(r.Name, false) {
					ref.Name = r.Name
				}
				out.addOutput(ref)
			}
		case "display":
			if OutputName(r.Name, false) {
				out.addOutput(spec.OutputRef{Type: spec.OutputDisplay, Name: r.Name})
			}
		case "figure":
			if OutputName(r.Name, true) {
				out.addOutput(spec.OutputRef{Type: spec.OutputDisplay, Figure: r.Name, Text: clip(r.Text, maxFigureTextBytes)})
			}
		case "exit":
			if r.Signal > 0 && r.Signal < 65 {
				out.Signal = r.Signal
			}
		case "end":
			if r.Status != nil && *r.Status >= 0 && *r.Status < 256 {
				out.Ended, out.Status = true, *r.Status
			}
		}
	}
	return out
}

// clip bounds s to n bytes without splitting a UTF-8 sequence and with a
// marker when something was cut. json.Unmarshal already replaced invalid
// UTF-8 with U+FFFD.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	cut := n - len(truncationMarker)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + truncationMarker
}

// ParseJobRecords splits the records of a runner that took several jobs at
// their "end" records and parses each job's; codeLines[i] bounds job i's
// line numbers (the last value serves later jobs). Records after the last
// "end" are the last job's. User code can write to fd 4 too, so a forged
// "end" can misplace its own process's records, nothing more; every job's
// records stay bounded by ParseRecords.
func ParseJobRecords(data []byte, codeLines []int) []Records {
	var out []Records
	lines := func(i int) int {
		if len(codeLines) == 0 {
			return 0
		}
		return codeLines[min(i, len(codeLines)-1)]
	}
	// Split on the raw bytes: a job's records are exactly the lines up to
	// and including its end record, whatever the lines hold.
	start := 0
	for pos := 0; pos < len(data); {
		end := len(data)
		if i := bytes.IndexByte(data[pos:], '\n'); i >= 0 {
			end = pos + i + 1
		}
		var r record
		if json.Unmarshal(data[pos:end], &r) == nil && r.Type == "end" && r.Status != nil {
			out = append(out, ParseRecords(data[start:end], lines(len(out))))
			start = end
		}
		pos = end
	}
	if start < len(data) {
		out = append(out, ParseRecords(data[start:], lines(len(out))))
	}
	return out
}

// ReadBoundedLine reads one line of r without its newline, for a pipe that
// stays open across jobs (a session's records). A line longer than limit
// is read to its end and returned empty; r's buffer bounds what is held
// besides the line.
func ReadBoundedLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	over := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !over {
			if len(line)+len(chunk) > limit+1 {
				over, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimSuffix(line, []byte{'\n'})
		if over || len(line) > limit { // the latter: a last line without its newline
			line = nil
		}
		return line, err
	}
}
