package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/doctor"
)

// doctorReport runs jailctl doctor --json and returns its checks by name.
func doctorReport(t *testing.T, args ...string) (map[string]doctor.Check, result) {
	t.Helper()
	r := jailctl(t, "", "", append([]string{"doctor", "--json"}, args...)...)
	var rep doctor.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	byName := map[string]doctor.Check{}
	for _, c := range rep.Checks {
		byName[c.Name] = c
		if c.Status == doctor.Fail && c.Fix == "" {
			t.Errorf("%s failed without naming a fix", c.Name)
		}
	}
	return byName, r
}

// missingConfig is a configuration whose image and profile do not exist
// (as after "make run", which passes its own on jaild's command line).
func missingConfig(t *testing.T) string {
	cfg := filepath.Join(t.TempDir(), "jaild.toml")
	os.WriteFile(cfg, []byte("image = \"/nonexistent/image\"\nseccomp_profile = \"/nonexistent/profile.json\"\n"), 0o644)
	return cfg
}

// useJaild makes doctor find the jaild at path; none when path is "".
func useJaild(t *testing.T, path string) {
	old := findJaild
	findJaild = func() (string, error) {
		if path == "" {
			return "", errors.New("not found")
		}
		return path, nil
	}
	t.Cleanup(func() { findJaild = old })
}

// When the daemon answers, the image and the profile checked are the
// ones it serves, not the configuration's missing files; jaild doctor is
// not needed.
func TestDoctorAsksTheDaemon(t *testing.T) {
	useJaild(t, "/nonexistent/jaild")
	h := newDaemon(t, func(c *config.Config) { c.SeccompProfile = "/srv/served.json" })
	checks, r := doctorReport(t, "--config", missingConfig(t), "--socket", h.Socket)
	for name, want := range map[string]string{
		"rootfs image":       "the daemon serves test: sha256:0000",
		"image test-small":   "the daemon serves test-small: sha256:1111",
		doctor.CheckSeccomp:  "the daemon's profile /srv/served.json, loaded at its start: default action SCMP_ACT_ERRNO, 1 rules",
		doctor.CheckNftables: "egress disabled",
		"daemon":             "jaild dev answers",
	} {
		if c := checks[name]; c.Status == doctor.Fail || c.Status == doctor.Warn || !strings.Contains(c.Detail, want) {
			t.Errorf("%s: %+v; want %q (exit %d)", name, c, want, r.code)
		}
	}
	if c := checks["socket"]; c.Status == doctor.Fail {
		t.Errorf("socket: %+v", c)
	}
	r = jailctl(t, "", "", "doctor", "--config", missingConfig(t), "--socket", h.Socket)
	if !strings.Contains(r.stdout, "OK    rootfs image") || strings.Contains(r.stdout, "/nonexistent") {
		t.Errorf("human report:\n%s", r.stdout)
	}
}

// With no daemon, jaild doctor --json makes the probes jailctl cannot
// (the profile, nf_tables), given the same configuration; its checks
// replace jailctl's.
func TestDoctorRunsJaild(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	jaild := filepath.Join(dir, "jaild")
	os.WriteFile(jaild, []byte(`#!/bin/sh
echo "$@" > `+argsFile+`
echo '{"checks":[{"name":"kernel","status":"fail","detail":"not this one","fix":"x"},`+
		`{"name":"seccomp","status":"fail","detail":"seccomp profile: bad","fix":"reinstall the profile"},`+
		`{"name":"nftables (egress)","status":"ok","detail":"nf_tables answers"}],"ok":false}'
exit 1
`), 0o755)
	useJaild(t, jaild)
	cfg := missingConfig(t)
	sock := filepath.Join(dir, "none.sock")
	checks, r := doctorReport(t, "--config", cfg, "--socket", sock)
	if c := checks[doctor.CheckSeccomp]; c.Status != doctor.Fail || c.Detail != "seccomp profile: bad" {
		t.Errorf("seccomp: %+v; want jaild's", c)
	}
	if c := checks[doctor.CheckNftables]; c.Status != doctor.OK {
		t.Errorf("nftables: %+v; want jaild's", c)
	}
	if c := checks["kernel"]; c.Detail == "not this one" {
		t.Errorf("kernel: %+v; jailctl's own check was replaced", c)
	}
	if c := checks["rootfs image"]; c.Status != doctor.Fail || !strings.Contains(c.Detail, "/nonexistent/image") {
		t.Errorf("rootfs image: %+v; want the configuration's, missing", c)
	}
	if r.code != exitFail {
		t.Errorf("exit %d; want 1", r.code)
	}
	args, _ := os.ReadFile(argsFile)
	if want := "doctor --json --config " + cfg + " --image /nonexistent/image --seccomp-profile /nonexistent/profile.json --socket " + sock + "\n"; string(args) != want {
		t.Errorf("jaild ran with %q; want %q", args, want)
	}
}

// With neither a daemon nor a jaild (or one that gives no report), the
// probes jailctl cannot make warn, naming jaild doctor; they do not fail.
func TestDoctorWithoutJaild(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "jaild")
	os.WriteFile(broken, []byte("#!/bin/sh\necho oops\nexit 2\n"), 0o755)
	for jaild, why := range map[string]string{"": "no jaild beside jailctl or on $PATH", broken: broken + " doctor: exit status 2"} {
		useJaild(t, jaild)
		checks, _ := doctorReport(t, "--config", missingConfig(t), "--socket", filepath.Join(t.TempDir(), "none.sock"))
		for _, name := range []string{doctor.CheckSeccomp, doctor.CheckNftables} {
			if c := checks[name]; c.Status != doctor.Warn || !strings.Contains(c.Fix, `run "jaild doctor" as root`) || !strings.Contains(c.Fix, why) {
				t.Errorf("%s: %+v; want a warning naming jaild doctor and %q", name, c, why)
			}
		}
		if c := checks["daemon"]; c.Status != doctor.Fail {
			t.Errorf("daemon: %+v", c)
		}
	}
}
