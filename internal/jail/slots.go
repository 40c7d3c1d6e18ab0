package jail

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

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

// HostIDLockDir holds one lock file per host id range a jail of some
// jaild on this host holds (named by its first id): two daemons given the
// same or overlapping host_id_base never hand out the same host ids at
// once, which would share the kernel's per-user accounting between their
// jails. A daemon killed with SIGKILL drops its locks with its jails still
// alive until its restart sweeps them; give each daemon its own
// host_id_base, and this only guards against a mistake.
const HostIDLockDir = "/run/jaild-ids"

// slots hands out the lowest slot number that is free in this engine and
// whose host id range no other engine on the host holds (a flock on its
// file in dir, held while the slot is in use).
type slots struct {
	dir  string // HostIDLockDir, or a test's
	base uint32 // Config.HostIDBase
	// foreign, when set, is told (once) that another engine holds host
	// ids of this engine's range.
	foreign func(firstID uint64)
	warned  bool

	mu    sync.Mutex
	used  [MaxJails]bool
	locks [MaxJails]*os.File
	next  int // every slot below next is used by this engine
}

func (s *slots) get() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := s.next; i < MaxJails; i++ {
		if s.used[i] {
			continue
		}
		f, err := s.claim(i)
		if err != nil {
			return -1, err
		}
		if f == nil { // another engine's
			if s.foreign != nil && !s.warned {
				s.warned = true
				s.foreign(uint64(s.base) + uint64(i)*idMapSize)
			}
			continue
		}
		s.used[i], s.locks[i] = true, f
		for s.next < MaxJails && s.used[s.next] { // a slot skipped for another engine's lock stays a candidate
			s.next++
		}
		return i, nil
	}
	return -1, errNoSlot
}

// claim takes slot i's host-wide lock: nil without an error when another
// engine holds it. The file stays (removing it would let two engines lock
// two different files of one name).
func (s *slots) claim(i int) (*os.File, error) {
	name := filepath.Join(s.dir, strconv.FormatUint(uint64(s.base)+uint64(i)*idMapSize, 10))
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("host id lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("host id lock %s: %w", name, err)
	}
	return f, nil
}

func (s *slots) put(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.locks[i]; f != nil {
		f.Close() // drops the flock
		s.locks[i] = nil
	}
	s.used[i] = false
	s.next = min(s.next, i)
}
