package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jaild/jaild/internal/config"
	"github.com/jaild/jaild/internal/daemon"
)

// reloadMain is "jaild reload": systemd's ExecReload. It signals the
// daemon and returns once its reload is done: 0 when applied, 1 with the
// daemon's reason when refused or when no outcome came within --timeout
// (below systemd's 90 s), 2 for a usage error. Plain `kill -HUP` returned
// at once and succeeded whatever the outcome; Type=notify-reload, which
// waits, needs systemd 253 (Debian bookworm has 252).
func reloadMain(args []string) int {
	fs := flag.NewFlagSet("jaild reload", flag.ContinueOnError)
	pid := fs.Int("pid", 0, "the daemon's `PID` (systemd: $MAINPID)")
	cfgPath := fs.String("config", config.DefaultPath, "the daemon's configuration file (for its run_dir)")
	runDir := fs.String("run-dir", "", "the daemon's run directory (default: the configuration's run_dir)")
	timeout := fs.Duration("timeout", 80*time.Second, "how long to wait for the reload's outcome")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || *pid <= 0 || *timeout <= 0 {
		fmt.Fprintln(os.Stderr, "jaild reload: usage: jaild reload --pid PID [--config FILE | --run-dir DIR] [--timeout D]")
		return 2
	}
	dir := *runDir
	if dir == "" {
		// The file being reloaded may well not load: its run_dir is
		// taken as far as it reads, and a file that does not parse leaves
		// the default's (then, with another run_dir, no outcome is seen
		// and the command fails at --timeout). The unit gives --run-dir.
		cfg, _ := config.Load(*cfgPath, true)
		dir = cfg.RunDir
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, err := daemon.Reload(ctx, *pid, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "jaild reload:", err)
		return 1
	}
	fmt.Println("jaild reloaded: serving images", st.Images)
	return 0
}
