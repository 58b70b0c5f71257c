package driver

import "errors"

// ErrShardedLockWait marks a driver's refusal of a claim with a bounded
// lock wait (dedupe's WithNoWait, WithLockWait) that it cannot bound
// where the keys live: through Vitess's vtgate, a sharded keyspace. The
// refusal also matches sqlonce.ErrInvalidArgument and never succeeds on
// a retry. httpidem and grpcidem, whose claims never wait for a request
// with the same key, answer it as not retryable, naming the fix: an
// unsharded keyspace for their keys.
var ErrShardedLockWait = errors.New("sqlonce: a bounded lock wait on a sharded keyspace")
