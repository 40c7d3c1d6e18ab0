// Command jaild is the jaild daemon: it runs untrusted Python in fresh
// kernel-enforced jails and serves JSON over HTTP on a Unix socket.
// See README.md and docs/API.md. Everything but its flags is in
// internal/daemon.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/daemon"
	"github.com/jaild/jaild/internal/jail"
	"github.com/jaild/jaild/internal/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "doctor" {
		os.Exit(doctorMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "reload" {
		os.Exit(reloadMain(os.Args[2:]))
	}
	jail.Init() // when started as a jail's init, this never returns
	// Re-executes itself from a sealed copy of its binary, once, so that
	// no jail's start copies it.
	jail.SealExe()
	// On cgroup v2: re-executes itself, seeing only its own cgroup subtree.
	if err := jail.EnterCgroupView(); err != nil {
		fmt.Fprintln(os.Stderr, "jaild:", err)
		os.Exit(1)
	}
	if err := serve(); err != nil {
		fmt.Fprintln(os.Stderr, "jaild:", err)
		os.Exit(1)
	}
}

func serve() error {
	o := daemon.Options{Log: slog.New(slog.NewJSONHandler(os.Stderr, nil))}
	flag.StringVar(&o.ConfigPath, "config", config.DefaultPath, "configuration file (TOML)")
	flag.StringVar(&o.Socket, "socket", "", "socket path (overrides the config's socket)")
	flag.StringVar(&o.Image, "image", "", "rootfs image directory (overrides the config's image)")
	flag.StringVar(&o.SeccompProfile, "seccomp-profile", "", "seccomp profile (overrides the config's seccomp_profile)")
	flag.StringVar(&o.RunDir, "run-dir", "", "state directory (overrides the config's run_dir)")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *showVersion {
		fmt.Println("jaild", version.Version)
		return nil
	}
	// A SIGHUP before the daemon serves must not kill it (its default
	// action): it is taken, and applied, once serving.
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	flag.Visit(func(f *flag.Flag) { o.ConfigExplicit = o.ConfigExplicit || f.Name == "config" })
	return daemon.Run(o, hups)
}
