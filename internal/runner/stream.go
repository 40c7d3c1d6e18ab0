package runner

import (
	"errors"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Stream drains one of a session's output pipes (stdout or stderr) for
// the session's whole life into the Capture attached, the call in
// progress's; what comes between calls is dropped. The pipes outlive
// calls, so a call's share is what the pipe holds when its end record
// arrives (the runner flushes before writing it): Sync takes exactly that.
type Stream struct {
	f    *os.File
	mu   sync.Mutex
	cap  *Capture
	acks chan chan struct{} // a Sync waiting for the loop
	eof  chan struct{}      // closed when the loop ended
}

// NewStream is a stream over the read end of a pipe; Run drains it.
func NewStream(f *os.File) *Stream {
	return &Stream{f: f, acks: make(chan chan struct{}, 1), eof: make(chan struct{})}
}

// Attach makes c the capture of what is read from now on; nil drops it.
func (s *Stream) Attach(c *Capture) {
	s.mu.Lock()
	s.cap = c
	s.mu.Unlock()
}

func (s *Stream) deliver(p []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cap != nil {
		s.cap.Add(p)
	}
}

// Run reads the pipe until its end or an error other than a Sync's
// deadline; run it in a goroutine of its own.
func (s *Stream) Run() {
	buf := make([]byte, 32<<10)
	for {
		n, err := s.f.Read(buf)
		if n > 0 {
			s.deliver(buf[:n])
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			close(s.eof) // the session is over
			return
		}
		// A sync: what is in the pipe now is the call's.
		if rc, err := s.f.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) {
				for {
					n, err := unix.Read(int(fd), buf)
					if n > 0 {
						s.deliver(buf[:n])
					}
					if n <= 0 || err != nil {
						return
					}
				}
			})
		}
		_ = s.f.SetReadDeadline(time.Time{})
		select {
		case ack := <-s.acks:
			close(ack)
		default:
		}
	}
}

// Sync returns once everything written to the pipe before it was called
// is delivered, the pipe ended, or wait passed (a writer that never stops
// keeps the pipe from ever being empty).
func (s *Stream) Sync(wait time.Duration) {
	select {
	case <-s.acks: // left by a sync that gave up
	default:
	}
	ack := make(chan struct{})
	s.acks <- ack
	_ = s.f.SetReadDeadline(time.Now())
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ack:
	case <-s.eof:
	case <-t.C:
	}
}
