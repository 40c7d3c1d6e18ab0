package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/doctor"
)

const doctorHelp = `Checks what jaild needs and what it will really use, for a new operator to
run first: the kernel, cgroups and the controllers delegated to jaild, user
namespaces, squashfs and loop devices, seccomp, nftables for egress, the
rootfs images (their digests verified), the socket's owner, group and mode,
and whether the daemon answers. When the daemon answers on its socket, the
images and the seccomp profile checked are the ones it serves (it verified
them at its start). Else they come from the daemon's configuration file,
as do the socket and group; the profile and nf_tables, which need the
daemon's libraries, are then checked by "jaild doctor --json" (the jaild
beside jailctl, else on $PATH), and without a jaild those two checks warn:
run "jaild doctor" as root. Each failed check names its fix. Exit status 1
when any check failed (warnings do not fail), 0 otherwise; --json prints
{"checks":[...],"ok":bool}.`

// jaildProbes are the checks whose probes need the daemon's libraries:
// jaild doctor makes them.
var jaildProbes = []string{doctor.CheckSeccomp, doctor.CheckNftables}

func runDoctor(e *env, args []string) int {
	fs := e.flagSet("doctor")
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	cfgPath := fs.String("config", config.DefaultPath, "the daemon's configuration file")
	image := fs.String("image", "", "rootfs image directory (default: the configuration's)")
	profile := fs.String("seccomp-profile", "", "seccomp profile (default: the configuration's)")
	socket := socketFlag(fs)
	if _, rc, ok := e.parse(fs, args, 0); !ok {
		return rc
	}
	if g := e.global; g.host != "" || g.cert != "" || g.key != "" || g.ca != "" {
		return e.usageError("doctor checks this host and the daemon on its socket: --host, --cert, --key and --ca are not for it")
	}
	// The socket: the flags', else $JAILD_SOCKET, else the configuration's.
	sock := *socket
	for _, s := range []string{e.global.socket, os.Getenv(client.SocketEnv)} {
		if sock == "" {
			sock = s
		}
	}
	// A missing file is the defaults, as for the daemon; a bad one is
	// reported, and the defaults checked.
	o, err := doctor.Configure(*cfgPath, *image, *profile, sock)
	if err != nil {
		fmt.Fprintf(e.stderr, "jailctl doctor: %v (checking the defaults)\n", err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	info, infoErr := client.New(o.Socket).Info(ctx)
	cancel()
	o.Daemon = func(context.Context) (*api.Info, error) { return info, infoErr }
	o.Elsewhere = `run "jaild doctor" as root: it loads the profile with libseccomp and asks nf_tables`
	var fromJaild *doctor.Report
	if infoErr != nil {
		var why string
		if fromJaild, why = e.jaildDoctor(*cfgPath, o); fromJaild == nil {
			o.Elsewhere += " (" + why + ")"
		}
	}
	rep := doctor.Run(e.ctx, o)
	if fromJaild != nil {
		rep = rep.Replace(*fromJaild, jaildProbes...)
	}
	if *jsonOut {
		b, _ := json.Marshal(rep)
		e.printJSON(b)
	} else {
		rep.WriteText(e.stdout)
	}
	if !rep.OK {
		return exitFail
	}
	return exitOK
}

// findJaild returns the jaild beside jailctl's executable, else the one
// on $PATH. Tests replace it.
var findJaild = func() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "jaild")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return exec.LookPath("jaild")
}

// jaildDoctor runs "jaild doctor --json" on o's configuration and returns
// its report, or nil and why there is none.
func (e *env) jaildDoctor(cfgPath string, o doctor.Options) (*doctor.Report, string) {
	path, err := findJaild()
	if err != nil {
		return nil, "no jaild beside jailctl or on $PATH"
	}
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "doctor", "--json", "--config", cfgPath,
		"--image", o.Image, "--seccomp-profile", o.SeccompProfile, "--socket", o.Socket)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	// Exit status 1 is a failed check: the report is what counts.
	runErr := cmd.Run()
	var rep doctor.Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || len(rep.Checks) == 0 {
		if runErr == nil {
			runErr = fmt.Errorf("no report (%v)", err)
		}
		return nil, fmt.Sprintf("%s doctor: %v", path, runErr)
	}
	return &rep, ""
}
