package jail

import (
	"sync"

	"github.com/jaild/jaild/internal/errdefs"
)

// MaxJails bounds the jails that exist at once (running, warm or being
// torn down). Each holds a slot: its own range of IDsPerJail host ids, so
// that the kernel's per-user accounting (pipe buffer pages, RLIMIT_NPROC's
// count, message queue bytes, keyrings) is never shared between jails and
// cannot become a channel or a denial of service between them.
const (
	MaxJails   = 1024
	IDsPerJail = idMapSize
)

// errNoSlot means MaxJails jails exist already.
var errNoSlot = errdefs.New(errdefs.ErrUnavailable, "too many jails at once: every host id range is in use; try again")

// slots hands out the lowest free slot number.
type slots struct {
	mu   sync.Mutex
	used [MaxJails]bool
	next int // no slot below next is free
}

func (s *slots) get() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := s.next; i < MaxJails; i++ {
		if !s.used[i] {
			s.used[i] = true
			s.next = i + 1
			return i, nil
		}
	}
	return -1, errNoSlot
}

func (s *slots) put(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used[i] = false
	s.next = min(s.next, i)
}
