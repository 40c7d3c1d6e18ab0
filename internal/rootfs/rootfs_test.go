package rootfs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// tree makes a minimal valid rootfs tree in a temp dir.
func tree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"dev", "proc", "sys", "tmp", "workspace", "jaild", "etc", "usr/bin", "opt/jaild"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"etc/hostname", "etc/hosts", "etc/machine-id", "etc/passwd", "opt/jaild/runner.py", "opt/jaild/init"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const (
	runner = "/opt/jaild/runner.py"
	init_  = "/opt/jaild/init"
)

func TestValidateTree(t *testing.T) {
	if err := ValidateTree(tree(t), runner, init_); err != nil {
		t.Fatalf("valid tree refused: %v", err)
	}
	// CVE-2025-31133 / CVE-2026-41579 shapes: special directories or files
	// replaced by symlinks, and device nodes or links shipped in /dev.
	mutations := map[string]func(root string) error{
		"/dev symlink": func(r string) error {
			os.RemoveAll(filepath.Join(r, "dev"))
			return os.Symlink("/dev", filepath.Join(r, "dev"))
		},
		"/proc symlink": func(r string) error {
			os.RemoveAll(filepath.Join(r, "proc"))
			return os.Symlink("/tmp", filepath.Join(r, "proc"))
		},
		"/sys missing": func(r string) error { return os.RemoveAll(filepath.Join(r, "sys")) },
		"/dev/null symlink": func(r string) error {
			return os.Symlink("/etc/shadow", filepath.Join(r, "dev", "null"))
		},
		"/etc/machine-id symlink": func(r string) error {
			os.Remove(filepath.Join(r, "etc/machine-id"))
			return os.Symlink("/etc/machine-id", filepath.Join(r, "etc/machine-id"))
		},
		"/etc symlink": func(r string) error {
			os.RemoveAll(filepath.Join(r, "etc"))
			return os.Symlink("/etc", filepath.Join(r, "etc"))
		},
		"runner missing": func(r string) error { return os.Remove(filepath.Join(r, "opt/jaild/runner.py")) },
		"init missing":   func(r string) error { return os.Remove(filepath.Join(r, "opt/jaild/init")) },
		"workspace file": func(r string) error {
			os.RemoveAll(filepath.Join(r, "workspace"))
			return os.WriteFile(filepath.Join(r, "workspace"), nil, 0o644)
		},
		"runner symlink": func(r string) error {
			os.Remove(filepath.Join(r, "opt/jaild/runner.py"))
			return os.Symlink("/bin/sh", filepath.Join(r, "opt/jaild/runner.py"))
		},
		"/tmp is symlink": func(r string) error {
			os.RemoveAll(filepath.Join(r, "tmp"))
			return os.Symlink("/", filepath.Join(r, "tmp"))
		},
	}
	for name, mutate := range mutations {
		root := tree(t)
		if err := mutate(root); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := ValidateTree(root, runner, init_); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: ValidateTree = %v, want ErrInvalid", name, err)
		}
	}
}

func manifest(digest string, size int64) []byte {
	b, _ := json.Marshal(Manifest{Schema: 1, Name: "python", ImageDigest: digest, ImageSizeBytes: size, PythonVersion: "3.13.5", Runner: runner, Init: init_})
	return b
}

func TestParseManifest(t *testing.T) {
	good := "sha256:" + strings.Repeat("ab", 32)
	if _, err := ParseManifest(manifest(good, 10)); err != nil {
		t.Fatalf("good manifest: %v", err)
	}
	bad := [][]byte{
		manifest("sha256:xyz", 10),
		manifest("md5:"+strings.Repeat("a", 32), 10),
		manifest(good, 0),
		append(manifest(good, 10), []byte(" {}")...),
		[]byte(`{"schema": 2}`),
		[]byte(`not json`),
	}
	// The daemon imports the runner by module name from its directory.
	for _, r := range []string{"opt/jaild/runner.py", "/opt/jaild/runner", "/opt/jaild/run-ner.py", "/opt/ja'ild/runner.py", "/opt/jaild/../runner.py", "/opt/jaild/1runner.py"} {
		m := strings.Replace(string(manifest(good, 10)), runner, r, 1)
		bad = append(bad, []byte(m))
	}
	for _, i := range []string{"", "opt/jaild/init", "/opt/jaild/../init"} {
		bad = append(bad, []byte(strings.Replace(string(manifest(good, 10)), `"init":"`+init_+`"`, `"init":"`+i+`"`, 1)))
	}
	for _, b := range bad {
		if _, err := ParseManifest(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseManifest(%.60s) = %v, want ErrInvalid", b, err)
		}
	}
}

func TestOpenRefusesDigestMismatch(t *testing.T) {
	dir := t.TempDir()
	img := []byte("not really squashfs")
	if err := os.WriteFile(filepath.Join(dir, ImageFile), img, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("other bytes"))
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), manifest("sha256:"+hex.EncodeToString(sum[:]), int64(len(img))), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Open(dir, filepath.Join(dir, "mnt"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "digest") {
		t.Errorf("Open = %v, want a digest mismatch", err)
	}
	if _, err := Open(t.TempDir(), filepath.Join(dir, "mnt2")); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open(empty dir) = %v, want ErrInvalid", err)
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add(manifest("sha256:"+strings.Repeat("0", 64), 1))
	f.Add([]byte(`{"schema":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err == nil && (m.Schema != 1 || !validDigest(m.ImageDigest) || m.ImageSizeBytes <= 0) {
			t.Fatalf("accepted an invalid manifest: %+v", m)
		}
	})
}

// A refused openat2 (a seccomp filter's ENOSYS or EPERM) is the host's
// fault, not the image's: the message must not send the operator to
// rebuild a good image.
func TestOpenat2ErrorBlamesTheRightParty(t *testing.T) {
	for _, tc := range []struct {
		err     error
		invalid bool
	}{
		{unix.ENOENT, true}, {unix.ELOOP, true}, {unix.EXDEV, true}, {unix.ENOTDIR, true},
		{unix.ENOSYS, false}, {unix.EPERM, false}, {unix.EACCES, false},
	} {
		err := openat2Error("/dev", tc.err)
		if got := errors.Is(err, ErrInvalid); got != tc.invalid {
			t.Errorf("%v: ErrInvalid = %v, want %v (%v)", tc.err, got, tc.invalid, err)
		}
		if !tc.invalid && !strings.Contains(err.Error(), "refused openat2") {
			t.Errorf("%v: %q does not say the host refused the call", tc.err, err)
		}
	}
}
