// Package config loads and validates jaild's configuration file (TOML).
// Every key has a default; an unknown key or a bad value stops start-up
// with an error that names the key.
package config

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"golang.org/x/sys/unix"

	"github.com/jaild/jaild/internal/allowlist"
	"github.com/jaild/jaild/internal/lazyre"
	"github.com/jaild/jaild/internal/rootfs"
)

// DefaultPath is where jaild looks for its configuration file.
const DefaultPath = "/etc/jaild/jaild.toml"

// Limits are limit values as configured (and as callers name them).
type Limits struct {
	TimeoutMs   int64 `toml:"timeout_ms"`
	MemoryMB    int64 `toml:"memory_mb"`
	Pids        int64 `toml:"pids"`
	FileSizeMB  int64 `toml:"file_size_mb"`
	OutputBytes int64 `toml:"output_bytes"`
}

// Duration is a time.Duration written as a string ("30s") in TOML.
type Duration struct{ time.Duration }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration as a string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Config is jaild's configuration.
type Config struct {
	Socket         string `toml:"socket"`
	SocketGroup    string `toml:"socket_group"`
	SocketMode     string `toml:"socket_mode"`
	Image          string `toml:"image"`
	SeccompProfile string `toml:"seccomp_profile"`
	RunDir         string `toml:"run_dir"`
	CgroupName     string `toml:"cgroup_name"`
	// CgroupFavorDynmods sets the host's cgroup option favordynmods at
	// start: each jail starts ~10 ms sooner (see jail.Config).
	CgroupFavorDynmods bool     `toml:"cgroup_favordynmods"`
	HostIDBase         uint32   `toml:"host_id_base"`
	AdminGroup         string   `toml:"admin_group"`
	ShutdownGrace      Duration `toml:"shutdown_grace"`
	MaxBodyBytes       int64    `toml:"max_body_bytes"`
	ReadTimeout        Duration `toml:"read_timeout"`
	IdleTimeout        Duration `toml:"idle_timeout"`
	// WriteTimeout and WriteMinRateKiB bound how long a response that
	// holds part of the memory budget may wait for its client: at most
	// WriteTimeout at a time, and in all WriteTimeout plus a second per
	// WriteMinRateKiB KiB written (a client reading slower is dropped).
	WriteTimeout    Duration `toml:"write_timeout"`
	WriteMinRateKiB int64    `toml:"write_min_rate_kib"`
	// MemoryBudgetMB bounds the memory held for requests in flight (their
	// bodies, output, returned files and figures); 0: a quarter of the
	// host's memory, within 256 MiB..8 GiB. See MemoryBudget.
	MemoryBudgetMB int64 `toml:"memory_budget_mb"`
	// MemoryLimitMB is the daemon's soft memory limit (the Go runtime's
	// GOMEMLIMIT, and memory.high of its cgroup on v2); 0: the budget
	// plus 512 MiB; -1: none.
	MemoryLimitMB int64 `toml:"memory_limit_mb"`
	// MetricsListen is a TCP address ("127.0.0.1:9464") on which the
	// daemon serves GET /metrics and nothing else, for a Prometheus that
	// cannot reach the socket; "": none (the socket serves /metrics).
	MetricsListen string `toml:"metrics_listen"`

	Defaults    Limits    `toml:"defaults"`
	Maxima      Limits    `toml:"maxima"`
	AdminMaxima Limits    `toml:"admin_maxima"`
	Admission   Admission `toml:"admission"`
	Audit       Audit     `toml:"audit"`
	Pool        Pool      `toml:"pool"`
	Network     Network   `toml:"network"`
	Sessions    Sessions  `toml:"sessions"`
	Files       Files     `toml:"files"`
	// Images are the images served beside the default (Image), by the
	// name requests give in their image field; it must be the name in
	// the image's manifest (rootfs/build.sh's recipe name).
	Images map[string]Image `toml:"images"`
	TLS    TLS              `toml:"tls"`
}

// TLS configures the optional TCP listener: the same API as the socket,
// over TLS 1.3 with client certificates (mutual TLS). A reload (SIGHUP)
// reads the certificate, key and client CA files again and applies
// Clients; Listen changes with a restart.
type TLS struct {
	Listen   string `toml:"listen"` // "host:port"; "": no TCP listener
	Cert     string `toml:"cert"`   // the server's certificate chain (PEM)
	Key      string `toml:"key"`    // its private key (PEM)
	ClientCA string `toml:"client_ca"`
	// MaxConnections bounds the listener's connections whose handshake
	// is done; MaxConnectionsPerClient one client's among them (admins
	// are exempt; 0: a quarter of MaxConnections, at least 1).
	MaxConnections          int `toml:"max_connections"`
	MaxConnectionsPerClient int `toml:"max_connections_per_client"`
	// MaxHandshakes and MaxHandshakesPerAddress bound the handshakes in
	// progress, in all and per source address (an IPv4 address or an
	// IPv6 /64), apart from MaxConnections: beyond either, the oldest
	// connection whose ClientHello has not arrived is closed to make
	// room. HandshakeTimeout bounds each handshake.
	MaxHandshakes           int         `toml:"max_handshakes"`
	MaxHandshakesPerAddress int         `toml:"max_handshakes_per_address"`
	HandshakeTimeout        Duration    `toml:"handshake_timeout"`
	Clients                 []TLSClient `toml:"clients"`
}

// MaxConnsPerClient resolves max_connections_per_client.
func (t TLS) MaxConnsPerClient() int {
	if t.MaxConnectionsPerClient > 0 {
		return t.MaxConnectionsPerClient
	}
	return max(1, t.MaxConnections/4)
}

// TLSClient maps client certificates to a caller. A certificate signed by
// the client CA that matches no entry is refused at the handshake.
type TLSClient struct {
	// Name is the caller's name: its sessions and stored files belong to
	// it, and the audit names it.
	Name string `toml:"name"`
	// Subject matches the certificate's subject common name exactly (""
	// means Name); SAN, when set instead, is a pattern over its DNS and
	// URI subject alternative names (path.Match: * matches any run of
	// characters but '/', so "*.corp.example" also matches
	// "a.b.corp.example", and "spiffe://corp/agent/*" one path segment).
	Subject string `toml:"subject"`
	SAN     string `toml:"san"`
	Admin   bool   `toml:"admin"`   // admin maxima, no rate or quota, every caller's sessions
	Network bool   `toml:"network"` // may ask for egress (with network.enabled)
	// RatePerMinute, Burst and DailyQuota replace [admission]'s for this
	// client when set.
	RatePerMinute *float64 `toml:"rate_per_minute"`
	Burst         *int     `toml:"burst"`
	DailyQuota    *int64   `toml:"daily_quota"`
}

// CN is the subject common name a client without a san pattern matches:
// its subject, or its name.
func (c TLSClient) CN() string {
	if c.Subject != "" {
		return c.Subject
	}
	return c.Name
}

// TLSClientUIDBase: a TLS client's uid is above it (TLSClientUID), far
// from the uids of local users and of containers' id ranges.
const TLSClientUIDBase = 1 << 31

// TLSClientUID is the uid a TLS client's sessions, files, rate and quota
// are kept under: derived from its name, so that it stays the same
// across restarts and reorderings of the configuration.
func TLSClientUID(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return TLSClientUIDBase | h.Sum32()&0x7fff_fffe // never 2^32-1 (the kernel's "no uid")
}

var tlsClientName = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

func (c *Config) validateTLS() error {
	t := c.TLS
	if t.Listen == "" && len(t.Clients) == 0 {
		return nil
	}
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("tls.%s: "+format, append([]any{key}, args...)...))
	}
	if t.Listen != "" {
		if err := checkListen(t.Listen); err != nil {
			bad("listen", "%v", err)
		}
		for key, p := range map[string]string{"cert": t.Cert, "key": t.Key, "client_ca": t.ClientCA} {
			if !filepath.IsAbs(p) {
				bad(key, "must be an absolute path when tls.listen is set, got %q", p)
			}
		}
		if len(t.Clients) == 0 {
			bad("clients", "no [[tls.clients]]: every client would be refused")
		}
	}
	if t.MaxConnections < 1 || t.MaxConnections > 65536 {
		bad("max_connections", "must be in 1..65536, got %d", t.MaxConnections)
	} else if t.MaxConnectionsPerClient < 0 || t.MaxConnectionsPerClient > t.MaxConnections {
		bad("max_connections_per_client", "must be in 0..%d (tls.max_connections; 0: a quarter of it), got %d", t.MaxConnections, t.MaxConnectionsPerClient)
	}
	if t.MaxHandshakes < 1 || t.MaxHandshakes > 65536 {
		bad("max_handshakes", "must be in 1..65536, got %d", t.MaxHandshakes)
	} else if t.MaxHandshakesPerAddress < 1 || t.MaxHandshakesPerAddress > t.MaxHandshakes {
		bad("max_handshakes_per_address", "must be in 1..%d (tls.max_handshakes), got %d", t.MaxHandshakes, t.MaxHandshakesPerAddress)
	}
	if d := t.HandshakeTimeout.Duration; d < 100*time.Millisecond || d > time.Minute {
		bad("handshake_timeout", "must be in 100ms..1m, got %v", d)
	}
	names, uids, rules := map[string]bool{}, map[uint32]string{}, map[string]string{}
	for i, cl := range t.Clients {
		key := fmt.Sprintf("clients[%d]", i)
		if !tlsClientName.MatchString(cl.Name) {
			bad(key+".name", "must be 1..64 letters, digits, '.', '_', '@' and '-', got %q", cl.Name)
			continue
		}
		if names[cl.Name] {
			bad(key+".name", "%q is named twice", cl.Name)
		}
		names[cl.Name] = true
		if other, ok := uids[TLSClientUID(cl.Name)]; ok {
			bad(key+".name", "%q and %q map to the same uid; rename one", cl.Name, other)
		}
		uids[TLSClientUID(cl.Name)] = cl.Name
		if cl.Subject != "" && cl.SAN != "" {
			bad(key, "set subject or san, not both")
		}
		if cl.SAN != "" {
			if _, err := path.Match(cl.SAN, ""); err != nil {
				bad(key+".san", "bad pattern %q: %v", cl.SAN, err)
			}
		}
		// Two clients of one rule match the same certificates: every
		// such certificate would be refused as ambiguous (tlsauth.Match).
		r := "subject CN " + strconv.Quote(cl.CN())
		if cl.SAN != "" {
			r = "san " + strconv.Quote(cl.SAN)
		}
		if other, ok := rules[r]; ok {
			bad(key, "clients %q and %q have the same rule (%s); every certificate it matches would be refused as ambiguous", other, cl.Name, r)
		}
		rules[r] = cl.Name
		if cl.RatePerMinute != nil && *cl.RatePerMinute < 0 {
			bad(key+".rate_per_minute", "must not be negative (0: unlimited)")
		}
		if cl.Burst != nil && *cl.Burst < 1 {
			bad(key+".burst", "must be at least 1")
		}
		if cl.DailyQuota != nil && *cl.DailyQuota < 0 {
			bad(key+".daily_quota", "must not be negative (0: unlimited)")
		}
	}
	return errors.Join(errs...)
}

// Image is one more image the daemon serves. A reload (SIGHUP) adds,
// replaces (a new build in Dir) and removes images without a restart.
type Image struct {
	Dir string `toml:"dir"` // a built image: rootfs.squashfs and manifest.json
	// Defaults are the limits of a run in this image that names none; a
	// key left out (0) takes [defaults]'. Each must be within [maxima].
	Defaults Limits `toml:"defaults"`
	// The image's warm pool (see [pool]): PoolSize jails that imported
	// Preimport, PlainPoolSize (default 1) that imported none.
	PoolSize      int      `toml:"pool_size"`
	PlainPoolSize *int     `toml:"plain_pool_size"`
	Preimport     []string `toml:"preimport"`
}

// DefaultPlainPoolSize is an image's plain_pool_size when it sets none.
const DefaultPlainPoolSize = 1

// PlainPool resolves plain_pool_size.
func (im Image) PlainPool() int {
	if im.PlainPoolSize == nil {
		return DefaultPlainPoolSize
	}
	return *im.PlainPoolSize
}

// ImageDefaults are the default limits of a run in the image named name:
// [defaults], with what its [images.NAME.defaults] sets instead. The
// default image, and a name not in Images, get [defaults].
func (c *Config) ImageDefaults(name string) Limits {
	d := c.Defaults
	im, ok := c.Images[name]
	if !ok {
		return d
	}
	for _, p := range []struct{ dst, v *int64 }{
		{&d.TimeoutMs, &im.Defaults.TimeoutMs}, {&d.MemoryMB, &im.Defaults.MemoryMB}, {&d.Pids, &im.Defaults.Pids},
		{&d.FileSizeMB, &im.Defaults.FileSizeMB}, {&d.OutputBytes, &im.Defaults.OutputBytes},
	} {
		if *p.v != 0 {
			*p.dst = *p.v
		}
	}
	return d
}

// ImageName is the form of an image's name (rootfs/build.sh's, and the
// jail engine's).
var ImageName = rootfs.ImageName

// MaxImages bounds how many images one daemon serves beside its default.
const MaxImages = 32

func (c *Config) validateImages() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	if len(c.Images) > MaxImages {
		bad("images", "at most %d images beside the default, got %d", MaxImages, len(c.Images))
	}
	dirs := map[string]string{filepath.Clean(c.Image): "image"}
	names := make([]string, 0, len(c.Images))
	for name := range c.Images {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		im := c.Images[name]
		key := "images." + name
		if !ImageName.MatchString(name) {
			bad(key, "an image's name is 1..63 lower-case letters, digits, - and _, starting with a letter or digit")
			continue
		}
		if !filepath.IsAbs(im.Dir) {
			bad(key+".dir", "must be an absolute path, got %q", im.Dir)
		} else if other, ok := dirs[filepath.Clean(im.Dir)]; ok {
			bad(key+".dir", "is also %s's", other)
		} else {
			dirs[filepath.Clean(im.Dir)] = key + ".dir"
		}
		for _, f := range im.Defaults.fields(ceilings) {
			if f.v < 0 || f.v > f.ceil {
				bad(key+".defaults."+f.name, "must be in 1..%d (or left out for [defaults]'), got %d", f.ceil, f.v)
			}
		}
		for _, f := range c.ImageDefaults(name).fields(c.Maxima) {
			if f.v > f.ceil {
				errs = append(errs, fmt.Errorf("%s.defaults.%s (%d) is above maxima.%s (%d)", key, f.name, f.v, f.name, f.ceil))
			}
		}
		if im.PoolSize < 0 || im.PoolSize > 64 {
			bad(key+".pool_size", "must be in 0..64 (0: no preloaded warm jails)")
		}
		if n := im.PlainPool(); n < 0 || n > 64 {
			bad(key+".plain_pool_size", "must be in 0..64 (0: no plain warm jails; default %d)", DefaultPlainPoolSize)
		}
		for i, m := range im.Preimport {
			if !moduleName.MatchString(m) {
				bad(fmt.Sprintf("%s.preimport[%d]", key, i), "%q is not a Python module name", m)
			}
		}
		if im.PoolSize > 0 && len(im.Preimport) == 0 {
			bad(key+".pool_size", "preloaded jails need modules to preload: set %s.preimport, or use plain_pool_size", key)
		}
	}
	return errors.Join(errs...)
}

// Files configures the file store: files uploaded once (POST /v1/files)
// and used by many runs, each owned by its uploader's uid.
type Files struct {
	Enabled bool   `toml:"enabled"`
	Dir     string `toml:"dir"` // made 0700 if missing
	// MaxFileMB bounds one file (413 beyond); MaxMBPerUID and
	// MaxFilesPerUID one caller's files (413 beyond); MaxTotalMB all
	// files, and MinFreeMB the free space the store leaves on its disk
	// (507 beyond either).
	MaxFileMB      int64    `toml:"max_file_mb"`
	MaxMBPerUID    int64    `toml:"max_mb_per_uid"`
	MaxFilesPerUID int      `toml:"max_files_per_uid"`
	MaxTotalMB     int64    `toml:"max_total_mb"`
	MinFreeMB      int64    `toml:"min_free_mb"`
	TTL            Duration `toml:"ttl"` // a file's lifetime from its upload
}

// Sessions configures stateful sessions: jails whose interpreter lives
// across calls.
type Sessions struct {
	Enabled   bool `toml:"enabled"`
	MaxPerUID int  `toml:"max_per_uid"` // live sessions of one caller (429 beyond)
	MaxTotal  int  `toml:"max_total"`   // live sessions of all callers (503 beyond)
	// IdleTimeout is a session's default idle timeout, counted from the
	// end of its last call; MaxIdleTimeout the most a caller may ask.
	IdleTimeout    Duration `toml:"idle_timeout"`
	MaxIdleTimeout Duration `toml:"max_idle_timeout"`
	// TTL is a session's default absolute lifetime; MaxTTL the most a
	// caller may ask, AdminMaxTTL an admin.
	TTL         Duration `toml:"ttl"`
	MaxTTL      Duration `toml:"max_ttl"`
	AdminMaxTTL Duration `toml:"admin_max_ttl"`
	// KeepEnded is how long an ended session stays visible to its owner.
	KeepEnded Duration `toml:"keep_ended"`
	// MaxMemoryPerUIDMB and MaxMemoryTotalMB bound the memory limits
	// (memory_mb) of the sessions live and being made, one caller's (429
	// beyond; admins are not bound by it) and all callers' (503 beyond): a
	// frozen session holds its memory between calls. 0: automatic (see
	// SessionMemory).
	MaxMemoryPerUIDMB int64 `toml:"max_memory_per_uid_mb"`
	MaxMemoryTotalMB  int64 `toml:"max_memory_total_mb"`
	// CheckpointDir holds paused sessions (0700, the daemon's only; a
	// disk, not a tmpfs: a paused session's memory is written there).
	CheckpointDir string `toml:"checkpoint_dir"`
	// CRIU is the criu program sessions pause with; "" finds one: what
	// `make deps` fetched (/var/cache/jaild/criu/current/bin/criu), else
	// criu on PATH. Whether it works on this host is probed at start
	// (GET /v1/info: sessions.pause).
	CRIU string `toml:"criu"`
	// OnIdle is what a session's idle timeout does: "pause" (to disk,
	// where the host can; elsewhere it ends) or "end".
	OnIdle string `toml:"on_idle"`
	// PausedTTL bounds how long a session stays paused (then it ends,
	// paused_ttl); 0: only its ttl bounds it.
	PausedTTL Duration `toml:"paused_ttl"`
	// OnShutdown is what a daemon's stop does to idle sessions: "pause"
	// (to disk, where this host can; the next daemon adopts them, as it
	// does every paused session) or "end". ShutdownPause bounds the time
	// the stop spends pausing them (the rest end).
	OnShutdown    string   `toml:"on_shutdown"`
	ShutdownPause Duration `toml:"shutdown_pause"`
	// MaxCheckpointMBPerUID and MaxCheckpointMBTotal bound the disk that
	// paused sessions and snapshots take: one caller's (413 beyond) and
	// everyone's (507); 0: no bound.
	MaxCheckpointMBPerUID int64 `toml:"max_checkpoint_mb_per_uid"`
	MaxCheckpointMBTotal  int64 `toml:"max_checkpoint_mb_total"`
	// CPUCores is a session's CPU quota in cores (cgroup cpu controller:
	// its background commands run between calls), MaxCPUCores the most a
	// caller may ask (cpu_cores); admins may ask up to MaxCPUCoresCeiling.
	CPUCores    float64 `toml:"cpu_cores"`
	MaxCPUCores float64 `toml:"max_cpu_cores"`
}

// MaxCPUCoresCeiling is the largest CPU quota of a session (the engine's,
// spec.MaxCPUCores).
const MaxCPUCoresCeiling = 256

// Network configures egress: whether a run may ask for "internet", who
// may, and where it may go.
type Network struct {
	Enabled bool `toml:"enabled"`
	// AllowGroup: callers in this group (and admins) may ask for
	// egress; "" lets every caller.
	AllowGroup string `toml:"allow_group"`
	// AllowHosts is the allowlist of a request that names none. When it is
	// set, a non-admin request's allow_hosts must be among its entries.
	AllowHosts []string `toml:"allow_hosts"`
	Subnet     string   `toml:"subnet"`
	// DNS are the upstream resolvers ("ip" or "ip:port"); empty: the
	// nameservers of /etc/resolv.conf.
	DNS               []string `toml:"dns"`
	Deny              []string `toml:"deny"` // denied on top of the built-in ranges
	MaxConnections    int      `toml:"max_connections"`
	MaxBytesPerSecond int64    `toml:"max_bytes_per_second"`
	Table             string   `toml:"table"`
	InterfacePrefix   string   `toml:"interface_prefix"`
}

// Pool configures the warm pool of jails created ahead of requests.
type Pool struct {
	Size           int      `toml:"size"` // jails that imported preimport; 0: none
	Preimport      []string `toml:"preimport"`
	PlainSize      int      `toml:"plain_size"`       // jails that imported none of preimport; 0: none
	MinAvailableMB int64    `toml:"min_available_mb"` // 0: 10% of the host's memory
}

// Admission configures concurrency, queueing and per-caller quotas.
type Admission struct {
	MaxConcurrent int      `toml:"max_concurrent"` // 0: one per CPU
	QueueSize     int      `toml:"queue_size"`
	QueueWait     Duration `toml:"queue_wait"`
	RatePerMinute float64  `toml:"rate_per_minute"` // 0: unlimited
	Burst         int      `toml:"burst"`
	DailyQuota    int64    `toml:"daily_quota"` // 0: unlimited
}

// Audit configures the audit trail.
type Audit struct {
	KeepCode     bool     `toml:"keep_code"`
	CodeDir      string   `toml:"code_dir"`
	MaxCodeBytes int64    `toml:"max_code_bytes"`
	Retention    Duration `toml:"retention"`
}

// HostIDSpan is how many host ids from host_id_base the jails use: 65536
// for each of at most 1024 jails at once (jail.MaxJails, jail.IDsPerJail;
// a test keeps the two packages in step).
const HostIDSpan = 1024 * 65536

// Default returns the built-in configuration.
func Default() Config {
	return Config{
		Socket:             "/run/jaild/jaild.sock",
		SocketGroup:        "jaild",
		SocketMode:         "0660",
		Image:              "/var/lib/jaild/rootfs/current",
		SeccompProfile:     "/usr/local/share/jaild/seccomp/default.json",
		RunDir:             "/run/jaild",
		CgroupName:         "jails",
		CgroupFavorDynmods: true,
		HostIDBase:         1_200_000_000,
		AdminGroup:         "jaild-admin",
		ShutdownGrace:      Duration{30 * time.Second},
		MaxBodyBytes:       64 << 20,
		ReadTimeout:        Duration{30 * time.Second},
		IdleTimeout:        Duration{120 * time.Second},
		WriteTimeout:       Duration{60 * time.Second},
		WriteMinRateKiB:    256,
		Defaults:           Limits{TimeoutMs: 10_000, MemoryMB: 512, Pids: 64, FileSizeMB: 64, OutputBytes: 1 << 20},
		Maxima:             Limits{TimeoutMs: 60_000, MemoryMB: 2048, Pids: 256, FileSizeMB: 256, OutputBytes: 16 << 20},
		AdminMaxima:        Limits{TimeoutMs: 3_600_000, MemoryMB: 16384, Pids: 1024, FileSizeMB: 4096, OutputBytes: 64 << 20},
		Admission: Admission{
			QueueSize: 64, QueueWait: Duration{10 * time.Second},
			RatePerMinute: 120, Burst: 30, DailyQuota: 10_000,
		},
		Audit: Audit{CodeDir: "/var/lib/jaild/audit", MaxCodeBytes: 64 << 10, Retention: Duration{7 * 24 * time.Hour}},
		Pool:  Pool{Size: 2, Preimport: []string{"numpy", "pandas", "matplotlib.pyplot"}, PlainSize: 2},
		Network: Network{
			AllowGroup: "jaild-network", AllowHosts: []string{}, Subnet: "10.231.0.0/16", DNS: []string{}, Deny: []string{}, MaxConnections: 64,
			MaxBytesPerSecond: 10 << 20, Table: "jaild", InterfacePrefix: "jd",
		},
		Sessions: Sessions{
			Enabled: true, MaxPerUID: 4, MaxTotal: 64,
			IdleTimeout: Duration{10 * time.Minute}, MaxIdleTimeout: Duration{time.Hour},
			TTL: Duration{time.Hour}, MaxTTL: Duration{4 * time.Hour}, AdminMaxTTL: Duration{24 * time.Hour},
			KeepEnded:     Duration{10 * time.Minute},
			CheckpointDir: "/var/lib/jaild/checkpoints", OnIdle: "pause", PausedTTL: Duration{7 * 24 * time.Hour},
			OnShutdown: "pause", ShutdownPause: Duration{20 * time.Second},
			MaxCheckpointMBPerUID: 8192, MaxCheckpointMBTotal: 65536,
			CPUCores: 1, MaxCPUCores: 2,
		},
		TLS: TLS{Cert: "/etc/jaild/tls/server.crt", Key: "/etc/jaild/tls/server.key", ClientCA: "/etc/jaild/tls/client-ca.crt", MaxConnections: 1024,
			MaxHandshakes: 128, MaxHandshakesPerAddress: 8, HandshakeTimeout: Duration{5 * time.Second}},
		Files: Files{
			Enabled: true, Dir: "/var/lib/jaild/files", MaxFileMB: 1024, MaxMBPerUID: 4096, MaxFilesPerUID: 1000,
			MaxTotalMB: 16384, MinFreeMB: 1024, TTL: Duration{24 * time.Hour},
		},
	}
}

// Load reads path over the defaults. A missing file at the default path
// is not an error (defaults apply); a missing file named explicitly is.
func Load(path string, explicit bool) (Config, error) {
	c := Default()
	md, err := toml.DecodeFile(path, &c)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && !explicit {
			return c, c.Validate()
		}
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return c, fmt.Errorf("config %s: unknown key %s", path, strings.Join(keys, ", "))
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// MaxConcurrent resolves admission.max_concurrent (0: one per CPU).
func (c *Config) MaxConcurrent() int {
	if c.Admission.MaxConcurrent > 0 {
		return c.Admission.MaxConcurrent
	}
	return runtime.NumCPU()
}

// MemoryBudget resolves memory_budget_mb, in bytes.
func (c *Config) MemoryBudget() int64 {
	if c.MemoryBudgetMB > 0 {
		return c.MemoryBudgetMB << 20
	}
	return min(max(hostMemory()/4, 256<<20), 8<<30)
}

// hostMemory is the host's RAM (4 GiB when it cannot be read).
func hostMemory() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		return int64(si.Totalram) * int64(si.Unit)
	}
	return 4 << 30
}

// SessionMemory resolves sessions.max_memory_per_uid_mb and
// max_memory_total_mb, in bytes. The automatic total is half the host's
// RAM (at least 2 GiB); the automatic per-uid bound half the total, at
// most 8 GiB. The per-uid bound is never above the total.
func (c *Config) SessionMemory() (perUID, total int64) {
	return c.Sessions.memory(hostMemory())
}

func (s *Sessions) memory(host int64) (perUID, total int64) {
	total = max(host/2, 2<<30)
	if s.MaxMemoryTotalMB > 0 {
		total = s.MaxMemoryTotalMB << 20
	}
	perUID = min(total/2, 8<<30)
	if s.MaxMemoryPerUIDMB > 0 {
		perUID = s.MaxMemoryPerUIDMB << 20
	}
	return min(perUID, total), total
}

// MemoryLimit resolves memory_limit_mb, in bytes; 0: no limit.
func (c *Config) MemoryLimit() int64 {
	switch {
	case c.MemoryLimitMB < 0:
		return 0
	case c.MemoryLimitMB > 0:
		return c.MemoryLimitMB << 20
	}
	return c.MemoryBudget() + 512<<20
}

// Mode parses socket_mode.
func (c *Config) Mode() os.FileMode {
	m, _ := strconv.ParseUint(c.SocketMode, 8, 32)
	return os.FileMode(m)
}

// Validate checks every key; the error names each bad one.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: "+format, append([]any{key}, args...)...))
	}
	for key, p := range map[string]string{"socket": c.Socket, "image": c.Image, "seccomp_profile": c.SeccompProfile, "run_dir": c.RunDir} {
		if !filepath.IsAbs(p) {
			bad(key, "must be an absolute path, got %q", p)
		}
	}
	if !cgroupName.MatchString(c.CgroupName) {
		bad("cgroup_name", "must be a plain name of letters, digits, - and _, got %q", c.CgroupName)
	}
	if len(c.Socket) > 107 {
		bad("socket", "path longer than 107 bytes")
	}
	if m, err := strconv.ParseUint(c.SocketMode, 8, 32); err != nil || m > 0o777 {
		bad("socket_mode", "must be an octal mode like \"0660\", got %q", c.SocketMode)
	}
	if c.HostIDBase == 0 || uint64(c.HostIDBase)+HostIDSpan > 1<<32-1 {
		bad("host_id_base", "must be in 1..%d (jails use host ids base..base+%d)", uint64(1<<32-1-HostIDSpan), HostIDSpan-1)
	}
	if c.MetricsListen != "" {
		if err := checkListen(c.MetricsListen); err != nil {
			bad("metrics_listen", "%v", err)
		}
	}
	if c.ShutdownGrace.Duration < 0 {
		bad("shutdown_grace", "must not be negative")
	}
	if c.MaxBodyBytes < 1<<10 || c.MaxBodyBytes > 1<<30 {
		bad("max_body_bytes", "must be in 1024..%d", 1<<30)
	}
	if c.ReadTimeout.Duration <= 0 {
		bad("read_timeout", "must be positive")
	}
	if c.IdleTimeout.Duration <= 0 {
		bad("idle_timeout", "must be positive")
	}
	if d := c.WriteTimeout.Duration; d < time.Second || d > time.Hour {
		bad("write_timeout", "must be in 1s..1h")
	}
	if c.WriteMinRateKiB < 1 || c.WriteMinRateKiB > 1<<20 {
		bad("write_min_rate_kib", "must be in 1..%d (KiB per second)", 1<<20)
	}
	if c.MemoryBudgetMB != 0 && (c.MemoryBudgetMB < 128 || c.MemoryBudgetMB > 1<<20) {
		bad("memory_budget_mb", "must be 0 (automatic) or in 128..%d", 1<<20)
	}
	if c.MemoryLimitMB < -1 || c.MemoryLimitMB > 1<<20 {
		bad("memory_limit_mb", "must be -1 (none), 0 (automatic) or in 1..%d", 1<<20)
	} else if b := c.MemoryBudget(); c.MemoryLimitMB > 0 && c.MemoryLimitMB<<20 < b+128<<20 {
		bad("memory_limit_mb", "must be at least memory_budget_mb + 128 (the budget is %d MiB), or the daemon's runtime would collect garbage without end", b>>20)
	}
	errs = append(errs, c.Defaults.validate("defaults"), c.Maxima.validate("maxima"), c.AdminMaxima.validate("admin_maxima"))
	errs = append(errs, within("defaults", c.Defaults, "maxima", c.Maxima), within("maxima", c.Maxima, "admin_maxima", c.AdminMaxima))
	a := c.Admission
	if a.MaxConcurrent < 0 || a.MaxConcurrent > 1024 {
		bad("admission.max_concurrent", "must be in 0..1024 (0: one per CPU)")
	}
	if a.QueueSize < 0 || a.QueueSize > 100000 {
		bad("admission.queue_size", "must be in 0..100000")
	}
	if a.QueueWait.Duration < 0 {
		bad("admission.queue_wait", "must not be negative")
	}
	if a.RatePerMinute < 0 {
		bad("admission.rate_per_minute", "must not be negative (0: unlimited)")
	}
	if a.RatePerMinute > 0 && a.Burst < 1 {
		bad("admission.burst", "must be at least 1 when a rate is set")
	}
	if a.DailyQuota < 0 {
		bad("admission.daily_quota", "must not be negative (0: unlimited)")
	}
	if c.Audit.KeepCode && !filepath.IsAbs(c.Audit.CodeDir) {
		bad("audit.code_dir", "must be an absolute path when audit.keep_code is set")
	}
	if c.Pool.Size < 0 || c.Pool.Size > 64 {
		bad("pool.size", "must be in 0..64 (0: no preloaded warm jails)")
	}
	if c.Pool.PlainSize < 0 || c.Pool.PlainSize > 64 {
		bad("pool.plain_size", "must be in 0..64 (0: no plain warm jails)")
	}
	for i, m := range c.Pool.Preimport {
		if !moduleName.MatchString(m) {
			bad(fmt.Sprintf("pool.preimport[%d]", i), "%q is not a Python module name", m)
		}
	}
	if c.Pool.MinAvailableMB < 0 {
		bad("pool.min_available_mb", "must not be negative")
	}
	if c.Audit.MaxCodeBytes < 0 {
		bad("audit.max_code_bytes", "must not be negative")
	}
	errs = append(errs, c.Network.validate(), c.Sessions.validate(c.Defaults.MemoryMB), c.Files.validate(), c.validateImages(), c.validateTLS())
	return errors.Join(errs...)
}

var cgroupName = lazyre.New(`^[A-Za-z0-9_-]{1,64}$`)

var moduleName = lazyre.New(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// Engine ceilings for limit values (jail.Limits has its own, higher ones).
var ceilings = Limits{TimeoutMs: 24 * 3600 * 1000, MemoryMB: 65536, Pids: 4096, FileSizeMB: 16384, OutputBytes: 256 << 20}

func (l Limits) validate(section string) error {
	var errs []error
	for _, f := range l.fields(ceilings) {
		if f.v <= 0 || f.v > f.ceil {
			errs = append(errs, fmt.Errorf("%s.%s: must be in 1..%d, got %d", section, f.name, f.ceil, f.v))
		}
	}
	return errors.Join(errs...)
}

func within(lo string, l Limits, hi string, h Limits) error {
	var errs []error
	for _, f := range l.fields(h) {
		if f.v > f.ceil {
			errs = append(errs, fmt.Errorf("%s.%s (%d) is above %s.%s (%d)", lo, f.name, f.v, hi, f.name, f.ceil))
		}
	}
	return errors.Join(errs...)
}

type field struct {
	name    string
	v, ceil int64
}

// fields pairs each limit with the same limit of other, by wire name.
func (l Limits) fields(other Limits) []field {
	return []field{
		{"timeout_ms", l.TimeoutMs, other.TimeoutMs},
		{"memory_mb", l.MemoryMB, other.MemoryMB},
		{"pids", l.Pids, other.Pids},
		{"file_size_mb", l.FileSizeMB, other.FileSizeMB},
		{"output_bytes", l.OutputBytes, other.OutputBytes},
	}
}

// NetworkSubnetBits is the largest prefix length network.subnet may have:
// it must hold a /30 for each of 1024 jails (jail.MaxJails).
const NetworkSubnetBits = 20

func (n *Network) validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("network.%s: "+format, append([]any{key}, args...)...))
	}
	if _, err := allowlist.ParseList(n.AllowHosts); err != nil {
		bad("allow_hosts", "%v", err)
	}
	if p, err := netip.ParsePrefix(n.Subnet); err != nil || !p.Addr().Is4() || p != p.Masked() || p.Bits() > NetworkSubnetBits {
		bad("subnet", "must be an IPv4 prefix of /%d or larger without host bits, got %q", NetworkSubnetBits, n.Subnet)
	}
	if _, err := n.DNSServers(); err != nil && len(n.DNS) > 0 {
		bad("dns", "%v", err)
	}
	for i, d := range n.Deny {
		if p, err := netip.ParsePrefix(d); err != nil || !p.Addr().Is4() {
			bad(fmt.Sprintf("deny[%d]", i), "must be an IPv4 prefix, got %q", d)
		}
	}
	if n.MaxConnections < 0 || n.MaxConnections > 1<<20 {
		bad("max_connections", "must be in 0..%d (0: no bound)", 1<<20)
	}
	if n.MaxBytesPerSecond < 0 {
		bad("max_bytes_per_second", "must not be negative (0: no bound)")
	}
	if !cgroupName.MatchString(n.Table) {
		bad("table", "must be a plain name of letters, digits, - and _, got %q", n.Table)
	}
	if !ifPrefix.MatchString(n.InterfacePrefix) {
		bad("interface_prefix", "must be 1..8 letters, digits or -, starting with a letter, got %q", n.InterfacePrefix)
	}
	return errors.Join(errs...)
}

// MaxSessionTTL is the engine's bound on a session's lifetime.
const MaxSessionTTL = 24 * time.Hour

// MaxSessionMemoryMB bounds sessions.max_memory_per_uid_mb and
// max_memory_total_mb (16 TiB).
const MaxSessionMemoryMB = 1 << 24

func (s *Sessions) validate(defaultMemoryMB int64) error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("sessions.%s: "+format, append([]any{key}, args...)...))
	}
	if s.MaxPerUID < 1 || s.MaxPerUID > 1024 {
		bad("max_per_uid", "must be in 1..1024")
	}
	if s.MaxTotal < 1 || s.MaxTotal > 1024 {
		bad("max_total", "must be in 1..1024 (jails at once are at most 1024)")
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"idle_timeout", s.IdleTimeout.Duration}, {"max_idle_timeout", s.MaxIdleTimeout.Duration}, {"ttl", s.TTL.Duration}, {"max_ttl", s.MaxTTL.Duration}, {"admin_max_ttl", s.AdminMaxTTL.Duration}} {
		if d.v < time.Second || d.v > MaxSessionTTL {
			bad(d.key, "must be in 1s..%v, got %v", MaxSessionTTL, d.v)
		}
	}
	for _, c := range []struct {
		key string
		v   float64
	}{{"cpu_cores", s.CPUCores}, {"max_cpu_cores", s.MaxCPUCores}} {
		if !(c.v >= 0.01 && c.v <= MaxCPUCoresCeiling) {
			bad(c.key, "must be in 0.01..%d cores, got %g", MaxCPUCoresCeiling, c.v)
		}
	}
	if s.CPUCores > s.MaxCPUCores {
		bad("cpu_cores", "(%g) is above sessions.max_cpu_cores (%g)", s.CPUCores, s.MaxCPUCores)
	}
	if s.IdleTimeout.Duration > s.MaxIdleTimeout.Duration {
		bad("idle_timeout", "(%v) is above sessions.max_idle_timeout (%v)", s.IdleTimeout.Duration, s.MaxIdleTimeout.Duration)
	}
	if s.TTL.Duration > s.MaxTTL.Duration {
		bad("ttl", "(%v) is above sessions.max_ttl (%v)", s.TTL.Duration, s.MaxTTL.Duration)
	}
	if s.MaxTTL.Duration > s.AdminMaxTTL.Duration {
		bad("max_ttl", "(%v) is above sessions.admin_max_ttl (%v)", s.MaxTTL.Duration, s.AdminMaxTTL.Duration)
	}
	if s.KeepEnded.Duration < 0 || s.KeepEnded.Duration > MaxSessionTTL {
		bad("keep_ended", "must be in 0s..%v", MaxSessionTTL)
	}
	if s.OnIdle != "pause" && s.OnIdle != "end" {
		bad("on_idle", "must be \"pause\" or \"end\", got %q", s.OnIdle)
	}
	if s.OnShutdown != "pause" && s.OnShutdown != "end" {
		bad("on_shutdown", "must be \"pause\" or \"end\", got %q", s.OnShutdown)
	}
	if s.MaxCheckpointMBPerUID < 0 || s.MaxCheckpointMBTotal < 0 {
		bad("max_checkpoint_mb_per_uid", "and max_checkpoint_mb_total must not be negative")
	}
	if s.ShutdownPause.Duration < 0 || s.ShutdownPause.Duration > 10*time.Minute {
		bad("shutdown_pause", "must be in 0s..10m, got %v", s.ShutdownPause.Duration)
	}
	if s.PausedTTL.Duration < 0 || s.PausedTTL.Duration > 365*24*time.Hour {
		bad("paused_ttl", "must be in 0s..8760h, got %v", s.PausedTTL.Duration)
	}
	for _, p := range []struct{ key, v string }{{"checkpoint_dir", s.CheckpointDir}, {"criu", s.CRIU}} {
		if p.v != "" && !filepath.IsAbs(p.v) {
			bad(p.key, "must be an absolute path, got %q", p.v)
		}
	}
	for _, m := range []struct {
		key string
		v   int64
	}{{"max_memory_per_uid_mb", s.MaxMemoryPerUIDMB}, {"max_memory_total_mb", s.MaxMemoryTotalMB}} {
		switch {
		case m.v != 0 && (m.v < 64 || m.v > MaxSessionMemoryMB):
			bad(m.key, "must be 0 (automatic) or in 64..%d, got %d", MaxSessionMemoryMB, m.v)
		case m.v != 0 && m.v < defaultMemoryMB:
			bad(m.key, "(%d) is below defaults.memory_mb (%d): no session of the default memory could be made", m.v, defaultMemoryMB)
		}
	}
	if s.MaxMemoryPerUIDMB != 0 && s.MaxMemoryTotalMB != 0 && s.MaxMemoryPerUIDMB > s.MaxMemoryTotalMB {
		bad("max_memory_per_uid_mb", "(%d) is above sessions.max_memory_total_mb (%d)", s.MaxMemoryPerUIDMB, s.MaxMemoryTotalMB)
	}
	return errors.Join(errs...)
}

// MaxFileTTL is the longest files.ttl.
const MaxFileTTL = 365 * 24 * time.Hour

func (f *Files) validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("files.%s: "+format, append([]any{key}, args...)...))
	}
	if f.Enabled && (!filepath.IsAbs(f.Dir) || filepath.Clean(f.Dir) != f.Dir || f.Dir == "/") {
		bad("dir", "must be a clean absolute path other than /, got %q", f.Dir)
	}
	const mostMB = 1 << 30 // 1 PiB
	for _, v := range []struct {
		key string
		v   int64
	}{{"max_file_mb", f.MaxFileMB}, {"max_mb_per_uid", f.MaxMBPerUID}, {"max_total_mb", f.MaxTotalMB}} {
		if v.v < 1 || v.v > mostMB {
			bad(v.key, "must be in 1..%d, got %d", mostMB, v.v)
		}
	}
	if f.MaxFileMB > f.MaxMBPerUID {
		bad("max_file_mb", "(%d) is above files.max_mb_per_uid (%d)", f.MaxFileMB, f.MaxMBPerUID)
	}
	if f.MaxMBPerUID > f.MaxTotalMB {
		bad("max_mb_per_uid", "(%d) is above files.max_total_mb (%d)", f.MaxMBPerUID, f.MaxTotalMB)
	}
	if f.MaxFilesPerUID < 1 || f.MaxFilesPerUID > 1_000_000 {
		bad("max_files_per_uid", "must be in 1..1000000, got %d", f.MaxFilesPerUID)
	}
	if f.MinFreeMB < 0 || f.MinFreeMB > mostMB {
		bad("min_free_mb", "must be in 0..%d, got %d", mostMB, f.MinFreeMB)
	}
	if f.TTL.Duration < time.Second || f.TTL.Duration > MaxFileTTL {
		bad("ttl", "must be in 1s..%v, got %v", MaxFileTTL, f.TTL.Duration)
	}
	return errors.Join(errs...)
}

var ifPrefix = lazyre.New(`^[A-Za-z][A-Za-z0-9-]{0,7}$`)

// DNSServers resolves network.dns: the configured servers, or the
// nameservers of /etc/resolv.conf (IPv4 only) when none are configured.
func (n *Network) DNSServers() ([]netip.AddrPort, error) {
	list := n.DNS
	if len(list) == 0 {
		b, err := os.ReadFile("/etc/resolv.conf")
		if err != nil {
			return nil, fmt.Errorf("no network.dns configured and %v", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "nameserver" {
				if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() {
					list = append(list, f[1])
				}
			}
		}
		if len(list) == 0 {
			return nil, errors.New("no network.dns configured and no IPv4 nameserver in /etc/resolv.conf")
		}
	}
	var out []netip.AddrPort
	for _, d := range list {
		ap, err := netip.ParseAddrPort(d)
		if err != nil {
			a, err2 := netip.ParseAddr(d)
			if err2 != nil {
				return nil, fmt.Errorf("%q is not an IPv4 address with an optional :port", d)
			}
			ap = netip.AddrPortFrom(a, 53)
		}
		if !ap.Addr().Is4() {
			return nil, fmt.Errorf("%q: only IPv4 resolvers are supported", d)
		}
		out = append(out, ap)
	}
	return out, nil
}

// checkListen accepts a TCP listen address: host:port with a numeric port
// in 1..65535 and a host that is an IP address or a name ("localhost").
func checkListen(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("must be host:port like \"127.0.0.1:9464\", got %q", addr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("port must be a number in 1..65535, got %q", port)
	}
	if host == "" {
		return fmt.Errorf("must name a host (\"127.0.0.1:%s\" for loopback, \"0.0.0.0:%s\" for every address), got %q", port, port, addr)
	}
	if _, err := netip.ParseAddr(host); err != nil && strings.ContainsAny(host, " /%") {
		return fmt.Errorf("host %q is neither an IP address nor a host name", host)
	}
	return nil
}

// NeedRestart lists the keys (top-level keys and sections) whose values
// differ between c and next other than image, [images] and [tls]'s files
// and clients, which a reload applies: the others take effect only at a
// restart.
func (c *Config) NeedRestart(next Config) []string {
	a, b := reflect.ValueOf(*c), reflect.ValueOf(next)
	var keys []string
	for i := range a.NumField() {
		f := a.Type().Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if key == "image" || key == "images" {
			continue
		}
		if key == "tls" {
			if c.TLS.Listen != next.TLS.Listen {
				keys = append(keys, "tls.listen")
			}
			// The listener's bounds are read when it opens.
			for _, k := range []struct {
				key      string
				old, new any
			}{
				{"tls.max_connections", c.TLS.MaxConnections, next.TLS.MaxConnections},
				{"tls.max_connections_per_client", c.TLS.MaxConnectionsPerClient, next.TLS.MaxConnectionsPerClient},
				{"tls.max_handshakes", c.TLS.MaxHandshakes, next.TLS.MaxHandshakes},
				{"tls.max_handshakes_per_address", c.TLS.MaxHandshakesPerAddress, next.TLS.MaxHandshakesPerAddress},
				{"tls.handshake_timeout", c.TLS.HandshakeTimeout, next.TLS.HandshakeTimeout},
			} {
				if k.old != k.new {
					keys = append(keys, k.key)
				}
			}
			continue
		}
		if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
			keys = append(keys, key)
		}
	}
	return keys
}
