package testrig

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// Main is the rig's commands' main: it runs run with the command line's
// arguments until SIGINT or SIGTERM, and exits 1 with "testrig <name>:
// <error>" when run fails.
func Main(name string, run func(ctx context.Context, args []string) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testrig %s: %v\n", name, err)
		os.Exit(1)
	}
}
