package api

import "time"

// StoredFile describes a file of the store: the 201 body of POST
// /v1/files and the body of GET /v1/files/{id}/meta.
type StoredFile struct {
	FileID    string    `json:"file_id"`
	Name      string    `json:"name"`
	SizeBytes int64     `json:"size_bytes"`
	SHA256    string    `json:"sha256"` // lowercase hex
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	UID       uint32    `json:"uid"` // the owner's (admins list everyone's)
}

// FileList is the body of GET /v1/files.
type FileList struct {
	Files []StoredFile `json:"files"`
}

// FilesInfo describes the file store: its bounds, and the caller's use.
type FilesInfo struct {
	Enabled        bool  `json:"enabled"`
	MaxFileBytes   int64 `json:"max_file_bytes"`
	MaxBytesPerUID int64 `json:"max_bytes_per_uid"`
	MaxFilesPerUID int   `json:"max_files_per_uid"`
	MaxTotalBytes  int64 `json:"max_total_bytes"`
	MinFreeBytes   int64 `json:"min_free_bytes"` // uploads stop while the disk has less free
	TTLS           int64 `json:"ttl_s"`
	UsedBytes      int64 `json:"used_bytes"` // all callers
	CallerBytes    int64 `json:"caller_bytes"`
	CallerFiles    int   `json:"caller_files"`
}
