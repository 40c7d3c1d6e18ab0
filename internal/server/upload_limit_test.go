package server

import (
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/filestore"
)

// countingReader counts the bytes read of r.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// A multipart upload is refused once a part's header passes maxPartHead,
// having read little more of the body: the multipart reader would
// otherwise hold a header of up to 10 MiB per connection (hostile case
// T15b). A header under the bound, and fields before the file, still work.
func TestUploadPartHeaderBound(t *testing.T) {
	st, err := filestore.Open(filestore.Config{
		Dir: filepath.Join(t.TempDir(), "files"), MaxFileBytes: 1 << 20, MaxBytesPerUID: 1 << 30, MaxFilesPerUID: 100,
		MaxTotalBytes: 1 << 30, TTL: time.Hour,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	const ctype = "multipart/form-data; boundary=b"
	file := func(header string) string {
		return "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"x.csv\"\r\n" + header + "\r\n1,2\r\n--b--\r\n"
	}
	for _, c := range []struct {
		name, body string
		ok         bool
	}{
		{"a 10 MiB header line", file("X-Huge: " + strings.Repeat("h", 10<<20) + "\r\n"), false},
		{"20,000 short headers", file(strings.Repeat("X-H: v\r\n", 20000)), false},
		{"a 10 MiB preamble", strings.Repeat("p\r\n", 10<<20/3) + file(""), false},
		{"a 12 KiB header", file("X-Big: " + strings.Repeat("h", 12<<10) + "\r\n"), true},
		{"fields, then the file", strings.Repeat("--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n"+strings.Repeat("v", 10<<10)+"\r\n", 50) + file(""), true},
	} {
		body := &countingReader{r: strings.NewReader(c.body)}
		m, err := storeUpload(st, 1, ctype, "", body)
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.ok:
			if m.Size != 3 {
				t.Errorf("%s: stored %+v", c.name, m)
			}
			_, _ = st.Delete(1, false, m.ID)
		case !errors.Is(err, errPartLimit) || !errors.Is(err, errdefs.ErrInvalidArgument):
			t.Errorf("%s: %v, want the part bound's error", c.name, err)
		case body.n > maxPartHead+2*partReadAhead:
			t.Errorf("%s: refused after reading %d bytes of the body", c.name, body.n)
		}
	}
	if _, n, _ := st.Usage(1); n != 0 {
		t.Errorf("%d files left stored", n)
	}
}
