package server

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/policy"
	"github.com/jaild/jaild/internal/rootfs"
	"github.com/jaild/jaild/internal/run/spec"
)

// These tests need neither root nor a jail: they exercise decoding and
// validation, which happen before anything is created.

func testServer() *Server {
	s := &Server{cfg: config.Default(), policy: policy.New(config.Default()), engine: imagesEngine{}}
	s.SetImages(s.cfg)
	return s
}

// imagesEngine is an engine that only knows its images: the default
// "python" (with ruff) and "small" (without).
type imagesEngine struct{ Engine }

func (imagesEngine) Images() []spec.ImageStats {
	return []spec.ImageStats{
		{Name: "python", Default: true, Manifest: &rootfs.Manifest{Name: "python", Packages: []rootfs.Package{{Name: "ruff"}}}},
		{Name: "small", Manifest: &rootfs.Manifest{Name: "small"}},
	}
}

func decodeExecute(s *Server, body string, who peer.Caller) (*spec.Request, error) {
	r := httptest.NewRequest("POST", "/v1/execute", strings.NewReader(body))
	var req api.ExecuteRequest
	if err := s.decode(httptest.NewRecorder(), r, &req); err != nil {
		return nil, err
	}
	return s.jailRequest(&req, who)
}

func TestLimitsResolution(t *testing.T) {
	s := testServer()
	user, admin := peer.Caller{UID: 1000}, peer.Caller{UID: 0, Admin: true}
	jr, err := decodeExecute(s, `{"code":"1"}`, user)
	if err != nil || jr.Limits.Timeout.Milliseconds() != 10000 || jr.Limits.MemoryBytes != 512<<20 {
		t.Fatalf("defaults: %+v %v", jr, err)
	}
	jr, err = decodeExecute(s, `{"code":"1","limits":{"memory_mb":2048,"timeout_ms":60000}}`, user)
	if err != nil || jr.Limits.MemoryBytes != 2048<<20 {
		t.Fatalf("at the maximum: %v", err)
	}
	if _, err := decodeExecute(s, `{"code":"1","limits":{"memory_mb":2049}}`, user); !errors.Is(err, errdefs.ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "limits.memory_mb: 2049 is above the maximum of 2048") {
		t.Errorf("above the caller maximum: %v", err)
	}
	if _, err := decodeExecute(s, `{"code":"1","limits":{"memory_mb":4096}}`, admin); err != nil {
		t.Errorf("admin within admin maxima: %v", err)
	}
	if _, err := decodeExecute(s, `{"code":"1","limits":{"memory_mb":16385}}`, admin); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("above the admin maximum: %v", err)
	}
}

func TestMessages(t *testing.T) {
	l := spec.DefaultLimits()
	cases := []struct {
		res  spec.Result
		want string
	}{
		{spec.Result{Status: spec.StatusOK}, ""},
		{spec.Result{Status: spec.StatusTimeout}, "Execution terminated after 10 seconds (the time limit)"},
		{spec.Result{Status: spec.StatusMemoryLimit}, "Memory limit of 512 MB exceeded; the process was killed"},
		{spec.Result{Status: spec.StatusError, ExitCode: 1, Exception: &spec.Exception{Type: "MemoryError", Message: ""}}, "MemoryError"},
		{spec.Result{Status: spec.StatusError, ExitCode: 1, Exception: &spec.Exception{Type: "ModuleNotFoundError", Message: "No module named 'foo'"}}, "ModuleNotFoundError: No module named 'foo'"},
		{spec.Result{Status: spec.StatusError, ExitCode: 3}, "Process exited with code 3"},
		{spec.Result{Status: spec.StatusKilled, Signal: 9}, "Process killed by signal 9 (SIGKILL)"},
		{spec.Result{Status: spec.StatusKilled, Cancelled: true}, "Execution cancelled"},
	}
	for _, c := range cases {
		if got := message(&c.res, l); got != c.want {
			t.Errorf("message(%s) = %q, want %q", c.res.Status, got, c.want)
		}
	}
}

// FuzzDecodeExecute: no input panics the decoder or the validator, and
// whatever they accept satisfies the engine's own validation.
func FuzzDecodeExecute(f *testing.F) {
	for _, seed := range []string{
		`{"code":"print(1)"}`,
		`{"code":"x","stdin":"y","files":[{"path":"a/b.txt","content_b64":"aGk="}],"return_files":["**/*.png"],"limits":{"timeout_ms":5,"memory_mb":5,"pids":5,"file_size_mb":5,"output_bytes":5},"last_line_interactive":true,"env":{"A":"b"}}`,
		`{"code":"1","files":[{"path":"../x","content_b64":""}]}`,
		`{"code":"1","limits":{"timeout_ms":1e999}}`,
		`[[[[`, `{"code":"1"} trailing`, "\xff\xfe",
	} {
		f.Add(seed)
	}
	s := testServer()
	f.Fuzz(func(t *testing.T, body string) {
		jr, err := decodeExecute(s, body, peer.Caller{UID: 1000})
		if err != nil {
			if status, _ := errdefs.Classify(err); status >= 500 {
				t.Fatalf("decoding %q gave a server error: %v", body, err)
			}
			return
		}
		if err := jr.Validate(); err != nil {
			t.Fatalf("accepted %q but the engine refuses it: %v", body, err)
		}
	})
}
