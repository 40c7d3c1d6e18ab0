// Package doctor is the preflight behind `jaild doctor` and `jailctl
// doctor`: it checks what jaild needs from a host (kernel, cgroups and the
// controllers delegated to jaild, user namespaces, squashfs and loop
// devices, seccomp, nftables for egress), the rootfs images, the socket,
// and whether the daemon answers. Each failed check names its fix. When
// the daemon answers, the images and the seccomp profile checked are the
// ones it serves (it verified them at its start), not the configuration's.
//
// The probes that need the daemon's libraries (loading a profile with
// libseccomp, asking nf_tables) are functions in Options, which jaild
// fills; this package links neither, so jailctl can use it. Host facts are
// read beneath Options.Root ("/" on a real host), so the checks are tested
// against fixture trees without root.
package doctor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/rootfs"
)

// Status is a check's outcome. Only Fail makes the report fail.
type Status string

const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
	Skip Status = "skip"
)

// The names of the checks whose probes need the daemon's libraries
// (Options.Seccomp, Options.Nftables).
const (
	CheckSeccomp  = "seccomp"
	CheckNftables = "nftables (egress)"
	CheckPause    = "paused sessions"
)

// Check is one check's result. Fix is set when Status is Warn or Fail.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Report is every check, in order; OK is false when any check failed.
type Report struct {
	Checks []Check `json:"checks"`
	OK     bool    `json:"ok"`
}

// ErrNoSeccompSupport is what Options.Seccomp returns, wrapped, from a
// build without seccomp support.
var ErrNoSeccompSupport = errors.New("this build has no seccomp support")

// Options says where to look.
type Options struct {
	Root  string // host root for /proc and /sys ("" or "/": the real one)
	Image string // the rootfs image directory
	// Images are the other images served ([images.NAME]): name → dir.
	Images         map[string]string
	SeccompProfile string
	Socket         string
	SocketGroup    string // the group the socket should have
	Unit           string // the systemd unit whose cgroup holds the jails ("jaild.service")
	// Daemon asks the daemon for /v1/info; nil skips the check. When it
	// answers, the images and the profile checked are the daemon's.
	Daemon func(context.Context) (*api.Info, error)
	// Seccomp loads and checks a profile as the daemon does (jaild's is
	// internal/seccomp's Load); nil: not here, see Elsewhere.
	Seccomp func(path string) (api.SeccompInfo, error)
	// Nftables asks the kernel's nf_tables for its tables; nil: not here,
	// see Elsewhere.
	Nftables func() error
	// Elsewhere is the fix of a check whose probe is nil: where it can be
	// made ("run jaild doctor as root"). Such a check warns with it; with
	// no Elsewhere it is skipped.
	Elsewhere string
}

// Configure returns the options of the daemon's configuration file at
// path where the flags (image, profile, socket; "" for not given) leave
// them. A missing file is the defaults, as for the daemon; a file that
// does not load is err, returned with the defaults' options.
func Configure(path, image, profile, socket string) (Options, error) {
	cfg, err := config.Load(path, false)
	if err != nil {
		cfg = config.Default()
	}
	o := Options{Image: image, SeccompProfile: profile, Socket: socket, SocketGroup: cfg.SocketGroup, Images: map[string]string{}}
	if o.Image == "" {
		o.Image = cfg.Image
	}
	if o.SeccompProfile == "" {
		o.SeccompProfile = cfg.SeccompProfile
	}
	if o.Socket == "" {
		o.Socket = cfg.Socket
	}
	for name, im := range cfg.Images {
		o.Images[name] = im.Dir
	}
	return o, err
}

// Run runs every check.
func Run(ctx context.Context, o Options) Report {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Unit == "" {
		o.Unit = "jaild.service"
	}
	var served *api.Info
	var daemonErr error
	if o.Daemon != nil {
		if served, daemonErr = o.Daemon(ctx); daemonErr == nil && served == nil {
			daemonErr = errors.New("an empty answer")
		} else if daemonErr != nil {
			served = nil
		}
	}
	checks := []Check{
		o.kernel(),
		o.cgroups(),
		o.userns(),
		o.filesystems(),
		o.loop(),
		o.seccomp(served),
		o.nftables(served),
		o.image(served),
	}
	checks = append(checks, o.images(served)...)
	checks = append(checks,
		o.socket(),
		o.daemon(served, daemonErr),
		o.pause(served),
	)
	return newReport(checks)
}

func newReport(checks []Check) Report {
	r := Report{Checks: checks, OK: true}
	for _, c := range checks {
		if c.Status == Fail {
			r.OK = false
		}
	}
	return r
}

// Replace returns r with its checks of the given names replaced by
// from's checks of the same names (those from has).
func (r Report) Replace(from Report, names ...string) Report {
	checks := slices.Clone(r.Checks)
	for i, c := range checks {
		if !slices.Contains(names, c.Name) {
			continue
		}
		for _, f := range from.Checks {
			if f.Name == c.Name {
				checks[i] = f
			}
		}
	}
	return newReport(checks)
}

// WriteText writes the report for people: a check a line, each warning's
// and failure's fix under it, and the verdict.
func (r Report) WriteText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(string(c.Status)), c.Name, c.Detail)
		if c.Fix != "" && (c.Status == Fail || c.Status == Warn) {
			fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
		}
	}
	tw.Flush()
	if r.OK {
		fmt.Fprintln(w, "jaild can run here.")
	} else {
		fmt.Fprintln(w, "jaild cannot run here until the failed checks are fixed.")
	}
}

// unchecked is c when its probe is not in this binary: a warning whose
// fix is Elsewhere, or skipped without one.
func (o Options) unchecked(c Check, detail string) Check {
	if o.Elsewhere == "" {
		c.Status, c.Detail = Skip, detail+" (not asked)"
		return c
	}
	c.Status, c.Detail, c.Fix = Warn, detail, o.Elsewhere
	return c
}

func (o Options) path(p string) string { return filepath.Join(o.Root, p) }

func (o Options) read(p string) (string, error) {
	b, err := os.ReadFile(o.path(p))
	return strings.TrimSpace(string(b)), err
}

// kernelVersion parses "6.12.17-amd64" into 6, 12.
func kernelVersion(release string) (major, minor int, ok bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(strings.TrimRightFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' }))
	return major, minor, err1 == nil && err2 == nil
}

func (o Options) kernel() Check {
	c := Check{Name: "kernel"}
	rel, err := o.read("/proc/sys/kernel/osrelease")
	major, minor, ok := kernelVersion(rel)
	switch {
	case err != nil || !ok:
		c.Status, c.Detail, c.Fix = Fail, fmt.Sprintf("cannot read the kernel release (%q)", rel), "check that /proc is mounted"
	case major < 5 || major == 5 && minor < 6:
		c.Status, c.Detail, c.Fix = Fail, "Linux "+rel+": jaild needs 5.6 or newer (openat2, pidfds)", "upgrade the kernel (Debian 12 ships 6.1)"
	case major < 6:
		c.Status, c.Detail, c.Fix = Warn, "Linux "+rel+": works; 6.0+ starts jails ~10 ms sooner (favordynmods), 6.12+ resets a warm run's memory peak", "a newer kernel, when convenient"
	default:
		c.Status, c.Detail = OK, "Linux "+rel
	}
	return c
}

// cgroupFS returns the file system type mounted at /sys/fs/cgroup and at
// /sys/fs/cgroup/unified, from the host's mountinfo.
func (o Options) cgroupFS() (top, unified string, err error) {
	f, err := os.Open(o.path("/proc/self/mountinfo"))
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld != "-" || i+1 >= len(fields) || len(fields) < 5 {
				continue
			}
			switch fields[4] {
			case "/sys/fs/cgroup":
				top = fields[i+1]
			case "/sys/fs/cgroup/unified":
				unified = fields[i+1]
			}
		}
	}
	return top, unified, sc.Err()
}

func (o Options) cgroups() Check {
	c := Check{Name: "cgroups"}
	top, unified, err := o.cgroupFS()
	if err != nil {
		c.Status, c.Detail, c.Fix = Fail, "cannot read mountinfo: "+err.Error(), "check that /proc is mounted"
		return c
	}
	switch {
	case top == "cgroup2":
		// The jails' parent is the unit's cgroup; before it first
		// starts, the root shows what systemd can delegate.
		where := "/sys/fs/cgroup/system.slice/" + o.Unit
		ctrl, err := o.read(where + "/cgroup.controllers")
		if err != nil {
			where = "/sys/fs/cgroup"
			ctrl, err = o.read(where + "/cgroup.controllers")
		}
		if err != nil {
			c.Status, c.Detail, c.Fix = Fail, "cgroup v2, but cgroup.controllers is unreadable", "mount cgroup2 at /sys/fs/cgroup"
			return c
		}
		have := strings.Fields(ctrl)
		var missing []string
		for _, need := range []string{"memory", "pids"} {
			if !contains(have, need) {
				missing = append(missing, need)
			}
		}
		if len(missing) > 0 {
			c.Status = Fail
			c.Detail = fmt.Sprintf("cgroup v2; %s has controllers [%s], missing %s", where, ctrl, strings.Join(missing, ", "))
			c.Fix = "run jaild under systemd with Delegate=yes (the shipped jaild.service), on a kernel with the memory and pids controllers"
			return c
		}
		c.Status, c.Detail = OK, fmt.Sprintf("cgroup v2 (unified); %s has controllers [%s]", where, ctrl)
	case top == "tmpfs":
		var missing []string
		for _, need := range []string{"memory", "pids"} {
			if _, err := os.Stat(o.path("/sys/fs/cgroup/" + need)); err != nil {
				missing = append(missing, need)
			}
		}
		mode := "v1"
		if unified == "cgroup2" {
			mode = "v1 (hybrid, with a cgroup2 hierarchy at /sys/fs/cgroup/unified)"
		}
		if len(missing) > 0 {
			c.Status, c.Detail, c.Fix = Fail, "cgroup "+mode+", no hierarchy for "+strings.Join(missing, ", "), "mount the memory and pids cgroup hierarchies"
			return c
		}
		c.Status, c.Detail = Warn, "cgroup "+mode+": supported, but production hosts should be pure v2"
		c.Fix = "boot with systemd.unified_cgroup_hierarchy=1 (the default since Debian 11 and Ubuntu 21.10)"
	default:
		c.Status, c.Detail, c.Fix = Fail, "no cgroup file system at /sys/fs/cgroup", "mount cgroup2 at /sys/fs/cgroup"
	}
	return c
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func (o Options) userns() Check {
	c := Check{Name: "user namespaces"}
	v, err := o.read("/proc/sys/user/max_user_namespaces")
	n, perr := strconv.Atoi(v)
	switch {
	case err != nil:
		c.Status, c.Detail, c.Fix = Fail, "the kernel has no user namespaces", "a kernel built with CONFIG_USER_NS"
		return c
	case perr != nil || n < 16:
		c.Status, c.Detail, c.Fix = Fail, "user.max_user_namespaces = "+v, "sysctl -w user.max_user_namespaces=15000 (and persist it in /etc/sysctl.d)"
		return c
	}
	c.Status, c.Detail = OK, "user.max_user_namespaces = "+v
	// Ubuntu 23.10+ restricts unprivileged user namespaces with AppArmor;
	// jaild creates them as root with CAP_SYS_ADMIN, which the
	// restriction does not cover.
	if a, err := o.read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); err == nil {
		c.Detail += "; kernel.apparmor_restrict_unprivileged_userns = " + a
		if a == "1" {
			c.Detail += " (restricts unprivileged processes only: jaild creates namespaces as root, so it is not affected)"
		}
	}
	return c
}

func (o Options) filesystems() Check {
	c := Check{Name: "file systems"}
	data, err := o.read("/proc/filesystems")
	if err != nil {
		c.Status, c.Detail, c.Fix = Fail, "cannot read /proc/filesystems", "check that /proc is mounted"
		return c
	}
	have := map[string]bool{}
	for _, l := range strings.Split(data, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 {
			have[f[len(f)-1]] = true
		}
	}
	var notes []string
	for _, fs := range []string{"squashfs", "tmpfs", "overlay"} {
		if have[fs] {
			notes = append(notes, fs)
		}
	}
	c.Detail = "available: " + strings.Join(notes, ", ")
	switch {
	case !have["tmpfs"]:
		c.Status, c.Fix = Fail, "a kernel with tmpfs (every workspace is a tmpfs)"
	case !have["squashfs"]:
		// A module that is installed but not loaded yet is loaded by the
		// first mount.
		rel, _ := o.read("/proc/sys/kernel/osrelease")
		if _, err := os.Stat(o.path("/lib/modules/" + rel + "/kernel/fs/squashfs")); err == nil {
			c.Status, c.Fix = Warn, "none needed: the kernel loads squashfs on the first mount (modprobe squashfs to check)"
			c.Detail += "; squashfs is a module, not loaded yet"
		} else {
			c.Status, c.Fix = Fail, "a kernel with squashfs (the image is a squashfs): install the distribution's kernel modules"
		}
	default:
		c.Status = OK
		if !have["overlay"] {
			c.Detail += " (overlayfs absent: jaild does not need it)"
		}
	}
	return c
}

func (o Options) loop() Check {
	c := Check{Name: "loop devices"}
	if _, err := os.Stat(o.path("/dev/loop-control")); err != nil {
		c.Status, c.Detail, c.Fix = Fail, "no /dev/loop-control: the image cannot be mounted", "modprobe loop (in a container: pass /dev/loop-control and the loop devices)"
		return c
	}
	c.Status, c.Detail = OK, "/dev/loop-control present"
	return c
}

func (o Options) seccomp(served *api.Info) Check {
	c := Check{Name: CheckSeccomp}
	status, err := o.read("/proc/self/status")
	if err != nil || !strings.Contains(status, "\nSeccomp:") {
		c.Status, c.Detail, c.Fix = Fail, "the kernel has no seccomp", "a kernel built with CONFIG_SECCOMP_FILTER"
		return c
	}
	actions, _ := o.read("/proc/sys/kernel/seccomp/actions_avail")
	for _, need := range []string{"errno", "kill_process"} {
		if actions != "" && !contains(strings.Fields(actions), need) {
			c.Status, c.Detail, c.Fix = Fail, "seccomp actions: "+actions+" (no "+need+")", "a newer kernel"
			return c
		}
	}
	var prof api.SeccompInfo
	switch {
	case served != nil:
		c.Status = OK
		c.Detail = fmt.Sprintf("kernel actions: %s; the daemon's profile %s, loaded at its start: default action %s, %d rules",
			actions, served.Seccomp.Profile, served.Seccomp.DefaultAction, served.Seccomp.Rules)
		return c
	case o.SeccompProfile == "":
		c.Status, c.Detail = Skip, "kernel supports seccomp (no profile to check)"
		return c
	case o.Seccomp == nil:
		return o.unchecked(c, fmt.Sprintf("kernel actions: %s; the profile %s is not loaded here (no daemon answers)", actions, o.SeccompProfile))
	}
	prof, err = o.Seccomp(o.SeccompProfile)
	switch {
	case errors.Is(err, ErrNoSeccompSupport):
		c.Status, c.Detail, c.Fix = Fail, "this build has no seccomp support", "build with cgo and -tags seccomp (make build does), or install the Debian package"
	case err != nil:
		c.Status, c.Detail, c.Fix = Fail, err.Error(), "reinstall the profile (the package's /usr/share/jaild/seccomp/default.json)"
	default:
		c.Status = OK
		c.Detail = fmt.Sprintf("kernel actions: %s; profile %s: default action %s, %d rules", actions, o.SeccompProfile, prof.DefaultAction, prof.Rules)
	}
	return c
}

func (o Options) nftables(served *api.Info) Check {
	c := Check{Name: CheckNftables}
	switch {
	case o.Nftables != nil:
	case served != nil && !served.Network.Available:
		c.Status, c.Detail = Skip, "the daemon has egress disabled: nothing uses nf_tables"
		return c
	default:
		return o.unchecked(c, "nf_tables is not asked here")
	}
	switch err := o.Nftables(); {
	case err == nil:
		c.Status, c.Detail = OK, "nf_tables answers"
	case errors.Is(err, os.ErrPermission):
		c.Status, c.Detail = Skip, "only root can ask nf_tables (run jaild doctor as root)"
	default:
		c.Status, c.Detail = Warn, "nf_tables does not answer ("+err.Error()+"): runs asking for egress will fail; loopback-only runs do not need it"
		c.Fix = "modprobe nf_tables (a kernel with CONFIG_NF_TABLES), or leave [network] disabled"
	}
	return c
}

func (o Options) image(served *api.Info) Check {
	c := Check{Name: "rootfs image"}
	if served != nil {
		im := api.ImageInfo{Name: served.Rootfs.Name, ImageDigest: served.Rootfs.ImageDigest, PythonVersion: served.Rootfs.PythonVersion}
		for _, i := range served.Images {
			if i.Default {
				im = i
			}
		}
		c.Status, c.Detail = OK, servedDetail(im)
		return c
	}
	if o.Image == "" {
		c.Status, c.Detail = Skip, "no image configured"
		return c
	}
	m, err := rootfs.Verify(o.Image)
	if err != nil {
		c.Status, c.Detail = Fail, o.Image+": "+err.Error()
		c.Fix = "install jaild-rootfs (apt install ./jaild-rootfs_*.deb) or build it (make rootfs), and point image= at it"
		return c
	}
	c.Status = OK
	c.Detail = fmt.Sprintf("%s: %s, %s, Python %s, digest verified", o.Image, m.Name, m.ImageDigest, m.PythonVersion)
	return c
}

// images checks each other image served: verified, and named as its
// table.
func (o Options) images(served *api.Info) []Check {
	var out []Check
	if served != nil {
		for _, im := range served.Images {
			if !im.Default {
				out = append(out, Check{Name: "image " + im.Name, Status: OK, Detail: servedDetail(im)})
			}
		}
		return out
	}
	for _, name := range slices.Sorted(maps.Keys(o.Images)) {
		dir := o.Images[name]
		c := Check{Name: "image " + name}
		m, err := rootfs.Verify(dir)
		switch {
		case err != nil:
			c.Status, c.Detail = Fail, dir+": "+err.Error()
			c.Fix = fmt.Sprintf("build it (rootfs/build.sh %s) and point images.%s.dir at its current directory, or remove the table", name, name)
		case m.Name != name:
			c.Status, c.Detail = Fail, fmt.Sprintf("%s holds the image %q", dir, m.Name)
			c.Fix = fmt.Sprintf("name the table [images.%s], or point images.%s.dir at a build of %s", m.Name, name, name)
		default:
			c.Status = OK
			c.Detail = fmt.Sprintf("%s: %s, Python %s, digest verified", dir, m.ImageDigest, m.PythonVersion)
		}
		out = append(out, c)
	}
	return out
}

func (o Options) socket() Check {
	c := Check{Name: "socket"}
	fi, err := os.Lstat(o.Socket)
	if err != nil {
		c.Status, c.Detail, c.Fix = Fail, o.Socket+": "+errText(err), "systemctl enable --now jaild.socket (or start jaild, or pass --socket)"
		return c
	}
	if fi.Mode().Type() != fs.ModeSocket {
		c.Status, c.Detail, c.Fix = Fail, o.Socket+" is not a socket", "remove it and restart jaild.socket"
		return c
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	owner, group := "?", "?"
	if st != nil {
		owner, group = strconv.Itoa(int(st.Uid)), strconv.Itoa(int(st.Gid))
		if u, err := user.LookupId(owner); err == nil {
			owner = u.Username
		}
		if g, err := user.LookupGroupId(group); err == nil {
			group = g.Name
		}
	}
	mode := fi.Mode().Perm()
	c.Detail = fmt.Sprintf("%s: owner %s, group %s, mode %04o", o.Socket, owner, group, mode)
	switch {
	case mode&0o002 != 0:
		c.Status, c.Fix = Fail, "anyone on the host can run code: set SocketMode=0660 in jaild.socket (socket_mode in jaild.toml)"
	case o.SocketGroup != "" && group != o.SocketGroup && mode&0o020 != 0:
		c.Status, c.Fix = Warn, "the socket's group is not "+o.SocketGroup+": set SocketGroup= in jaild.socket (socket_group in jaild.toml)"
	default:
		c.Status = OK
	}
	return c
}

// servedDetail describes an image the daemon serves.
func servedDetail(im api.ImageInfo) string {
	return fmt.Sprintf("the daemon serves %s: %s, Python %s, digest verified at its start", im.Name, im.ImageDigest, im.PythonVersion)
}

func (o Options) daemon(info *api.Info, err error) Check {
	c := Check{Name: "daemon"}
	if o.Daemon == nil {
		c.Status, c.Detail = Skip, "not asked"
		return c
	}
	if err != nil {
		c.Status, c.Detail = Fail, "no answer on "+o.Socket+": "+err.Error()
		c.Fix = "systemctl status jaild.service; journalctl -u jaild.service (a caller must be root or in the socket's group)"
		return c
	}
	c.Status = OK
	c.Detail = fmt.Sprintf("jaild %s answers: cgroup %s, image %s, %d runs at once", info.Version, info.CgroupMode, info.Rootfs.ImageDigest, info.Capacity.MaxConcurrent)
	return c
}

// pause reports whether the daemon can pause sessions to disk, as its
// start-up probe (a checkpoint and a restore of a test jail) found.
func (o Options) pause(served *api.Info) Check {
	c := Check{Name: CheckPause}
	switch {
	case served == nil:
		c.Status, c.Detail = Skip, "the daemon was not asked (it probes CRIU at its start)"
	case !served.Sessions.Enabled:
		c.Status, c.Detail = Skip, "sessions are disabled"
	case served.Sessions.Pause.Available:
		c.Status = OK
		c.Detail = "sessions can pause to disk (CRIU checkpointed and restored a test jail at the daemon's start); an idle timeout " + map[string]string{"pause": "pauses them", "end": "ends them (sessions.on_idle)"}[served.Sessions.Pause.OnIdle] +
			"; paused sessions outlive a restart, and a stop " + map[string]string{"pause": "pauses idle ones", "end": "ends idle ones (sessions.on_shutdown)"}[served.Sessions.Pause.OnShutdown]
	default:
		c.Status = Warn
		c.Detail = "sessions cannot pause: " + served.Sessions.Pause.Reason + "; idle sessions end, pause answers 503"
		c.Fix = "make deps fetches a CRIU new enough for this kernel into /var/cache/jaild/criu (or set sessions.criu), then restart jaild"
	}
	return c
}

func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
