package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func write(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "jaild.toml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaultIsValid(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	p := write(t, `
socket = "/tmp/x.sock"
shutdown_grace = "5s"
[defaults]
timeout_ms = 2000
[admission]
max_concurrent = 3
`)
	c, err := Load(p, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Socket != "/tmp/x.sock" || c.Defaults.TimeoutMs != 2000 || c.Defaults.MemoryMB != 512 || c.MaxConcurrent() != 3 || c.ShutdownGrace.Seconds() != 5 {
		t.Errorf("loaded %+v", c)
	}
}

func TestLoadErrorsNameTheKey(t *testing.T) {
	cases := map[string]string{
		"unknown key":             "sockett = \"/x\"\n",
		"relative socket":         "socket = \"x.sock\"\n",
		"bad mode":                "socket_mode = \"rw\"\n",
		"zero timeout":            "[defaults]\ntimeout_ms = 0\n",
		"default over max":        "[defaults]\nmemory_mb = 4096\n",
		"max over admin":          "[maxima]\npids = 2000\n",
		"bad duration":            "shutdown_grace = \"soon\"\n",
		"negative quota":          "[admission]\ndaily_quota = -1\n",
		"relative files":          "[files]\ndir = \"files\"\n",
		"file over uid":           "[files]\nmax_file_mb = 8192\n",
		"uid over total":          "[files]\nmax_mb_per_uid = 20000\n",
		"zero file count":         "[files]\nmax_files_per_uid = 0\n",
		"negative free":           "[files]\nmin_free_mb = -1\n",
		"short files ttl":         "[files]\nttl = \"0s\"\n",
		"metrics no port":         "metrics_listen = \"127.0.0.1\"\n",
		"metrics bad port":        "metrics_listen = \"127.0.0.1:http\"\n",
		"metrics no host":         "metrics_listen = \":9464\"\n",
		"tls per client over max": "[tls]\nmax_connections = 16\nmax_connections_per_client = 17\n[[tls.clients]]\nname = \"a\"\n",
		"tls zero handshakes":     "[tls]\nmax_handshakes = 0\n[[tls.clients]]\nname = \"a\"\n",
		"tls per address over":    "[tls]\nmax_handshakes = 4\nmax_handshakes_per_address = 5\n[[tls.clients]]\nname = \"a\"\n",
		"tls handshake timeout":   "[tls]\nhandshake_timeout = \"10ms\"\n[[tls.clients]]\nname = \"a\"\n",
		"tls same subject":        "[tls]\n[[tls.clients]]\nname = \"ops\"\n[[tls.clients]]\nname = \"ops2\"\nsubject = \"ops\"\n",
		"tls same san":            "[tls]\n[[tls.clients]]\nname = \"a\"\nsan = \"*.x\"\n[[tls.clients]]\nname = \"b\"\nsan = \"*.x\"\n",
		"short write":             "write_timeout = \"500ms\"\n",
		"long write":              "write_timeout = \"2h\"\n",
		"zero write rate":         "write_min_rate_kib = 0\n",
		"huge write rate":         "write_min_rate_kib = 1048577\n",
		"session mem low":         "[sessions]\nmax_memory_total_mb = 63\n",
		"session mem high":        "[sessions]\nmax_memory_per_uid_mb = 16777217\n",
		"session mem neg":         "[sessions]\nmax_memory_per_uid_mb = -1\n",
		"session uid>tot":         "[sessions]\nmax_memory_per_uid_mb = 4096\nmax_memory_total_mb = 2048\n",
		"session mem<def":         "[sessions]\nmax_memory_per_uid_mb = 256\n",
	}
	want := map[string]string{}
	for name, body := range cases {
		_, err := Load(write(t, body), true)
		if err == nil || !strings.Contains(err.Error(), want[name]) {
			t.Errorf("%s: error %v, want one naming %s", name, err, want[name])
		}
	}
}

func TestMissingFile(t *testing.T) {
	if _, err := Load("/nonexistent/jaild.toml", false); err != nil {
		t.Errorf("missing default file: %v, want defaults", err)
	}
	if _, err := Load("/nonexistent/jaild.toml", true); err == nil {
		t.Error("missing explicit file accepted")
	}
}

// The example configuration shipped in systemd/ loads and documents the
// true defaults.
func TestShippedConfigIsTheDefault(t *testing.T) {
	c, err := Load("../../systemd/jaild.toml", true)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("systemd/jaild.toml differs from Default():\n%+v\n%+v", c, Default())
	}
}

func TestMetricsListen(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:9464", "[::1]:9464", "0.0.0.0:9464", "localhost:9464"} {
		c, err := Load(write(t, "metrics_listen = \""+addr+"\"\n"), true)
		if err != nil || c.MetricsListen != addr {
			t.Errorf("metrics_listen = %q: %v", addr, err)
		}
	}
	for _, addr := range []string{"9464", "127.0.0.1:0", "127.0.0.1:99999", "[::1]", "a b:1"} {
		if _, err := Load(write(t, "metrics_listen = \""+addr+"\"\n"), true); err == nil || !strings.Contains(err.Error(), "metrics_listen") {
			t.Errorf("metrics_listen = %q: %v, want an error naming the key", addr, err)
		}
	}
}

// TestSessionMemory: the session memory bounds' bounds, and how 0
// resolves against the host's RAM.
func TestSessionMemory(t *testing.T) {
	const gib = 1 << 30
	for _, c := range []struct {
		perUID, total int64 // configured, MiB
		host          int64
		wantUID       int64
		wantTotal     int64
	}{
		{0, 0, 24 * gib, 6 * gib, 12 * gib},
		{0, 0, 64 * gib, 8 * gib, 32 * gib}, // per uid at most 8 GiB
		{0, 0, 1 * gib, 1 * gib, 2 * gib},   // total at least 2 GiB
		{0, 384, 24 * gib, 192 << 20, 384 << 20},
		{4096, 0, 4 * gib, 2 * gib, 2 * gib}, // never above the total
		{256, 384, 24 * gib, 256 << 20, 384 << 20},
	} {
		s := Sessions{MaxMemoryPerUIDMB: c.perUID, MaxMemoryTotalMB: c.total}
		if u, tot := s.memory(c.host); u != c.wantUID || tot != c.wantTotal {
			t.Errorf("%+v on %d GiB: per uid %d MiB, total %d MiB; want %d, %d", c, c.host/gib, u>>20, tot>>20, c.wantUID>>20, c.wantTotal>>20)
		}
	}
	ok := Default()
	ok.Defaults.MemoryMB = 64
	ok.Sessions.MaxMemoryPerUIDMB, ok.Sessions.MaxMemoryTotalMB = 64, MaxSessionMemoryMB
	if err := ok.Validate(); err != nil {
		t.Errorf("the bounds themselves: %v", err)
	}
	def := Default()
	if u, tot := def.SessionMemory(); u <= 0 || u > tot || tot < 2*gib {
		t.Errorf("automatic on this host: per uid %d, total %d", u, tot)
	}
}
