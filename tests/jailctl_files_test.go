package tests

// jailctl's file store commands against a real daemon (issue 14): files
// put, ls, get and rm; exec --file of a file over 1 MiB, which goes
// through the store and is removed from it after the run; exec
// --return-to-store and the IDs it prints.

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

func TestJailctlFiles(t *testing.T) {
	d := fsStartDaemon(t, "")
	ctl := func(stdin string, args ...string) (string, string, int) {
		t.Helper()
		return jailctlAt(t, d.Socket, stdin, args...)
	}
	dir := t.TempDir()

	// put, ls, get, rm.
	data := fsDetBytes(21, 300<<10)
	local := filepath.Join(dir, "report.dat")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := ctl("", "files", "put", local)
	id := strings.TrimSuffix(out, "\n")
	if code != 0 || !fsIDRe.MatchString(id) || errOut != "" {
		t.Fatalf("files put: exit %d stdout %q stderr %q; want the bare ID", code, out, errOut)
	}
	fsCheckStoreHolds(t, d, id)

	out, errOut, code = ctl("", "files", "ls")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 2 || !slices.Equal(strings.Fields(lines[0]), []string{"ID", "NAME", "SIZE", "EXPIRES"}) {
		t.Errorf("files ls: exit %d stdout %q stderr %q; want a header and one row", code, out, errOut)
	} else if f := strings.Fields(lines[1]); len(f) < 4 || f[0] != id || f[1] != "report.dat" || f[2]+" "+f[3] != "300.0 KiB" {
		t.Errorf("files ls row %q; want %s report.dat 300.0 KiB", lines[1], id)
	}
	out, _, code = ctl("", "files", "ls", "--json")
	var list api.FileList
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != 0 || len(list.Files) != 1 ||
		list.Files[0].FileID != id || list.Files[0].SizeBytes != int64(len(data)) || list.Files[0].SHA256 != fsSHA(data) {
		t.Errorf("files ls --json: exit %d %v %q", code, err, out)
	}

	got := filepath.Join(dir, "got.dat")
	if out, errOut, code := ctl("", "files", "get", id, "-o", got); code != 0 || out != "" || errOut != "" {
		t.Errorf("files get -o: exit %d %q %q", code, out, errOut)
	}
	if b, err := os.ReadFile(got); err != nil || !bytes.Equal(b, data) {
		t.Errorf("files get -o wrote %d bytes (%v); want the %d uploaded", len(b), err, len(data))
	}
	if out, _, code := ctl("", "files", "get", id); code != 0 || out != string(data) {
		t.Errorf("files get to stdout: exit %d, %d bytes; want the %d uploaded", code, len(out), len(data))
	}
	// -o DIR: the stored name in it.
	getDir := filepath.Join(dir, "getdir")
	if err := os.Mkdir(getDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := ctl("", "files", "get", id, "-o", getDir); code != 0 {
		t.Errorf("files get -o DIR: exit %d %q", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(getDir, "report.dat")); err != nil || !bytes.Equal(b, data) {
		t.Errorf("files get -o DIR wrote %d bytes to DIR/report.dat (%v); want the %d uploaded", len(b), err, len(data))
	}
	// put from stdin needs --name, and takes it.
	if _, errOut, code := ctl("x", "files", "put", "-"); code != 2 || !strings.Contains(errOut, "--name") {
		t.Errorf("files put - without --name: exit %d %q; want 2 asking for --name", code, errOut)
	}
	out, errOut, code = ctl("from stdin\n", "files", "put", "--name", "in.txt", "-")
	stdinID := strings.TrimSuffix(out, "\n")
	if code != 0 || !fsIDRe.MatchString(stdinID) {
		t.Fatalf("files put - --name: exit %d %q %q", code, out, errOut)
	}
	if out, _, code := ctl("", "files", "get", stdinID); code != 0 || out != "from stdin\n" {
		t.Errorf("files get of a file put from stdin: exit %d %q", code, out)
	}
	// rm of several, one of them missing: the others removed, exit 2.
	missing := "f-" + strings.Repeat("0", 32)
	if _, errOut, code := ctl("", "files", "rm", stdinID, missing); code != 2 || !strings.Contains(errOut, missing) || strings.Contains(errOut, stdinID) {
		t.Errorf("files rm of a file and a missing one: exit %d %q; want 2 naming the missing one only", code, errOut)
	}
	fsCheckStoreHolds(t, d, id)

	if out, errOut, code := ctl("", "files", "rm", id); code != 0 || out != "" || errOut != "" {
		t.Errorf("files rm: exit %d %q %q", code, out, errOut)
	}
	fsCheckStoreHolds(t, d)
	gone := filepath.Join(dir, "gone.dat")
	out, errOut, code = ctl("", "files", "get", id, "-o", gone)
	if code != 2 || out != "" || !strings.HasPrefix(errOut, "jailctl: ") || !strings.Contains(errOut, id) || !strings.Contains(errOut, "no file") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("files get of a removed file: exit %d stdout %q stderr %q; want 2 and one line naming it", code, out, errOut)
	}
	if _, err := os.Lstat(gone); err == nil {
		t.Errorf("files get of a removed file created %s", gone)
	}
	if ents, _ := filepath.Glob(filepath.Join(dir, ".jailctl-*")); len(ents) != 0 {
		t.Errorf("files get left temporary files %v", ents)
	}
	if _, errOut, code := ctl("", "files", "rm", id); code != 2 || !strings.Contains(errOut, id) {
		t.Errorf("files rm of a removed file: exit %d %q; want 2 naming it", code, errOut)
	}

	// exec --file of 3 MiB: over the 1 MiB threshold, so stored first
	// (inline, its base64 alone would pass the test daemon's 4 MiB body
	// cap), seen in the store while the run goes, and removed after it.
	big := fsDetBytes(22, 3<<20)
	bigPath := filepath.Join(dir, "big.bin")
	if err := os.WriteFile(bigPath, big, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "jailctl"), "--socket", d.Socket, "exec", "--file", bigPath+":data/big.bin", "-c",
		"import hashlib, os, sys, time\nb = open('data/big.bin', 'rb').read()\nprint(len(b), hashlib.sha256(b).hexdigest(), flush=True)\ntime.sleep(1.5)\n")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var staged []api.StoredFile
	var err error
	ran := false
poll:
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, f := range fsList(t, d) {
			if f.Name == "big.bin" {
				staged = append(staged, f)
			}
		}
		if staged != nil {
			break
		}
		select {
		case err = <-exited:
			ran = true
			break poll
		default:
		}
	}
	if !ran {
		select {
		case err = <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			err = <-exited
		}
	}
	if err != nil || o.String() != "3145728 "+fsSHA(big)+"\n" {
		t.Errorf("exec --file of 3 MiB: %v, stdout %q stderr %q; want the size and sha256 %s", err, o.String(), e.String(), fsSHA(big))
	}
	if len(staged) != 1 || staged[0].SizeBytes != int64(len(big)) || staged[0].SHA256 != fsSHA(big) || staged[0].UID != 0 {
		t.Errorf("while the run went, the store held %+v; want big.bin, root's, of 3 MiB", staged)
	}
	if left := fsList(t, d); len(left) != 0 {
		t.Errorf("after exec --file the store holds %+v; want the temporary upload deleted", left)
	}
	fsCheckStoreHolds(t, d)

	// A failed run, and an interrupted jailctl, remove the upload too.
	_, errOut, code = ctl("", "exec", "--timeout", "500ms", "--file", bigPath, "-c", "while True: pass")
	if code != 124 {
		t.Errorf("exec --file of 3 MiB, timed out: exit %d %q; want 124", code, errOut)
	}
	fsCheckStoreHolds(t, d)
	cmd = exec.Command(filepath.Join(binDir, "jailctl"), "--socket", d.Socket, "exec", "--file", bigPath, "-c", "import time\nprint('started', flush=True)\ntime.sleep(30)\n")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	e.Reset()
	cmd.Stderr = &e
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		b := make([]byte, 64)
		n, _ := stdout.Read(b)
		line <- string(b[:n])
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		if l != "started\n" {
			t.Errorf("interrupted exec: stdout %q", l)
		}
	case <-time.After(30 * time.Second):
		t.Error("interrupted exec: the run did not start")
	}
	if names := fsStoreNames(t, d); len(names) != 2 {
		t.Errorf("while the run went, the store's directory held %q; want big.bin's data and record", names)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	exited = make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
		if code := cmd.ProcessState.ExitCode(); code != 130 {
			t.Errorf("exec interrupted: exit %d, stderr %q; want 130", code, e.String())
		}
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Error("exec did not end within 15 s of SIGINT")
	}
	fsCheckStoreHolds(t, d)

	// exec --return-to-store: the IDs on stderr, the files fetched by
	// them, nothing written locally.
	outDir := filepath.Join(dir, "outdir")
	code1 := "import os\nos.makedirs('out')\nopen('out/a.txt', 'w').write('alpha\\n')\nopen('out/b.bin', 'wb').write(bytes(range(256)) * 8)\nprint('done')\n"
	out, errOut, code = ctl("", "exec", "--return-to-store", "--get", "out/*", "--out-dir", outDir, "-c", code1)
	if code != 0 || out != "done\n" {
		t.Fatalf("exec --return-to-store: exit %d stdout %q stderr %q", code, out, errOut)
	}
	re := regexp.MustCompile(`(?m)^stored (\S+) as (f-[0-9a-f]{32}) \(([^)]*)\)$`)
	ids := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(errOut, -1) {
		ids[m[1]] = m[2]
	}
	if len(ids) != 2 || ids["out/a.txt"] == "" || ids["out/b.bin"] == "" || strings.Count(errOut, "\n") != 2 {
		t.Fatalf("exec --return-to-store: stderr %q; want a line \"stored PATH as ID (SIZE)\" for each of out/a.txt and out/b.bin, and nothing else", errOut)
	}
	want := map[string][]byte{"out/a.txt": []byte("alpha\n"), "out/b.bin": bytes.Repeat(func() []byte {
		b := make([]byte, 256)
		for i := range b {
			b[i] = byte(i)
		}
		return b
	}(), 8)}
	for p, fid := range ids {
		if out, errOut, code := ctl("", "files", "get", fid); code != 0 || out != string(want[p]) {
			t.Errorf("files get %s (%s): exit %d, %q, stderr %q; want %q", fid, p, code, out, errOut, want[p])
		}
	}
	fsCheckStoreHolds(t, d, ids["out/a.txt"], ids["out/b.bin"])
	if _, err := os.Stat(outDir); err == nil {
		ents, _ := os.ReadDir(outDir)
		if len(ents) != 0 {
			t.Errorf("exec --return-to-store wrote %v into --out-dir", ents)
		}
	}
}
