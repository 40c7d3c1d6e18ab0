package runner

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// The control channel of a session's init (rootfs/runner/init.c): the
// daemon's commands on fd 5, one byte each, and init's reports on fd 6,
// one line each. Init keeps both from the interpreter and user code, but
// it runs in the jail: its reports are bounded and parsed strictly all
// the same.

// MaxReportBytes bounds one of init's reports, its newline included
// (init writes them from a 64-byte buffer).
const MaxReportBytes = 64

// ErrBadReport is the class of a report that is malformed or longer than
// MaxReportBytes: init no longer speaks the protocol.
var ErrBadReport = errors.New("bad report from init")

// ReportKind says what a report of init is.
type ReportKind int

// Init's reports.
const (
	// ReportExit is "exit CODE SIGNAL": the interpreter ended, with its
	// exit status (-1 after a signal) or the signal that ended it (0 for
	// none).
	ReportExit ReportKind = iota + 1
	// ReportStarted is "started": a fresh interpreter was started after
	// a Restart command.
	ReportStarted
)

// Report is one of init's reports, parsed.
type Report struct {
	Kind ReportKind
	// Code and Signal are those of a ReportExit: Code in -1..255, Signal
	// in 0..64.
	Code, Signal int
}

// ParseReport parses one of init's reports, without its newline. An error
// is of class ErrBadReport.
func ParseReport(line []byte) (Report, error) {
	if len(line) >= MaxReportBytes {
		return Report{}, fmt.Errorf("%w: %d bytes", ErrBadReport, len(line))
	}
	if string(line) == "started" {
		return Report{Kind: ReportStarted}, nil
	}
	f := bytes.Split(line, []byte{' '})
	if len(f) != 3 || string(f[0]) != "exit" {
		return Report{}, fmt.Errorf("%w: %q", ErrBadReport, line)
	}
	code, err1 := decimal(f[1], -1, 255)
	sig, err2 := decimal(f[2], 0, 64)
	if err1 != nil || err2 != nil {
		return Report{}, fmt.Errorf("%w: %q", ErrBadReport, line)
	}
	return Report{Kind: ReportExit, Code: code, Signal: sig}, nil
}

// decimal parses b as init's %d writes an integer within lo..hi: its
// canonical form only (no "+", no leading zeros, no "-0").
func decimal(b []byte, lo, hi int) (int, error) {
	if len(b) > 4 {
		return 0, strconv.ErrRange
	}
	n, err := strconv.Atoi(string(b))
	if err != nil || strconv.Itoa(n) != string(b) || n < lo || n > hi {
		return 0, strconv.ErrSyntax
	}
	return n, nil
}

// Control is the daemon's end of a session init's control channel: the
// write end of its commands pipe (fd 5) and the read end of its reports
// pipe (fd 6). The commands are safe for concurrent use; ReadReport is
// for one reader.
type Control struct {
	cmds    io.Writer
	reports *bufio.Reader
	err     error // ReadReport's first error, which is for good
}

// NewControl is the control channel over the commands pipe's write end
// and the reports pipe's read end.
func NewControl(cmds io.Writer, reports io.Reader) *Control {
	return &Control{cmds: cmds, reports: bufio.NewReaderSize(reports, MaxReportBytes)}
}

// SessionMode tells init that an interpreter's end is not the jail's:
// init kills what is left of it, reports its exit and waits for Restart.
func (c *Control) SessionMode() error { return c.send('s') }

// Interrupt has init send SIGINT to the interpreter.
func (c *Control) Interrupt() error { return c.send('i') }

// Kill has init send SIGKILL to the interpreter.
func (c *Control) Kill() error { return c.send('k') }

// Restart has init start a fresh interpreter after the last one's exit
// report; init reports "started".
func (c *Control) Restart() error { return c.send('r') }

// Reexec has init execute itself afresh in place, keeping the interpreter
// (a restored session's init; see init.c, 'x'); init reports "started".
// Only an image with FeatureReexec knows it.
func (c *Control) Reexec() error { return c.send('x') }

// FeatureReexec is the runner feature (rootfs.Manifest.RunnerFeatures) of
// an init that knows Reexec.
const FeatureReexec = "init_reexec"

// send writes one command; an error means the jail is going.
func (c *Control) send(cmd byte) error {
	if _, err := c.cmds.Write([]byte{cmd}); err != nil {
		return fmt.Errorf("command %q: %w", cmd, err)
	}
	return nil
}

// ReadReport reads init's next report. Errors: io.EOF when init closed
// the pipe between reports; io.ErrUnexpectedEOF when it closed it within
// one; of class ErrBadReport for a malformed report or one longer than
// MaxReportBytes (nothing beyond the bound is read); else the pipe's. After
// an error every call returns it: the channel cannot be resynchronised.
func (c *Control) ReadReport() (Report, error) {
	if c.err != nil {
		return Report{}, c.err
	}
	line, err := c.reports.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		err = fmt.Errorf("%w: longer than %d bytes", ErrBadReport, MaxReportBytes)
	case errors.Is(err, io.EOF) && len(line) > 0:
		err = io.ErrUnexpectedEOF
	case err == nil:
		var r Report
		if r, err = ParseReport(line[:len(line)-1]); err == nil {
			return r, nil
		}
	}
	c.err = err
	return Report{}, err
}
