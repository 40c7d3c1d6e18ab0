package server

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/filestore"
)

func FuzzUploadQuery(f *testing.F) {
	for _, s := range []string{"", "name=data.csv", "name=", "name=a&name=b", "name=%2e%2e", "name=a%2Fb", "x=1", "name=a;b", "name=%zz", "name=%E2%80%AE"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := parseUploadQuery(raw)
		if err != nil {
			var fe *errdefs.FieldError
			if !errors.As(err, &fe) || (fe.Field != "name" && fe.Field != "query") || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("%q: %v is not a field error for name or query", raw, err)
			}
			return
		}
		if q.name == "" {
			return
		}
		if err := filestore.ValidName(q.name); err != nil {
			t.Fatalf("%q: accepted the name %q: %v", raw, q.name, err)
		}
		// The name, sent as a client sends it, comes back the same.
		again, err := parseUploadQuery(url.Values{"name": {q.name}}.Encode())
		if err != nil || again != q {
			t.Fatalf("%q: name %q does not round-trip: %+v %v", raw, q.name, again, err)
		}
	})
}

// FuzzMultipartUpload feeds arbitrary multipart bodies to the upload
// parser: it fails with a caller's error and stores nothing, or stores
// exactly the first file part.
func FuzzMultipartUpload(f *testing.F) {
	st, err := filestore.Open(filestore.Config{
		Dir: filepath.Join(f.TempDir(), "files"), MaxFileBytes: 1 << 20, MaxBytesPerUID: 1 << 30, MaxFilesPerUID: 1 << 20,
		MaxTotalBytes: 1 << 30, TTL: time.Hour,
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(st.Close)
	add := func(boundary string, parts ...[3]string) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		if err := mw.SetBoundary(boundary); err != nil {
			f.Fatal(err)
		}
		for _, p := range parts {
			var w io.Writer
			if p[1] == "" {
				w, _ = mw.CreateFormField(p[0])
			} else {
				w, _ = mw.CreateFormFile(p[0], p[1])
			}
			io.WriteString(w, p[2])
		}
		mw.Close()
		f.Add(boundary, b.Bytes())
		f.Add(boundary, b.Bytes()[:b.Len()/2])
	}
	add("xyz", [3]string{"file", "a.csv", "1,2\n"})
	add("b0undary", [3]string{"note", "", "text"}, [3]string{"file", "data.bin", "\x00\xff\r\n--b0undary\r\n"})
	add("q", [3]string{"f", "../../etc/passwd", "x"}, [3]string{"g", "b", "y"})
	add("e", [3]string{"f", "..", ""})
	f.Add("zz", []byte("--zz\r\nContent-Disposition: form-data; name=\"f\"; filename=\"q.txt\"\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\na=3Db\r\n--zz--\r\n"))
	f.Fuzz(func(t *testing.T, boundary string, body []byte) {
		ctype := mime.FormatMediaType("multipart/form-data", map[string]string{"boundary": boundary})
		if ctype == "" {
			return
		}
		m, err := storeUpload(st, 1, ctype, "", bytes.NewReader(body))
		if err != nil {
			if status, _ := errdefs.Classify(err); status >= 500 {
				t.Fatalf("a malformed body is the daemon's fault: %v", err)
			}
			if _, n, _ := st.Usage(1); n != 0 {
				t.Fatalf("a refused upload stored a file: %v", err)
			}
			return
		}
		defer st.Delete(1, false, m.ID)
		// The stored file is the first part with a filename, whole.
		mr := multipart.NewReader(bytes.NewReader(body), boundary)
		var want []byte
		var name string
		for {
			p, err := mr.NextPart()
			if err != nil {
				t.Fatalf("stored %+v from a body without a readable file part: %v", m, err)
			}
			if p.FileName() != "" {
				name = p.FileName()
				if want, err = io.ReadAll(p); err != nil {
					t.Fatalf("stored %+v from a file part that does not read: %v", m, err)
				}
				break
			}
		}
		file, _, err := st.Open(1, false, m.ID)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(file)
		file.Close()
		if err != nil || !bytes.Equal(got, want) || m.Name != name || m.Size != int64(len(want)) {
			t.Fatalf("stored %q as %q (%d bytes); the part is %q named %q", got, m.Name, m.Size, want, name)
		}
	})
}
