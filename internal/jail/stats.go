package jail

import (
	"bufio"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
)

// readCgroupStats reads CPU time, peak memory and the OOM-kill count from a
// jail's cgroup files. A jail without cgroups (not started) reads as zeros.
func readCgroupStats(paths map[string]string) Stats {
	var st Stats
	if len(paths) == 0 {
		return st
	}
	if dir := paths[""]; cgroups.IsCgroup2UnifiedMode() {
		st.CPU = time.Duration(keyed(filepath.Join(dir, "cpu.stat"), "usage_usec")) * time.Microsecond
		st.PeakMemoryBytes = single(filepath.Join(dir, "memory.peak"))
		st.OOMKills = keyed(filepath.Join(dir, "memory.events"), "oom_kill")
		return st
	}
	st.CPU = time.Duration(single(filepath.Join(paths["cpuacct"], "cpuacct.usage")))
	st.PeakMemoryBytes = single(filepath.Join(paths["memory"], "memory.max_usage_in_bytes"))
	st.OOMKills = keyed(filepath.Join(paths["memory"], "memory.oom_control"), "oom_kill")
	return st
}

// anonMemory reads a jail's anonymous memory from memory.stat.
func anonMemory(paths map[string]string) uint64 {
	if len(paths) == 0 {
		return 0
	}
	if cgroups.IsCgroup2UnifiedMode() {
		return keyed(filepath.Join(paths[""], "memory.stat"), "anon")
	}
	return keyed(filepath.Join(paths["memory"], "memory.stat"), "rss")
}

func single(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return v
}

func keyed(path, key string) uint64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// resetPeak opens a jail's memory.peak and resets it for that descriptor,
// so that the peak read from it counts from now (as v1's
// memory.max_usage_in_bytes reset does). Kernels before 6.12 cannot reset
// it; the peak then counts from the jail's start.
func resetPeak(dir string) *os.File {
	f, err := os.OpenFile(filepath.Join(dir, "memory.peak"), os.O_RDWR, 0)
	if err != nil {
		return nil
	}
	if _, err := f.WriteString("reset\n"); err != nil {
		f.Close()
		return nil
	}
	return f
}

// readPeak reads the peak since resetPeak from the same descriptor.
func readPeak(f *os.File) (uint64, bool) {
	buf := make([]byte, 32)
	n, err := f.ReadAt(buf, 0)
	if n == 0 && err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(buf[:n])), 10, 64)
	return v, err == nil
}
