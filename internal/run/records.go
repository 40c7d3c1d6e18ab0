package run

import (
	"bufio"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/runner"
)

// recordsPipe is a session's records pipe as its reader reads it, made
// so that another goroutine can wait until every record written to the
// pipe so far has been passed on (drained).
//
// The reader holds mu from each read system call until it waits for the
// pipe to be readable again: while it parses what it read and passes the
// lines on, and through the next read (bufio reads again only once no
// whole line is left in its buffer). So whoever holds mu finds every byte
// taken from the pipe already passed on as lines, but for a line not yet
// whole; and when the pipe holds nothing (FIONREAD, TIOCINQ on Linux), every line written
// to it so far has been passed on. A record is written in one write()
// shorter than PIPE_BUF: it is never half in the pipe.
type recordsPipe struct {
	mu sync.Mutex
	rc syscall.RawConn
}

func newRecordsPipe(f *os.File) (*recordsPipe, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &recordsPipe{rc: rc}, nil
}

// Read is the reader's, called with mu held; it returns with mu held. It
// lets mu go only while it waits for the pipe to become readable.
func (p *recordsPipe) Read(b []byte) (int, error) {
	var n int
	var err error
	p.mu.Unlock()
	locked := false
	rerr := p.rc.Read(func(fd uintptr) bool {
		p.mu.Lock()
		for {
			n, err = unix.Read(int(fd), b)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		if errors.Is(err, unix.EAGAIN) {
			p.mu.Unlock()
			return false // wait for the pipe, mu free
		}
		locked = true
		return true
	})
	if !locked {
		p.mu.Lock()
	}
	switch {
	case rerr != nil:
		return 0, rerr
	case err != nil:
		return 0, err
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readLines reads the pipe's lines, each bounded, until its end, and
// passes them to deliver (with mu held).
func (p *recordsPipe) readLines(deliver func([]byte)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := bufio.NewReaderSize(p, 64<<10)
	for {
		line, err := runner.ReadBoundedLine(r, runner.MaxRecordBytes)
		if len(line) > 0 {
			deliver(line)
		}
		if err != nil {
			return
		}
	}
}

// drained waits until every record written to the pipe so far has been
// passed on, then runs then (with mu held: the reader passes nothing on
// meanwhile) and reports true. It gives up after wait, or when stop is
// closed, or when the pipe cannot be asked (closed: the session is
// going), and reports false.
func (p *recordsPipe) drained(wait time.Duration, stop <-chan struct{}, then func()) bool {
	deadline := time.Now().Add(wait)
	for {
		p.mu.Lock()
		left, ierr := 0, error(nil)
		cerr := p.rc.Control(func(fd uintptr) {
			left, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
		})
		if cerr == nil && ierr == nil && left == 0 {
			then()
			p.mu.Unlock()
			return true
		}
		p.mu.Unlock()
		if cerr != nil || ierr != nil || time.Now().After(deadline) {
			return false
		}
		select {
		case <-stop:
			return false
		case <-time.After(time.Millisecond):
		}
	}
}
