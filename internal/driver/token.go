package driver

import (
	"context"
	"time"
)

// Tokens is what a driver does for one-time tokens (package token), on
// the sqlonce_tokens table. Hashes are SHA-256 digests of the tokens; the
// tokens themselves never reach the database.
type Tokens[TTx any] interface {
	// TokenInsert stores a token's hash, live for ttl from now.
	TokenInsert(ctx context.Context, tx TTx, hash []byte, scope string, ttl time.Duration, now time.Time) error
	// TokenConsume consumes a live, unconsumed token of scope in one
	// conditional statement and reports whether it did.
	TokenConsume(ctx context.Context, tx TTx, hash []byte, scope string, now time.Time) (bool, error)
	// TokenGet reads a token's state after TokenConsume changed nothing,
	// seeing the latest committed row (a locking read where a plain one
	// would read an old snapshot). ok is false when there is no row.
	TokenGet(ctx context.Context, tx TTx, hash []byte, now time.Time) (state TokenState, ok bool, err error)
	// TokenPurge deletes up to limit expired tokens and reports how many.
	TokenPurge(ctx context.Context, tx TTx, limit int, now time.Time) (int64, error)
}

// TokenState is a token row as TokenGet reads it.
type TokenState struct {
	Scope    string
	Consumed bool
	Expired  bool
}
