package conformance

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// keysRowsRead counts, in the current transaction, the rows of
// sqlonce_keys that scans have read: heap rows fetched through an index
// and rows read sequentially (pg_stat_xact_user_tables).
const keysRowsRead = `SELECT coalesce(sum(idx_tup_fetch + seq_tup_read), 0)::bigint
FROM pg_stat_xact_user_tables WHERE relname = 'sqlonce_keys' AND schemaname = current_schema()`

// The batch claim on PostgreSQL reads the keys of the batch by their
// primary key, whatever the planner believes of the scope's size. A young
// table's statistics say a scope holds a row or two; the claim's read of
// existing keys, written as a join or "= ANY", then walked every key of
// the scope, a cost growing with the scope (23 ms for 100 keys beside
// 20,000, against 0.8 ms). Counted in rows read, not timed: the claim of
// 100 keys, half of them existing, beside 5,000 others reads about 100
// (the 50 existing, and the conflict checks of the insert).
func TestBatchClaimReadsByKeyPostgres(t *testing.T) {
	batchClaimReadsByKey(t, harness.Postgres, func(ctx context.Context, tx pgx.Tx) (n int64, err error) {
		return n, tx.QueryRow(ctx, keysRowsRead).Scan(&n)
	})
}

func TestBatchClaimReadsByKeyPostgresSQL(t *testing.T) {
	batchClaimReadsByKey(t, harness.PostgresSQL, func(ctx context.Context, tx *sql.Tx) (n int64, err error) {
		return n, tx.QueryRowContext(ctx, keysRowsRead).Scan(&n)
	})
}

// MariaDB reads the batch's keys by their primary key too: its handler
// reads (every table the claim touches, the JSON array walked with a table
// of numbers among them) stay near the batch's size.
func TestBatchClaimReadsByKeyMySQL(t *testing.T) {
	batchClaimReadsByKey(t, harness.MySQL, func(ctx context.Context, tx *sql.Tx) (n int64, err error) {
		return n, tx.QueryRowContext(ctx, `SELECT CAST(SUM(VARIABLE_VALUE) AS SIGNED) FROM information_schema.SESSION_STATUS
WHERE VARIABLE_NAME IN ('HANDLER_READ_KEY', 'HANDLER_READ_NEXT', 'HANDLER_READ_PREV', 'HANDLER_READ_RND', 'HANDLER_READ_RND_NEXT')`).Scan(&n)
	})
}

func batchClaimReadsByKey[TTx any](t *testing.T, f harness.Factory[TTx], rowsRead func(context.Context, TTx) (int64, error)) {
	ctx := ctxT(t)
	db := f(t, 0)
	s, err := dedupe.New(db.Driver())
	must(t, err)
	const scope, grown, batch = "sc", 5000, 100
	nop := func(context.Context, []string) error { return nil }
	for b := range grown / 1000 {
		ids := make([]string, 1000)
		for i := range ids {
			ids[i] = fmt.Sprintf("old-%d-%d", b, i)
		}
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			_, err := s.DoBatch(ctx, tx, scope, ids, nop)
			return err
		}))
	}
	ids := make([]string, batch)
	for i := range ids {
		if i%2 == 0 {
			ids[i] = fmt.Sprintf("old-0-%d", i)
		} else {
			ids[i] = fmt.Sprintf("new-%d", i)
		}
	}
	var before, after int64
	err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
		var err error
		if before, err = rowsRead(ctx, tx); err != nil {
			return err
		}
		res, err := s.DoBatch(ctx, tx, scope, ids, nop)
		if err != nil {
			return err
		}
		wantOutcomes(t, "batch", res[:4], "DFDF")
		after, err = rowsRead(ctx, tx)
		return err
	})
	must(t, err)
	read := after - before
	t.Logf("the claim of %d keys (%d existing) beside %d keys of the scope read %d rows", batch, batch/2, grown, read)
	// Walking the scope reads at least its 5,000 keys; reading the batch's
	// reads about its 100 on PostgreSQL, and under 500 on MariaDB, whose
	// count takes in every table the claim and the count itself touch.
	if read >= grown/5 {
		t.Fatalf("the batch claim read %d rows for a batch of %d keys: it walks the scope (%d keys) instead of reading the batch's keys", read, batch, grown)
	}
}

// MariaDB walks the batch's JSON array of keys once, with JSON_TABLE: the
// claim's INSERT and its read each build one small table of the keys.
// Walked with a table of the numbers 0 to 999 and JSON_EXTRACT, the array
// was parsed again for every key and each statement built eight derived
// tables: a claim of 100 keys took 5 ms of the server's time instead of
// 0.6 ms. Counted in temporary tables, not timed.
func TestBatchClaimWalksKeysOnceMySQL(t *testing.T) {
	ctx := ctxT(t)
	db := harness.MySQL(t, 0)
	s, err := dedupe.New(db.Driver())
	must(t, err)
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("k-%d", i)
	}
	const tmpTables = `SELECT CAST(VARIABLE_VALUE AS SIGNED) FROM information_schema.SESSION_STATUS WHERE VARIABLE_NAME = 'CREATED_TMP_TABLES'`
	var before, after int64
	err = harness.WithTx(ctx, db, harness.Default, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, tmpTables).Scan(&before); err != nil {
			return err
		}
		if _, err := s.DoBatch(ctx, tx, "sc", ids, func(context.Context, []string) error { return nil }); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, tmpTables).Scan(&after)
	})
	must(t, err)
	// The count's own statement builds one each time it runs.
	made := after - before - 1
	t.Logf("the claim of %d keys built %d temporary tables", len(ids), made)
	if made > 2 {
		t.Fatalf("the batch claim built %d temporary tables for its two statements: it walks the key array with a table of numbers, not JSON_TABLE", made)
	}
}

// A batch whose keys all exist is a replay on MariaDB whatever the
// client counts as affected: with clientFoundRows=true the INSERT's no-op
// updates of the existing rows count as many rows as the batch has keys,
// the count a batch of new keys gives, and the claim must still read the
// rows before it answers (a batch of new keys skips that read).
func TestBatchClaimFoundRowsMySQL(t *testing.T) {
	ctx := ctxT(t)
	base := harness.MySQL(t, 0)
	for _, found := range []string{"false", "true"} {
		t.Run("clientFoundRows="+found, func(t *testing.T) {
			db, err := harness.Reopen(t, base, 2, harness.Settings{MySQL: map[string]string{"clientFoundRows": found}})
			must(t, err)
			s, err := dedupe.New(db.Driver())
			must(t, err)
			scope := "found-" + found
			ids := []string{"a", "b", "c"}
			runs := 0
			batch := func(ids []string) []sqlonce.Outcome {
				var got []sqlonce.Outcome
				err := harness.WithTx(ctx, db, harness.Default, func(tx *sql.Tx) error {
					res, err := s.DoBatch(ctx, tx, scope, ids, func(_ context.Context, fresh []string) error {
						runs += len(fresh)
						return nil
					})
					for _, r := range res {
						got = append(got, r.Outcome)
					}
					return err
				})
				must(t, err)
				return got
			}
			first := batch(ids)
			again := batch(ids)
			mixed := batch([]string{"a", "d"})
			t.Logf("first %v, again %v, mixed %v, fn ran for %d keys", first, again, mixed, runs)
			if runs != 4 {
				t.Fatalf("fn ran for %d keys over the three batches, want 4 (a, b, c, then d)", runs)
			}
			for _, o := range again {
				if o != sqlonce.AlreadyDone {
					t.Fatalf("the repeated batch answered %v, want already done for every key", again)
				}
			}
		})
	}
}
