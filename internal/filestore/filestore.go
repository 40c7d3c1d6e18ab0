// Package filestore keeps the daemon's stored files: uploads that many
// runs use, each owned by its uploader's uid, bounded per file, per uid and
// in total, and deleted after a TTL by a collector of its own.
//
// A file is durable before it is visible: its content streams into a
// temporary file of the store's directory (hashed and counted on the way,
// never held in memory), is fsynced and renamed to <id>.data; then its
// metadata record is written the same way to <id>.meta, and the directory
// is fsynced. Only then does Put return. Open recovers from a crash at any
// of those steps: temporary files, data without a record, records without
// data or whose size differs, malformed and expired records are removed,
// so a kill -9 leaves nothing partial and loses nothing acknowledged.
//
// Every file is reached through the directory's descriptor by a name made
// of a validated id: no path is ever built from a caller's input.
package filestore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/errdefs"
)

// Config configures a Store. Sizes are bytes.
type Config struct {
	Dir            string // made 0700 if missing (its parents 0755); must belong to the daemon's uid
	MaxFileBytes   int64  // one file (ErrTooLarge beyond)
	MaxBytesPerUID int64  // one owner's files together (ErrTooLarge beyond)
	MaxFilesPerUID int    // one owner's files (ErrTooLarge beyond)
	MaxTotalBytes  int64  // all files (ErrInsufficientStorage beyond)
	MinFreeBytes   int64  // free space left on Dir's disk (ErrInsufficientStorage below); 0: none
	TTL            time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Meta describes a stored file.
type Meta struct {
	ID      string
	Name    string
	Size    int64
	SHA256  string // lowercase hex
	Created time.Time
	Expires time.Time
	Owner   uint32
}

// Store is a file store on one directory. Create it with Open; its methods
// are safe for concurrent use.
type Store struct {
	cfg Config
	log *slog.Logger
	dir *os.File // keeps fd open
	fd  int

	mu       sync.Mutex
	files    map[string]Meta
	uids     map[uint32]*usage
	total    int64 // bytes of the stored files
	reserved int64 // bytes of uploads in flight
	refs     int   // operations using fd
	closed   bool

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// usage is one owner's: stored, and reserved by uploads in flight.
type usage struct {
	bytes, rbytes int64
	files, rfiles int
}

const (
	idPrefix   = "f-"
	idHexLen   = 32
	tmpPrefix  = ".tmp-" // every temporary file; Open removes them
	dataSuffix = ".data"
	metaSuffix = ".meta"
	copyBuffer = 32 << 10
	// freeCheckBytes is how often (in bytes written) an upload checks the
	// disk's free space again.
	freeCheckBytes = 8 << 20
	// maxCollectEvery bounds the collector's period; a short TTL gets a
	// shorter one.
	maxCollectEvery = time.Minute
)

// Open opens (or creates) the store in cfg.Dir, recovers it from
// whatever a crash left (see the package doc), and starts the collector of
// expired files. Errors name the directory: they are the administrator's.
func Open(cfg Config, log *slog.Logger) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// Missing parents are made as directories usually are (0755): other
	// things may live beside the store; the store itself is 0700.
	if err := os.MkdirAll(filepath.Dir(cfg.Dir), 0o755); err != nil {
		return nil, fmt.Errorf("file store: %w", err)
	}
	if err := os.Mkdir(cfg.Dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("file store: %w", err)
	}
	fd, err := unix.Open(cfg.Dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("file store: open %s: %w", cfg.Dir, err)
	}
	dir := os.NewFile(uintptr(fd), cfg.Dir)
	if err := checkDir(fd, cfg.Dir); err != nil {
		dir.Close()
		return nil, err
	}
	s := &Store{
		cfg: cfg, log: log, dir: dir, fd: fd,
		files: map[string]Meta{}, uids: map[uint32]*usage{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	if err := s.recover(); err != nil {
		dir.Close()
		return nil, err
	}
	go s.collector(min(max(cfg.TTL/4, time.Second), maxCollectEvery))
	return s, nil
}

func (c *Config) validate() error {
	var errs []error
	if !filepath.IsAbs(c.Dir) {
		errs = append(errs, fmt.Errorf("dir %q is not an absolute path", c.Dir))
	}
	if c.MaxFileBytes < 1 || c.MaxBytesPerUID < 1 || c.MaxFilesPerUID < 1 || c.MaxTotalBytes < 1 {
		errs = append(errs, errors.New("every bound must be positive"))
	}
	if c.MinFreeBytes < 0 {
		errs = append(errs, errors.New("MinFreeBytes must not be negative"))
	}
	if c.TTL <= 0 {
		errs = append(errs, errors.New("TTL must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("file store: %w", err)
	}
	return nil
}

// checkDir: the store's directory is the daemon's own, and nobody else's
// to read.
func checkDir(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("file store: stat %s: %w", path, err)
	}
	if st.Uid != uint32(os.Geteuid()) {
		return fmt.Errorf("file store: %s belongs to uid %d, not the daemon's (%d)", path, st.Uid, os.Geteuid())
	}
	if st.Mode&0o077 != 0 {
		if err := unix.Fchmod(fd, 0o700); err != nil {
			return fmt.Errorf("file store: chmod 0700 %s: %w", path, err)
		}
	}
	return nil
}

// Close stops the collector. Operations in flight finish (the directory is
// closed after the last); later ones fail with ErrUnavailable.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.mu.Lock()
		s.closed = true
		last := s.refs == 0
		s.mu.Unlock()
		if last {
			s.dir.Close()
		}
	})
}

func (s *Store) acquire() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errdefs.New(errdefs.ErrUnavailable, "the file store is closed (the daemon is shutting down)")
	}
	s.refs++
	return nil
}

func (s *Store) release() {
	s.mu.Lock()
	s.refs--
	last := s.closed && s.refs == 0
	s.mu.Unlock()
	if last {
		s.dir.Close()
	}
}

// Put stores r's content as a file named name, owned by owner, and
// returns its record once it is durable.
//
// Errors: a bad name is an errdefs.FieldError for "name"; a file over
// MaxFileBytes is ErrTooLarge (field "body"), one over the owner's bytes or
// count ErrTooLarge; a full store (MaxTotalBytes), a disk below
// MinFreeBytes or out of space ErrInsufficientStorage; an error of r is
// returned as it is; a fault of the host is unclassed, with
// a message that names no path (the detail is logged). Nothing of a
// failed Put remains.
func (s *Store) Put(owner uint32, name string, r io.Reader) (m Meta, retErr error) {
	if err := ValidName(name); err != nil {
		return Meta{}, err
	}
	if err := s.acquire(); err != nil {
		return Meta{}, err
	}
	defer s.release()
	up, err := s.begin(owner)
	if err != nil {
		return Meta{}, err
	}
	defer up.end()

	tmp, f, err := s.createTemp()
	if err != nil {
		return Meta{}, s.storageErr("create a temporary file", err)
	}
	var data string // the data file, once renamed
	defer func() {
		if retErr == nil {
			return
		}
		if f != nil {
			f.Close()
		}
		s.remove(tmp)
		if data != "" {
			s.remove(data)
		}
	}()
	w := &sink{up: up, f: f, h: sha256.New()}
	if _, err := io.CopyBuffer(w, r, make([]byte, copyBuffer)); err != nil {
		if w.err != nil {
			return Meta{}, w.err
		}
		return Meta{}, err
	}
	if err := f.Sync(); err != nil {
		return Meta{}, s.storageErr("sync a file", err)
	}
	err = f.Close()
	f = nil
	if err != nil {
		return Meta{}, s.storageErr("close a file", err)
	}
	now := s.cfg.Now().UTC().Round(0)
	m = Meta{
		ID: newID(), Name: name, Size: w.n, SHA256: hex.EncodeToString(w.h.Sum(nil)),
		Created: now, Expires: now.Add(s.cfg.TTL), Owner: owner,
	}
	if err := unix.Renameat(s.fd, tmp, s.fd, m.ID+dataSuffix); err != nil {
		return Meta{}, s.storageErr("rename a file", err)
	}
	data = m.ID + dataSuffix
	if err := s.writeMeta(m); err != nil {
		return Meta{}, err
	}
	if err := unix.Fsync(s.fd); err != nil {
		s.remove(m.ID + metaSuffix)
		return Meta{}, s.storageErr("sync the directory", err)
	}
	up.commit(m)
	return m, nil
}

// sink writes an upload to its temporary file: it hashes and counts, and
// reserves each chunk against the bounds before writing it.
type sink struct {
	up  *upload
	f   *os.File
	h   hash.Hash
	n   int64
	err error // the sink's own error (a bound, the disk), not the reader's
}

func (w *sink) Write(p []byte) (int, error) {
	if err := w.up.grow(int64(len(p))); err != nil {
		w.err = err
		return 0, err
	}
	n, err := w.f.Write(p)
	w.n += int64(n)
	w.h.Write(p[:n])
	if err != nil {
		w.err = w.up.s.storageErr("write a file", err)
		return n, w.err
	}
	return n, nil
}

// upload is a Put in flight: a file slot and the bytes written so far,
// reserved against the owner's and the store's bounds.
type upload struct {
	s         *Store
	owner     uint32
	bytes     int64
	unchecked int64 // bytes written since the last free-space check
	collected bool  // ran the collector once to make room
	done      bool
}

// begin reserves a file slot for owner and checks the disk's free space.
func (s *Store) begin(owner uint32) (*upload, error) {
	up := &upload{s: s, owner: owner}
	for {
		s.mu.Lock()
		u := s.usage(owner)
		if n := u.files + u.rfiles; n >= s.cfg.MaxFilesPerUID {
			s.forgetIdle(owner)
			s.mu.Unlock()
			if up.tryCollect() {
				continue
			}
			return nil, errdefs.New(errdefs.ErrTooLarge, "uid %d has %d files (uploads in progress included), the most max_files_per_uid (%d) allows: delete some (DELETE /v1/files/{id}) or wait for them to expire", owner, n, s.cfg.MaxFilesPerUID)
		}
		u.rfiles++
		s.mu.Unlock()
		break
	}
	if err := s.checkFree(0); err != nil {
		up.end()
		return nil, err
	}
	return up, nil
}

// tryCollect runs the collector once per upload, to free what has expired
// but was not collected yet; it reports whether it ran.
func (up *upload) tryCollect() bool {
	if up.collected {
		return false
	}
	up.collected = true
	return up.s.Collect() > 0
}

// grow reserves n more bytes.
func (up *upload) grow(n int64) error {
	s := up.s
	if up.bytes+n > s.cfg.MaxFileBytes {
		return errdefs.FieldOfClass(errdefs.ErrTooLarge, "body", "the file is larger than max_file_bytes (%d bytes)", s.cfg.MaxFileBytes)
	}
	for {
		s.mu.Lock()
		u := s.usage(up.owner)
		var err error
		switch {
		case u.bytes+u.rbytes+n > s.cfg.MaxBytesPerUID:
			err = errdefs.New(errdefs.ErrTooLarge, "the upload would take uid %d's files over max_bytes_per_uid (%d bytes; %d stored, %d in uploads in progress): delete some (DELETE /v1/files/{id}) or wait for them to expire", up.owner, s.cfg.MaxBytesPerUID, u.bytes, u.rbytes)
		case s.total+s.reserved+n > s.cfg.MaxTotalBytes:
			err = errdefs.New(errdefs.ErrInsufficientStorage, "the file store is full: its files would take more than max_total_bytes (%d bytes); try later", s.cfg.MaxTotalBytes)
		}
		if err == nil {
			u.rbytes += n
			s.reserved += n
			up.bytes += n
		}
		s.mu.Unlock()
		if err != nil {
			if up.tryCollect() {
				continue
			}
			return err
		}
		break
	}
	if up.unchecked += n; up.unchecked >= freeCheckBytes {
		up.unchecked = 0
		return s.checkFree(n)
	}
	return nil
}

// commit turns the upload's reservation into the stored file m.
func (up *upload) commit(m Meta) {
	s := up.s
	s.mu.Lock()
	defer s.mu.Unlock()
	u := up.unreserve()
	u.bytes += m.Size
	u.files++
	s.total += m.Size
	s.files[m.ID] = m
	up.done = true
}

// end releases what an upload that did not commit reserved.
func (up *upload) end() {
	if up.done {
		return
	}
	up.done = true
	s := up.s
	s.mu.Lock()
	defer s.mu.Unlock()
	up.unreserve()
	s.forgetIdle(up.owner)
}

// unreserve gives back what the upload reserved and returns its owner's
// usage; the store's lock is held.
func (up *upload) unreserve() *usage {
	u := up.s.usage(up.owner)
	u.rbytes -= up.bytes
	u.rfiles--
	up.s.reserved -= up.bytes
	return u
}

// usage returns owner's entry, made if missing. Call with mu held.
func (s *Store) usage(owner uint32) *usage {
	u := s.uids[owner]
	if u == nil {
		u = &usage{}
		s.uids[owner] = u
	}
	return u
}

// forgetIdle drops owner's entry when it holds nothing. Call with mu held.
func (s *Store) forgetIdle(owner uint32) {
	if u := s.uids[owner]; u != nil && *u == (usage{}) {
		delete(s.uids, owner)
	}
}

// checkFree refuses when writing need more bytes would leave the disk
// with less than MinFreeBytes free.
func (s *Store) checkFree(need int64) error {
	if s.cfg.MinFreeBytes == 0 {
		return nil
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(s.fd, &st); err != nil {
		return s.hostErr("statfs", err)
	}
	free := int64(math.MaxInt64)
	if st.Bsize > 0 && st.Bavail < uint64(math.MaxInt64)/uint64(st.Bsize) {
		free = int64(st.Bavail) * st.Bsize
	}
	if free-need < s.cfg.MinFreeBytes {
		return errdefs.New(errdefs.ErrInsufficientStorage, "the file store's disk has %d MiB free, less than the %d MiB it must keep free (min_free_mb); try later", free>>20, s.cfg.MinFreeBytes>>20)
	}
	return nil
}

// storageErr classifies an error of the disk: out of space or quota is
// ErrInsufficientStorage, anything else a fault of the host.
func (s *Store) storageErr(op string, err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		s.log.Warn("file store: disk full", "dir", s.cfg.Dir, "op", op, "err", err)
		return errdefs.New(errdefs.ErrInsufficientStorage, "the file store's disk is full; try later")
	}
	return s.hostErr(op, err)
}

// hostErr logs a fault of the host with its detail and returns an error
// that names no path.
func (s *Store) hostErr(op string, err error) error {
	s.log.Error("file store: "+op, "dir", s.cfg.Dir, "err", err)
	return fmt.Errorf("file store: cannot %s", op)
}

func (s *Store) createTemp() (string, *os.File, error) {
	name := tmpPrefix + randHex(8)
	fd, err := unix.Openat(s.fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", nil, &os.PathError{Op: "openat", Path: name, Err: err}
	}
	return name, os.NewFile(uintptr(fd), name), nil
}

// writeMeta writes m's record durably (temporary file, fsync, rename);
// the caller fsyncs the directory.
func (s *Store) writeMeta(m Meta) (retErr error) {
	b, err := encodeMeta(m)
	if err != nil {
		return s.hostErr("encode a record", err)
	}
	tmp, f, err := s.createTemp()
	if err != nil {
		return s.storageErr("create a temporary file", err)
	}
	defer func() {
		if retErr != nil {
			s.remove(tmp)
		}
	}()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return s.storageErr("write a record", err)
	}
	if err := unix.Renameat(s.fd, tmp, s.fd, m.ID+metaSuffix); err != nil {
		return s.storageErr("rename a record", err)
	}
	return nil
}

// remove unlinks name of the directory; a failure is logged (Open removes
// what is left).
func (s *Store) remove(name string) {
	if err := unix.Unlinkat(s.fd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		s.log.Warn("file store: remove", "dir", s.cfg.Dir, "name", name, "err", err)
	}
}

// visible returns id's record when the caller may see it. Call with mu
// held.
func (s *Store) visible(owner uint32, admin bool, id string) (Meta, bool) {
	m, ok := s.files[id]
	if !ok || (!admin && m.Owner != owner) || !s.cfg.Now().Before(m.Expires) {
		return Meta{}, false
	}
	return m, true
}

func notFound(id string) error {
	if !ValidID(id) {
		return errdefs.New(errdefs.ErrNotFound, "no such file (a file id is f- and 32 hex digits)")
	}
	return errdefs.New(errdefs.ErrNotFound, "no file %s", id)
}

// Stat returns the record of file id. Errors: ErrNotFound for an id that
// is malformed, unknown, expired, or another owner's (unless admin).
func (s *Store) Stat(owner uint32, admin bool, id string) (Meta, error) {
	if !ValidID(id) {
		return Meta{}, notFound(id)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.visible(owner, admin, id)
	if !ok {
		return Meta{}, notFound(id)
	}
	return m, nil
}

// Open opens file id for reading; the caller closes the file. It reads
// as the file was when opened, even if it is deleted meanwhile. Errors:
// those of Stat; a data file that is not a regular file of the recorded
// size is a fault of the host.
func (s *Store) Open(owner uint32, admin bool, id string) (*os.File, Meta, error) {
	m, err := s.Stat(owner, admin, id)
	if err != nil {
		return nil, Meta{}, err
	}
	if err := s.acquire(); err != nil {
		return nil, Meta{}, err
	}
	defer s.release()
	fd, err := unix.Openat(s.fd, id+dataSuffix, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, Meta{}, notFound(id) // deleted or expired meanwhile
	}
	if err != nil {
		return nil, Meta{}, s.hostErr("open a file", &os.PathError{Op: "openat", Path: id + dataSuffix, Err: err})
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, Meta{}, s.hostErr("stat a file", &os.PathError{Op: "fstat", Path: id + dataSuffix, Err: err})
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != m.Size {
		unix.Close(fd)
		return nil, Meta{}, s.hostErr("open a file", fmt.Errorf("%s: not a regular file of %d bytes (mode %#o, size %d)", id+dataSuffix, m.Size, st.Mode, st.Size))
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, Meta{}, s.hostErr("open a file", err)
	}
	return os.NewFile(uintptr(fd), id+dataSuffix), m, nil
}

// List returns the owner's files (every owner's for admin), oldest first.
func (s *Store) List(owner uint32, admin bool) []Meta {
	s.mu.Lock()
	out := make([]Meta, 0, len(s.files))
	for id := range s.files {
		if m, ok := s.visible(owner, admin, id); ok {
			out = append(out, m)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Delete deletes file id and returns its record: the record goes first
// (the file is invisible from then on, after a crash too), then the data.
// Errors: those of Stat; a fault of the host leaves the file as it was.
func (s *Store) Delete(owner uint32, admin bool, id string) (Meta, error) {
	if !ValidID(id) {
		return Meta{}, notFound(id)
	}
	if err := s.acquire(); err != nil {
		return Meta{}, err
	}
	defer s.release()
	s.mu.Lock()
	m, ok := s.visible(owner, admin, id)
	if ok {
		delete(s.files, id)
	}
	s.mu.Unlock()
	if !ok {
		return Meta{}, notFound(id)
	}
	if err := unix.Unlinkat(s.fd, id+metaSuffix, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		s.mu.Lock()
		s.files[id] = m
		s.mu.Unlock()
		return Meta{}, s.hostErr("delete a file", &os.PathError{Op: "unlinkat", Path: id + metaSuffix, Err: err})
	}
	s.remove(id + dataSuffix)
	s.forget(m)
	// Acknowledged only once durable: after a failed sync a crash could
	// bring the file back, so the caller is not told it is gone.
	if err := unix.Fsync(s.fd); err != nil {
		return Meta{}, s.hostErr("delete a file", fmt.Errorf("sync the directory: %w", err))
	}
	return m, nil
}

// forget takes a removed file out of its owner's usage.
func (s *Store) forget(m Meta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.usage(m.Owner)
	u.bytes -= m.Size
	u.files--
	s.total -= m.Size
	s.forgetIdle(m.Owner)
}

// Usage returns owner's stored bytes and files, and the bytes of all
// files; uploads in progress are not counted.
func (s *Store) Usage(owner uint32) (bytes int64, files int, total int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if u := s.uids[owner]; u != nil {
		bytes, files = u.bytes, u.files
	}
	return bytes, files, s.total
}

// Totals returns the bytes and the number of all stored files; uploads in
// progress are not counted.
func (s *Store) Totals() (bytes int64, files int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, len(s.files)
}

func (s *Store) collector(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.Collect()
		}
	}
}

// Collect deletes the files whose TTL is over and returns how many; the
// collector calls it periodically.
func (s *Store) Collect() int {
	if err := s.acquire(); err != nil {
		return 0
	}
	defer s.release()
	now := s.cfg.Now()
	var expired []Meta
	s.mu.Lock()
	for id, m := range s.files {
		if !now.Before(m.Expires) {
			delete(s.files, id)
			expired = append(expired, m)
		}
	}
	s.mu.Unlock()
	if len(expired) == 0 {
		return 0
	}
	for _, m := range expired {
		s.remove(m.ID + metaSuffix)
	}
	if err := unix.Fsync(s.fd); err != nil {
		s.log.Warn("file store: sync the directory", "dir", s.cfg.Dir, "err", err)
	}
	for _, m := range expired {
		s.remove(m.ID + dataSuffix)
		s.forget(m)
		s.log.Info("file store: expired", "file_id", m.ID, "uid", m.Owner, "size_bytes", m.Size)
	}
	return len(expired)
}

// recover rebuilds the table from the directory, removing what a crash
// left (see the package doc).
func (s *Store) recover() error {
	ents, err := s.dir.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("file store: read %s: %w", s.cfg.Dir, err)
	}
	datas := map[string]bool{}
	var metas []string
	removed := 0
	drop := func(name, why string) {
		s.log.Info("file store: removing a leftover", "dir", s.cfg.Dir, "name", name, "reason", why)
		s.remove(name)
		removed++
	}
	for _, e := range ents {
		name := e.Name()
		id, ext, _ := strings.Cut(name, ".")
		switch {
		case strings.HasPrefix(name, tmpPrefix):
			drop(name, "temporary file")
		case !ValidID(id) || (ext != dataSuffix[1:] && ext != metaSuffix[1:]):
			s.log.Warn("file store: leaving an unknown entry alone", "dir", s.cfg.Dir, "name", name)
		case !e.Type().IsRegular():
			drop(name, "not a regular file")
		case ext == dataSuffix[1:]:
			datas[id] = true
		default:
			metas = append(metas, id)
		}
	}
	now := s.cfg.Now()
	for _, id := range metas {
		m, why := s.readRecord(id, datas[id])
		if why == "" && !now.Before(m.Expires) {
			why = "expired"
		}
		if why != "" {
			drop(id+metaSuffix, why)
			if datas[id] {
				drop(id+dataSuffix, why)
			}
		} else {
			s.files[id] = m
			u := s.usage(m.Owner)
			u.bytes += m.Size
			u.files++
			s.total += m.Size
		}
		delete(datas, id)
	}
	for id := range datas {
		drop(id+dataSuffix, "data without a record")
	}
	if removed > 0 {
		if err := unix.Fsync(s.fd); err != nil {
			return fmt.Errorf("file store: sync %s: %w", s.cfg.Dir, err)
		}
	}
	s.log.Info("file store open", "dir", s.cfg.Dir, "files", len(s.files), "bytes", s.total, "removed", removed)
	return nil
}

// readRecord reads and checks id's record against its data file; a
// reason not to keep it is returned instead.
func (s *Store) readRecord(id string, hasData bool) (Meta, string) {
	if !hasData {
		return Meta{}, "record without data"
	}
	fd, err := unix.Openat(s.fd, id+metaSuffix, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return Meta{}, "unreadable record: " + err.Error()
	}
	f := os.NewFile(uintptr(fd), id+metaSuffix)
	b, err := io.ReadAll(io.LimitReader(f, maxMetaBytes+1))
	f.Close()
	if err != nil {
		return Meta{}, "unreadable record: " + err.Error()
	}
	m, err := decodeMeta(b)
	if err != nil {
		return Meta{}, "malformed record: " + err.Error()
	}
	if m.ID != id {
		return Meta{}, "record of another id"
	}
	var st unix.Stat_t
	if err := unix.Fstatat(s.fd, id+dataSuffix, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Meta{}, "data unreadable: " + err.Error()
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != m.Size {
		return Meta{}, fmt.Sprintf("data of %d bytes, the record says %d", st.Size, m.Size)
	}
	return m, ""
}

func newID() string { return idPrefix + randHex(idHexLen/2) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand crashes the program instead)
	return hex.EncodeToString(b)
}

// ValidID reports whether id has the syntax of a file id: "f-" and 32
// lowercase hex digits.
func ValidID(id string) bool {
	if len(id) != len(idPrefix)+idHexLen || !strings.HasPrefix(id, idPrefix) {
		return false
	}
	for _, c := range id[len(idPrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
