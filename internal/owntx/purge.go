package owntx

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
)

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
			if !sqlonce.IsRetryable(err) || driver.Classify(err).Has(driver.LockNotAvailable) || rounds == PurgeRounds || !pauseRound(ctx, rounds+1) {
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

// pauseRound sleeps up to round*10ms, at random; false when ctx ended
// first.
func pauseRound(ctx context.Context, round int) bool {
	t := time.NewTimer(time.Millisecond + rand.N(time.Duration(round)*10*time.Millisecond))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
