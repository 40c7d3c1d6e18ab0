// Command jailbench measures jaild against bare python3 on this machine
// and prints a Markdown table (and, with -json FILE, the raw figures).
// It needs root, a built jaild and the rootfs; `make bench` runs it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jaild/jaild/internal/bench"
)

func main() {
	cfg := bench.Config{}
	flag.StringVar(&cfg.Jaild, "jaild", "bin/jaild", "jaild binary")
	flag.StringVar(&cfg.ImageDir, "image", "/var/cache/jaild/rootfs/current", "rootfs image directory")
	flag.StringVar(&cfg.Profile, "seccomp-profile", "seccomp-profiles/default.json", "seccomp profile")
	flag.IntVar(&cfg.Iter, "n", 50, "sequential runs per latency figure")
	flag.IntVar(&cfg.PoolSize, "pool", 2, "warm jails of each kind (plain, preloaded) in the warm daemon's pool")
	flag.BoolVar(&cfg.Quick, "quick", false, "print(1) only: latency cold, warm and back to back, and CPU per run")
	flag.BoolVar(&cfg.PauseOnly, "pause", false, "paused sessions only (a 200 MB DataFrame: pause, the next call's restore)")
	flag.BoolVar(&cfg.SessionsOnly, "sessions", false, "sessions only: create, a call, a foreground command, the port proxy, a terminal, and memory")
	jsonOut := flag.String("json", "", "also write the report as JSON to this file")
	images := flag.String("images", "", "also time print(1) in every image built under `DIR` (DIR/<name>/current, rootfs/build.sh's layout)")
	flag.Parse()
	if *images != "" {
		dirs, err := filepath.Glob(filepath.Join(*images, "*", "current", "rootfs.squashfs"))
		if err != nil || len(dirs) == 0 {
			fmt.Fprintf(os.Stderr, "jailbench: -images %s: no image (DIR/<name>/current/rootfs.squashfs)\n", *images)
			os.Exit(2)
		}
		cfg.Images = map[string]string{}
		for _, d := range dirs {
			cur := filepath.Dir(d)
			cfg.Images[filepath.Base(filepath.Dir(cur))] = cur
		}
	}
	for _, p := range []*string{&cfg.Jaild, &cfg.Profile} {
		abs, err := os.Getwd()
		if err == nil && (*p)[0] != '/' {
			*p = abs + "/" + *p
		}
	}
	rep, err := bench.Run(context.Background(), cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "jailbench:", err)
		os.Exit(1)
	}
	fmt.Print(rep.Table())
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "jailbench:", err)
			os.Exit(1)
		}
	}
}
