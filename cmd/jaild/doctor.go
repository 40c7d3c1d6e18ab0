package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jaild/jaild/internal/api"
	"github.com/jaild/jaild/internal/client"
	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/doctor"
	"github.com/jaild/jaild/internal/egress"
	"github.com/jaild/jaild/internal/seccomp"
)

// doctorMain is "jaild doctor": the preflight of package doctor with the
// probes only the daemon's binary has (the profile loaded with libseccomp,
// nf_tables asked). jailctl doctor runs it with --json when no daemon
// answers. Exit status 1 when a check failed, 2 for a usage error.
func doctorMain(args []string) int {
	fs := flag.NewFlagSet("jaild doctor", flag.ContinueOnError)
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	cfgPath := fs.String("config", config.DefaultPath, "the daemon's configuration file")
	image := fs.String("image", "", "rootfs image directory (default: the configuration's)")
	profile := fs.String("seccomp-profile", "", "seccomp profile (default: the configuration's)")
	socket := fs.String("socket", "", "daemon socket `PATH` (default: the configuration's)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "jaild doctor: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	o, err := doctor.Configure(*cfgPath, *image, *profile, *socket)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jaild doctor: %v (checking the defaults)\n", err)
	}
	o.Seccomp = loadProfile
	o.Nftables = egress.Available
	c := client.New(o.Socket)
	o.Daemon = func(ctx context.Context) (*api.Info, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return c.Info(ctx)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := doctor.Run(ctx, o)
	if *jsonOut {
		b, _ := json.Marshal(rep)
		fmt.Printf("%s\n", b)
	} else {
		rep.WriteText(os.Stdout)
	}
	if !rep.OK {
		return 1
	}
	return 0
}

// loadProfile loads and checks a seccomp profile as the daemon does.
func loadProfile(path string) (api.SeccompInfo, error) {
	p, err := seccomp.Load(path)
	if errors.Is(err, seccomp.ErrNoSeccompSupport) {
		return api.SeccompInfo{}, fmt.Errorf("%w: %w", doctor.ErrNoSeccompSupport, err)
	}
	if err != nil {
		return api.SeccompInfo{}, err
	}
	return api.SeccompInfo{Profile: path, DefaultAction: string(p.DefaultAction), Rules: len(p.Syscalls)}, nil
}
