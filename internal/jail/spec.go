package jail

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// Paths masked and made read-only in every jail: runc's and Docker's
// defaults, plus a few more host details (DMI ids, kernel symbol table).
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
		"/proc/scsi", "/proc/kallsyms", "/proc/kmsg", "/proc/sysrq-trigger",
		"/proc/sys/kernel/random/boot_id", // identifies the host's boot
		"/sys/firmware", "/sys/devices/virtual/powercap", "/sys/class/dmi", "/sys/devices/virtual/dmi",
	}
	readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys"}
)

// shmBytes bounds /dev/shm; its pages are charged to the jail's memory
// cgroup as well.
const shmBytes = 64 << 20

// config builds the libcontainer configuration of one jail. The OCI spec is
// the readable form; specconv turns it into libcontainer's, including the
// seccomp filter.
func (e *Engine) config(j *Jail, l Limits) (*configs.Config, error) {
	id, runDir := j.id, j.runDir
	idmap := []specs.LinuxIDMapping{{ContainerID: 0, HostID: j.idBase, Size: idMapSize}}
	mem := l.MemoryBytes
	pids := l.Pids
	oomAdj := 1000
	noexec := []string{"nosuid", "noexec", "nodev"}
	spec := &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: filepath.Join(runDir, "root"), Readonly: true},
		Hostname: "jail",
		Process: &specs.Process{
			User:            specs.User{UID: UID, GID: GID},
			NoNewPrivileges: true,
			Capabilities:    &specs.LinuxCapabilities{},
			OOMScoreAdj:     &oomAdj,
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: noexec},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "noexec", "strictatime", "mode=755", "size=64k"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: append(noexec, "mode=1777", "size="+strconv.Itoa(shmBytes))},
			{Destination: WorkspaceDir, Type: "bind", Source: filepath.Join(runDir, "work"), Options: []string{"bind", "nosuid", "nodev"}},
			{Destination: "/tmp", Type: "bind", Source: filepath.Join(runDir, "tmp"), Options: []string{"bind", "nosuid", "nodev"}},
			{Destination: MetaDir, Type: "bind", Source: filepath.Join(runDir, "meta"), Options: []string{"bind", "nosuid", "nodev", "noexec"}},
		},
		Linux: &specs.Linux{
			UIDMappings: idmap,
			GIDMappings: idmap,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.UserNamespace}, {Type: specs.MountNamespace}, {Type: specs.PIDNamespace},
				{Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.CgroupNamespace},
			},
			Resources: &specs.LinuxResources{
				Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
				Memory:  &specs.LinuxMemory{Limit: &mem, Swap: &mem},
				Pids:    &specs.LinuxPids{Limit: &pids},
			},
			CgroupsPath:   e.cgroupPath(id),
			Sysctl:        map[string]string{"kernel.shm_rmid_forced": "1"},
			Seccomp:       e.seccomp,
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
		},
	}
	if j.net != nil {
		// The daemon's network namespace for the run (owned by the host's
		// user namespace: nothing in the jail can reconfigure it), and a
		// resolv.conf naming the run's resolver.
		for i := range spec.Linux.Namespaces {
			if spec.Linux.Namespaces[i].Type == specs.NetworkNamespace {
				spec.Linux.Namespaces[i].Path = j.net.NetnsPath()
			}
		}
		spec.Mounts = append(spec.Mounts, specs.Mount{Destination: "/etc/resolv.conf", Type: "bind",
			Source: filepath.Join(runDir, "resolv.conf"), Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	if q, period, ok := cpuQuota(l.CPUCores); ok {
		spec.Linux.Resources.CPU = &specs.LinuxCPU{Quota: &q, Period: &period}
	}
	cfg, err := specconv.CreateLibcontainerConfig(&specconv.CreateOpts{CgroupName: id, Spec: spec, NoNewKeyring: false})
	if err != nil {
		return nil, fmt.Errorf("jail config: %w", err)
	}
	if cfg.Seccomp == nil {
		// Fail closed: never start a jail without the filter.
		return nil, fmt.Errorf("jail config: seccomp filter missing")
	}
	if e.criu != nil {
		// CRIU's configuration for this jail (checkpoint.go), in its run
		// directory.
		cfg.Labels = append(cfg.Labels, "org.criu.config="+filepath.Join(runDir, criuConfName))
	}
	// specconv adds a loopback "network" for the new net namespace; bringing
	// it up is libcontainer's job inside the jail.
	return cfg, nil
}

// rlimits are the jail's rlimits in libcontainer's form.
func rlimits(l Limits) []configs.Rlimit {
	var out []configs.Rlimit
	for _, r := range l.Rlimits() {
		out = append(out, configs.Rlimit{Type: r.Type, Soft: r.Soft, Hard: r.Hard})
	}
	return out
}

// cpuPeriod is the period of a jail's CPU quota, in microseconds.
const cpuPeriod = 100_000

// cpuQuota is cores as a CFS quota and period (microseconds); ok is false
// for no quota.
func cpuQuota(cores float64) (quota int64, period uint64, ok bool) {
	if cores <= 0 {
		return 0, 0, false
	}
	return int64(cores * cpuPeriod), cpuPeriod, true
}

// setCPUQuota writes the jail's CPU quota (cores; 0: none) to its cgroup.
func setCPUQuota(paths map[string]string, cores float64) error {
	q, _, ok := cpuQuota(cores)
	if cgroups.IsCgroup2UnifiedMode() {
		v := "max " + strconv.Itoa(cpuPeriod)
		if ok {
			v = strconv.FormatInt(q, 10) + " " + strconv.Itoa(cpuPeriod)
		}
		return cgroups.WriteFile(paths[""], "cpu.max", v)
	}
	if !ok {
		q = -1
	}
	if err := cgroups.WriteFile(paths["cpu"], "cpu.cfs_period_us", strconv.Itoa(cpuPeriod)); err != nil {
		return err
	}
	return cgroups.WriteFile(paths["cpu"], "cpu.cfs_quota_us", strconv.FormatInt(q, 10))
}
