package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/optimistic"
	"github.com/sqlonce/sqlonce/statemachine"
	"github.com/sqlonce/sqlonce/unique"
)

// outcome is what the server answered a request.
type outcome int

const (
	// applied: this attempt did the business write and committed it.
	applied outcome = iota + 1
	// duplicate: the technique took the request for a repeat and did
	// nothing; the client stops retrying.
	duplicate
)

var (
	// errCrash is returned by a hook to make the attempt die before its
	// commit.
	errCrash = errors.New("injected crash")
	// errCrashed is what the client sees of a server that died mid-request
	// (a reset connection); it retries.
	errCrashed = errors.New("server died before the commit")
)

// hook runs in an attempt after the technique's check and the business
// write, just before the commit: the point where a crash hurts most and
// where a duplicate finds the first request in flight. nil in the timed
// runs.
type hook func(ctx context.Context) error

// request is one logical client request, retried under the same identity.
type request struct {
	// seq is the request's number within its run.
	seq int
	// key is the idempotency key, the ledger ref and the order code.
	key string
	// order is the pre-created order the request updates (update variants).
	order int64
	// token is the one-time token fetched before the first attempt
	// (Redis token technique).
	token string
}

// Kinds of technique.
const (
	KindBaseline    = "baseline"
	KindReference   = "reference"
	KindSqlonce     = "sqlonce"
	KindAlternative = "alternative"
)

type variant struct {
	ID, Name, Kind string
	// Write says what the business write is.
	Write string
	// orders: each request updates an order created beforehand.
	orders bool
	// bare is the id of the unprotected technique doing the same business
	// write ("" for the baseline's own write).
	bare string
	// before runs once per request, before its first attempt, and is
	// timed with it (fetching a one-time token). May be nil.
	before func(ctx context.Context, r *request) error
	// attempt is one try of the request by the server.
	attempt func(ctx context.Context, r *request, h hook) (outcome, error)
	// replays marks a technique whose timed requests repeat requests
	// answered before the rounds (prepare records them): each must be
	// answered as a duplicate, with the first answer. It has no fault
	// phase: a repeat writes nothing to lose or double.
	replays bool
	// prepare runs once before the warm-up (replays: records the keys the
	// timed requests repeat). May be nil.
	prepare func(ctx context.Context) error
	// effects reads from the database how many times each request's
	// business write is there.
	effects func(ctx context.Context, prefix string, reqs []*request) ([]int64, error)
	// db, when set, is the only database ("postgres") the technique runs
	// on: elsewhere the database has no statement for it.
	db string
}

// response is what the first run answers and a replay must return byte for
// byte: a typical JSON API answer of about 100 bytes.
func response(key string) []byte {
	return fmt.Appendf(nil, `{"payment":%q,"status":"accepted","amount":{"value":"1.00","currency":"EUR"}}`, key)
}

const (
	amount = 100
	scope  = "bench"
)

// payment is the dedupe request of the techniques that check a request
// fingerprint: the key and a fingerprint of the request's method, path
// and body.
func payment(key string) dedupe.Request {
	return dedupe.Request{Scope: scope, Key: key, Fingerprint: dedupe.Fingerprint([]byte("POST /payments"), []byte(key), []byte(`{"amount":100}`))}
}

// replayed is the error of a replay that did not return the first run's
// response byte for byte.
func replayed(res sqlonce.Result, want []byte) error {
	if res.AlreadyDone() && !bytes.Equal(res.Response, want) {
		return fmt.Errorf("replayed response %q, recorded %q", res.Response, want)
	}
	return nil
}

// inTx runs fn in a transaction and commits; when fn did the write and h
// asks for a crash, the transaction's connection is killed instead.
func inTx[TTx any](ctx context.Context, b backend[TTx], h hook, fn func(tx TTx) (outcome, error)) (outcome, error) {
	tx, err := b.begin(ctx)
	if err != nil {
		return 0, err
	}
	out, err := fn(tx)
	if err != nil {
		_ = b.rollback(ctx, tx)
		return 0, err
	}
	if out == applied && h != nil {
		if err := h(ctx); err != nil {
			if errors.Is(err, errCrash) {
				b.kill(ctx, tx)
				// Releases the pool's handle; the server has rolled back
				// (or does so now, if the kill failed).
				_ = b.rollback(ctx, tx)
				return 0, errCrashed
			}
			_ = b.rollback(ctx, tx)
			return 0, err
		}
	}
	if err := b.commit(ctx, tx); err != nil {
		return 0, err
	}
	return out, nil
}

func fromResult(firstRun bool) outcome {
	if firstRun {
		return applied
	}
	return duplicate
}

// getCompareDelete is the Lua script the one-time token technique runs:
// the token is consumed only if it still holds the expected value, in one
// atomic step on the Redis server.
var getCompareDelete = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// tokenOwner is the value a token is issued with (the user it was issued
// to); the script compares it.
const tokenOwner = "user-1"

func variants[TTx any](b backend[TTx], rdb *redis.Client, redisPrefix string, cfg Config) ([]*variant, error) {
	store, err := dedupe.New(b.driver())
	if err != nil {
		return nil, err
	}
	firstRuns, err := dedupe.New(b.driver(), dedupe.WithFavor(dedupe.FavorFirstRuns))
	if err != nil {
		return nil, err
	}
	repeats, err := dedupe.New(b.driver(), dedupe.WithFavor(dedupe.FavorRepeats))
	if err != nil {
		return nil, err
	}
	inserter, err := unique.New(b.driver())
	if err != nil {
		return nil, err
	}
	machine, err := statemachine.New(statemachine.Edge("created", "paid"), statemachine.Edge("paid", "shipped"))
	if err != nil {
		return nil, err
	}

	ledger := func(ctx context.Context, prefix string, reqs []*request) ([]int64, error) {
		m, err := b.ledgerRows(ctx, prefix+"-")
		if err != nil {
			return nil, err
		}
		n := make([]int64, len(reqs))
		for i, r := range reqs {
			n[i] = m[r.key]
		}
		return n, nil
	}
	amounts := func(ctx context.Context, _ string, reqs []*request) ([]int64, error) {
		m, err := b.orders(ctx, orderIDs(reqs))
		if err != nil {
			return nil, err
		}
		n := make([]int64, len(reqs))
		for i, r := range reqs {
			n[i] = m[r.order].amount / amount
		}
		return n, nil
	}
	orderCodes := func(ctx context.Context, prefix string, reqs []*request) ([]int64, error) {
		m, err := b.orderCodes(ctx, prefix+"-")
		if err != nil {
			return nil, err
		}
		n := make([]int64, len(reqs))
		for i, r := range reqs {
			n[i] = m[r.key]
		}
		return n, nil
	}
	insertLedger := func(ctx context.Context, tx TTx, r *request) (outcome, error) {
		return applied, b.biz(tx).ledgerInsert(ctx, r.key, amount)
	}

	// runAttempt is one attempt of a Run technique on s.
	runAttempt := func(s *dedupe.Store[TTx]) func(ctx context.Context, r *request, h hook) (outcome, error) {
		return func(ctx context.Context, r *request, h hook) (outcome, error) {
			want := response(r.key)
			// Run begins and commits the transaction itself, and may
			// call fn more than once (after a lost race or a
			// deadlock): the hook fires once per request, the crash
			// kills fn's connection from inside fn, after the business
			// write and before Run's commit, and Run hands the error
			// back to the client to retry.
			res, err := s.Run(ctx, payment(r.key), func(ctx context.Context, tx TTx) ([]byte, error) {
				if err := b.biz(tx).ledgerInsert(ctx, r.key, amount); err != nil {
					return nil, err
				}
				if h != nil {
					if err := h(ctx); errors.Is(err, errCrash) {
						b.kill(ctx, tx)
						return nil, errCrashed
					} else if err != nil {
						return nil, err
					}
				}
				return want, nil
			})
			if err == nil {
				err = replayed(res, want)
			}
			return fromResult(res.FirstRun()), err
		}
	}
	vs := []*variant{
		{
			ID: "baseline", Name: "bare INSERT (baseline)", Kind: KindBaseline,
			Write: "INSERT a ledger row, commit; no protection",
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				return inTx(ctx, b, h, func(tx TTx) (outcome, error) { return insertLedger(ctx, tx, r) })
			},
			effects: ledger,
		},
		{
			ID: "bare-update", Name: "bare UPDATE order (reference)", Kind: KindReference,
			Write: "UPDATE orders SET amount = amount + 100 WHERE id, commit; no protection", orders: true,
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				return inTx(ctx, b, h, func(tx TTx) (outcome, error) {
					return applied, b.bareUpdate(ctx, tx, r.order, amount)
				})
			},
			effects: amounts,
		},
		{
			ID: "bare-order", Name: "bare INSERT order (reference)", Kind: KindReference,
			Write: "INSERT an order with a unique code, commit; no protection",
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				out, err := inTx(ctx, b, h, func(tx TTx) (outcome, error) {
					return applied, b.biz(tx).orderInsert(ctx, r.key, amount)
				})
				if uniqueViolation(err) {
					// The unique code refuses the repeat: the client gets an
					// error, not the first call's answer, and stops.
					return duplicate, nil
				}
				return out, err
			},
			effects: orderCodes,
		},
		{
			ID: "dedupe-do", Name: "sqlonce dedupe.Do", Kind: KindSqlonce,
			Write: "claim key + INSERT ledger row in one transaction",
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				return inTx(ctx, b, h, func(tx TTx) (outcome, error) {
					res, err := store.Do(ctx, tx, dedupe.Request{Scope: scope, Key: r.key}, func(ctx context.Context) error {
						return b.biz(tx).ledgerInsert(ctx, r.key, amount)
					})
					return fromResult(res.FirstRun()), err
				})
			},
			effects: ledger,
		},
		{
			ID: "dedupe-response", Name: "sqlonce dedupe.DoResponse+fingerprint", Kind: KindSqlonce,
			Write: "as dedupe.Do, plus a request fingerprint and a ~100-byte response recorded and replayed",
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				want := response(r.key)
				return inTx(ctx, b, h, func(tx TTx) (outcome, error) {
					res, err := store.DoResponse(ctx, tx, payment(r.key), func(ctx context.Context) ([]byte, error) {
						return want, b.biz(tx).ledgerInsert(ctx, r.key, amount)
					})
					if err == nil {
						err = replayed(res, want)
					}
					return fromResult(res.FirstRun()), err
				})
			},
			effects: ledger,
		},
		{
			ID: "dedupe-run", Name: "sqlonce dedupe.Run+fingerprint", Kind: KindSqlonce,
			Write:   "dedupe.Run: the Store's own transaction runs the ledger INSERT and records key, fingerprint and ~100-byte response with the commit",
			attempt: runAttempt(store),
			effects: ledger,
		},
		{
			ID: "dedupe-run-firstruns", Name: "sqlonce dedupe.Run+fingerprint, FavorFirstRuns", Kind: KindSqlonce,
			Write:   "as dedupe.Run, the Store built WithFavor(FavorFirstRuns): no read of the key before the work where the driver can trade one (MariaDB)",
			attempt: runAttempt(firstRuns),
			effects: ledger,
		},
		{
			ID: "dedupe-response-replay", Name: "sqlonce dedupe.DoResponse, replay", Kind: KindSqlonce, replays: true,
			Write: "a repeat of a dedupe.DoResponse+fingerprint request: the caller's transaction, the claim finds the key and returns the recorded response; nothing written",
			prepare: func(ctx context.Context) error {
				for i := range replayKeys {
					k := replayKey("response", i)
					if _, err := inTx(ctx, b, nil, func(tx TTx) (outcome, error) {
						res, err := store.DoResponse(ctx, tx, payment(k), func(ctx context.Context) ([]byte, error) { return response(k), nil })
						return fromResult(res.FirstRun()), err
					}); err != nil {
						return err
					}
				}
				return nil
			},
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				k := replayKey("response", r.seq)
				want := response(k)
				return inTx(ctx, b, h, func(tx TTx) (outcome, error) {
					res, err := store.DoResponse(ctx, tx, payment(k), func(ctx context.Context) ([]byte, error) {
						return want, b.biz(tx).ledgerInsert(ctx, r.key, amount)
					})
					if err == nil {
						err = replayed(res, want)
					}
					return fromResult(res.FirstRun()), err
				})
			},
			effects: ledger,
		},
		{
			ID: "dedupe-run-replay", Name: "sqlonce dedupe.Run, replay", Kind: KindSqlonce, replays: true,
			Write: "a repeat of a dedupe.Run+fingerprint request: Run finds the key and returns the recorded response; nothing written",
			prepare: func(ctx context.Context) error {
				for i := range replayKeys {
					k := replayKey("run", i)
					if _, err := store.Run(ctx, payment(k), func(ctx context.Context, tx TTx) ([]byte, error) { return response(k), nil }); err != nil {
						return err
					}
				}
				return nil
			},
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				k := replayKey("run", r.seq)
				want := response(k)
				res, err := store.Run(ctx, payment(k), func(ctx context.Context, tx TTx) ([]byte, error) {
					return want, b.biz(tx).ledgerInsert(ctx, r.key, amount)
				})
				if err == nil {
					err = replayed(res, want)
				}
				return fromResult(res.FirstRun()), err
			},
			effects: ledger,
		},
		{
			ID: "dedupe-run-repeats-replay", Name: "sqlonce dedupe.Run, replay, FavorRepeats", Kind: KindSqlonce, replays: true,
			Write: "as dedupe.Run, replay, the Store built WithFavor(FavorRepeats): the key read before anything else (PostgreSQL through pgx: one round trip)",
			prepare: func(ctx context.Context) error {
				for i := range replayKeys {
					k := replayKey("run-repeats", i)
					if _, err := repeats.Run(ctx, payment(k), func(ctx context.Context, tx TTx) ([]byte, error) { return response(k), nil }); err != nil {
						return err
					}
				}
				return nil
			},
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				k := replayKey("run-repeats", r.seq)
				want := response(k)
				res, err := repeats.Run(ctx, payment(k), func(ctx context.Context, tx TTx) ([]byte, error) {
					return want, b.biz(tx).ledgerInsert(ctx, r.key, amount)
				})
				if err == nil {
					err = replayed(res, want)
				}
				return fromResult(res.FirstRun()), err
			},
			effects: ledger,
		},
		{
			ID: "unique-insert", Name: "sqlonce unique.Insert", Kind: KindSqlonce, bare: "bare-order",
			Write: "INSERT an order with a unique code under a savepoint; duplicate = already done",
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				return inTx(ctx, b, h, func(tx TTx) (outcome, error) {
					res, err := inserter.Insert(ctx, tx, "orders_code_key", func(ctx context.Context) error {
						return b.biz(tx).orderInsert(ctx, r.key, amount)
					})
					return fromResult(res.FirstRun()), err
				})
			},
			effects: orderCodes,
		},
		{
			ID: "unique-insert-one", Name: "sqlonce unique.InsertOne", Kind: KindSqlonce, bare: "bare-order",
			Write: "INSERT an order with a unique code, one statement: no savepoint on MariaDB (a failed statement rolls back alone), one left for COMMIT on PostgreSQL; duplicate = already done",
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				return inTx(ctx, b, h, func(tx TTx) (outcome, error) {
					res, err := inserter.InsertOne(ctx, tx, "orders_code_key", func(ctx context.Context) error {
						return b.biz(tx).orderInsert(ctx, r.key, amount)
					})
					return fromResult(res.FirstRun()), err
				})
			},
			effects: orderCodes,
		},
		{
			ID: "unique-inserted", Name: "sqlonce unique.Inserted", Kind: KindSqlonce, bare: "bare-order", db: "postgres",
			Write: "INSERT ... ON CONFLICT (code) DO NOTHING, judged by affected rows: no savepoint; 0 rows = already done",
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				// The other techniques' orders have the code as their customer,
				// so a repeat collides on orders_ref_key (customer, amount)
				// too; ON CONFLICT (code) does not cover that key, and two
				// racing repeats can fail on it (unique.Inserted's documented
				// limit). Here each attempt's customer is its own: a repeat
				// collides on the code alone.
				customer := fmt.Sprintf("%s#%d", r.key, attemptSeq.Add(1))
				return inTx(ctx, b, h, func(tx TTx) (outcome, error) {
					rows, err := b.biz(tx).orderInsertIfAbsent(ctx, r.key, customer, amount)
					if err != nil {
						return 0, err
					}
					res, err := unique.Inserted(ctx, rows)
					return fromResult(res.FirstRun()), err
				})
			},
			effects: orderCodes,
		},
		{
			ID: "optimistic", Name: "sqlonce optimistic.Update", Kind: KindSqlonce, bare: "bare-update",
			Write: "UPDATE orders SET amount = amount + 100, version = version + 1 WHERE id AND version", orders: true,
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				return inTx(ctx, b, h, func(tx TTx) (outcome, error) {
					q := b.biz(tx)
					const readVersion = 1
					rows, err := q.orderAddAmount(ctx, r.order, readVersion, amount)
					if err != nil {
						return 0, err
					}
					res, err := optimistic.Update(ctx, rows, int64(readVersion), func(ctx context.Context) (int64, error) {
						return q.orderGetVersion(ctx, r.order)
					})
					return fromResult(res.FirstRun()), err
				})
			},
			effects: amounts,
		},
		{
			ID: "statemachine", Name: "sqlonce statemachine.Transition", Kind: KindSqlonce, bare: "bare-update",
			Write: "UPDATE orders SET status = 'paid' WHERE id AND status = 'created'", orders: true,
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				return inTx(ctx, b, h, func(tx TTx) (outcome, error) {
					q := b.biz(tx)
					res, err := machine.Transition(ctx, "created", "paid",
						func(ctx context.Context) (int64, error) { return q.orderSetStatus(ctx, r.order, "created", "paid") },
						func(ctx context.Context) (string, error) { return q.orderGetStatus(ctx, r.order) })
					return fromResult(res.FirstRun()), err
				})
			},
			effects: func(ctx context.Context, _ string, reqs []*request) ([]int64, error) {
				m, err := b.orders(ctx, orderIDs(reqs))
				if err != nil {
					return nil, err
				}
				n := make([]int64, len(reqs))
				for i, r := range reqs {
					if s := m[r.order].status; s == "paid" || s == "shipped" {
						n[i] = 1
					}
				}
				return n, nil
			},
		},
		{
			ID: "dedupe-lease", Name: "sqlonce dedupe lease (Claim+CompleteTx)", Kind: KindSqlonce,
			Write: "Claim commits a lease; then INSERT ledger row + CompleteTx in a second transaction",
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				l, res, err := store.Claim(ctx, dedupe.Request{Scope: scope, Key: r.key}, cfg.Lease)
				if err != nil || !res.FirstRun() {
					return duplicate, err
				}
				out, err := inTx(ctx, b, h, func(tx TTx) (outcome, error) {
					if err := b.biz(tx).ledgerInsert(ctx, r.key, amount); err != nil {
						return 0, err
					}
					return applied, store.CompleteTx(ctx, tx, l, response(r.key))
				})
				if err != nil && !errors.Is(err, errCrashed) {
					// A live server gives the key back at once; a dead one
					// leaves the lease to lapse.
					_ = store.Release(ctx, l)
				}
				return out, err
			},
			effects: ledger,
		},
		{
			ID: "select-insert", Name: "SELECT then INSERT", Kind: KindAlternative,
			Write: "SELECT EXISTS(ledger row for the key); if absent INSERT it; commit",
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				return inTx(ctx, b, h, func(tx TTx) (outcome, error) {
					done, err := b.biz(tx).ledgerExists(ctx, r.key)
					if err != nil || done {
						return duplicate, err
					}
					return insertLedger(ctx, tx, r)
				})
			},
			effects: ledger,
		},
	}
	if rdb == nil {
		return vs, nil
	}
	vs = append(vs,
		&variant{
			ID: "redis-setnx", Name: "Redis SET NX PX, then DB tx", Kind: KindAlternative,
			Write: "SET key 1 NX PX ttl in Redis; if set, INSERT ledger row and commit; DEL the key if the transaction fails",
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				k := redisPrefix + "marker:" + r.key
				err := rdb.Do(ctx, "SET", k, "1", "NX", "PX", cfg.MarkerTTL.Milliseconds()).Err()
				if errors.Is(err, redis.Nil) { // not set: the key exists
					return duplicate, nil
				}
				if err != nil {
					return 0, err
				}
				out, err := inTx(ctx, b, h, func(tx TTx) (outcome, error) { return insertLedger(ctx, tx, r) })
				if err != nil && !errors.Is(err, errCrashed) {
					// What the technique's advocates do in their catch block;
					// a dead process never gets there.
					rdb.Del(context.WithoutCancel(ctx), k)
				}
				return out, err
			},
			effects: ledger,
		},
		&variant{
			ID: "redis-token", Name: "Redis token, Lua get-compare-del, then DB tx", Kind: KindAlternative,
			Write: "fetch a token (SET PX) first; on submit, a Lua script consumes it; if consumed, INSERT ledger row and commit; the token is put back if the transaction fails",
			before: func(ctx context.Context, r *request) error {
				var t [16]byte
				_, _ = rand.Read(t[:])
				r.token = redisPrefix + "token:" + hex.EncodeToString(t[:])
				return rdb.Set(ctx, r.token, tokenOwner, cfg.MarkerTTL).Err()
			},
			attempt: func(ctx context.Context, r *request, h hook) (outcome, error) {
				n, err := getCompareDelete.Run(ctx, rdb, []string{r.token}, tokenOwner).Int()
				if err != nil || n == 0 {
					return duplicate, err
				}
				out, err := inTx(ctx, b, h, func(tx TTx) (outcome, error) { return insertLedger(ctx, tx, r) })
				if err != nil && !errors.Is(err, errCrashed) {
					rdb.Set(context.WithoutCancel(ctx), r.token, tokenOwner, cfg.MarkerTTL)
				}
				return out, err
			},
			effects: ledger,
		},
	)
	return vs, nil
}

// attemptSeq numbers attempts where a technique needs them apart.
var attemptSeq atomic.Int64

// replayKeys is how many keys a replay technique records before the
// rounds; its timed requests repeat them in turn.
const replayKeys = 64

// replayKey is the i-th request's key of a replay technique: one of the
// replayKeys recorded keys.
func replayKey(technique string, i int) string {
	return fmt.Sprintf("replay-%s-%d", technique, i%replayKeys)
}

func uniqueViolation(err error) bool {
	return driver.Classify(err).Has(driver.Unique)
}

func orderIDs(reqs []*request) []int64 {
	ids := make([]int64, len(reqs))
	for i, r := range reqs {
		ids[i] = r.order
	}
	return ids
}
