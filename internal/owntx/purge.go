package owntx

import (
	"context"
	"fmt"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// MaxPurgeBatch is the most rows a purge batch may take.
const MaxPurgeBatch = 100000

// CheckPurge returns an error matching sqlonce.ErrInvalidArgument when n,
// a purge's batch or limit (what), is outside 1..MaxPurgeBatch.
func CheckPurge(what string, n int) error {
	if n < 1 || n > MaxPurgeBatch {
		return fmt.Errorf("%w: purge %s %d is outside 1..%d", sqlonce.ErrInvalidArgument, what, n, MaxPurgeBatch)
	}
	return nil
}

// PurgeRounds bounds how many times in a row Purge takes up a batch again
// after Run gave it up: each round is Run's attempts, after a longer pause
// and with half the batch.
const PurgeRounds = 8

// Purge deletes expired rows batch at a time, each batch by runBatch in a
// transaction of its own (with Run's attempts), until a batch comes back short or
// ctx is done, and reports how many it removed.
//
// Purgers running at once all go for the oldest rows. On one server they
// queue on the rows' locks; on a cluster whose every node takes writes
// (Galera) they delete the same rows on different nodes and all but one
// fail at COMMIT with a deadlock error, again and again, faster than Run's
// short pauses can pull them apart. So a batch that Run gives up on a
// conflict is taken up again, after a pause that grows with each round and
// at half the size (the smaller the write set, the fewer rows it shares),
// up to PurgeRounds times in a row; the next batch that goes through is
// back to full size.
func Purge(ctx context.Context, batch int, runBatch func(limit int) (int64, error)) (int64, error) {
	var total int64
	limit, rounds := batch, 0
	for {
		n, err := runBatch(limit)
		if err != nil {
			if !sqlonce.IsRetryable(err) || driver.Classify(err).Has(driver.LockNotAvailable) || rounds == PurgeRounds || !sleep(ctx, time.Millisecond, time.Duration(rounds+1)*10*time.Millisecond) {
				return total, err
			}
			rounds++
			limit = max(limit/2, 1)
			continue
		}
		total += n
		if n < int64(limit) {
			return total, nil
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
		limit, rounds = batch, 0
	}
}
