package inbox

import (
	"context"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/obs"
)

// MaxBatch is the most message ids HandleBatch takes in one call.
const MaxBatch = dedupe.MaxBatch

// HandleBatch applies a batch of messages, each once, in one transaction of
// its own on the driver's database handle:
// it claims every id of msgIDs in a constant number of statements, then
// runs fn once with the transaction and the ids not applied before, in the
// order of msgIDs; fn is not called when every id was. fn applies exactly
// those messages; its writes and the claims commit together. It is
// dedupe.Store.RunBatch in the inbox's own keys. A consumer that pulls 100
// messages at a time thus pays the round trips of one transaction, not of
// 100: through pgx the bare transaction's three when fn sends one
// statement.
//
// It returns one Result per id, in order: FirstRun for the ids fn was
// given, AlreadyDone for the others (and for every repeat of an id within
// msgIDs after its first). Ack every message of the batch when HandleBatch
// returns nil, after it returned. On an error nothing of the batch was
// applied: do not ack; let the broker redeliver the batch. After a
// deadlock or a serialization failure HandleBatch runs the transaction,
// and fn, again itself, a few times. At most MaxBatch ids
// (sqlonce.ErrInvalidArgument otherwise).
func (i *Inbox[TTx]) HandleBatch(ctx context.Context, msgIDs []string, fn func(ctx context.Context, tx TTx, fresh []string) error) (res []sqlonce.Result, err error) {
	op := obs.Start(i.observer, "inbox", "HandleBatch", i.consumer, "")
	defer func() { err = op.EndBatch(ctx, res, err) }()
	return i.store.RunBatch(obs.With(ctx, &op), i.consumer, msgIDs, fn)
}

// HandleBatchTx is HandleBatch in the caller's transaction, for consumers
// that run their own: commit tx, then ack the batch. On an error roll tx
// back and do not ack.
func (i *Inbox[TTx]) HandleBatchTx(ctx context.Context, tx TTx, msgIDs []string, fn func(ctx context.Context, fresh []string) error) (res []sqlonce.Result, err error) {
	op := obs.Start(i.observer, "inbox", "HandleBatchTx", i.consumer, "")
	defer func() { err = op.EndBatch(ctx, res, err) }()
	return i.store.DoBatch(ctx, tx, i.consumer, msgIDs, fn)
}
