package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/doctor"
	"github.com/jaild/jaild/internal/egress"
)

const doctorHelp = `Checks what jaild needs, for a new operator to run first: the kernel,
cgroups and the controllers delegated to jaild, user namespaces, squashfs
and loop devices, seccomp and this build's support for it, nftables for
egress, the rootfs image (its digest verified), the socket's owner, group
and mode, and whether the daemon answers. The image, seccomp profile,
socket and group come from the daemon's configuration file. Each failed
check names its fix. Exit status 1 when any check failed (warnings do not
fail), 0 otherwise; --json prints {"checks":[...],"ok":bool}.`

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
	// A missing file is the defaults, as for the daemon; a bad one is
	// reported, and the defaults checked.
	cfg, err := config.Load(*cfgPath, false)
	if err != nil {
		fmt.Fprintf(e.stderr, "jailctl doctor: %v (checking the defaults)\n", err)
		cfg = config.Default()
	}
	if *image == "" {
		*image = cfg.Image
	}
	if *profile == "" {
		*profile = cfg.SeccompProfile
	}
	sock := e.socketPath(*socket)
	if *socket == "" && os.Getenv(client.SocketEnv) == "" && e.global.socket == "" {
		sock = cfg.Socket
	}
	c := client.New(sock)
	rep := doctor.Run(e.ctx, doctor.Options{
		Image: *image, Images: imageDirs(cfg), SeccompProfile: *profile, Socket: sock, SocketGroup: cfg.SocketGroup,
		Nftables: egress.Available,
		Daemon: func(ctx context.Context) (*api.Info, error) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return c.Info(ctx)
		},
	})
	if *jsonOut {
		b, _ := json.Marshal(rep)
		e.printJSON(b)
	} else {
		writeReport(e, rep)
	}
	if !rep.OK {
		return exitFail
	}
	return exitOK
}

func writeReport(e *env, rep doctor.Report) {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, c := range rep.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(string(c.Status)), c.Name, c.Detail)
		if c.Fix != "" && (c.Status == doctor.Fail || c.Status == doctor.Warn) {
			fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
		}
	}
	tw.Flush()
	if rep.OK {
		fmt.Fprintln(e.stdout, "jaild can run here.")
	} else {
		fmt.Fprintln(e.stdout, "jaild cannot run here until the failed checks are fixed.")
	}
}

// imageDirs are the configuration's other images: name → dir.
func imageDirs(cfg config.Config) map[string]string {
	out := map[string]string{}
	for name, im := range cfg.Images {
		out[name] = im.Dir
	}
	return out
}
