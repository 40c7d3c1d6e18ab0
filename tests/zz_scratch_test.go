package tests

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jaild/jaild/internal/api"
)

func TestZZScratch(t *testing.T) {
	d := shared
	pid := d.cmd.Process.Pid
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	var memdir string
	for _, l := range strings.Split(string(cg), "\n") {
		if strings.Contains(l, ":memory:") {
			memdir = filepath.Join("/sys/fs/cgroup/memory", strings.SplitN(l, ":", 3)[2], "jails")
		}
	}
	show := func(tag string) {
		ms, _ := os.ReadFile(filepath.Join(memdir, "memory.stat"))
		var mem string
		for _, x := range strings.Split(string(ms), "\n") {
			for _, k := range []string{"total_rss ", "total_shmem ", "total_cache ", "total_mapped_file ", "total_inactive_anon ", "total_active_anon ", "total_inactive_file ", "total_active_file "} {
				if strings.HasPrefix(x, k) {
					mem += x + "; "
				}
			}
		}
		u, _ := os.ReadFile(filepath.Join(memdir, "memory.usage_in_bytes"))
		ents, _ := os.ReadDir(memdir)
		n := 0
		var names []string
		for _, e := range ents {
			if e.IsDir() {
				n++
				names = append(names, e.Name())
				procs, _ := os.ReadFile(filepath.Join(memdir, e.Name(), "cgroup.procs"))
				names = append(names, fmt.Sprintf("procs=%q", procs))
			}
		}
		t.Logf("children %v", names)
		ku, _ := os.ReadFile("/proc/key-users")
		t.Logf("%s: usage %s children %d %s keys %q", tag, strings.TrimSpace(string(u)), n, mem, strings.ReplaceAll(string(ku), "\n", "|"))
	}
	var r api.ExecuteResponse
	d.call(t, "POST", "/v1/execute", `{"code":"print(1)"}`, &r)
	show("warm")
	d.call(t, "POST", "/v1/execute", `{"code":"import numpy\nx = bytearray(200<<20)\nx[::4096] = b'1' * len(x[::4096])\nopen('/dev/shm/x','wb').write(b'1'*(30<<20))"}`, &r)
	t.Logf("%s %s", r.Status, r.Stderr)
	for i := 0; i < 3; i++ {
		show(fmt.Sprint(i))
		time.Sleep(100 * time.Millisecond)
	}
}
