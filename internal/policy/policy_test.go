package policy_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/errdefs"
	"github.com/jaild/jaild/internal/peer"
	"github.com/jaild/jaild/internal/policy"
	"github.com/jaild/jaild/internal/run/spec"
)

func ptr[T any](v T) *T { return &v }

// field returns the field an error names ("" for none).
func field(err error) string {
	var fe *errdefs.FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

func TestLimits(t *testing.T) {
	cfg := config.Default()
	p := policy.New(cfg)
	user, admin := peer.Caller{UID: 1000}, peer.Caller{UID: 0, Admin: true}
	l, err := p.Limits(nil, cfg.Defaults, user)
	if err != nil || l.Timeout.Milliseconds() != cfg.Defaults.TimeoutMs || l.MemoryBytes != cfg.Defaults.MemoryMB<<20 {
		t.Fatalf("defaults: %+v %v", l, err)
	}
	if l.AddressSpaceBytes < 4*l.MemoryBytes || l.WorkspaceBytes < l.FileSizeBytes {
		t.Errorf("derived limits below their floor: %+v", l)
	}
	for _, c := range []struct {
		in    api.Limits
		who   peer.Caller
		field string // "" = accepted
	}{
		{api.Limits{TimeoutMs: ptr(cfg.Maxima.TimeoutMs)}, user, ""},
		{api.Limits{TimeoutMs: ptr(cfg.Maxima.TimeoutMs + 1)}, user, "limits.timeout_ms"},
		{api.Limits{TimeoutMs: ptr(cfg.Maxima.TimeoutMs + 1)}, admin, ""},
		{api.Limits{MemoryMB: ptr(int64(0))}, admin, "limits.memory_mb"},
		{api.Limits{Pids: ptr(cfg.AdminMaxima.Pids + 1)}, admin, "limits.pids"},
		{api.Limits{OutputBytes: ptr(int64(-5))}, user, "limits.output_bytes"},
	} {
		_, err := p.Limits(&c.in, cfg.Defaults, c.who)
		if got := field(err); got != c.field || (c.field == "" && err != nil) {
			t.Errorf("%+v as admin=%v: %v (field %q), want field %q", c.in, c.who.Admin, err, got, c.field)
		}
	}
}

func TestFiles(t *testing.T) {
	none := func(string) (spec.File, error) { t.Fatal("no file_id expected"); return spec.File{}, nil }
	for _, c := range []struct {
		name  string
		files []api.FileIn
		field string
	}{
		{"fine", []api.FileIn{{Path: "a/b.txt", ContentB64: "aGk="}, {Path: "c"}}, ""},
		{"duplicate", []api.FileIn{{Path: "a"}, {Path: "a"}}, "files[1].path"},
		{"inside a file", []api.FileIn{{Path: "a"}, {Path: "a/b"}}, "files[1].path"},
		{"dot-dot", []api.FileIn{{Path: "../x"}}, "files[0].path"},
		{"bad base64", []api.FileIn{{Path: "a", ContentB64: "%%%"}}, "files[0].content_b64"},
		{"both", []api.FileIn{{Path: "a", ContentB64: "aGk=", FileID: "f"}}, "files[0]"},
		{"too large", []api.FileIn{{Path: "a", ContentB64: "aGVsbG8="}}, "files"},
	} {
		ws := int64(1 << 20)
		if c.name == "too large" {
			ws = 4
		}
		out, err := policy.Files(c.files, ws, none)
		if got := field(err); got != c.field || (c.field == "" && err != nil) {
			t.Errorf("%s: %v (field %q), want %q", c.name, err, got, c.field)
		}
		if c.field == "" && (len(out) != 2 || string(out[0].Data) != "hi" || out[0].Path != "a/b.txt") {
			t.Errorf("%s: %+v", c.name, out)
		}
	}
}

// TestFilesStored: a file_id is opened once however often it is named,
// and what was opened is closed when a later entry is refused.
func TestFilesStored(t *testing.T) {
	var opened []*os.File
	open := func(id string) (spec.File, error) {
		if id == "gone" {
			return spec.File{}, errdefs.New(errdefs.ErrNotFound, "no stored file %q", id)
		}
		f, err := os.CreateTemp(t.TempDir(), "stored")
		if err != nil {
			t.Fatal(err)
		}
		opened = append(opened, f)
		return spec.File{Src: f, Size: 3}, nil
	}
	out, err := policy.Files([]api.FileIn{{Path: "a", FileID: "f1"}, {Path: "b", FileID: "f1"}}, 1<<20, open)
	if err != nil || len(out) != 2 || len(opened) != 1 || out[0].Src != out[1].Src || out[1].Path != "b" {
		t.Fatalf("shared id: %+v %v (opened %d)", out, err, len(opened))
	}
	policy.CloseFiles(out)
	_, err = policy.Files([]api.FileIn{{Path: "a", FileID: "f2"}, {Path: "b", FileID: "gone"}}, 1<<20, open)
	if field(err) != "files[1].file_id" || !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing id: %v", err)
	}
	if _, err := opened[1].Stat(); err == nil {
		t.Errorf("the file opened before the refusal is still open")
	}
}

func TestNetwork(t *testing.T) {
	cfg := config.Default()
	if _, err := policy.New(cfg).Network(api.NetworkInternet, nil, peer.Caller{UID: 0, Admin: true, Network: true}); !errors.Is(err, errdefs.ErrForbidden) || !strings.Contains(err.Error(), "network.enabled") {
		t.Errorf("egress disabled: %v", err)
	}
	cfg.Network.Enabled, cfg.Network.AllowHosts = true, []string{"example.org"}
	p := policy.New(cfg)
	for _, c := range []struct {
		network string
		hosts   []string
		who     peer.Caller
		ok      bool
	}{
		{"", nil, peer.Caller{UID: 1000}, true},
		{"none", []string{"example.org"}, peer.Caller{UID: 1000}, false},
		{"internet", nil, peer.Caller{UID: 1000}, false},
		{"internet", nil, peer.Caller{UID: 1000, Network: true}, true},
		{"internet", []string{"other.org"}, peer.Caller{UID: 1000, Network: true}, false},
		{"internet", []string{"other.org"}, peer.Caller{UID: 0, Admin: true, Network: true}, true},
		{"bogus", nil, peer.Caller{UID: 0, Admin: true, Network: true}, false},
	} {
		n, err := p.Network(c.network, c.hosts, c.who)
		if (err == nil) != c.ok || (c.ok && c.network == "internet" && n == nil) {
			t.Errorf("%q %v %+v: %v %v", c.network, c.hosts, c.who, n, err)
		}
	}
}

func TestCall(t *testing.T) {
	b := policy.CallBounds{Limits: spec.DefaultLimits(), MaxTimeoutMs: 60000, MaxOutput: 1 << 20}
	rs := policy.Resolvers{Sink: func(string) (spec.FileSink, error) { return nil, nil }}
	c, err := policy.Call(&api.SessionExecuteRequest{Code: "x"}, b, rs)
	if err != nil || c.Timeout != b.Limits.Timeout || !c.LastLineInteractive {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	big := strings.Repeat("x", policy.MaxSessionStdinBytes+1)
	for _, c := range []struct {
		req   api.SessionExecuteRequest
		field string
	}{
		{api.SessionExecuteRequest{Code: ""}, "code"},
		{api.SessionExecuteRequest{Code: "x", Limits: &api.Limits{TimeoutMs: ptr(int64(60001))}}, "limits.timeout_ms"},
		{api.SessionExecuteRequest{Code: "x", Stdin: &big}, "stdin"},
		{api.SessionExecuteRequest{Code: "x", ReturnFiles: []string{"/abs"}}, "return_files[0]"},
	} {
		if _, err := policy.Call(&c.req, b, rs); field(err) != c.field {
			t.Errorf("%+v: %v, want field %q", c.req.Limits, err, c.field)
		}
	}
	if err := policy.CallFields(&api.SessionExecuteRequest{Limits: &api.Limits{MemoryMB: ptr(int64(1))}}); field(err) != "limits.memory_mb" {
		t.Errorf("a session's own field: %v", err)
	}
}
