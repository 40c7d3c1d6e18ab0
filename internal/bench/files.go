package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/jaild/jaild/internal/api"
)

// Files compares moving a file in the JSON bodies (base64, content_b64)
// with moving it through the file store (/v1/files), on the warm daemon.
type Files struct {
	// Return is a file the run writes (random bytes) and the client gets
	// back: inline in the execute response, decoded; or with
	// return_files_as "store" and then GET /v1/files/{id} (its DELETE
	// untimed). Alone is the same run not returning the file.
	Return []FileRow `json:"return"`
	// Upload is a file the client sends to a run, which checks its size:
	// inline as content_b64; or POST /v1/files and then execute with its
	// file_id (its DELETE untimed). Alone is the run given the file
	// already stored (the store's use: upload once, run many times).
	Upload []FileRow `json:"upload"`
}

// FileRow is one file size moved one way, inline and through the store.
type FileRow struct {
	SizeBytes  int64 `json:"size_bytes"`
	Iterations int   `json:"iterations"`
	Alone      Stat  `json:"alone"`
	// Inline is nil when the daemon refused the size inline; Refused is
	// then its reason.
	Inline  *Stat  `json:"inline,omitempty"`
	Refused string `json:"inline_refused,omitempty"`
	// InlineCodecMs is the p50 of the client's part of Inline: JSON and
	// base64 decoding (returned) or encoding (uploaded), Go's
	// encoding/json, which is slow on long strings.
	InlineCodecMs float64 `json:"inline_client_codec_ms_p50"`
	Store         Stat    `json:"store"`
	// The growth of the daemon's peak RSS (VmHWM, reset before each
	// measurement) over its RSS when the measurement began.
	InlineRSSGrowth uint64 `json:"inline_daemon_peak_rss_growth_bytes"`
	StoreRSSGrowth  uint64 `json:"store_daemon_peak_rss_growth_bytes"`
}

// fileSizes are the sizes measured, each with its runs per figure: 16 MiB
// is the largest file returned inline; 100 MiB is past that cap (and
// past max_body_bytes as an inline upload).
var fileSizes = []struct {
	size int64
	iter int
}{{1 << 20, 20}, {16 << 20, 10}, {100 << 20, 5}}

// fileLimits lets the run write 100 MiB (the default file_size_mb is 64);
// the warm jails, created with the maxima, still serve it.
var fileLimits = func() *api.Limits { mb := int64(128); return &api.Limits{FileSizeMB: &mb} }()

func benchFiles(ctx context.Context, maxIter int, d *daemon) (Files, error) {
	var out Files
	for _, fs := range fileSizes {
		n := min(fs.iter, maxIter)
		row, err := returnRow(ctx, d, fs.size, n)
		if err != nil {
			return out, fmt.Errorf("return %d MiB: %w", fs.size>>20, err)
		}
		out.Return = append(out.Return, row)
		if row, err = uploadRow(ctx, d, fs.size, n); err != nil {
			return out, fmt.Errorf("upload %d MiB: %w", fs.size>>20, err)
		}
		out.Upload = append(out.Upload, row)
	}
	return out, nil
}

func returnRow(ctx context.Context, d *daemon, size int64, n int) (FileRow, error) {
	row := FileRow{SizeBytes: size, Iterations: n}
	code := fmt.Sprintf("import os\nwith open('out.bin', 'wb') as f:\n    for _ in range(%d): f.write(os.urandom(1 << 20))\n", size>>20)
	ready := func() { d.waitReady(ctx) }
	var err error
	if row.Alone, err = measureAfter(n, ready, func() error {
		_, err := d.execute(api.ExecuteRequest{Code: code, Limits: fileLimits})
		return err
	}); err != nil {
		return row, err
	}

	inlineReq, _ := json.Marshal(api.ExecuteRequest{Code: code, Limits: fileLimits, ReturnFiles: []string{"out.bin"}})
	var codec []float64
	inline := func() error {
		body, err := d.post(inlineReq)
		if err != nil {
			return err
		}
		start := time.Now()
		var res api.ExecuteResponse
		if err := json.Unmarshal(body, &res); err != nil || res.Status != "ok" || len(res.Files) != 1 {
			return fmt.Errorf("execute: %.300s", body)
		}
		if f := res.Files[0]; f.Error != "" {
			return refusal(f.Error)
		}
		b, err := base64.StdEncoding.DecodeString(res.Files[0].ContentB64)
		codec = append(codec, ms(time.Since(start)))
		if err == nil && int64(len(b)) != size {
			err = fmt.Errorf("%d bytes returned", len(b))
		}
		return err
	}
	if row.Inline, row.Refused, row.InlineRSSGrowth, err = measureInline(d, n, ready, inline); err != nil {
		return row, err
	}
	row.InlineCodecMs = median(codec)

	st := &stored{d: d}
	grow := d.watchRSS()
	row.Store, err = measureAfter(n, func() { st.drop(); ready() }, func() error {
		res, err := d.execute(api.ExecuteRequest{Code: code, Limits: fileLimits, ReturnFiles: []string{"out.bin"}, ReturnFilesAs: "store"})
		if err != nil {
			return err
		}
		if len(res.Files) != 1 || res.Files[0].FileID == "" {
			return fmt.Errorf("not stored: %+v", res.Files)
		}
		st.id = res.Files[0].FileID
		return d.getFile(st.id, size)
	})
	row.StoreRSSGrowth = grow()
	st.drop()
	return row, err
}

func uploadRow(ctx context.Context, d *daemon, size int64, n int) (FileRow, error) {
	row := FileRow{SizeBytes: size, Iterations: n}
	data := make([]byte, size)
	_, _ = rand.Read(data) // never fails (crypto/rand panics instead)
	code := fmt.Sprintf("import os\nassert os.path.getsize('in.bin') == %d\n", size)
	ready := func() { d.waitReady(ctx) }
	run := func(in api.FileIn) error {
		_, err := d.execute(api.ExecuteRequest{Code: code, Limits: fileLimits, Files: []api.FileIn{in}})
		return err
	}

	var codec []float64
	var err error
	if row.Inline, row.Refused, row.InlineRSSGrowth, err = measureInline(d, n, ready, func() error {
		start := time.Now()
		req, err := json.Marshal(api.ExecuteRequest{Code: code, Limits: fileLimits,
			Files: []api.FileIn{{Path: "in.bin", ContentB64: base64.StdEncoding.EncodeToString(data)}}})
		if err != nil {
			return err
		}
		codec = append(codec, ms(time.Since(start)))
		body, err := d.post(req)
		if err == nil && !bytes.Contains(body, []byte(`"status":"ok"`)) {
			err = fmt.Errorf("execute: %.300s", body)
		}
		return err
	}); err != nil {
		return row, err
	}
	if row.Inline != nil { // else codec timed only the refused body
		row.InlineCodecMs = median(codec)
	}

	st := &stored{d: d}
	grow := d.watchRSS()
	row.Store, err = measureAfter(n, func() { st.drop(); ready() }, func() error {
		var err error
		if st.id, err = d.putFile("in.bin", data); err != nil {
			return err
		}
		return run(api.FileIn{Path: "in.bin", FileID: st.id})
	})
	row.StoreRSSGrowth = grow()
	if err != nil {
		st.drop()
		return row, err
	}
	row.Alone, err = measureAfter(n, ready, func() error { return run(api.FileIn{Path: "in.bin", FileID: st.id}) })
	st.drop()
	return row, err
}

// stored is the file a measurement left in the store; drop deletes it.
type stored struct {
	d  *daemon
	id string
}

func (s *stored) drop() {
	if s.id != "" {
		s.d.deleteFile(s.id)
		s.id = ""
	}
}

// refusal is the daemon refusing a file inline (a size cap): reported,
// not a failure of the benchmark.
type refusal string

func (r refusal) Error() string { return string(r) }

// measureInline times f, or says why the daemon refused it: a refusal
// on the first run is the row's answer, not an error.
func measureInline(d *daemon, n int, setup func(), f func() error) (*Stat, string, uint64, error) {
	grow := d.watchRSS()
	s, err := measureAfter(n, setup, f)
	if r := refusal(""); errors.As(err, &r) {
		return nil, string(r), 0, nil
	}
	return &s, "", grow(), err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// median is the p50 of ds as measureAfter takes it; 0 for none.
func median(ds []float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// post sends an execute request's body and returns the response's; a
// 413 is a refusal.
func (d *daemon) post(req []byte) ([]byte, error) {
	resp, err := d.Client.Post("http://jaild/v1/execute", "application/json", bytes.NewReader(req))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case resp.StatusCode == http.StatusRequestEntityTooLarge:
		var e api.ErrorBody
		_ = json.Unmarshal(b, &e)
		return nil, refusal(e.Error.Message)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("execute: HTTP %d: %.300s", resp.StatusCode, b)
	}
	return b, err
}

// execute runs req and wants status ok.
func (d *daemon) execute(req api.ExecuteRequest) (*api.ExecuteResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if body, err = d.post(body); err != nil {
		return nil, err
	}
	var res api.ExecuteResponse
	if json.Unmarshal(body, &res) != nil || res.Status != "ok" {
		return nil, fmt.Errorf("execute: %.300s", body)
	}
	return &res, nil
}

func (d *daemon) putFile(name string, data []byte) (string, error) {
	resp, err := d.Client.Post("http://jaild/v1/files?name="+url.QueryEscape(name), "application/octet-stream", bytes.NewReader(data))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var f api.StoredFile
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(b, &f) != nil || f.SizeBytes != int64(len(data)) {
		return "", fmt.Errorf("upload: HTTP %d: %.300s", resp.StatusCode, b)
	}
	return f.FileID, nil
}

// getFile reads the stored file id whole into memory, as the inline
// client has it.
func (d *daemon) getFile(id string, size int64) error {
	resp, err := d.Client.Get("http://jaild/v1/files/" + id)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("download: HTTP %d: %.300s", resp.StatusCode, b)
	}
	buf := make([]byte, size+1)
	got, err := io.ReadFull(resp.Body, buf)
	if !errors.Is(err, io.ErrUnexpectedEOF) || int64(got) != size {
		return fmt.Errorf("download: %d bytes, want %d (%v)", got, size, err)
	}
	return nil
}

func (d *daemon) deleteFile(id string) {
	req, _ := http.NewRequest(http.MethodDelete, "http://jaild/v1/files/"+id, nil)
	if resp, err := d.Client.Do(req); err == nil {
		resp.Body.Close()
	}
}

// watchRSS resets the daemon's peak RSS (clear_refs 5: VmHWM := VmRSS)
// and returns a func giving how far the peak has since risen above the
// RSS at the reset.
func (d *daemon) watchRSS() func() uint64 {
	pid := d.Pid()
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
	base := procStatus(pid, "VmRSS:")
	return func() uint64 {
		if hwm := procStatus(pid, "VmHWM:"); hwm > base {
			return hwm - base
		}
		return 0
	}
}
