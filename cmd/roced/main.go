package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/goroce/goroce/internal/tool/version"
)

func main() {
	if version.Requested(os.Args[1:]) {
		version.Print(os.Stdout, "roced")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
