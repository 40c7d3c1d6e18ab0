package spec

import (
	"io"
	"os"
	"time"
)

// A session's files (issue 29): the kinds of FSEntry.Type.
const (
	FSFile    = "file"
	FSDir     = "dir"
	FSSymlink = "symlink"
	FSOther   = "other" // a FIFO, a socket, a device node
)

// MaxFSList is the most entries one listing of a session's directory
// returns (more: Truncated).
const MaxFSList = 10000

// FSEntry describes one file of a session's tree.
type FSEntry struct {
	Name  string
	Type  string // FSFile, FSDir, FSSymlink or FSOther
	Size  int64  // a regular file's or a link's; 0 for the others
	Mode  uint32 // permission bits
	MTime time.Time
}

// The operations of FSRequest.Op.
const (
	FSStat   = "stat"
	FSList   = "list"
	FSOpen   = "open"
	FSPut    = "put"
	FSRemove = "remove"
	FSMkdir  = "mkdir"
	FSMove   = "move"
)

// FSRequest is one operation on a session's files. Path and To are the
// session's absolute paths (/workspace/..., /tmp/...).
type FSRequest struct {
	Op      string
	Path    string
	To      string    // FSMove's new path
	Body    io.Reader // FSPut's bytes
	Parents bool      // FSPut, FSMkdir: make missing directories
}

// FSResult is what an operation found or made.
type FSResult struct {
	Entry     FSEntry   // FSStat, FSOpen, FSPut, FSMkdir, FSMove
	Entries   []FSEntry // FSList, sorted by name
	Truncated bool      // FSList: more than MaxFSList
	File      *os.File  // FSOpen: the file, to read and close
	Created   bool      // FSPut: the file is new
}
