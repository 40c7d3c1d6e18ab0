package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/daemontest"
)

// The memory-bound daemon: runs in flight may hold memoryBudget bytes
// together, and the Go runtime's soft limit is memoryLimit.
const (
	memoryBudgetMB = 384
	memoryLimitMB  = 640
	// memorySlack is what the daemon's RSS may exceed its limit by: the
	// runtime's own structures, stacks, and pages not yet returned.
	memorySlackMB = 96
	fillOutput    = 32 << 20 // each of stdout and stderr, filled to its cap
	fillFiles     = 4        // files of 16 MiB returned inline: the 64 MiB total cap
)

// fillCode fills every cap of a run: stdout and stderr to output_bytes,
// four random files of 16 MiB (one 4 KiB short: their sha256 go in
// sums.txt, returned too, within the 64 MiB total), and
// as many large random figures as the figures' cap takes.
var fillCode = fmt.Sprintf(`
import hashlib, os, sys
import matplotlib.pyplot as plt
import numpy as np
sums = []
for i in range(%d):
    data = os.urandom((16 << 20) - (4096 if i == 0 else 0))  # room for sums.txt
    with open(f"out{i}.bin", "wb") as f:
        f.write(data)
    sums.append(f"out{i}.bin " + hashlib.sha256(data).hexdigest())
with open("sums.txt", "w") as f:
    f.write("\n".join(sums))
for i in range(16):
    plt.figure(figsize=(10, 10), dpi=100)
    plt.imshow(np.random.rand(1000, 1000, 3))
chunk = ("x" * 1023 + "\n") * 1024
for _ in range(%d):
    sys.stdout.write(chunk)
    sys.stderr.write(chunk)
`, fillFiles, fillOutput>>20)

// TestDaemonMemoryBounded sends more runs than the memory budget holds at
// once, each filling every cap (stdout, stderr, returned files,
// figures), and checks that the daemon's peak RSS stays under its limit
// plus a slack while every response is complete and correct.
func TestDaemonMemoryBounded(t *testing.T) {
	d := startDaemon(t, daemontest.Options{Config: fmt.Sprintf("memory_budget_mb = %d\nmemory_limit_mb = %d\n", memoryBudgetMB, memoryLimitMB), Tune: func(c string) string {
		// Every request is admitted at once: only the memory budget
		// holds them back.
		return setKeys(c, map[string]string{"max_concurrent": "4", "queue_size": "8", "queue_wait": `"300s"`})
	}})
	var info api.Info
	if code, _ := d.call(t, http.MethodGet, "/v1/info", nil, &info); code != http.StatusOK {
		t.Fatalf("info: %d", code)
	}
	if info.Memory.BudgetBytes != memoryBudgetMB<<20 || info.Memory.LimitBytes != memoryLimitMB<<20 {
		t.Fatalf("info.memory %+v", info.Memory)
	}
	// Each run reserves 2 x 32 MiB of output, 32 MiB of figures and 64 MiB
	// of files (plus its body's): two at once fit the budget, four do not.
	const runs = 4
	var wg sync.WaitGroup
	resps := make([]api.ExecuteResponse, runs)
	codes := make([]int, runs)
	for i := range runs {
		wg.Go(func() {
			codes[i], _ = d.call(t, http.MethodPost, "/v1/execute", api.ExecuteRequest{
				Code:        fillCode,
				ReturnFiles: []string{"out*.bin", "sums.txt"},
				Limits:      &api.Limits{OutputBytes: ptr(int64(fillOutput)), MemoryMB: ptr(int64(2048)), TimeoutMs: ptr(int64(120000))},
			}, &resps[i])
		})
	}
	wg.Wait()
	hwm := procStatusKB(t, d.Cmd.Process.Pid, "VmHWM") << 10
	t.Logf("daemon peak RSS %d MiB (limit %d MiB, budget %d MiB)", hwm>>20, memoryLimitMB, memoryBudgetMB)
	if hwm > (memoryLimitMB+memorySlackMB)<<20 {
		t.Errorf("daemon peak RSS %d MiB, above its limit %d MiB + %d MiB", hwm>>20, memoryLimitMB, memorySlackMB)
	}
	wantOut := strings.Repeat(strings.Repeat("x", 1023)+"\n", fillOutput>>10)
	for i, r := range resps {
		if codes[i] != http.StatusOK || r.Status != "ok" {
			t.Fatalf("run %d: HTTP %d, status %q: %s", i, codes[i], r.Status, r.Message)
		}
		if r.Stdout != wantOut || r.Stderr != wantOut || r.StdoutTruncated || r.StderrTruncated {
			t.Errorf("run %d: stdout %d bytes, stderr %d bytes (want %d each, untruncated)", i, len(r.Stdout), len(r.Stderr), len(wantOut))
		}
		checkFilledFiles(t, i, r.Files)
		if len(r.Figures) < 2 {
			t.Errorf("run %d: %d figures", i, len(r.Figures))
		}
		var figs int
		for _, f := range r.Figures {
			png, err := base64.StdEncoding.DecodeString(f.ContentB64)
			if err != nil || !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
				t.Errorf("run %d: figure %s is not a PNG (%v)", i, f.Name, err)
			}
			figs += len(png)
		}
		if figs > 32<<20 {
			t.Errorf("run %d: %d bytes of figures, above the 32 MiB cap", i, figs)
		}
	}
}

// checkFilledFiles checks fillCode's returned files against the sums it
// wrote.
func checkFilledFiles(t *testing.T, run int, files []api.FileOut) {
	t.Helper()
	got := map[string][]byte{}
	for _, f := range files {
		if f.Error != "" {
			t.Errorf("run %d: %s not returned: %s", run, f.Path, f.Error)
			continue
		}
		data, err := base64.StdEncoding.DecodeString(f.ContentB64)
		if err != nil || int64(len(data)) != f.SizeBytes {
			t.Errorf("run %d: %s: %d bytes decoded of %d (%v)", run, f.Path, len(data), f.SizeBytes, err)
		}
		got[f.Path] = data
	}
	sums := strings.Split(string(got["sums.txt"]), "\n")
	if len(sums) != fillFiles {
		t.Fatalf("run %d: sums.txt %q", run, got["sums.txt"])
	}
	for _, line := range sums {
		name, sum, _ := strings.Cut(line, " ")
		h := sha256.Sum256(got[name])
		if hex.EncodeToString(h[:]) != sum {
			t.Errorf("run %d: %s differs from what the run wrote", run, name)
		}
	}
}

// procStatusKB reads a kB field of /proc/pid/status.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field+":" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}
