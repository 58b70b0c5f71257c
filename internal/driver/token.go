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
	// conditional statement and reports whether it did. Where the same
	// statement can also tell why it changed nothing, without a lock or a
	// write the conditional statement alone would not take, it does
	// (TokenConsumed.Read), and a repeat needs no TokenGet after it.
	TokenConsume(ctx context.Context, tx TTx, hash []byte, scope string, now time.Time) (TokenConsumed, error)
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

// TokenConsumed is TokenConsume's answer.
type TokenConsumed struct {
	// Consumed: the statement consumed the token.
	Consumed bool
	// Read: the statement did not consume the token and read it as well:
	// Found tells whether a row exists, State is the row. What it read is
	// the row the statement judged, which on PostgreSQL under READ
	// COMMITTED is the statement's snapshot: it misses a consumption the
	// statement waited for, and shows the token live, unconsumed and of
	// the scope. The caller reads such a state again with TokenGet, and
	// reads with TokenGet whenever Read is false.
	Read  bool
	Found bool
	State TokenState
}
