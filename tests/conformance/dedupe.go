package conformance

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// blockedFor is how long a call that must be waiting on a lock is watched
// before the case concludes that it waits.
const blockedFor = 300 * time.Millisecond

func runDedupe[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("FirstRunThenAlreadyDone", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		store, err := dedupe.New(db.Driver())
		must(t, err)
		req := dedupe.Request{Scope: "payments", Key: "order-1"}
		for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone, sqlonce.AlreadyDone} {
			var res sqlonce.Result
			must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				var err error
				res, err = store.Do(ctx, tx, req, func(ctx context.Context) error {
					return db.Tx(tx).LedgerInsert(ctx, req.Key, 100)
				})
				return err
			}))
			if res.Outcome != want {
				t.Fatalf("call %d: got %v, want %v", i, res.Outcome, want)
			}
			if res.Response != nil {
				t.Fatalf("call %d: Do recorded no response, got %q", i, res.Response)
			}
		}
		ddLedger(t, db, req.Key, 1)
		ddKeys(t, db, 1)
	})

	t.Run("ConcurrentDuplicateWaits", func(t *testing.T) {
		// How the first transaction ends, and whether the duplicate then
		// finds the work done.
		for _, end := range []struct {
			name   string
			fnErr  bool // fn fails: Do undoes the claim, the caller commits anyway
			commit bool
			done   bool
		}{
			{"FirstCommits", false, true, true},
			{"FirstRollsBack", false, false, false},
			{"FirstFailsAndCommitsAnyway", true, true, false},
		} {
			t.Run(end.name, func(t *testing.T) {
				ctx := ctxT(t)
				db := f(t, 4)
				store, err := dedupe.New(db.Driver())
				must(t, err)
				req := dedupe.Request{Scope: "payments", Key: "pay-1"}

				tx1, err := db.Begin(ctx, harness.Default)
				must(t, err)
				defer func() { _ = db.Rollback(ctx, tx1) }()
				holds := make(chan struct{})
				first := make(chan error, 1)
				release := make(chan struct{})
				go func() {
					_, err := store.Do(ctx, tx1, req, func(ctx context.Context) error {
						close(holds)
						<-release // the duplicate arrives while fn runs
						if end.fnErr {
							return errors.New("fn failed")
						}
						return db.Tx(tx1).LedgerInsert(ctx, "pay-1", 1)
					})
					first <- err
				}()
				<-holds

				type outcome struct {
					res sqlonce.Result
					ran bool
					err error
				}
				second := make(chan outcome, 1)
				go func() {
					var o outcome
					o.err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
						var err error
						o.res, err = store.Do(ctx, tx, req, func(ctx context.Context) error {
							o.ran = true
							return db.Tx(tx).LedgerInsert(ctx, "pay-1", 2)
						})
						return err
					})
					second <- o
				}()
				select {
				case o := <-second:
					t.Fatalf("the duplicate returned (%v, %v) while the first transaction held the key", o.res, o.err)
				case <-time.After(blockedFor):
				}
				close(release)
				if err := <-first; (err != nil) != end.fnErr {
					t.Fatalf("first: %v", err)
				}
				select {
				case o := <-second:
					t.Fatalf("the duplicate returned (%v, %v) before the first transaction ended", o.res, o.err)
				case <-time.After(blockedFor):
				}

				if end.commit {
					must(t, db.Commit(ctx, tx1))
				} else {
					must(t, db.Rollback(ctx, tx1))
				}
				var o outcome
				select {
				case o = <-second:
				case <-time.After(30 * time.Second):
					t.Fatal("the duplicate still waits after the first transaction ended")
				}
				must(t, o.err)
				switch {
				case end.done && (!o.res.AlreadyDone() || o.ran):
					t.Fatalf("got %v, fn ran %v; want already done, fn not run", o.res, o.ran)
				case !end.done && (!o.res.FirstRun() || !o.ran):
					t.Fatalf("got %v, fn ran %v; want first run", o.res, o.ran)
				}
				ddLedger(t, db, "pay-1", 1)
				ddKeys(t, db, 1)
			})
		}
	})

	// A transaction holding AlreadyDone has only read the key: another
	// repeat must not wait for it, and two repeats taking keys in opposite
	// orders must not deadlock.
	t.Run("RepeatsDoNotWaitForEachOther", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 4)
		skipOnSQLite(t, db, sqliteTwoWriters)
		store, err := dedupe.New(db.Driver())
		must(t, err)
		k1 := dedupe.Request{Scope: "consumer", Key: "msg-1"}
		k2 := dedupe.Request{Scope: "consumer", Key: "msg-2"}
		for _, req := range []dedupe.Request{k1, k2} {
			res, err := ddDo(ctx, db, store, harness.Default, req, req.Key)
			must(t, err)
			if !res.FirstRun() {
				t.Fatalf("%s: got %v, want first run", req.Key, res)
			}
		}
		tx1, err := db.Begin(ctx, harness.Default)
		must(t, err)
		defer func() { _ = db.Rollback(ctx, tx1) }()
		tx2, err := db.Begin(ctx, harness.Default)
		must(t, err)
		defer func() { _ = db.Rollback(ctx, tx2) }()
		repeat := func(tx TTx, req dedupe.Request) error {
			res, err := store.Do(ctx, tx, req, func(ctx context.Context) error {
				return fmt.Errorf("fn ran for the repeat of %s", req.Key)
			})
			if err == nil && !res.AlreadyDone() {
				err = fmt.Errorf("repeat of %s: got %v, want already done", req.Key, res)
			}
			return err
		}
		must(t, repeat(tx1, k1))
		must(t, repeat(tx2, k2))
		done := make(chan error, 2)
		go func() { done <- repeat(tx1, k2) }()
		go func() { done <- repeat(tx2, k1) }()
		for range 2 {
			select {
			case err := <-done:
				must(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("a repeat waits for another transaction that only read the key")
			}
		}
		must(t, db.Commit(ctx, tx1))
		must(t, db.Commit(ctx, tx2))
		ddLedger(t, db, "msg-1", 1)
		ddLedger(t, db, "msg-2", 1)
	})

	// The claim is visible to the transaction that made it: a second call
	// with the key in the same transaction replays, and a claim undone
	// after fn failed can be made again in the same transaction.
	t.Run("SameTransaction", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		store, err := dedupe.New(db.Driver())
		must(t, err)
		req := dedupe.Request{Scope: "s", Key: "k"}
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			_, err := store.Do(ctx, tx, req, func(ctx context.Context) error { return errors.New("first try fails") })
			if err == nil {
				return errors.New("fn's error was lost")
			}
			for i, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
				res, err := store.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
					return []byte("r"), db.Tx(tx).LedgerInsert(ctx, "k", 1)
				})
				if err != nil {
					return err
				}
				if res.Outcome != want || string(res.Response) != "r" {
					return fmt.Errorf("call %d: got %v %q, want %v with the response", i, res, res.Response, want)
				}
			}
			return nil
		}))
		ddLedger(t, db, "k", 1)
		ddKeys(t, db, 1)
	})

	// A duplicate waiting for the first transaction gives up with its
	// context and leaves nothing behind.
	t.Run("WaitingDuplicateCancelled", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 4)
		skipOnSQLite(t, db, sqliteTwoWriters)
		store, err := dedupe.New(db.Driver())
		must(t, err)
		req := dedupe.Request{Scope: "s", Key: "k"}
		tx1, err := db.Begin(ctx, harness.Default)
		must(t, err)
		defer func() { _ = db.Rollback(ctx, tx1) }()
		_, err = store.Do(ctx, tx1, req, func(ctx context.Context) error {
			return db.Tx(tx1).LedgerInsert(ctx, "k", 1)
		})
		must(t, err)

		tx2, err := db.Begin(ctx, harness.Default)
		must(t, err)
		waitCtx, cancel := context.WithTimeout(ctx, blockedFor)
		defer cancel()
		start := time.Now()
		_, err = store.Do(waitCtx, tx2, req, func(ctx context.Context) error {
			return errors.New("fn ran while the key was held")
		})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("got %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("gave up after %v", d)
		}
		_ = db.Rollback(ctx, tx2)
		must(t, db.Commit(ctx, tx1))
		res, err := ddDo(ctx, db, store, harness.Default, req, "k")
		must(t, err)
		if !res.AlreadyDone() {
			t.Errorf("after the first committed: got %v, want already done", res)
		}
		ddLedger(t, db, "k", 1)
		ddKeys(t, db, 1)
	})

	t.Run("FnError", func(t *testing.T) {
		errBoom := errors.New("boom")

		t.Run("RolledBack", func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, 0)
			store, err := dedupe.New(db.Driver())
			must(t, err)
			req := dedupe.Request{Scope: "s", Key: "k"}
			err = harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				res, err := store.Do(ctx, tx, req, func(ctx context.Context) error {
					if err := db.Tx(tx).LedgerInsert(ctx, "k", 1); err != nil {
						return err
					}
					return errBoom
				})
				if res.Outcome != 0 || res.Response != nil {
					t.Errorf("got %v with the error, want the zero Result", res)
				}
				return err
			})
			if err != errBoom { // unchanged: the very value fn returned
				t.Fatalf("got %v, want fn's error unchanged", err)
			}
			ddKeys(t, db, 0)
			ddLedger(t, db, "k", 0)
		})

		// The claim is undone in tx, so a caller that commits anyway does
		// not leave a key marked done with nothing done.
		t.Run("CommittedAnyway", func(t *testing.T) {
			ctx := ctxT(t)
			db := f(t, 0)
			store, err := dedupe.New(db.Driver())
			must(t, err)
			req := dedupe.Request{Scope: "s", Key: "k"}
			tx, err := db.Begin(ctx, harness.Default)
			must(t, err)
			_, err = store.Do(ctx, tx, req, func(ctx context.Context) error { return errBoom })
			if !errors.Is(err, errBoom) {
				t.Fatalf("got %v, want %v", err, errBoom)
			}
			must(t, db.Commit(ctx, tx))
			ddKeys(t, db, 0)
			res, err := ddDo(ctx, db, store, harness.Default, req, "k")
			must(t, err)
			if !res.FirstRun() {
				t.Fatalf("retry: got %v, want first run", res)
			}
			ddLedger(t, db, "k", 1)
		})

		// fn's own statement fails. PostgreSQL aborts tx, so the undo
		// cannot run there and the commit turns into a rollback; MySQL
		// rolls back only the statement and the undo runs. Either way no
		// key is left and the retry runs.
		t.Run("FailedStatement", func(t *testing.T) {
			for _, commit := range []bool{false, true} {
				t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
					ctx := ctxT(t)
					db := f(t, 0)
					store, err := dedupe.New(db.Driver())
					must(t, err)
					_, err = db.Pool().OrderInsert(ctx, "A-1", "alice", 10)
					must(t, err)
					req := dedupe.Request{Scope: "orders", Key: "create-A-1"}
					tx, err := db.Begin(ctx, harness.Default)
					must(t, err)
					var fnErr error
					_, err = store.Do(ctx, tx, req, func(ctx context.Context) error {
						if err := db.Tx(tx).LedgerInsert(ctx, "A-1", 10); err != nil {
							return err
						}
						_, fnErr = db.Tx(tx).OrderInsert(ctx, "A-1", "bob", 20)
						return fnErr
					})
					if fnErr == nil || err != fnErr {
						t.Fatalf("got %v, want fn's error %v unchanged", err, fnErr)
					}
					if commit {
						_ = db.Commit(ctx, tx) // fails on PostgreSQL: tx is aborted
					} else {
						must(t, db.Rollback(ctx, tx))
					}
					ddKeys(t, db, 0)
					res, err := ddDo(ctx, db, store, harness.Default, req, "A-1-retry")
					must(t, err)
					if !res.FirstRun() {
						t.Fatalf("retry: got %v, want first run", res)
					}
					ddKeys(t, db, 1)
				})
			}
		})

		t.Run("DeadlockInFn", func(t *testing.T) { ddDeadlockInFn(t, f) })
	})

	t.Run("KeysCompareByteForByte", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		store, err := dedupe.New(db.Driver())
		must(t, err)
		distinct := []string{
			"ABC", "abc", "Abc",
			"a", "a ", " a", "a\t",
			"\u00e9",  // é, NFC
			"e\u0301", // é, NFD
			"\u212b",  // Å, ANGSTROM SIGN
			"\u00c5",  // Å, LATIN CAPITAL LETTER A WITH RING ABOVE
			"ß", "ss",
			strings.Repeat("k", sqlonce.MaxKeyLen),
			strings.Repeat("k", sqlonce.MaxKeyLen-1) + "K",
			strings.Repeat("é", sqlonce.MaxKeyLen/2) + "x", // 255 bytes, 128 characters
		}
		var reqs []dedupe.Request
		for _, k := range distinct {
			reqs = append(reqs, dedupe.Request{Scope: "keys", Key: k})
		}
		for _, s := range distinct {
			reqs = append(reqs, dedupe.Request{Scope: s, Key: "same-key"})
		}
		for pass, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
			for i, req := range reqs {
				res, err := ddDo(ctx, db, store, harness.Default, req, fmt.Sprintf("ref-%d", i))
				must(t, err)
				if res.Outcome != want {
					t.Errorf("pass %d, scope %q key %q: got %v, want %v", pass, req.Scope, req.Key, res.Outcome, want)
				}
			}
		}
		ddKeys(t, db, int64(len(reqs)))
		per, err := db.Pool().LedgerCountPerRef(ctx)
		must(t, err)
		for i, req := range reqs {
			if n := per[fmt.Sprintf("ref-%d", i)]; n != 1 {
				t.Errorf("scope %q key %q: %d ledger rows, want 1", req.Scope, req.Key, n)
			}
			if _, ok, err := db.Key(ctx, req.Scope, req.Key); err != nil || !ok {
				t.Errorf("scope %q key %q: row not stored under its exact bytes (%v)", req.Scope, req.Key, err)
			}
		}

		long := strings.Repeat("k", sqlonce.MaxKeyLen+1)
		longUTF8 := strings.Repeat("é", sqlonce.MaxKeyLen/2+1) // 256 bytes, 128 characters
		for _, req := range []dedupe.Request{
			{Scope: "keys", Key: long},
			{Scope: "keys", Key: longUTF8},
			{Scope: long, Key: "k"},
			{Scope: longUTF8, Key: "k"},
		} {
			err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				_, err := store.Do(ctx, tx, req, func(ctx context.Context) error {
					return errors.New("fn ran for an invalid key")
				})
				return err
			})
			if !errors.Is(err, sqlonce.ErrInvalidKey) {
				t.Errorf("%d-byte scope, %d-byte key: got %v, want ErrInvalidKey", len(req.Scope), len(req.Key), err)
			}
		}
		ddKeys(t, db, int64(len(reqs)))
	})

	t.Run("Isolation", func(t *testing.T) {
		for _, iso := range harness.Isolations {
			t.Run(string(iso), func(t *testing.T) { ddIsolation(t, f, iso) })
		}
	})

	t.Run("RaceSameKey", func(t *testing.T) {
		for _, iso := range harness.Isolations {
			t.Run(string(iso), func(t *testing.T) {
				ctx := ctxT(t)
				db := f(t, Racers+4)
				store, err := dedupe.New(db.Driver())
				must(t, err)
				const keys = 4
				var c counter
				errs := race(Racers, func(i int) error {
					key := fmt.Sprintf("k-%d", i%keys)
					var last sqlonce.Result
					_, err := retryTx(ctx, db, iso, func(tx TTx) error {
						var err error
						last, err = store.Do(ctx, tx, dedupe.Request{Scope: "race", Key: key}, func(ctx context.Context) error {
							return db.Tx(tx).LedgerInsert(ctx, key, 1)
						})
						return err
					})
					if err == nil {
						c.add(last) // the attempt that committed
					}
					return err
				})
				noErrors(t, errs)
				per, err := db.Pool().LedgerCountPerRef(ctx)
				must(t, err)
				for k := range keys {
					key := fmt.Sprintf("k-%d", k)
					if per[key] != 1 {
						t.Errorf("%s: %d ledger rows, want exactly 1", key, per[key])
					}
				}
				if c.first.Load() != keys || c.first.Load()+c.done.Load() != int64(Racers) {
					t.Errorf("%s; want first=%d done=%d", &c, keys, Racers-keys)
				}
				ddKeys(t, db, keys)
				t.Logf("%s: %s", iso, &c)
			})
		}
	})

	t.Run("ScopesAreIndependent", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		store, err := dedupe.New(db.Driver())
		must(t, err)
		// Each caller numbers its own requests: scope is the authenticated
		// caller, key its serial number. Both callers send serial 0001.
		callers := []string{"caller-a", "caller-b"}
		for pass := range 2 {
			for _, caller := range callers {
				req := dedupe.Request{Scope: caller, Key: "0001"}
				var res sqlonce.Result
				must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
					var err error
					res, err = store.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
						return []byte("receipt for " + caller), db.Tx(tx).LedgerInsert(ctx, caller, 1)
					})
					return err
				}))
				want := sqlonce.FirstRun
				if pass > 0 {
					want = sqlonce.AlreadyDone
				}
				if res.Outcome != want || string(res.Response) != "receipt for "+caller {
					t.Errorf("pass %d, %s: got %v %q, want %v with its own receipt", pass, caller, res, res.Response, want)
				}
			}
		}
		for _, caller := range callers {
			ddLedger(t, db, caller, 1)
		}
		// A scope and key that concatenate to the same text are still two keys.
		for i, req := range []dedupe.Request{{Scope: "a", Key: "b:c"}, {Scope: "a:b", Key: "c"}} {
			res, err := ddDo(ctx, db, store, harness.Default, req, fmt.Sprintf("concat-%d", i))
			must(t, err)
			if !res.FirstRun() {
				t.Errorf("%q/%q: got %v, want first run", req.Scope, req.Key, res)
			}
		}
		ddKeys(t, db, 4)
	})

	t.Run("InvalidKey", func(t *testing.T) {
		ctx := ctxT(t)
		db := f(t, 0)
		store, err := dedupe.New(db.Driver())
		must(t, err)
		for _, req := range []dedupe.Request{
			{Scope: "s", Key: ""},
			{Scope: "", Key: "k"},
			{Scope: "s", Key: string(make([]byte, sqlonce.MaxKeyLen+1))},
			{Scope: "s", Key: "\xff"},
			{Scope: "\xc3", Key: "k"},
			{Scope: "s", Key: "a\x00b"},
			{Scope: "s\x00", Key: "k"},
		} {
			err := harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
				_, err := store.Do(ctx, tx, req, func(ctx context.Context) error { return nil })
				return err
			})
			if !errors.Is(err, sqlonce.ErrInvalidKey) {
				t.Errorf("%q/%q: got %v, want ErrInvalidKey", req.Scope, req.Key, err)
			}
		}
		ddKeys(t, db, 0)
	})

	t.Run("InvalidArguments", func(t *testing.T) { ddInvalidArguments(t, f) })
}

// ddIsolation checks one isolation level: the outcome is right or an error
// IsRetryable accepts, never a second run, and the transaction handed back
// with AlreadyDone or ErrKeyReuse stays usable for the caller's own writes.
func ddIsolation[TTx any](t *testing.T, f harness.Factory[TTx], iso harness.Isolation) {
	ctx := ctxT(t)
	db := f(t, 4)
	store, err := dedupe.New(db.Driver())
	must(t, err)
	fp := dedupe.Fingerprint([]byte("pay 10"))
	req := dedupe.Request{Scope: "iso", Key: "k", Fingerprint: fp}
	runs := 0
	do := func(tx TTx, req dedupe.Request) (sqlonce.Result, error) {
		return store.Do(ctx, tx, req, func(ctx context.Context) error {
			runs++
			return db.Tx(tx).LedgerInsert(ctx, "k", 10)
		})
	}

	_, err = retryTx(ctx, db, iso, func(tx TTx) error {
		res, err := do(tx, req)
		if err == nil && !res.FirstRun() {
			return fmt.Errorf("got %v, want first run", res)
		}
		return err
	})
	must(t, err)

	// The repeat: AlreadyDone, then the caller's own write in the same tx.
	_, err = retryTx(ctx, db, iso, func(tx TTx) error {
		res, err := do(tx, req)
		if err != nil {
			return err
		}
		if !res.AlreadyDone() {
			return fmt.Errorf("repeat: got %v, want already done", res)
		}
		return db.Tx(tx).LedgerInsert(ctx, "after-done", 1)
	})
	must(t, err)

	// A different request under the same key: ErrKeyReuse, tx still usable.
	_, err = retryTx(ctx, db, iso, func(tx TTx) error {
		other := req
		other.Fingerprint = dedupe.Fingerprint([]byte("pay 20"))
		_, err := do(tx, other)
		if !errors.Is(err, sqlonce.ErrKeyReuse) {
			return fmt.Errorf("reuse: got %v, want ErrKeyReuse", err)
		}
		return db.Tx(tx).LedgerInsert(ctx, "after-reuse", 1)
	})
	must(t, err)

	// The key committed after this transaction's snapshot was taken: the
	// claim must not trust the snapshot. PostgreSQL reports 40001 under
	// REPEATABLE READ and SERIALIZABLE; the retry sees the key.
	late := dedupe.Request{Scope: "iso", Key: "late"}
	attempts := 0
	retries, err := retryTx(ctx, db, iso, func(tx TTx) error {
		attempts++
		// The first read fixes the snapshot. It reads a table the other
		// transaction does not write: under SERIALIZABLE MySQL's reads lock.
		if _, err := db.Tx(tx).OrderCount(ctx); err != nil {
			return err
		}
		if attempts == 1 {
			res, err := ddDo(ctx, db, store, iso, late, "late")
			if err != nil {
				return fmt.Errorf("the other transaction: %v", err) // not to be retried
			}
			if !res.FirstRun() {
				return fmt.Errorf("the other transaction: got %v, want first run", res)
			}
		}
		res, err := store.Do(ctx, tx, late, func(ctx context.Context) error {
			return db.Tx(tx).LedgerInsert(ctx, "late", 1)
		})
		if err != nil {
			return err
		}
		if !res.AlreadyDone() {
			return fmt.Errorf("after a commit the snapshot cannot see: got %v, want already done", res)
		}
		return db.Tx(tx).LedgerInsert(ctx, "after-late", 1)
	})
	must(t, err)
	t.Logf("%s: the late key took %d retries", iso, retries)

	if runs != 1 {
		t.Errorf("fn ran %d times, want 1", runs)
	}
	for ref, want := range map[string]int64{"k": 1, "late": 1, "after-done": 1, "after-reuse": 1, "after-late": 1} {
		ddLedger(t, db, ref, want)
	}
}

// ddDeadlockInFn: fn's transaction is chosen as a deadlock victim while a
// duplicate waits for its key. The server has rolled the transaction back,
// so the duplicate takes the key; nothing may then touch the key on the
// victim's connection. (After a deadlock MySQL/MariaDB run the next
// statement outside any transaction: a DELETE undoing the claim there
// would wait for the duplicate and then delete its committed key.)
func ddDeadlockInFn[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	db := f(t, 6)
	skipOnSQLite(t, db, sqliteNoRowLocks)
	store, err := dedupe.New(db.Driver())
	must(t, err)
	id1, err := db.Pool().OrderInsert(ctx, "D-1", "dora", 1)
	must(t, err)
	id2, err := db.Pool().OrderInsert(ctx, "D-2", "dan", 1)
	must(t, err)
	req := dedupe.Request{Scope: "deadlock", Key: "k"}

	// other locks order 2, the victim order 1, then each wants the other's:
	// other first, the victim closing the cycle. other writes many rows
	// first: MySQL rolls back the lighter transaction. PostgreSQL aborts
	// the waiter whose deadlock check (deadlock_timeout after it began to
	// wait) finds the cycle: other's is put off for a minute, so that the
	// victim's finds it however late a loaded machine runs its statement.
	other, err := db.Begin(ctx, harness.Default)
	must(t, err)
	defer func() { _ = db.Rollback(ctx, other) }()
	if db.Dialect() == "postgres" {
		must(t, db.TxExec(ctx, other, "SET LOCAL deadlock_timeout = '60s'"))
	}
	otherID, err := db.ConnID(ctx, other)
	must(t, err)
	for i := range 50 {
		must(t, db.Tx(other).LedgerInsert(ctx, fmt.Sprintf("weight-%d", i), 1))
	}

	_, err = db.Tx(other).OrderAddAmount(ctx, id2, 1, 1)
	must(t, err)

	victim, err := db.Begin(ctx, harness.Default)
	must(t, err)
	defer func() { _ = db.Rollback(ctx, victim) }()
	holdsOrder1 := make(chan struct{})
	otherWaits := make(chan struct{})
	dupClaimed := make(chan struct{})
	victimDone := make(chan error, 1)
	go func() {
		_, err := store.Do(ctx, victim, req, func(ctx context.Context) error {
			if _, err := db.Tx(victim).OrderAddAmount(ctx, id1, 1, 1); err != nil {
				return err
			}
			close(holdsOrder1)
			select {
			case <-otherWaits:
			case <-ctx.Done():
				return ctx.Err()
			}
			_, err := db.Tx(victim).OrderAddAmount(ctx, id2, 1, 1) // closes the cycle
			if err == nil {
				return errors.New("no deadlock")
			}
			// Let the duplicate take the key first where the server has
			// already released it (MySQL); PostgreSQL holds it until the
			// rollback.
			select {
			case <-dupClaimed:
			case <-time.After(blockedFor):
			}
			return err
		})
		victimDone <- err
	}()
	select {
	case <-holdsOrder1:
	case err := <-victimDone:
		t.Fatalf("victim: %v", err)
	}

	dupDone := make(chan error, 1)
	go func() {
		dupDone <- harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			res, err := store.Do(ctx, tx, req, func(ctx context.Context) error {
				close(dupClaimed)
				return db.Tx(tx).LedgerInsert(ctx, "k", 1)
			})
			if err == nil && !res.FirstRun() {
				err = fmt.Errorf("duplicate: got %v, want first run after the victim's rollback", res)
			}
			return err
		})
	}()
	otherDone := make(chan error, 1)
	go func() {
		_, err := db.Tx(other).OrderAddAmount(ctx, id1, 1, 1)
		otherDone <- err
	}()
	must(t, harness.WaitLockWait(ctx, db, otherID))
	close(otherWaits)

	select {
	case err = <-victimDone:
	case <-time.After(30 * time.Second):
		t.Fatal("Do still runs after its transaction was chosen as deadlock victim")
	}
	if !sqlonce.IsRetryable(err) {
		t.Fatalf("victim: got %v, want a deadlock IsRetryable accepts", err)
	}
	must(t, db.Rollback(ctx, victim))
	must(t, <-otherDone)
	must(t, db.Rollback(ctx, other))
	must(t, <-dupDone)

	// The victim's caller retries, as IsRetryable tells it to.
	res, err := ddDo(ctx, db, store, harness.Default, req, "k")
	must(t, err)
	if !res.AlreadyDone() {
		t.Errorf("the victim's retry: got %v, want already done", res)
	}
	ddLedger(t, db, "k", 1)
	ddKeys(t, db, 1)
}

func ddInvalidArguments[TTx any](t *testing.T, f harness.Factory[TTx]) {
	ctx := ctxT(t)
	db := f(t, 0)

	if _, err := dedupe.New[TTx](nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Errorf("New(nil): got %v, want ErrInvalidArgument", err)
	}
	// A nil *pgxdriver.Driver or *mysqldriver.Driver in the interface.
	typedNil := reflect.Zero(reflect.TypeOf(db.Driver())).Interface().(sqlonce.Driver[TTx])
	if _, err := dedupe.New(typedNil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Errorf("New(%T(nil)): got %v, want ErrInvalidArgument", typedNil, err)
	}
	for name, opt := range map[string]dedupe.Option{
		"WithTTL(-1s)":                 dedupe.WithTTL(-time.Second),
		"WithMaxResponseSize(-1)":      dedupe.WithMaxResponseSize(-1),
		"WithMaxResponseSize(max + 1)": dedupe.WithMaxResponseSize(dedupe.MaxResponseSize + 1),
		"WithLockWait(-1s)":            dedupe.WithLockWait(-time.Second),
		"WithFavor(unknown)":           dedupe.WithFavor(dedupe.FavorRepeats + 1),
		"WithFavor(-1)":                dedupe.WithFavor(-1),
		"nil option":                   nil,
	} {
		s, err := dedupe.New(db.Driver(), opt)
		if !errors.Is(err, sqlonce.ErrInvalidArgument) || s != nil {
			t.Errorf("%s: got %v, %v; want no store and ErrInvalidArgument", name, s, err)
		}
	}

	store, err := dedupe.New(db.Driver())
	must(t, err)
	req := dedupe.Request{Scope: "s", Key: "k"}
	calls := map[string]func(tx TTx) (sqlonce.Result, error){
		"Do(nil fn)": func(tx TTx) (sqlonce.Result, error) { return store.Do(ctx, tx, req, nil) },
		"DoResponse(nil fn)": func(tx TTx) (sqlonce.Result, error) {
			return store.DoResponse(ctx, tx, req, nil)
		},
		"DoJSON(nil fn)": func(tx TTx) (sqlonce.Result, error) {
			_, res, err := dedupe.DoJSON[int](ctx, store, tx, req, nil)
			return res, err
		},
		"negative TTL": func(tx TTx) (sqlonce.Result, error) {
			bad := req
			bad.TTL = -time.Second
			return store.Do(ctx, tx, bad, func(ctx context.Context) error {
				return db.Tx(tx).LedgerInsert(ctx, "k", 1)
			})
		},
	}
	for name, call := range calls {
		// The error is checked inside a transaction that then commits: no
		// SQL ran, so tx is usable and nothing was written.
		must(t, harness.WithTx(ctx, db, harness.Default, func(tx TTx) error {
			res, err := call(tx)
			if !errors.Is(err, sqlonce.ErrInvalidArgument) || res.Outcome != 0 {
				t.Errorf("%s: got %v, %v; want ErrInvalidArgument", name, res, err)
			}
			return db.Tx(tx).LedgerInsert(ctx, "usable", 1)
		}))
	}
	ddKeys(t, db, 0)
	ddLedger(t, db, "k", 0)
	ddLedger(t, db, "usable", int64(len(calls)))
}

// ddDo runs store.Do for req in a transaction of its own at iso, fn
// writing one ledger row under ref.
func ddDo[TTx any](ctx context.Context, db harness.DB[TTx], store *dedupe.Store[TTx], iso harness.Isolation, req dedupe.Request, ref string) (sqlonce.Result, error) {
	var res sqlonce.Result
	err := harness.WithTx(ctx, db, iso, func(tx TTx) error {
		var err error
		res, err = store.Do(ctx, tx, req, func(ctx context.Context) error {
			return db.Tx(tx).LedgerInsert(ctx, ref, 1)
		})
		return err
	})
	return res, err
}

// ddLedger asserts the number of ledger rows under ref.
func ddLedger[TTx any](t testing.TB, db harness.DB[TTx], ref string, want int64) {
	t.Helper()
	n, err := db.Pool().LedgerCountByRef(context.Background(), ref)
	must(t, err)
	if n != want {
		t.Errorf("ledger rows for %q = %d, want %d", ref, n, want)
	}
}

// ddKeys asserts the number of rows in sqlonce_keys.
func ddKeys[TTx any](t testing.TB, db harness.DB[TTx], want int64) {
	t.Helper()
	n, err := db.KeyCount(context.Background())
	must(t, err)
	if n != want {
		t.Errorf("sqlonce_keys has %d rows, want %d", n, want)
	}
}
