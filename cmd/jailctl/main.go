// Command jailctl is the command-line client of jaild; package cli holds
// its commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/jaild/jaild/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal cancels the request, a second one kills
		// jailctl the default way.
		<-ctx.Done()
		stop()
	}()
	os.Exit(cli.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
