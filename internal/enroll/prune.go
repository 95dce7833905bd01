package enroll

import (
	"context"
	"log/slog"
	"time"
)

// DefaultPruneEvery is how often a TokenPruner deletes join tokens past
// their retention.
const DefaultPruneEvery = time.Hour

// Duty is held by one replica at a time: Run calls fn whenever this
// replica holds it, with a ctx that ends the moment it stops holding it,
// until ctx ends (consulstore's duties satisfy it).
type Duty interface {
	Run(ctx context.Context, fn func(ctx context.Context) error) error
}

// PruneOptions are a TokenPruner's.
type PruneOptions struct {
	// Retention is how long a token is kept after it expired or was
	// revoked (config tokenRetention).
	Retention time.Duration
	// Every is the period; 0 is DefaultPruneEvery.
	Every time.Duration
	// Duty, when set, prunes only while this replica holds it (replicas
	// sharing a store); nil prunes here.
	Duty Duty
}

// TokenPruner deletes the join tokens past their retention, at start
// and then periodically.
type TokenPruner struct {
	log    *slog.Logger
	tokens tokenPruner
	opts   PruneOptions
}

// NewTokenPruner returns the pruner of tokens.
func NewTokenPruner(log *slog.Logger, tokens *Tokens, opts PruneOptions) *TokenPruner {
	if opts.Every <= 0 {
		opts.Every = DefaultPruneEvery
	}
	return &TokenPruner{log: log, tokens: tokens, opts: opts}
}

// Run prunes until ctx is done (under the duty, when there is one).
func (p *TokenPruner) Run(ctx context.Context) error {
	prune := func(ctx context.Context) error {
		return pruneTokens(ctx, p.log, p.tokens, p.opts.Retention, p.opts.Every)
	}
	if p.opts.Duty != nil {
		return p.opts.Duty.Run(ctx, prune)
	}
	return prune(ctx)
}

// tokenPruner is what pruneTokens needs of the join tokens.
type tokenPruner interface {
	Prune(ctx context.Context, retention time.Duration) (int, error)
}

// pruneTokens deletes the join tokens that expired or were revoked more
// than retention ago, at start and then every period, until ctx is done.
// A failure is logged and tried again at the next period.
func pruneTokens(ctx context.Context, log *slog.Logger, tokens tokenPruner, retention, every time.Duration) error {
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		switch n, err := tokens.Prune(ctx, retention); {
		case err != nil && ctx.Err() == nil:
			log.Error("pruning join tokens failed; trying again later", "err", err, "retry_in", every)
		case n > 0:
			log.Info("pruned join tokens", "deleted", n, "retention", retention)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}
