package conformance

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgsqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// Why a Run case cannot run on SQLite.
const (
	// sqliteRunHoldsWriteLock: fn calls the Store on another connection
	// while Run's transaction is open.
	sqliteRunHoldsWriteLock = "SQLite's Run takes the generic path: its transaction claims the key at BEGIN IMMEDIATE and holds the database's write lock while fn runs, so a write from fn on another connection waits for Run's own transaction"
)

// genericRunHoldsKey: on the generic path (a driver without a Runner, such
// as pgsqldriver) Run claims the key before fn runs, taking over a lapsed
// lease and holding its row until Run ends: a late Complete of that lease
// from fn, on another connection, waits for Run's own transaction. (From
// another process it waits, then finds its lease lost.)
const genericRunHoldsKey = "this driver's Run takes the generic path, which holds the key's row while fn runs: a late Complete from fn on another connection waits for Run's own transaction"

// skipOnGenericRun skips t when db's driver runs Store.Run the generic way.
func skipOnGenericRun[TTx any](t *testing.T, db harness.DB[TTx], why string) {
	t.Helper()
	if db.Driver().Engine().Capabilities().Runner == nil {
		t.Skip(why)
	}
}

// drWork returns a Run fn that writes a ledger row under ref and answers
// resp, counting its calls in n when n is not nil.
func drWork[TTx any](db harness.DB[TTx], ref string, resp []byte, n *atomic.Int64) func(context.Context, TTx) ([]byte, error) {
	return func(ctx context.Context, tx TTx) ([]byte, error) {
		if n != nil {
			n.Add(1)
		}
		return resp, db.Tx(tx).LedgerInsert(ctx, ref, 1)
	}
}

// drNever returns a Run fn for a call that must not run it: it counts its
// calls in n and fails.
func drNever[TTx any](n *atomic.Int64) func(context.Context, TTx) ([]byte, error) {
	return func(context.Context, TTx) ([]byte, error) {
		n.Add(1)
		return nil, errors.New("fn ran")
	}
}

func wantNoCalls(t testing.TB, what string, n *atomic.Int64) {
	t.Helper()
	if c := n.Load(); c != 0 {
		t.Fatalf("%s: fn ran %d times, want never", what, c)
	}
}

type drResult struct {
	res sqlonce.Result
	err error
}

// drHold starts a Run of req in a goroutine whose fn writes a ledger row
// under req.Key and, on its first call only, blocks until release is
// called; it answers resp. drHold returns once that first call is
// running, with the channel the Run's result arrives on.
func drHold[TTx any](t testing.TB, ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request, resp string) (release func(), done <-chan drResult) {
	t.Helper()
	started := make(chan struct{})
	rel := make(chan struct{})
	out := make(chan drResult, 1)
	var once sync.Once
	go func() {
		res, err := s.Run(ctx, req, func(ctx context.Context, tx TTx) ([]byte, error) {
			if err := db.Tx(tx).LedgerInsert(ctx, req.Key, 1); err != nil {
				return nil, err
			}
			first := false
			once.Do(func() { first = true; close(started) })
			if first {
				select {
				case <-rel:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return []byte(resp), nil
		})
		out <- drResult{res, err}
	}()
	select {
	case <-started:
	case r := <-out:
		t.Fatalf("the holder's Run returned (%v, %v) before its fn ran", r.res, r.err)
	}
	var relOnce sync.Once
	release = func() { relOnce.Do(func() { close(rel) }) }
	t.Cleanup(release)
	return release, out
}

// pgPool opens a pgx pool of the case's own on db's PostgreSQL schema.
func pgPool[TTx any](t testing.TB, db harness.DB[TTx], maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.DSN())
	must(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	must(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// ownHandle opens a database handle of the case's own on db's database,
// holding at most maxConns connections, and returns a driver built on it
// and a function that counts the connections the handle has handed out
// and not got back.
func ownHandle[TTx any](t testing.TB, db harness.DB[TTx], maxConns int) (sqlonce.Driver[TTx], func() int) {
	t.Helper()
	var (
		d     any
		inUse func() int
	)
	sqlDriver, overSQL := any(db).(interface{ SQLDriverName() string })
	switch {
	case db.Dialect() == "postgres" && !overSQL:
		pool := pgPool(t, db, int32(maxConns))
		d, inUse = testdrv.Pgx(t, pool), func() int { return int(pool.Stat().AcquiredConns()) }
	case db.Dialect() == "postgres", db.Dialect() == "mysql", db.Dialect() == "sqlite":
		name := "mysql"
		switch {
		case overSQL:
			name = sqlDriver.SQLDriverName()
		case db.Dialect() == "sqlite":
			name = sqliteDriverName(db)
		}
		h, err := sql.Open(name, db.DSN())
		must(t, err)
		h.SetMaxOpenConns(maxConns)
		h.SetMaxIdleConns(maxConns)
		t.Cleanup(func() { h.Close() })
		switch db.Dialect() {
		case "postgres":
			d = testdrv.PgSQL(t, h)
		case "mysql":
			d = testdrv.MySQL(t, h)
		default:
			d, err = sqlitedriver.New(h)
			must(t, err)
		}
		inUse = func() int { return h.Stats().InUse }
	default:
		t.Fatalf("unknown dialect %q", db.Dialect())
	}
	return d.(sqlonce.Driver[TTx]), inUse
}

// beginOnly is a pgxdriver.Beginner that is neither a *pgxpool.Pool nor a
// *pgx.Conn, as an application's own wrapper is.
type beginOnly struct{ pool *pgxpool.Pool }

func (b beginOnly) Begin(ctx context.Context) (pgx.Tx, error) { return b.pool.Begin(ctx) }

// catchPanic runs fn and returns what it panicked with, or nil.
func catchPanic(fn func()) (p any) {
	defer func() { p = recover() }()
	fn()
	return nil
}

// drBody is n bytes that differ from piece to piece, so that a response
// reassembled out of order, short or padded does not compare equal.
func drBody(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{'s', 'q', 'l', 'o', 'n', 'c', 'e'}).Read(b)
	return b
}

// drRace has Racers goroutines Run req at once, each answering a body of
// its own, and checks that exactly one ran first, that every other got
// the winner's body back, and what the database holds: one ledger row
// more than before under req.Key, and the key recorded with the winner's
// body. It returns how many times fn ran.
func drRace[TTx any](t *testing.T, ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request, ledgerBefore int64) int64 {
	t.Helper()
	var calls atomic.Int64
	results := make([]sqlonce.Result, Racers)
	bodies := make([][]byte, Racers)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, "racer %d \x00\xff", i)
	}
	errs := race(Racers, func(i int) error {
		var err error
		results[i], err = s.Run(ctx, req, drWork(db, req.Key, bodies[i], &calls))
		return err
	})
	noErrors(t, errs)
	drOneWinner(t, req, results, bodies)
	if n := ledgerRows(t, ctx, db, req.Key); n != ledgerBefore+1 {
		t.Errorf("%s: %d ledger rows, want %d", req.Key, n, ledgerBefore+1)
	}
	return calls.Load()
}

// drOneWinner checks that exactly one of results is a first run and that
// all of them, and the stored key, carry the winner's body.
func drOneWinner(t *testing.T, req dedupe.Request, results []sqlonce.Result, bodies [][]byte) (winner int) {
	t.Helper()
	var c counter
	winner = -1
	for i, res := range results {
		c.add(res)
		if res.FirstRun() {
			winner = i
		}
	}
	if c.first.Load() != 1 || c.done.Load() != int64(len(results)-1) || winner < 0 {
		t.Fatalf("%s: %s, want first=1 done=%d", req.Key, &c, len(results)-1)
	}
	for i, res := range results {
		if !bytes.Equal(res.Response, bodies[winner]) {
			t.Errorf("%s: racer %d (%v) got %q, want the winner's %q", req.Key, i, res.Outcome, res.Response, bodies[winner])
		}
	}
	return winner
}

// runDedupeRun runs every Run case with the default Favor, and again with
// each Favor that gives the driver another shape (favorChanges).
// Under -short the default's cases run as a part of their own,
// FavorDefault, beside the others.
func runDedupeRun[TTx any](t *testing.T, f harness.Factory[TTx]) {
	if parallelGroups {
		part(t, dedupe.FavorDefault.String(), func(t *testing.T) { runDedupeRunCases(t, f, dedupe.FavorDefault) })
	} else {
		runDedupeRunCases(t, f, dedupe.FavorDefault)
	}
	for _, favor := range []dedupe.Favor{dedupe.FavorFirstRuns, dedupe.FavorRepeats} {
		part(t, favor.String(), func(t *testing.T) {
			if db := f(t, 0); !favorChanges(db, favor) {
				t.Skipf("%v gives %T the default's shape", favor, db.Driver())
			}
			runDedupeRunCases(t, f, favor)
		})
	}
}

// favorChanges reports whether favor gives db's driver another shape of
// Store.Run than the default (dedupe.WithFavor's table).
func favorChanges[TTx any](db harness.DB[TTx], favor dedupe.Favor) bool {
	switch any(db.Driver()).(type) {
	case *mysqldriver.Driver, *pgsqldriver.Driver:
		return favor == dedupe.FavorFirstRuns
	case *pgxdriver.Driver:
		return favor == dedupe.FavorRepeats
	}
	return false
}

// runShape is what a Run case can see of how db's driver runs Store.Run.
type runShape struct {
	// holdsKey: a concurrent Run of the same key waits for the first to
	// end before it runs fn (pgxdriver's advisory lock; the generic path's
	// claim). The database/sql drivers' Run holds nothing while fn runs.
	holdsKey bool
	// repeatRunsFn: a repeat runs fn, then finds the key at its record and
	// rolls fn's work back (FavorFirstRuns on the database/sql drivers).
	repeatRunsFn bool
}

func shapeOf[TTx any](db harness.DB[TTx], favor dedupe.Favor) runShape {
	switch any(db.Driver()).(type) {
	case *mysqldriver.Driver, *pgsqldriver.Driver:
		return runShape{repeatRunsFn: favor == dedupe.FavorFirstRuns}
	}
	return runShape{holdsKey: true}
}

// wantRepeatCalls checks n, the calls of the fn of repeats of a recorded
// key: none, or exactly one per repeat where the shape runs fn for a
// repeat.
func wantRepeatCalls(t testing.TB, sh runShape, what string, n *atomic.Int64, repeats int) {
	t.Helper()
	if !sh.repeatRunsFn {
		wantNoCalls(t, what, n)
		return
	}
	if c := n.Load(); c != int64(repeats) {
		t.Fatalf("%s: fn ran %d times, want once for each of %d repeats", what, c, repeats)
	}
}

// drEnv is what every Run case gets: the configuration's factory and the
// Favor its Stores run with.
type drEnv[TTx any] struct {
	f     harness.Factory[TTx]
	favor dedupe.Favor
}

// newStore returns a Store on d with e's Favor and opts.
func (e drEnv[TTx]) newStore(t *testing.T, d sqlonce.Driver[TTx], opts ...dedupe.Option) *dedupe.Store[TTx] {
	t.Helper()
	s, err := dedupe.New(d, append([]dedupe.Option{dedupe.WithFavor(e.favor)}, opts...)...)
	must(t, err)
	return s
}

// runDedupeRunCases runs every Run case (drCases) with favor, each as a
// subtest of its name.
func runDedupeRunCases[TTx any](t *testing.T, f harness.Factory[TTx], favor dedupe.Favor) {
	e := drEnv[TTx]{f: f, favor: favor}
	for _, c := range drCases[TTx]() {
		t.Run(c.name, func(t *testing.T) { c.run(t, e) })
	}
}

// drCase is one named Run case.
type drCase[TTx any] struct {
	name string
	run  func(t *testing.T, e drEnv[TTx])
}

// drCases lists the Run cases in the order they run. To add one, write a
// func drName[TTx any](t *testing.T, e drEnv[TTx]) and list it here.
func drCases[TTx any]() []drCase[TTx] {
	return []drCase[TTx]{
		{"FirstRunThenRepeat", drFirstRunThenRepeat[TTx]},
		{"ResponsesByteForByte", drResponsesByteForByte[TTx]},
		{"JSON", drJSON[TTx]},
		{"FingerprintMismatch", drFingerprintMismatch[TTx]},
		{"ScopesAreSeparate", drScopesAreSeparate[TTx]},
		{"RaceSameKey", drRaceSameKey[TTx]},
		{"RaceSameKeyCollidingWork", drRaceSameKeyCollidingWork[TTx]},
		{"DoHoldsKeyCollidingWork", drDoHoldsKeyCollidingWork[TTx]},
		{"RaceWithDo", drRaceWithDo[TTx]},
		{"ExpiredKeyTakenOver", drExpiredKeyTakenOver[TTx]},
		{"RaceExpiredKey", drRaceExpiredKey[TTx]},
		{"Lease", drLease[TTx]},
		{"FnError", drFnError[TTx]},
		{"FnPanics", drFnPanics[TTx]},
		{"TooLarge", drTooLarge[TTx]},
		{"InvalidArguments", drInvalidArguments[TTx]},
		{"FnEndsTx", drFnEndsTx[TTx]},
		{"RetriesDeadlock", drRetriesDeadlock[TTx]},
		{"NoWait", func(t *testing.T, e drEnv[TTx]) { drBoundedWait(t, e, dedupe.WithNoWait(), 0) }},
		{"LockWait200ms", func(t *testing.T, e drEnv[TTx]) {
			drBoundedWait(t, e, dedupe.WithLockWait(200*time.Millisecond), 200*time.Millisecond)
		}},
		{"DefaultStoreWaits", drDefaultStoreWaits[TTx]},
		{"OtherBeginner", drOtherBeginner[TTx]},
		{"LargeResponse", drLargeResponse[TTx]},
	}
}

func drFirstRunThenRepeat[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 0)
	s := e.newStore(t, db.Driver())
	fp := dedupe.Fingerprint([]byte("pay 10"))
	req := dedupe.Request{Scope: "run", Key: "order-1", Fingerprint: fp}
	var calls atomic.Int64
	res, err := s.Run(ctx, req, drWork(db, req.Key, []byte("receipt-1"), &calls))
	wantOutcome(t, "first", res, err, sqlonce.FirstRun, ptr("receipt-1"))
	row := keyRow(t, ctx, db, req.Scope, req.Key)
	if row.State != 1 || string(row.Response) != "receipt-1" || !bytes.Equal(row.Fingerprint, fp) {
		t.Fatalf("row after the first run: %+v", row)
	}
	for i := range 3 {
		res, err := s.Run(ctx, req, drWork(db, req.Key, []byte("never"), &calls))
		wantOutcome(t, fmt.Sprintf("repeat %d", i), res, err, sqlonce.AlreadyDone, ptr("receipt-1"))
	}
	if c, want := calls.Load(), 1+3*int64(btoi(shapeOf(db, e.favor).repeatRunsFn)); c != want {
		t.Fatalf("fn ran %d times, want %d", c, want)
	}
	// The key Run recorded is the one Do and Claim see.
	res, err = doRecord(ctx, db, s, req, "never")
	wantOutcome(t, "Do after Run", res, err, sqlonce.AlreadyDone, ptr("receipt-1"))
	l, res, err := s.Claim(ctx, req, time.Minute)
	wantOutcome(t, "Claim after Run", res, err, sqlonce.AlreadyDone, ptr("receipt-1"))
	if l != nil {
		t.Fatal("a lease returned with AlreadyDone")
	}
	sameRow(t, "after the repeats", keyRow(t, ctx, db, req.Scope, req.Key), row)
	if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
		t.Fatalf("ledger rows: %d, want 1", n)
	}
	if n := keyCount(t, ctx, db); n != 1 {
		t.Fatalf("%d keys, want 1", n)
	}
}

func drResponsesByteForByte[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 0)
	const limit = 1024
	s := e.newStore(t, db.Driver(), dedupe.WithMaxResponseSize(limit))
	binary := make([]byte, 512)
	for i := range binary {
		binary[i] = byte(i)
	}
	for _, c := range []struct {
		name     string
		response []byte
		want     []byte
	}{
		{"binary", binary, binary},
		{"trailing spaces", []byte("ok  "), []byte("ok  ")},
		{"trailing NULs", []byte("ok\x00\x00"), []byte("ok\x00\x00")},
		{"empty", []byte{}, []byte{}},
		{"nil", nil, []byte{}},
		{"at the limit", bytes.Repeat([]byte{0xa5}, limit), bytes.Repeat([]byte{0xa5}, limit)},
	} {
		req := dedupe.Request{Scope: "run-bytes", Key: c.name}
		for pass, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
			res, err := s.Run(ctx, req, drWork(db, req.Key, c.response, nil))
			must(t, err)
			if res.Outcome != want || res.Response == nil || !bytes.Equal(res.Response, c.want) {
				t.Errorf("%s, call %d: got %v %q (nil %v), want %v with %q", c.name, pass, res.Outcome, res.Response, res.Response == nil, want, c.want)
			}
		}
		if row := keyRow(t, ctx, db, req.Scope, req.Key); row.Response == nil || !bytes.Equal(row.Response, c.want) {
			t.Errorf("%s: stored %q (nil %v), want %q", c.name, row.Response, row.Response == nil, c.want)
		}
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Errorf("%s: %d ledger rows, want 1", c.name, n)
		}
	}
}

func drJSON[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 0)
	s := e.newStore(t, db.Driver())
	note := "<b>& \"quoted\" é \u2028"
	first := ddReceipt{
		OrderID: 1 << 53, Code: "A-1", Amount: 10.25, Paid: true,
		Lines: []string{"x", ""}, Meta: map[string]string{"b": "2", "a": "1"},
		At:   time.Date(2024, 2, 29, 23, 59, 59, 123456789, time.FixedZone("", 5*3600+1800)),
		Note: &note, Raw: json.RawMessage(`{"z":[1,2.50,1e3]}`), Bytes: []byte{0, 1, 0xff},
		internal: 7,
	}
	want := first
	want.internal = 0
	req := dedupe.Request{Scope: "run-json", Key: "k"}
	var calls atomic.Int64
	call := func() (ddReceipt, sqlonce.Result) {
		got, res, err := dedupe.RunJSON(ctx, s, req, func(ctx context.Context, tx TTx) (ddReceipt, error) {
			calls.Add(1)
			return first, db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
		})
		must(t, err)
		return got, res
	}
	got, res := call()
	if !res.FirstRun() || !reflect.DeepEqual(got, first) {
		t.Fatalf("first: got %+v, %v; want fn's value as returned", got, res.Outcome)
	}
	recorded := res.Response
	if row := keyRow(t, ctx, db, req.Scope, req.Key); !bytes.Equal(row.Response, recorded) || !json.Valid(row.Response) {
		t.Fatalf("stored %s, want %s", row.Response, recorded)
	}
	for i := range 2 {
		got, res := call()
		if !res.AlreadyDone() || !bytes.Equal(res.Response, recorded) {
			t.Fatalf("repeat %d: got %v %s, want already done with %s", i, res.Outcome, res.Response, recorded)
		}
		if !got.At.Equal(want.At) {
			t.Errorf("repeat %d: At = %v, want %v", i, got.At, want.At)
		}
		got.At = want.At
		if !reflect.DeepEqual(got, want) {
			t.Errorf("repeat %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
	if c, want := calls.Load(), 1+2*int64(btoi(shapeOf(db, e.favor).repeatRunsFn)); c != want {
		t.Fatalf("fn ran %d times, want %d", c, want)
	}
	if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
		t.Fatalf("ledger rows: %d, want 1", n)
	}

	// A recorded response that is not JSON of T is an error on a repeat.
	text := dedupe.Request{Scope: "run-json", Key: "text"}
	res, err := s.Run(ctx, text, drWork(db, text.Key, []byte("not json"), nil))
	wantOutcome(t, "record text", res, err, sqlonce.FirstRun, nil)
	var never atomic.Int64
	_, _, err = dedupe.RunJSON(ctx, s, text, func(ctx context.Context, tx TTx) (ddReceipt, error) {
		never.Add(1)
		return ddReceipt{}, nil
	})
	if err == nil {
		t.Errorf("decoding %q into a struct: no error", "not json")
	}
	wantRepeatCalls(t, shapeOf(db, e.favor), "RunJSON over a text response", &never, 1)

	// A value encoding/json cannot encode, after fn wrote: nothing left.
	ch := dedupe.Request{Scope: "run-json", Key: "chan"}
	_, _, err = dedupe.RunJSON(ctx, s, ch, func(ctx context.Context, tx TTx) (chan int, error) {
		return make(chan int), db.Tx(tx).LedgerInsert(ctx, ch.Key, 1)
	})
	var unsupported *json.UnsupportedTypeError
	if !errors.As(err, &unsupported) {
		t.Errorf("encoding a chan: got %v, want *json.UnsupportedTypeError", err)
	}
	if _, ok, err := db.Key(ctx, ch.Scope, ch.Key); err != nil || ok {
		t.Errorf("a key was left for a value that could not be encoded (%v)", err)
	}
	if n := ledgerRows(t, ctx, db, ch.Key); n != 0 {
		t.Errorf("ledger rows after an encoding failure: %d, want 0", n)
	}
}

func drFingerprintMismatch[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 0)
	s := e.newStore(t, db.Driver())
	req := dedupe.Request{Scope: "run-fp", Key: "k", Fingerprint: dedupe.Fingerprint([]byte(`{"amount":10}`))}
	res, err := s.Run(ctx, req, drWork(db, req.Key, []byte("r1"), nil))
	wantOutcome(t, "first", res, err, sqlonce.FirstRun, ptr("r1"))
	before := keyRow(t, ctx, db, req.Scope, req.Key)
	var never atomic.Int64
	for name, fp := range map[string][]byte{
		"other body":     dedupe.Fingerprint([]byte(`{"amount":20}`)),
		"no fingerprint": nil,
		"one byte less":  req.Fingerprint[:len(req.Fingerprint)-1],
	} {
		other := req
		other.Fingerprint = fp
		res, err := s.Run(ctx, other, drNever[TTx](&never))
		wantErr(t, name, err, sqlonce.ErrKeyReuse)
		if res.Outcome != 0 || res.Response != nil {
			t.Fatalf("%s: got %v %q with the error, want the zero Result", name, res.Outcome, res.Response)
		}
		_, _, err = dedupe.RunJSON(ctx, s, other, func(context.Context, TTx) (int, error) {
			never.Add(1)
			return 0, nil
		})
		wantErr(t, name+" (RunJSON)", err, sqlonce.ErrKeyReuse)
	}
	wantRepeatCalls(t, shapeOf(db, e.favor), "ErrKeyReuse", &never, 6)
	sameRow(t, "after the refused requests", keyRow(t, ctx, db, req.Scope, req.Key), before)
	res, err = s.Run(ctx, req, drNever[TTx](&never))
	wantOutcome(t, "the first request again", res, err, sqlonce.AlreadyDone, ptr("r1"))
	if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
		t.Fatalf("ledger rows: %d, want 1", n)
	}
	if n := keyCount(t, ctx, db); n != 1 {
		t.Fatalf("%d keys, want 1", n)
	}
}

func drScopesAreSeparate[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 0)
	s := e.newStore(t, db.Driver())
	callers := []string{"caller-a", "caller-b"}
	for pass, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
		for _, caller := range callers {
			req := dedupe.Request{Scope: caller, Key: "0001"}
			res, err := s.Run(ctx, req, drWork(db, caller, []byte("receipt for "+caller), nil))
			wantOutcome(t, fmt.Sprintf("pass %d, %s", pass, caller), res, err, want, ptr("receipt for "+caller))
		}
	}
	for _, caller := range callers {
		if n := ledgerRows(t, ctx, db, caller); n != 1 {
			t.Errorf("%s: %d ledger rows, want 1", caller, n)
		}
		if row := keyRow(t, ctx, db, caller, "0001"); string(row.Response) != "receipt for "+caller {
			t.Errorf("%s: stored %q", caller, row.Response)
		}
	}
	if n := keyCount(t, ctx, db); n != 2 {
		t.Fatalf("%d keys, want 2", n)
	}
}

func drRaceSameKey[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, Racers+4)
	s := e.newStore(t, db.Driver())
	var wantKeys int64
	for round, nkeys := range []int{1, 1, 1, 4, 8} {
		var calls atomic.Int64
		results := make([]sqlonce.Result, Racers)
		bodies := make([][]byte, Racers)
		key := func(i int) string { return fmt.Sprintf("r%d-k%d", round, i%nkeys) }
		for i := range bodies {
			bodies[i] = fmt.Appendf(nil, "round %d racer %d \x00\xff", round, i)
		}
		errs := race(Racers, func(i int) error {
			var err error
			results[i], err = s.Run(ctx, dedupe.Request{Scope: "run-race", Key: key(i)}, drWork(db, key(i), bodies[i], &calls))
			return err
		})
		noErrors(t, errs)
		for k := range nkeys {
			var rs []sqlonce.Result
			var bs [][]byte
			for i := k; i < Racers; i += nkeys {
				rs, bs = append(rs, results[i]), append(bs, bodies[i])
			}
			req := dedupe.Request{Scope: "run-race", Key: key(k)}
			w := drOneWinner(t, req, rs, bs)
			if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
				t.Errorf("%s: %d ledger rows, want 1", req.Key, n)
			}
			if row := keyRow(t, ctx, db, req.Scope, req.Key); !bytes.Equal(row.Response, bs[w]) || row.State != 1 {
				t.Errorf("%s: stored %+v, want the winner's %q", req.Key, row, bs[w])
			}
		}
		wantKeys += int64(nkeys)
		if n := keyCount(t, ctx, db); n != wantKeys {
			t.Fatalf("round %d: %d keys, want %d", round, n, wantKeys)
		}
		// pgxdriver's key lock makes the others wait and then replay;
		// SQLite runs one transaction at a time. The database/sql
		// drivers lock nothing while fn runs: every racer may run fn,
		// the record of the key decides, and the losers' work rolls
		// back.
		if shapeOf(db, e.favor).holdsKey && calls.Load() != int64(nkeys) {
			t.Errorf("round %d: fn ran %d times for %d keys, want once per key", round, calls.Load(), nkeys)
		}
		t.Logf("round %d: %d keys, fn ran %d times", round, nkeys, calls.Load())
	}
}

// The racers' work collides: each inserts the order the key stands
// for, whose code is unique. Where Run holds nothing while fn runs,
// the losers' inserts wait for the winner's and fail on its code when
// it commits, before they reach the key's record: they must still
// answer with the winner's record, not with the collision.
func drRaceSameKeyCollidingWork[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, Racers+4)
	s := e.newStore(t, db.Driver())
	for round := range 3 {
		req := dedupe.Request{Scope: "run-race-order", Key: fmt.Sprintf("order-%d", round)}
		results := make([]sqlonce.Result, Racers)
		bodies := make([][]byte, Racers)
		for i := range bodies {
			bodies[i] = fmt.Appendf(nil, "order %d by racer %d", round, i)
		}
		errs := race(Racers, func(i int) error {
			var err error
			results[i], err = s.Run(ctx, req, func(ctx context.Context, tx TTx) ([]byte, error) {
				_, err := db.Tx(tx).OrderInsert(ctx, req.Key, fmt.Sprintf("round-%d-racer-%d", round, i), int64(i))
				return bodies[i], err
			})
			return err
		})
		noErrors(t, errs)
		drOneWinner(t, req, results, bodies)
		if n, err := db.Pool().OrderCountByCode(ctx, req.Key); err != nil || n != 1 {
			t.Fatalf("%s: %d orders (%v), want 1", req.Key, n, err)
		}
	}
}

// A Do holds the key in a transaction still open when Run reads it, and
// Run's fn collides with the Do's work: its order insert waits for the
// Do's and fails on the code when the Do commits. Run must answer with
// the Do's record, as if it had come a moment later, not with the
// collision.
func drDoHoldsKeyCollidingWork[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 4)
	s := e.newStore(t, db.Driver())
	req := dedupe.Request{Scope: "run-vs-do-order", Key: "order-1"}
	var (
		res    sqlonce.Result
		runErr error
		done   = make(chan struct{})
		inFn   = make(chan struct{}, 1)
	)
	err := harness.WithTx(ctx, db, harness.ReadCommitted, func(tx TTx) error {
		doRes, err := s.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
			_, err := db.Tx(tx).OrderInsert(ctx, req.Key, "do", 1)
			return []byte("by do"), err
		})
		if err != nil || !doRes.FirstRun() {
			return fmt.Errorf("Do: %v, %v", doRes.Outcome, err)
		}
		go func() {
			defer close(done)
			res, runErr = s.Run(ctx, req, func(ctx context.Context, tx TTx) ([]byte, error) {
				inFn <- struct{}{}
				_, err := db.Tx(tx).OrderInsert(ctx, req.Key, "run", 2)
				return []byte("by run"), err
			})
		}()
		// Where Run's transaction waits for the Do's at BEGIN (SQLite)
		// or at its claim of the key, fn is not reached before the Do
		// commits; elsewhere fn's insert is left a moment to reach
		// the server and wait for the Do's order.
		select {
		case <-inFn:
			time.Sleep(100 * time.Millisecond)
		case <-time.After(300 * time.Millisecond):
		}
		return nil
	})
	must(t, err)
	<-done
	wantOutcome(t, "Run after the Do", res, runErr, sqlonce.AlreadyDone, ptr("by do"))
	if n, err := db.Pool().OrderCountByCode(ctx, req.Key); err != nil || n != 1 {
		t.Fatalf("%s: %d orders (%v), want 1", req.Key, n, err)
	}
}

func drRaceWithDo[TTx any](t *testing.T, e drEnv[TTx]) {
	for _, iso := range harness.Isolations {
		t.Run(string(iso), func(t *testing.T) {
			ctx := ctxT(t)
			db := e.f(t, Racers+4)
			s := e.newStore(t, db.Driver())
			for round := range 3 {
				req := dedupe.Request{Scope: "run-mix", Key: fmt.Sprintf("k-%d", round), Fingerprint: []byte("same")}
				results := make([]sqlonce.Result, Racers)
				bodies := make([][]byte, Racers)
				for i := range bodies {
					bodies[i] = fmt.Appendf(nil, "round %d racer %d", round, i)
				}
				var runCalls, doRetries atomic.Int64
				errs := race(Racers, func(i int) error {
					if i%2 == 0 {
						var err error
						results[i], err = s.Run(ctx, req, drWork(db, req.Key, bodies[i], &runCalls))
						return err
					}
					n, err := retryTx(ctx, db, iso, func(tx TTx) error {
						var err error
						results[i], err = s.DoResponse(ctx, tx, req, func(ctx context.Context) ([]byte, error) {
							return bodies[i], db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
						})
						return err
					})
					doRetries.Add(int64(n))
					return err
				})
				noErrors(t, errs)
				w := drOneWinner(t, req, results, bodies)
				if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
					t.Errorf("%s: %d ledger rows, want 1", req.Key, n)
				}
				if row := keyRow(t, ctx, db, req.Scope, req.Key); !bytes.Equal(row.Response, bodies[w]) {
					t.Errorf("%s: stored %q, want the winner's %q", req.Key, row.Response, bodies[w])
				}
				kind := "Do"
				if w%2 == 0 {
					kind = "Run"
				}
				t.Logf("round %d: won by a %s, Run's fn ran %d times, Do retried %d times", round, kind, runCalls.Load(), doRetries.Load())
			}
			if n := keyCount(t, ctx, db); n != 3 {
				t.Fatalf("%d keys, want 3", n)
			}
		})
	}
}

func drExpiredKeyTakenOver[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 0)
	s := e.newStore(t, db.Driver(), dedupe.WithTTL(time.Hour))
	t0 := clockBase()
	req := dedupe.Request{Scope: "run-expiry", Key: "k", Fingerprint: []byte("v1")}
	var never atomic.Int64
	res, err := s.Run(at(ctx, t0, 0), req, drWork(db, req.Key, []byte("first"), nil))
	wantOutcome(t, "record", res, err, sqlonce.FirstRun, ptr("first"))
	before := keyRow(t, ctx, db, req.Scope, req.Key)
	res, err = s.Run(at(ctx, t0, time.Hour-time.Microsecond), req, drNever[TTx](&never))
	wantOutcome(t, "1µs before expiry", res, err, sqlonce.AlreadyDone, ptr("first"))
	wantRepeatCalls(t, shapeOf(db, e.favor), "before expiry", &never, 1)

	// At expires_at the key is absent: taken over by another request.
	req2 := req
	req2.Fingerprint = []byte("v2")
	res, err = s.Run(at(ctx, t0, time.Hour), req2, drWork(db, req.Key, []byte("second"), nil))
	wantOutcome(t, "at expiry", res, err, sqlonce.FirstRun, ptr("second"))
	after := keyRow(t, ctx, db, req.Scope, req.Key)
	if after.State != 1 || string(after.Fingerprint) != "v2" || string(after.Response) != "second" || after.Token == before.Token {
		t.Fatalf("row after takeover %+v (before %+v)", after, before)
	}
	// MySQL's Run records a key under a random nonce, as its in-transaction
	// claims do; elsewhere the token of a taken-over key grows.
	if db.Dialect() != "mysql" && after.Token <= before.Token {
		t.Errorf("token after takeover %d, not above %d", after.Token, before.Token)
	}
	if n := ledgerRows(t, ctx, db, req.Key); n != 2 {
		t.Fatalf("ledger rows after takeover: %d, want 2", n)
	}
	res, err = s.Run(at(ctx, t0, 2*time.Hour-time.Microsecond), req2, drNever[TTx](&never))
	wantOutcome(t, "repeat after takeover", res, err, sqlonce.AlreadyDone, ptr("second"))
	_, err = s.Run(at(ctx, t0, 90*time.Minute), req, drNever[TTx](&never))
	wantErr(t, "old fingerprint after takeover", err, sqlonce.ErrKeyReuse)
	wantRepeatCalls(t, shapeOf(db, e.favor), "after takeover", &never, 3)
	if n := ledgerRows(t, ctx, db, req.Key); n != 2 {
		t.Fatalf("ledger rows at the end: %d, want 2", n)
	}
	if n := keyCount(t, ctx, db); n != 1 {
		t.Fatalf("%d keys, want 1", n)
	}
}

func drRaceExpiredKey[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, Racers+4)
	s := e.newStore(t, db.Driver(), dedupe.WithTTL(time.Minute))
	t0 := clockBase()
	for round := range 3 {
		req := dedupe.Request{Scope: "run-race-expiry", Key: fmt.Sprintf("k-%d", round)}
		res, err := s.Run(at(ctx, t0, 0), req, drWork(db, req.Key, []byte("old"), nil))
		wantOutcome(t, "record", res, err, sqlonce.FirstRun, nil)
		calls := drRace(t, at(ctx, t0, time.Hour), db, s, req, 1)
		t.Logf("round %d: fn ran %d times", round, calls)
	}
	if n := keyCount(t, ctx, db); n != 3 {
		t.Fatalf("%d keys, want 3", n)
	}
}

func drLease[TTx any](t *testing.T, e drEnv[TTx]) {
	t.Run("LiveThenCompleted", func(t *testing.T) {
		ctx := ctxT(t)
		db := e.f(t, 0)
		s := e.newStore(t, db.Driver())
		t0 := clockBase()
		req := dedupe.Request{Scope: "run-lease", Key: "k"}
		l, res, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
		wantLease(t, "claim", req, l, res, err)
		leased := keyRow(t, ctx, db, req.Scope, req.Key)
		var never atomic.Int64
		for _, r := range []dedupe.Request{req, {Scope: req.Scope, Key: req.Key, Fingerprint: []byte("other")}} {
			res, err := s.Run(at(ctx, t0, 30*time.Second), r, drNever[TTx](&never))
			wantErr(t, "Run during the lease", err, sqlonce.ErrInProgress)
			if res.Outcome != 0 {
				t.Fatalf("got %v with ErrInProgress", res.Outcome)
			}
		}
		wantRepeatCalls(t, shapeOf(db, e.favor), "Run during the lease", &never, 2)
		sameRow(t, "after Run during the lease", keyRow(t, ctx, db, req.Scope, req.Key), leased)

		must(t, s.Complete(at(ctx, t0, 40*time.Second), l, []byte("lease-receipt")))
		res, err = s.Run(at(ctx, t0, 50*time.Second), req, drNever[TTx](&never))
		wantOutcome(t, "Run after Complete", res, err, sqlonce.AlreadyDone, ptr("lease-receipt"))
		wantRepeatCalls(t, shapeOf(db, e.favor), "Run after Complete", &never, 3)
		if row := keyRow(t, ctx, db, req.Scope, req.Key); row.State != 1 || row.Token != l.Token || string(row.Response) != "lease-receipt" {
			t.Fatalf("row %+v, want completed by token %d", row, l.Token)
		}
		if n := ledgerRows(t, ctx, db, req.Key); n != 0 {
			t.Fatalf("ledger rows: %d, want 0", n)
		}
	})

	t.Run("Released", func(t *testing.T) {
		ctx := ctxT(t)
		db := e.f(t, 0)
		s := e.newStore(t, db.Driver())
		req := dedupe.Request{Scope: "run-lease", Key: "released"}
		l, res, err := s.Claim(ctx, req, time.Minute)
		wantLease(t, "claim", req, l, res, err)
		must(t, s.Release(ctx, l))
		res, err = s.Run(ctx, req, drWork(db, req.Key, []byte("by run"), nil))
		wantOutcome(t, "Run after Release", res, err, sqlonce.FirstRun, ptr("by run"))
		row := keyRow(t, ctx, db, req.Scope, req.Key)
		if row.State != 1 || string(row.Response) != "by run" || row.Token == l.Token {
			t.Fatalf("row %+v after Run took over the released lease %d", row, l.Token)
		}
		wantErr(t, "Complete by the releaser", s.Complete(ctx, l, []byte("late")), sqlonce.ErrLeaseLost)
		sameRow(t, "after the releaser's Complete", keyRow(t, ctx, db, req.Scope, req.Key), row)
		_, res, err = s.Claim(ctx, req, time.Minute)
		wantOutcome(t, "Claim after Run", res, err, sqlonce.AlreadyDone, ptr("by run"))
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("ledger rows: %d, want 1", n)
		}
	})

	t.Run("Lapsed", func(t *testing.T) {
		ctx := ctxT(t)
		db := e.f(t, 0)
		s := e.newStore(t, db.Driver())
		t0 := clockBase()
		req := dedupe.Request{Scope: "run-lease", Key: "lapsed"}
		l, res, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
		wantLease(t, "claim", req, l, res, err)
		var never atomic.Int64
		_, err = s.Run(at(ctx, t0, time.Minute-time.Microsecond), req, drNever[TTx](&never))
		wantErr(t, "Run 1µs before the deadline", err, sqlonce.ErrInProgress)
		wantRepeatCalls(t, shapeOf(db, e.favor), "before the deadline", &never, 1)
		res, err = s.Run(at(ctx, t0, time.Minute), req, drWork(db, req.Key, []byte("by run"), nil))
		wantOutcome(t, "Run at the deadline", res, err, sqlonce.FirstRun, ptr("by run"))
		row := keyRow(t, ctx, db, req.Scope, req.Key)
		if row.State != 1 || string(row.Response) != "by run" || row.Token == l.Token {
			t.Fatalf("row %+v after Run took over the lapsed lease %d", row, l.Token)
		}
		later := at(ctx, t0, time.Minute+time.Second)
		wantErr(t, "stale Complete", s.Complete(later, l, []byte("stale")), sqlonce.ErrLeaseLost)
		wantErr(t, "stale Extend", s.Extend(later, l, time.Hour), sqlonce.ErrLeaseLost)
		sameRow(t, "after the stale holder's calls", keyRow(t, ctx, db, req.Scope, req.Key), row)
		res, err = s.Run(later, req, drNever[TTx](&never))
		wantOutcome(t, "repeat", res, err, sqlonce.AlreadyDone, ptr("by run"))
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("ledger rows: %d, want 1", n)
		}
	})

	// The lapsed lease's holder completes it while Run's fn runs: the
	// key Run read as free is not any more. Run must not overwrite the
	// completion: its work rolls back and it replays the lease's
	// response.
	t.Run("LapsedCompletedWhileRunning", func(t *testing.T) {
		ctx := ctxT(t)
		db := e.f(t, 4)
		skipOnSQLite(t, db, sqliteRunHoldsWriteLock)
		skipOnGenericRun(t, db, genericRunHoldsKey)
		s := e.newStore(t, db.Driver(), dedupe.WithTTL(time.Hour))
		t0 := clockBase()
		req := dedupe.Request{Scope: "run-lease", Key: "late"}
		l, res, err := s.Claim(at(ctx, t0, 0), req, time.Minute)
		wantLease(t, "claim", req, l, res, err)
		now := at(ctx, t0, 2*time.Minute)
		var calls atomic.Int64
		res, err = s.Run(now, req, func(ctx context.Context, tx TTx) ([]byte, error) {
			if calls.Add(1) == 1 {
				if err := s.Complete(ctx, l, []byte("completed late")); err != nil {
					return nil, fmt.Errorf("late Complete: %w", err)
				}
			}
			return []byte("by run"), db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
		})
		wantOutcome(t, "Run", res, err, sqlonce.AlreadyDone, ptr("completed late"))
		if row := keyRow(t, ctx, db, req.Scope, req.Key); row.State != 1 || row.Token != l.Token || string(row.Response) != "completed late" {
			t.Fatalf("row %+v, want completed by token %d", row, l.Token)
		}
		if n := ledgerRows(t, ctx, db, req.Key); n != 0 {
			t.Fatalf("ledger rows: %d, want 0 (Run's attempt rolled back)", n)
		}
		t.Logf("fn ran %d times", calls.Load())
	})
}

func drFnError[TTx any](t *testing.T, e drEnv[TTx]) {
	errBoom := errors.New("boom")

	t.Run("Returned", func(t *testing.T) {
		ctx := ctxT(t)
		db := e.f(t, 0)
		s := e.newStore(t, db.Driver())
		req := dedupe.Request{Scope: "run-err", Key: "k"}
		var calls atomic.Int64
		res, err := s.Run(ctx, req, func(ctx context.Context, tx TTx) ([]byte, error) {
			calls.Add(1)
			if err := db.Tx(tx).LedgerInsert(ctx, req.Key, 1); err != nil {
				return nil, err
			}
			return []byte("never recorded"), errBoom
		})
		if err != errBoom { // unchanged, as documented
			t.Fatalf("got %v, want fn's error unchanged", err)
		}
		if res.Outcome != 0 || res.Response != nil {
			t.Fatalf("got %v %q with the error, want the zero Result", res.Outcome, res.Response)
		}
		if c := calls.Load(); c != 1 {
			t.Fatalf("fn ran %d times, want 1: its error is not retryable", c)
		}
		_, _, err = dedupe.RunJSON(ctx, s, req, func(ctx context.Context, tx TTx) (int, error) { return 0, errBoom })
		wantErr(t, "RunJSON", err, errBoom)
		if n := keyCount(t, ctx, db); n != 0 {
			t.Fatalf("%d keys after fn failed, want 0", n)
		}
		if n := ledgerRows(t, ctx, db, req.Key); n != 0 {
			t.Fatalf("ledger rows after fn failed: %d, want 0", n)
		}
		res, err = s.Run(ctx, req, drWork(db, req.Key, []byte("ok"), nil))
		wantOutcome(t, "the next Run", res, err, sqlonce.FirstRun, ptr("ok"))
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("ledger rows: %d, want 1", n)
		}
	})

	// fn's own statement fails: PostgreSQL aborts the transaction.
	t.Run("FailedStatement", func(t *testing.T) {
		ctx := ctxT(t)
		db := e.f(t, 0)
		s := e.newStore(t, db.Driver())
		_, err := db.Pool().OrderInsert(ctx, "A-1", "alice", 10)
		must(t, err)
		req := dedupe.Request{Scope: "run-err", Key: "create-A-1"}
		var fnErr error
		_, err = s.Run(ctx, req, func(ctx context.Context, tx TTx) ([]byte, error) {
			if err := db.Tx(tx).LedgerInsert(ctx, req.Key, 1); err != nil {
				return nil, err
			}
			_, fnErr = db.Tx(tx).OrderInsert(ctx, "A-1", "bob", 20)
			return []byte("never"), fnErr
		})
		if fnErr == nil || err != fnErr {
			t.Fatalf("got %v, want fn's error %v unchanged", err, fnErr)
		}
		if n := keyCount(t, ctx, db); n != 0 {
			t.Fatalf("%d keys, want 0", n)
		}
		if n := ledgerRows(t, ctx, db, req.Key); n != 0 {
			t.Fatalf("ledger rows: %d, want 0", n)
		}
		if n, err := db.Pool().OrderCount(ctx); err != nil || n != 1 {
			t.Fatalf("orders: %d (%v), want 1", n, err)
		}
		res, err := s.Run(ctx, req, drWork(db, req.Key, []byte("ok"), nil))
		wantOutcome(t, "the next Run", res, err, sqlonce.FirstRun, ptr("ok"))
	})

	// fn fails while taking over an expired key: the expired row stays
	// as it was.
	t.Run("OnExpiredKey", func(t *testing.T) {
		ctx := ctxT(t)
		db := e.f(t, 0)
		s := e.newStore(t, db.Driver(), dedupe.WithTTL(time.Minute))
		t0 := clockBase()
		req := dedupe.Request{Scope: "run-err", Key: "expired"}
		res, err := s.Run(at(ctx, t0, 0), req, drWork(db, req.Key, []byte("old"), nil))
		wantOutcome(t, "record", res, err, sqlonce.FirstRun, nil)
		old := keyRow(t, ctx, db, req.Scope, req.Key)
		late := at(ctx, t0, time.Hour)
		_, err = s.Run(late, req, func(ctx context.Context, tx TTx) ([]byte, error) {
			if err := db.Tx(tx).LedgerInsert(ctx, req.Key, 1); err != nil {
				return nil, err
			}
			return nil, errBoom
		})
		wantErr(t, "failed takeover", err, errBoom)
		sameRow(t, "after a failed takeover", keyRow(t, ctx, db, req.Scope, req.Key), old)
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("ledger rows: %d, want 1", n)
		}
		res, err = s.Run(late, req, drWork(db, req.Key, []byte("new"), nil))
		wantOutcome(t, "takeover", res, err, sqlonce.FirstRun, ptr("new"))
		if n := ledgerRows(t, ctx, db, req.Key); n != 2 {
			t.Fatalf("ledger rows: %d, want 2", n)
		}
	})
}

func drFnPanics[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 2)
	const poolSize = 3
	d, inUse := ownHandle(t, db, poolSize)
	s := e.newStore(t, d, dedupe.WithTTL(time.Minute))
	t0 := clockBase()
	type boom struct{ n int }
	expired := dedupe.Request{Scope: "run-panic", Key: "expired"}
	res, err := s.Run(at(ctx, t0, 0), expired, drWork(db, expired.Key, []byte("old"), nil))
	wantOutcome(t, "record", res, err, sqlonce.FirstRun, nil)
	old := keyRow(t, ctx, db, expired.Scope, expired.Key)
	const panics = 2 * poolSize
	for i := range panics {
		req := dedupe.Request{Scope: "run-panic", Key: "k"}
		if i%2 == 1 {
			req = expired // taking over an expired key
		}
		p := catchPanic(func() {
			_, _ = s.Run(at(ctx, t0, time.Hour), req, func(ctx context.Context, tx TTx) ([]byte, error) {
				if err := db.Tx(tx).LedgerInsert(ctx, req.Key, 1); err != nil {
					return nil, err
				}
				panic(boom{i})
			})
		})
		if p != (boom{i}) {
			t.Fatalf("panic %d: recovered %v, want fn's panic value", i, p)
		}
	}
	if n := inUse(); n != 0 {
		t.Fatalf("%d connections still out after %d panics", n, panics)
	}
	if n := ledgerRows(t, ctx, db, "k"); n != 0 {
		t.Fatalf("ledger rows after panics: %d, want 0", n)
	}
	if _, ok, err := db.Key(ctx, "run-panic", "k"); err != nil || ok {
		t.Fatalf("a key was left by a panicking fn (%v)", err)
	}
	sameRow(t, "expired key after panicking takeovers", keyRow(t, ctx, db, expired.Scope, expired.Key), old)
	if n := ledgerRows(t, ctx, db, expired.Key); n != 1 {
		t.Fatalf("ledger rows for the expired key: %d, want 1", n)
	}
	// The pool still serves twice its size of Runs, one at a time.
	for i := range 2 * poolSize {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		req := dedupe.Request{Scope: "run-panic", Key: fmt.Sprintf("after-%d", i)}
		res, err := s.Run(cctx, req, drWork(db, req.Key, []byte("ok"), nil))
		cancel()
		wantOutcome(t, req.Key, res, err, sqlonce.FirstRun, ptr("ok"))
	}
	res, err = s.Run(at(ctx, t0, time.Hour), dedupe.Request{Scope: "run-panic", Key: "k"}, drWork(db, "k", []byte("ok"), nil))
	wantOutcome(t, "the key fn panicked on", res, err, sqlonce.FirstRun, ptr("ok"))
	if n := inUse(); n != 0 {
		t.Fatalf("%d connections out at the end", n)
	}
}

func drTooLarge[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 0)
	const limit = 1024
	s := e.newStore(t, db.Driver(), dedupe.WithMaxResponseSize(limit), dedupe.WithTTL(time.Minute))
	t0 := clockBase()
	req := dedupe.Request{Scope: "run-big", Key: "k"}
	var calls atomic.Int64
	res, err := s.Run(ctx, req, drWork(db, req.Key, make([]byte, limit+1), &calls))
	wantErr(t, "limit + 1", err, sqlonce.ErrResponseTooLarge)
	if res.Outcome != 0 {
		t.Fatalf("got %v with the error", res.Outcome)
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("fn ran %d times, want 1", c)
	}
	_, _, err = dedupe.RunJSON(ctx, s, req, func(ctx context.Context, tx TTx) (string, error) {
		return strings.Repeat("x", limit), db.Tx(tx).LedgerInsert(ctx, req.Key, 1)
	})
	wantErr(t, "RunJSON over the limit", err, sqlonce.ErrResponseTooLarge)
	if n := keyCount(t, ctx, db); n != 0 {
		t.Fatalf("%d keys, want 0", n)
	}
	if n := ledgerRows(t, ctx, db, req.Key); n != 0 {
		t.Fatalf("ledger rows: %d, want 0", n)
	}
	body := bytes.Repeat([]byte{0x5a}, limit)
	res, err = s.Run(at(ctx, t0, 0), req, drWork(db, req.Key, body, nil))
	wantOutcome(t, "at the limit", res, err, sqlonce.FirstRun, ptr(string(body)))

	// Over the limit while taking over the expired key: it stays.
	old := keyRow(t, ctx, db, req.Scope, req.Key)
	_, err = s.Run(at(ctx, t0, time.Hour), req, drWork(db, req.Key, make([]byte, limit+1), nil))
	wantErr(t, "limit + 1 on the expired key", err, sqlonce.ErrResponseTooLarge)
	sameRow(t, "after a takeover over the limit", keyRow(t, ctx, db, req.Scope, req.Key), old)
	if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
		t.Fatalf("ledger rows: %d, want 1", n)
	}
}

func drInvalidArguments[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 0)
	stores := map[string]*dedupe.Store[TTx]{"with a handle": e.newStore(t, db.Driver())}
	long := strings.Repeat("k", sqlonce.MaxKeyLen+1)
	for sname, s := range stores {
		var calls atomic.Int64
		fn := drWork(db, "k", []byte("x"), &calls)
		for _, c := range []struct {
			name  string
			req   dedupe.Request
			nilFn bool
			want  error
		}{
			{"nil fn", dedupe.Request{Scope: "s", Key: "k"}, true, sqlonce.ErrInvalidArgument},
			{"empty key", dedupe.Request{Scope: "s", Key: ""}, false, sqlonce.ErrInvalidKey},
			{"empty scope", dedupe.Request{Scope: "", Key: "k"}, false, sqlonce.ErrInvalidKey},
			{"long key", dedupe.Request{Scope: "s", Key: long}, false, sqlonce.ErrInvalidKey},
			{"long scope", dedupe.Request{Scope: long, Key: "k"}, false, sqlonce.ErrInvalidKey},
			{"invalid UTF-8", dedupe.Request{Scope: "s", Key: "\xff"}, false, sqlonce.ErrInvalidKey},
			{"NUL in key", dedupe.Request{Scope: "s", Key: "a\x00b"}, false, sqlonce.ErrInvalidKey},
			{"long fingerprint", dedupe.Request{Scope: "s", Key: "k", Fingerprint: make([]byte, sqlonce.MaxFingerprintLen+1)}, false, sqlonce.ErrInvalidKey},
			{"negative TTL", dedupe.Request{Scope: "s", Key: "k", TTL: -time.Second}, false, sqlonce.ErrInvalidArgument},
		} {
			what := sname + ", " + c.name
			var (
				res sqlonce.Result
				err error
			)
			if c.nilFn {
				res, err = s.Run(ctx, c.req, nil)
			} else {
				res, err = s.Run(ctx, c.req, fn)
			}
			wantErr(t, what, err, c.want)
			if res.Outcome != 0 {
				t.Fatalf("%s: got %v, %v", what, res.Outcome, err)
			}
			if c.nilFn {
				_, res, err = dedupe.RunJSON[int](ctx, s, c.req, nil)
			} else {
				_, res, err = dedupe.RunJSON(ctx, s, c.req, func(ctx context.Context, tx TTx) (int, error) {
					calls.Add(1)
					return 1, nil
				})
			}
			wantErr(t, what+" (RunJSON)", err, c.want)
			if res.Outcome != 0 {
				t.Fatalf("%s (RunJSON): got %v, %v", what, res.Outcome, err)
			}
		}
		wantNoCalls(t, sname, &calls)
	}
	if n := keyCount(t, ctx, db); n != 0 {
		t.Fatalf("%d keys, want 0", n)
	}
	if n := ledgerRows(t, ctx, db, "k"); n != 0 {
		t.Fatalf("ledger rows: %d, want 0", n)
	}
}

// fn commits or rolls back the transaction Run gave it: a caller bug,
// reported as sqlonce.ErrInvalidArgument. What the database holds then
// is logged, not asserted: fn's work may have committed without the
// key.
func drFnEndsTx[TTx any](t *testing.T, e drEnv[TTx]) {
	for _, end := range []string{"commit", "rollback"} {
		for _, expired := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/expired=%v", end, expired), func(t *testing.T) {
				ctx := ctxT(t)
				db := e.f(t, 0)
				s := e.newStore(t, db.Driver(), dedupe.WithTTL(time.Minute))
				t0 := clockBase()
				req := dedupe.Request{Scope: "run-end", Key: "k"}
				if expired {
					res, err := s.Run(at(ctx, t0, 0), req, drWork(db, "old", []byte("old"), nil))
					wantOutcome(t, "record", res, err, sqlonce.FirstRun, nil)
				}
				now := at(ctx, t0, time.Hour)
				var calls atomic.Int64
				res, err := s.Run(now, req, func(ctx context.Context, tx TTx) ([]byte, error) {
					calls.Add(1)
					if err := db.Tx(tx).LedgerInsert(ctx, req.Key, 1); err != nil {
						return nil, err
					}
					if end == "commit" {
						return []byte("ended"), db.Commit(ctx, tx)
					}
					return []byte("ended"), db.Rollback(ctx, tx)
				})
				if !errors.Is(err, sqlonce.ErrInvalidArgument) {
					t.Errorf("fn ended the transaction: %v, want %v", err, sqlonce.ErrInvalidArgument)
				}
				if res.Outcome != 0 {
					t.Errorf("got %v with the error", res.Outcome)
				}
				row, ok, kerr := db.Key(ctx, req.Scope, req.Key)
				must(t, kerr)
				t.Logf("error: %v; fn ran %d times; ledger rows %d; key row %v: state %d response %q",
					err, calls.Load(), ledgerRows(t, ctx, db, req.Key), ok, row.State, row.Response)
				// The connection went back usable: the next Run works.
				other := dedupe.Request{Scope: "run-end", Key: "next"}
				res, err = s.Run(now, other, drWork(db, other.Key, []byte("ok"), nil))
				wantOutcome(t, "the next Run", res, err, sqlonce.FirstRun, ptr("ok"))
			})
		}
	}
}

// fn's first attempts deadlock on two shared rows: Run runs fn again
// in a new transaction, and only the committed attempts leave effects.
func drRetriesDeadlock[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 6)
	skipOnSQLite(t, db, sqliteNoRowLocks)
	s := e.newStore(t, db.Driver())
	var ids [2]int64
	for i := range ids {
		var err error
		ids[i], err = db.Pool().OrderInsert(ctx, fmt.Sprintf("R-%d", i), fmt.Sprintf("rita-%d", i), 1)
		must(t, err)
	}
	var (
		calls    atomic.Int64
		attempts [2]atomic.Int64
		arrived  sync.WaitGroup
	)
	arrived.Add(2)
	bothThere := make(chan struct{})
	go func() { arrived.Wait(); close(bothThere) }()
	// add adds 1 to an order's amount. The version guard misses when
	// the row changed between the read and the update (a PostgreSQL
	// READ COMMITTED update that waited re-checks it): read again.
	add := func(ctx context.Context, tx TTx, id int64) error {
		biz := db.Tx(tx)
		for range 5 {
			v, err := biz.OrderGetVersion(ctx, id)
			if err != nil {
				return err
			}
			if n, err := biz.OrderAddAmount(ctx, id, v, 1); err != nil || n == 1 {
				return err
			}
		}
		return fmt.Errorf("order %d keeps changing", id)
	}
	results := make([]sqlonce.Result, 2)
	errs := race(2, func(i int) error {
		key := fmt.Sprintf("k-%d", i)
		var err error
		results[i], err = s.Run(ctx, dedupe.Request{Scope: "run-deadlock", Key: key}, func(ctx context.Context, tx TTx) ([]byte, error) {
			calls.Add(1)
			n := attempts[i].Add(1)
			// Racer 0 takes order 0 then order 1, racer 1 the reverse.
			if err := add(ctx, tx, ids[i]); err != nil {
				return nil, err
			}
			if n == 1 {
				arrived.Done()
				select {
				case <-bothThere:
				case <-time.After(10 * time.Second):
				}
			}
			if err := add(ctx, tx, ids[1-i]); err != nil {
				return nil, err
			}
			return []byte(key), db.Tx(tx).LedgerInsert(ctx, key, 1)
		})
		return err
	})
	noErrors(t, errs)
	for i, res := range results {
		if !res.FirstRun() || string(res.Response) != fmt.Sprintf("k-%d", i) {
			t.Errorf("racer %d: got %v %q, want first run", i, res.Outcome, res.Response)
		}
		if n := ledgerRows(t, ctx, db, fmt.Sprintf("k-%d", i)); n != 1 {
			t.Errorf("k-%d: %d ledger rows, want 1", i, n)
		}
	}
	if c := calls.Load(); c < 3 {
		t.Errorf("fn ran %d times, want at least 3 (a deadlock and its retry)", c)
	}
	for _, id := range ids {
		o, err := db.Pool().OrderGetByID(ctx, id)
		must(t, err)
		if o.Amount != 3 {
			t.Errorf("order %d: amount %d, want 3 (1 + one committed attempt of each run)", id, o.Amount)
		}
	}
	if n := keyCount(t, ctx, db); n != 2 {
		t.Fatalf("%d keys, want 2", n)
	}
	t.Logf("fn ran %d times (racer 0: %d, racer 1: %d)", calls.Load(), attempts[0].Load(), attempts[1].Load())
}

// drBoundedWait is the NoWait and LockWait200ms cases: a Store with opt
// gives up on a key another transaction holds (drHolders: a Run of the
// same Store whose fn has not returned yet, or a caller's transaction that
// ran Do and is still open), on PostgreSQL after minWait at the least.
// MySQL's Run with a no-wait or bounded-wait Store takes the claim-first
// path in a transaction of its own.
func drBoundedWait[TTx any](t *testing.T, e drEnv[TTx], opt dedupe.Option, minWait time.Duration) {
	for _, h := range drHolders[TTx]() {
		t.Run(h.name, func(t *testing.T) {
			ctx := ctxT(t)
			db := e.f(t, 6)
			skipOnSQLite(t, db, sqliteNoKeyWait)
			s := e.newStore(t, db.Driver(), opt)
			req := dedupe.Request{Scope: "run-wait", Key: "k"}
			end, holderDone := h.hold(t, ctx, db, s, req)
			// fn would succeed: if it runs, what follows shows.
			var calls atomic.Int64
			r, elapsed, returned := drRunWatched(t, ctx, s, req, drWork(db, req.Key, []byte("never"), &calls), 15*time.Second, func() { end(true) })
			// Giving up while the holder still holds the key is
			// what shows the bound; how soon after the lock wait
			// it returns depends on the machine's load.
			if !returned {
				t.Errorf("Run still waited after 15s while the key was held; it returned %v, %v after the holder committed", r.res.Outcome, r.err)
			} else {
				if !errors.Is(r.err, sqlonce.ErrInProgress) {
					t.Errorf("Run while the key is held: %v, %v; want %v", r.res.Outcome, r.err, sqlonce.ErrInProgress)
				}
				if db.Dialect() == "postgres" && elapsed < minWait*9/10 {
					t.Errorf("gave up after %v, want about %v", elapsed, minWait)
				}
				end(true)
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("fn ran %d times for a key another transaction held", n)
			}
			t.Logf("Run returned after %v: %v, %v", elapsed.Round(time.Millisecond), r.res.Outcome, r.err)
			if holderDone != nil {
				hr := <-holderDone
				wantOutcome(t, "holder", hr.res, hr.err, sqlonce.FirstRun, ptr("holder"))
			}
			var never atomic.Int64
			res, err := s.Run(ctx, req, drNever[TTx](&never))
			wantOutcome(t, "Run after the holder committed", res, err, sqlonce.AlreadyDone, nil)
			if holderDone != nil && string(res.Response) != "holder" {
				t.Errorf("replay %q, want the holder's response", res.Response)
			}
			if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
				t.Fatalf("ledger rows: %d, want 1", n)
			}
			if n := keyCount(t, ctx, db); n != 1 {
				t.Fatalf("%d keys, want 1", n)
			}
		})
	}
}

func drDefaultStoreWaits[TTx any](t *testing.T, e drEnv[TTx]) {
	t.Run("HeldByRun", func(t *testing.T) {
		ctx := ctxT(t)
		db := e.f(t, 6)
		s := e.newStore(t, db.Driver())
		req := dedupe.Request{Scope: "run-wait", Key: "k"}
		release, holderDone := drHold(t, ctx, db, s, req, "holder")
		var calls atomic.Int64
		r, elapsed, returned := drRunWatched(t, ctx, s, req, drWork(db, req.Key, []byte("second"), &calls), e.untilHeld(db), release)
		release()
		hr := <-holderDone
		if !shapeOf(db, e.favor).holdsKey {
			// Nothing holds the key while the holder's fn runs: the
			// second Run records it first, and the holder's INSERT then
			// fails, its work rolls back, and it replays.
			if !returned {
				t.Errorf("the second Run waited %v for the holder", elapsed)
			}
			wantOutcome(t, "second", r.res, r.err, sqlonce.FirstRun, ptr("second"))
			wantOutcome(t, "holder", hr.res, hr.err, sqlonce.AlreadyDone, ptr("second"))
		} else {
			if returned {
				t.Fatalf("the second Run returned (%v, %v) after %v while the holder's fn ran", r.res.Outcome, r.err, elapsed)
			}
			wantOutcome(t, "holder", hr.res, hr.err, sqlonce.FirstRun, ptr("holder"))
			wantOutcome(t, "second", r.res, r.err, sqlonce.AlreadyDone, ptr("holder"))
			if c := calls.Load(); c != 0 {
				t.Errorf("the second Run's fn ran %d times, want never", c)
			}
		}
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("ledger rows: %d, want 1", n)
		}
		if n := keyCount(t, ctx, db); n != 1 {
			t.Fatalf("%d keys, want 1", n)
		}
		t.Logf("second Run returned after %v", elapsed.Round(time.Millisecond))
	})

	// The run that holds the key fails: the waiting run then runs fn
	// itself, in the transaction its first round trip began.
	t.Run("HeldByRunThatFails", func(t *testing.T) {
		ctx := ctxT(t)
		db := e.f(t, 6)
		s := e.newStore(t, db.Driver())
		req := dedupe.Request{Scope: "run-wait", Key: "k"}
		started, rel := make(chan struct{}), make(chan struct{})
		holderErr := errors.New("the holder's work failed")
		holderDone := make(chan drResult, 1)
		go func() {
			res, err := s.Run(ctx, req, func(ctx context.Context, tx TTx) ([]byte, error) {
				if err := db.Tx(tx).LedgerInsert(ctx, req.Key, 1); err != nil {
					return nil, err
				}
				close(started)
				<-rel
				return nil, holderErr
			})
			holderDone <- drResult{res, err}
		}()
		<-started
		var once sync.Once
		release := func() { once.Do(func() { close(rel) }) }
		var calls atomic.Int64
		// Where nothing holds the key while the holder's fn runs (the
		// database/sql drivers) the second Run does not wait and
		// records the key; the holder's fn fails after that, and the
		// holder answers as any later repeat would: with the second's
		// record, not its own error.
		r, elapsed, _ := drRunWatched(t, ctx, s, req, drWork(db, req.Key, []byte("second"), &calls), e.untilHeld(db), release)
		release()
		hr := <-holderDone
		if shapeOf(db, e.favor).holdsKey {
			// The second Run waits for the holder's rollback, then
			// runs and records the key; the holder, its fn failed,
			// answers its own error, or AlreadyDone with the second's
			// response when that was recorded by the time it looked
			// (Run's doc allows both; under load either comes first).
			if !errors.Is(hr.err, holderErr) && !(hr.err == nil && hr.res.AlreadyDone() && string(hr.res.Response) == "second") {
				t.Fatalf("holder: (%v, %v), want its own error or AlreadyDone with the second's response", hr.res, hr.err)
			}
		} else {
			wantOutcome(t, "holder, failed after the second recorded the key", hr.res, hr.err, sqlonce.AlreadyDone, ptr("second"))
		}
		wantOutcome(t, "second", r.res, r.err, sqlonce.FirstRun, ptr("second"))
		if c := calls.Load(); c < 1 {
			t.Fatalf("the second Run's fn ran %d times", c)
		}
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("ledger rows: %d, want 1", n)
		}
		if got := keyRow(t, ctx, db, req.Scope, req.Key); string(got.Response) != "second" {
			t.Fatalf("recorded response %q, want %q", got.Response, "second")
		}
		t.Logf("second Run returned after %v", elapsed.Round(time.Millisecond))
	})

	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("HeldByDo/commit=%v", commit), func(t *testing.T) {
			ctx := ctxT(t)
			db := e.f(t, 6)
			s := e.newStore(t, db.Driver())
			req := dedupe.Request{Scope: "run-wait", Key: "k"}
			tx := holdKey(t, ctx, db, s, req)
			var calls atomic.Int64
			r, elapsed, returned := drRunWatched(t, ctx, s, req, drWork(db, req.Key, []byte("run"), &calls), blockedFor, func() {
				if commit {
					must(t, db.Commit(ctx, tx))
				} else {
					must(t, db.Rollback(ctx, tx))
				}
			})
			if returned {
				t.Fatalf("Run returned (%v, %v) after %v while Do's transaction held the key", r.res.Outcome, r.err, elapsed)
			}
			if commit {
				wantOutcome(t, "Run after Do committed", r.res, r.err, sqlonce.AlreadyDone, nil)
			} else {
				wantOutcome(t, "Run after Do rolled back", r.res, r.err, sqlonce.FirstRun, ptr("run"))
			}
			if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
				t.Fatalf("ledger rows: %d, want 1", n)
			}
			if n := keyCount(t, ctx, db); n != 1 {
				t.Fatalf("%d keys, want 1", n)
			}
			t.Logf("Run returned after %v, fn ran %d times", elapsed.Round(time.Millisecond), calls.Load())
		})
	}
}

// pgxdriver runs Run in its own round trips on a *pgxpool.Pool or a
// *pgx.Conn only; any other Beginner takes the generic path, which
// claims the key first.
func drOtherBeginner[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 2)
	if _, ok := any(db).(harness.DB[pgx.Tx]); !ok {
		t.Skip("pgxdriver only: the other drivers take a *sql.DB")
	}
	pool := pgPool(t, db, int32(Racers)+2)
	// claimed counts the key's rows fn's transaction sees: its own
	// claim on the generic path, none on the fast one.
	claimed := func(ctx context.Context, tx pgx.Tx, req dedupe.Request) (int64, error) {
		var n int64
		err := tx.QueryRow(ctx, "SELECT count(*) FROM sqlonce_keys WHERE scope = $1 AND idempotency_key = $2", req.Scope, req.Key).Scan(&n)
		return n, err
	}
	for _, c := range []struct {
		name    string
		driver  *pgxdriver.Driver
		claimed int64
	}{
		{"wrapped pool", testdrv.Pgx(t, beginOnly{pool}), 1},
		{"pool", testdrv.Pgx(t, pool), 0},
	} {
		s, err := dedupe.New[pgx.Tx](c.driver)
		must(t, err)
		req := dedupe.Request{Scope: "run-beginner", Key: c.name}
		res, err := s.Run(ctx, req, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			n, err := claimed(ctx, tx, req)
			if err == nil && n != c.claimed {
				err = fmt.Errorf("fn's transaction sees %d rows of its key, want %d", n, c.claimed)
			}
			return []byte("ok"), err
		})
		wantOutcome(t, c.name, res, err, sqlonce.FirstRun, ptr("ok"))
	}

	s, err := dedupe.New[pgx.Tx](testdrv.Pgx(t, beginOnly{pool}))
	must(t, err)
	for round := range 3 {
		req := dedupe.Request{Scope: "run-beginner", Key: fmt.Sprintf("race-%d", round)}
		var calls atomic.Int64
		results := make([]sqlonce.Result, Racers)
		bodies := make([][]byte, Racers)
		for i := range bodies {
			bodies[i] = fmt.Appendf(nil, "racer %d", i)
		}
		errs := race(Racers, func(i int) error {
			var err error
			results[i], err = s.Run(ctx, req, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				calls.Add(1)
				if n, err := claimed(ctx, tx, req); err != nil || n != 1 {
					return nil, fmt.Errorf("not the generic path: %d rows of the key (%v)", n, err)
				}
				return bodies[i], db.Tx(any(tx).(TTx)).LedgerInsert(ctx, req.Key, 1)
			})
			return err
		})
		noErrors(t, errs)
		w := drOneWinner(t, req, results, bodies)
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Errorf("%s: %d ledger rows, want 1", req.Key, n)
		}
		if row := keyRow(t, ctx, db, req.Scope, req.Key); !bytes.Equal(row.Response, bodies[w]) {
			t.Errorf("%s: stored %q, want the winner's %q", req.Key, row.Response, bodies[w])
		}
		if c := calls.Load(); c != 1 {
			t.Errorf("%s: fn ran %d times, want 1", req.Key, c)
		}
	}

	// fn ending the transaction, and a panic, on the generic path.
	for _, end := range []string{"commit", "rollback"} {
		req := dedupe.Request{Scope: "run-beginner", Key: "end-" + end}
		_, err := s.Run(ctx, req, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			if end == "commit" {
				return []byte("ended"), tx.Commit(ctx)
			}
			return []byte("ended"), tx.Rollback(ctx)
		})
		wantErr(t, "fn's "+end+" on the generic path", err, sqlonce.ErrInvalidArgument)
	}
	p := catchPanic(func() {
		_, _ = s.Run(ctx, dedupe.Request{Scope: "run-beginner", Key: "panic"}, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			panic("boom")
		})
	})
	if p != "boom" {
		t.Fatalf("recovered %v, want fn's panic", p)
	}
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired", n)
	}
	if _, ok, err := db.Key(ctx, "run-beginner", "panic"); err != nil || ok {
		t.Fatalf("a key was left by a panicking fn (%v)", err)
	}
}

// MySQL records a response in 1 MiB pieces: each must land in order.
func drLargeResponse[TTx any](t *testing.T, e drEnv[TTx]) {
	ctx := ctxT(t)
	db := e.f(t, 0)
	s := e.newStore(t, db.Driver(), dedupe.WithMaxResponseSize(dedupe.MaxResponseSize), dedupe.WithTTL(time.Minute))
	t0 := clockBase()
	const mib = 1 << 20
	for _, size := range []int{mib - 1, mib, mib + 1, 3 * mib, 3*mib + 17, dedupe.MaxResponseSize} {
		body := drBody(size)
		req := dedupe.Request{Scope: "run-large", Key: fmt.Sprint(size)}
		for pass, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
			res, err := s.Run(at(ctx, t0, 0), req, drWork(db, req.Key, body, nil))
			must(t, err)
			if res.Outcome != want || !bytes.Equal(res.Response, body) {
				t.Fatalf("%d bytes, call %d: got %v with %d bytes, want %v with %d", size, pass, res.Outcome, len(res.Response), want, size)
			}
		}
		if row := keyRow(t, ctx, db, req.Scope, req.Key); !bytes.Equal(row.Response, body) {
			t.Fatalf("%d bytes: stored %d bytes, not the response", size, len(row.Response))
		}
		if n := ledgerRows(t, ctx, db, req.Key); n != 1 {
			t.Fatalf("%d bytes: %d ledger rows, want 1", size, n)
		}
	}
	// Taking over an expired key with a large response.
	req := dedupe.Request{Scope: "run-large", Key: fmt.Sprint(3 * mib)}
	body := drBody(3*mib + 1)
	body[0] ^= 0xff
	for pass, want := range []sqlonce.Outcome{sqlonce.FirstRun, sqlonce.AlreadyDone} {
		res, err := s.Run(at(ctx, t0, time.Hour), req, drWork(db, req.Key, body, nil))
		must(t, err)
		if res.Outcome != want || !bytes.Equal(res.Response, body) {
			t.Fatalf("takeover, call %d: got %v with %d bytes, want %v with %d", pass, res.Outcome, len(res.Response), want, len(body))
		}
	}
	if row := keyRow(t, ctx, db, req.Scope, req.Key); !bytes.Equal(row.Response, body) {
		t.Fatalf("takeover: stored %d bytes, not the response", len(row.Response))
	}
	if n := ledgerRows(t, ctx, db, req.Key); n != 2 {
		t.Fatalf("takeover: %d ledger rows, want 2", n)
	}
}

// drHolder holds a key in another transaction for the bounded-wait cases.
type drHolder[TTx any] struct {
	name string
	hold func(t *testing.T, ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request) (end func(commit bool), done <-chan drResult)
}

// drHolders are the two ways another transaction holds the key: a Run of
// the same Store whose fn has not returned yet, or a caller's transaction
// that ran Do and is still open.
func drHolders[TTx any]() []drHolder[TTx] {
	return []drHolder[TTx]{
		{"HeldByRun", func(t *testing.T, ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request) (func(bool), <-chan drResult) {
			release, done := drHold(t, ctx, db, s, req, "holder")
			return func(bool) { release() }, done
		}},
		{"HeldByDo", func(t *testing.T, ctx context.Context, db harness.DB[TTx], s *dedupe.Store[TTx], req dedupe.Request) (func(bool), <-chan drResult) {
			tx := holdKey(t, ctx, db, s, req)
			return func(commit bool) {
				if commit {
					must(t, db.Commit(ctx, tx))
				} else {
					must(t, db.Rollback(ctx, tx))
				}
			}, nil
		}},
	}
}

// untilHeld is how long drRunWatched lets a second Run go before it
// releases the holder: blockedFor where the holder holds the key (the
// second must still wait then), and where nothing holds it while fn
// runs (database/sql) long enough for the second Run to finish on a
// loaded machine, so that it records the key before the holder ends.
func (e drEnv[TTx]) untilHeld(db harness.DB[TTx]) time.Duration {
	if shapeOf(db, e.favor).holdsKey {
		return blockedFor
	}
	return time.Minute
}

// drRunWatched runs s.Run in a goroutine and returns its result, or
// reports the Run as still waiting after limit and then waits for it
// after calling unblock.
func drRunWatched[TTx any](t *testing.T, ctx context.Context, s *dedupe.Store[TTx], req dedupe.Request, fn func(context.Context, TTx) ([]byte, error), limit time.Duration, unblock func()) (drResult, time.Duration, bool) {
	t.Helper()
	out := make(chan drResult, 1)
	start := time.Now()
	go func() {
		res, err := s.Run(ctx, req, fn)
		out <- drResult{res, err}
	}()
	select {
	case r := <-out:
		return r, time.Since(start), true
	case <-time.After(limit):
	}
	unblock()
	r := <-out
	return r, time.Since(start), false
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
