package conformance

import (
	"errors"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// runUniqueSnapshotTrap: a transaction takes its snapshot, another inserts
// code X and commits, then the first runs the form's OrGet for X. The insert
// hits the duplicate; whether the read of the existing row sees it depends
// on the database, the level and the kind of read. Every outcome must be
// the existing row or an error sqlonce.IsRetryable accepts.
func runUniqueSnapshotTrap[TTx any](t *testing.T, f harness.Factory[TTx], form uniqueForm[TTx]) {
	type outcome string
	const (
		existing outcome = "existing row"
		// The duplicate is reported but the read cannot see the row:
		// ErrStaleRead.
		staleRead outcome = "ErrStaleRead"
		// The server refused instead: 40001, or MariaDB's 1020 for a
		// locking read of a row newer than the snapshot.
		refused outcome = "server refused"
		// PostgreSQL's SERIALIZABLE may report either.
		staleOrRefused outcome = "ErrStaleRead or server refused"
		// MySQL's SERIALIZABLE check is a locking read of the gap: the
		// other writer waits for this transaction and gives up (1205),
		// and this transaction's insert goes first.
		writerBlocked outcome = "writer blocked"
	)
	type want struct{ postgres, mysql outcome }
	for _, tc := range []struct {
		level    string
		iso      harness.Isolation
		snapshot bool
		// checkFirst: the transaction first looks for the code itself,
		// instead of reading another row.
		checkFirst bool
		want       want
	}{
		{"READ COMMITTED", harness.ReadCommitted, true, false, want{existing, existing}},
		{"READ COMMITTED", harness.ReadCommitted, false, false, want{existing, existing}},
		// PostgreSQL reports the duplicate (23505), but the row is not in
		// the snapshot, whichever the read. MySQL's locking read sees it.
		{"REPEATABLE READ", harness.RepeatableRead, true, false, want{staleRead, staleRead}},
		{"REPEATABLE READ", harness.RepeatableRead, false, false, want{staleRead, existing}},
		// MySQL's SERIALIZABLE reads are all locking reads.
		{"SERIALIZABLE", harness.Serializable, true, false, want{staleOrRefused, existing}},
		{"SERIALIZABLE", harness.Serializable, false, false, want{staleOrRefused, existing}},
		// Both transactions check the code is free, then insert it: with
		// both reads on record, PostgreSQL's SSI reports the duplicate as
		// a serialization failure (40001).
		{"SERIALIZABLE", harness.Serializable, false, true, want{refused, writerBlocked}},
		{StrictSnapshot, harness.RepeatableRead, true, false, want{staleRead, staleRead}},
		{StrictSnapshot, harness.RepeatableRead, false, false, want{staleRead, refused}},
	} {
		read := "locking read"
		if tc.snapshot {
			read = "snapshot read"
		}
		if tc.checkFirst {
			read += " after checking the code"
		}
		t.Run(tc.level+"/"+read, func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, 2)
			if tc.level == StrictSnapshot {
				db = strictSnapshot(t, db, 2)
			}
			// The other writer gives up after a second instead of waiting
			// out the server's default for a lock this test holds.
			writer, err := harness.Reopen(t, db, 1, harness.Settings{
				MySQL:    map[string]string{"innodb_lock_wait_timeout": "1"},
				Postgres: map[string]string{"lock_timeout": "1s"},
			})
			must(t, err)
			w := tc.want.postgres
			switch db.Dialect() {
			case "mysql":
				w = tc.want.mysql
			case "sqlite":
				// Every level but Default begins DEFERRED: the insert on a
				// stale snapshot fails with SQLITE_BUSY_SNAPSHOT.
				w = refused
			}
			if form.rows && db.Dialect() == "postgres" && tc.iso != harness.ReadCommitted {
				// ON CONFLICT DO NOTHING refuses a conflict with a row
				// the transaction's snapshot cannot see (40001).
				w = refused
			}
			form.noConflictTarget(t, db)
			ins := newInserter(t, db)
			seed, err := insertOrder(db.Pool(), "u-seed")(ctx)
			must(t, err)
			tx, err := db.Begin(ctx, tc.iso)
			must(t, err)
			defer func() { _ = db.Rollback(ctx, tx) }()
			b := db.Tx(tx)
			if tc.checkFirst {
				n, err := b.OrderCountByCode(ctx, "u-trap")
				must(t, err)
				if n != 0 {
					t.Fatalf("%d orders u-trap", n)
				}
			} else {
				// Take the snapshot with a read of another row: a point
				// read of an existing key, so that MySQL's SERIALIZABLE,
				// which turns it into a locking read, locks that row only.
				_, err = b.OrderGetVersionSnapshot(ctx, seed)
				must(t, err)
			}
			var theirs int64
			var theirErr error
			if tc.checkFirst {
				// The other writer checks too, at the same level.
				theirErr = harness.WithTx(ctx, writer, tc.iso, func(tx TTx) error {
					wb := writer.Tx(tx)
					if _, err := wb.OrderCountByCode(ctx, "u-trap"); err != nil {
						return err
					}
					var err error
					theirs, err = insertOrder(wb, "u-trap")(ctx)
					return err
				})
			} else {
				theirs, theirErr = insertOrder(writer.Pool(), "u-trap")(ctx)
			}
			blocked := theirErr != nil
			if blocked && !sqlonce.IsRetryable(theirErr) {
				t.Fatalf("other writer: %v", theirErr)
			}

			id, res, err := form.orderOrGet(ctx, ins, tx, b, orderOf("u-trap"), tc.snapshot)
			var got outcome
			switch {
			case err == nil && res.FirstRun() && blocked:
				got = writerBlocked
			case err == nil && res.AlreadyDone() && id == theirs:
				got = existing
			case errors.Is(err, sqlonce.ErrStaleRead) && sqlonce.IsRetryable(err):
				got = staleRead
			case err != nil && sqlonce.IsRetryable(err):
				got = refused
			default:
				t.Fatalf("got %d, %v, %v; the other transaction inserted %d", id, res, err, theirs)
			}
			if got != w && (w != staleOrRefused || got == existing) {
				t.Fatalf("got %s (%v), want %s", got, err, w)
			}
			t.Logf("%s: %v", got, errors.Join(err, theirErr))
			if got == writerBlocked {
				must(t, db.Commit(ctx, tx))
				theirs = id
			} else {
				_ = db.Rollback(ctx, tx)
			}

			// The retry, with a fresh snapshot, gets the existing row.
			// (After a blocked writer, this stands for the writer's retry.)
			must(t, harness.WithTx(ctx, db, tc.iso, func(tx TTx) error {
				var err error
				id, res, err = form.orderOrGet(ctx, ins, tx, db.Tx(tx), orderOf("u-trap"), tc.snapshot)
				return err
			}))
			if !res.AlreadyDone() || id != theirs {
				t.Fatalf("retry: %v id %d, want AlreadyDone id %d", res, id, theirs)
			}
			wantOrders(t, ctx, db, "u-trap", 1)
		})
	}
}
