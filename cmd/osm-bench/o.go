package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// oTarget runs the real osm-server.
type oTarget struct {
	osmServer    string
	staticPlugin string
	dir          string
	logw         io.Writer
	log          *slog.Logger
}

func (t *oTarget) Name() string { return "O" }

func (t *oTarget) Start(ctx context.Context, w Workload, extra int) (*server, error) {
	for _, p := range []string{t.osmServer, t.staticPlugin} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("O: %w (build it with make build)", err)
		}
	}
	return nil, fmt.Errorf("O: %w", errNotAvailable)
}
