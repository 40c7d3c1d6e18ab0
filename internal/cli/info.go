package cli

import (
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jaild/jaild/internal/api"
)

func runInfo(e *env, args []string) int {
	a, rc, ok := e.ask("info", jsonUsage, nil, args, 0, 0)
	if !ok {
		return rc
	}
	var info api.Info
	if rc, ok := e.fetch(a.c, http.MethodGet, "/v1/info", nil, &info, a.json); !ok || a.json {
		return rc
	}
	writeInfo(e, &info)
	return exitOK
}

func writeInfo(e *env, info *api.Info) {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	row("version:", "%s (API %s)", info.Version, info.API)
	row("python:", "%s", info.Rootfs.PythonVersion)
	rootfs := info.Rootfs.Name
	if info.Rootfs.DebianSuite != "" {
		rootfs += " (debian " + info.Rootfs.DebianSuite + ")"
	}
	row("rootfs:", "%s", rootfs)
	row("rootfs digest:", "%s", info.Rootfs.ImageDigest)
	if info.Rootfs.BuiltAt != "" {
		row("rootfs built:", "%s", info.Rootfs.BuiltAt)
	}
	row("packages:", "%d python, %d debian (see --json)", len(info.Rootfs.PythonPackages), info.Rootfs.Packages)
	writeImageLines(tw, "images:", info.Images)
	row("default limits:", "%s", limitsString(info.Defaults))
	row("max limits:", "%s", limitsString(info.Maxima))
	if info.Caller.Admin {
		row("admin max limits:", "%s", limitsString(info.AdminMaxima))
	}
	row("cgroup mode:", "%s", info.CgroupMode)
	row("seccomp:", "%s (default action %s, %d rules)", info.Seccomp.Profile, info.Seccomp.DefaultAction, info.Seccomp.Rules)
	row("capacity:", "%d/%d running, %d/%d queued", info.Capacity.Running, info.Capacity.MaxConcurrent, info.Capacity.Queued, info.Capacity.QueueSize)
	p := info.Pool
	pool := fmt.Sprintf("%d/%d plain ready, %d/%d preloaded ready (%s)", p.PlainReady, p.PlainSize, p.Ready, p.Size, strings.Join(p.Preimport, ", "))
	if p.Paused {
		pool += ", paused: host memory is low"
	}
	row("warm pool:", "%s", pool)
	quota := "unlimited"
	if q := info.Caller.QuotaRemaining; q != nil {
		quota = fmt.Sprintf("%d runs remaining", *q)
	}
	admin := ""
	if info.Caller.Admin {
		admin = ", admin"
	}
	who := fmt.Sprintf("uid %d", info.Caller.UID)
	if info.Caller.Client != "" {
		who = fmt.Sprintf("client %q (uid %d)", info.Caller.Client, info.Caller.UID)
	}
	row("caller:", "%s%s, quota %s", who, admin, quota)
	tw.Flush()
}

func limitsString(l api.LimitValues) string {
	return fmt.Sprintf("timeout %s, memory %d MB, pids %d, file size %d MB, output %s",
		time.Duration(l.TimeoutMs)*time.Millisecond, l.MemoryMB, l.Pids, l.FileSizeMB, byteSize(l.OutputBytes))
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func runHealth(e *env, args []string) int {
	a, rc, ok := e.ask("health", jsonUsage, nil, args, 0, 0)
	if !ok {
		return rc
	}
	var h api.Health
	if rc, ok := e.fetch(a.c, http.MethodGet, "/v1/health", nil, &h, a.json); !ok {
		return rc
	}
	if !a.json {
		fmt.Fprintf(e.stdout, "%s\n", h.Status)
	}
	if h.Status != api.StatusOK {
		return exitFail
	}
	return exitOK
}
