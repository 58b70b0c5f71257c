package roundtrips

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/internal/testclock"
	"github.com/sqlonce/sqlonce/optimistic"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/statemachine"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/tests/internal/wire"
	"github.com/sqlonce/sqlonce/token"
	"github.com/sqlonce/sqlonce/unique"
)

// env is one database seen through a counter: the driver under test and
// transactions are on a handle whose traffic is counted.
type env[TTx any] struct {
	h        harness.DB[TTx] // the test's database, for business queries on a tx
	d        sqlonce.Driver[TTx]
	begin    func(ctx context.Context) (TTx, error)
	commit   func(ctx context.Context, tx TTx) error
	rollback func(ctx context.Context, tx TTx) error
	reset    func()
	counts   func() wire.Counts
	// got is the last measurement.
	got wire.Counts
}

// measure counts what op sends: the counters are reset before it and read
// after it returns.
func (e *env[TTx]) measure(op func() error) error {
	e.reset()
	err := op()
	e.got = e.counts()
	return err
}

func (e *env[TTx]) withTx(ctx context.Context, fn func(tx TTx) error) error {
	tx, err := e.begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = e.rollback(ctx, tx)
		return err
	}
	return e.commit(ctx, tx)
}

func postgresEnv(t *testing.T) *env[pgx.Tx] {
	h := harness.Postgres(t, 4)
	cfg, err := pgxpool.ParseConfig(h.DSN())
	must(t, err)
	p := wire.Start(t, "postgres", fmt.Sprintf("%s:%d", cfg.ConnConfig.Host, cfg.ConnConfig.Port), 0)
	host, port, _ := strings.Cut(p.Addr(), ":")
	cfg.ConnConfig.Host = host
	fmt.Sscan(port, &cfg.ConnConfig.Port)
	cfg.MaxConns = 2
	cfg.MinConns = 0
	// The pool pings a connection idle for over a second before handing it
	// out: a round trip that depends on timing, not on the path.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	must(t, err)
	t.Cleanup(pool.Close)
	return &env[pgx.Tx]{
		h: h, d: testdrv.Pgx(t, pool),
		begin:    func(ctx context.Context) (pgx.Tx, error) { return pool.Begin(ctx) },
		commit:   func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) },
		rollback: func(ctx context.Context, tx pgx.Tx) error { return tx.Rollback(ctx) },
		reset:    p.Reset, counts: p.Counts,
	}
}

// pgsqlEnv is PostgreSQL through database/sql with pgx's stdlib driver,
// its default statement cache on, behind the same proxy as postgresEnv.
func pgsqlEnv(t *testing.T) *env[*sql.Tx] {
	h := harness.PostgresSQL(t, 4)
	cfg, err := pgx.ParseConfig(h.DSN())
	must(t, err)
	p := wire.Start(t, "postgres", fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), 0)
	host, port, _ := strings.Cut(p.Addr(), ":")
	cfg.Host = host
	fmt.Sscan(port, &cfg.Port)
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	t.Cleanup(func() { db.Close() })
	return sqlEnv(h, testdrv.PgSQL(t, db), db, p.Reset, p.Counts)
}

func mysqlEnv(t *testing.T) *env[*sql.Tx] {
	h := harness.MySQL(t, 4)
	cfg, err := mysql.ParseDSN(h.DSN())
	must(t, err)
	p := wire.Start(t, "mysql", cfg.Addr, 0)
	cfg.Addr = p.Addr()
	// The application's own statements take one round trip each, as they
	// do with interpolateParams or statements of its own prepared once; the
	// counts then show sqlonce's statements, not the client's setting.
	cfg.InterpolateParams = true
	conn, err := mysql.NewConnector(cfg)
	must(t, err)
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	t.Cleanup(func() { db.Close() })
	return sqlEnv(h, testdrv.MySQL(t, db), db, p.Reset, p.Counts)
}

func sqliteEnv(t *testing.T) *env[*sql.Tx] {
	h := harness.SQLite(t, 4)
	db, c, err := openCounting(modernc.DriverName, h.DSN())
	must(t, err)
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	t.Cleanup(func() { db.Close() })
	// A counting wrapper around modernc.org/sqlite: New asks it for an
	// error and finds the library's.
	d, err := sqlitedriver.New(db)
	must(t, err)
	return sqlEnv(h, d, db, func() { c.n.Store(0) }, func() wire.Counts {
		return wire.Counts{Statements: int(c.n.Load())}
	})
}

func sqlEnv(h harness.DB[*sql.Tx], d sqlonce.Driver[*sql.Tx], db *sql.DB, reset func(), counts func() wire.Counts) *env[*sql.Tx] {
	return &env[*sql.Tx]{
		h: h, d: d,
		begin:    func(ctx context.Context) (*sql.Tx, error) { return db.BeginTx(ctx, nil) },
		commit:   func(_ context.Context, tx *sql.Tx) error { return tx.Commit() },
		rollback: func(_ context.Context, tx *sql.Tx) error { return tx.Rollback() },
		reset:    reset, counts: counts,
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// path is one operation whose cost is counted. run prepares what the
// operation needs (a key already recorded, a lease, a row) with key n, and
// runs the operation itself inside e.measure.
type path[TTx any] struct {
	name string
	run  func(ctx context.Context, e *env[TTx], n int) error
}

// batchSize is the number of message ids a batch path claims.
const batchSize = 100

var response = []byte(`{"order_id":123456789,"status":"accepted"}`)

func want(res sqlonce.Result, err error, first bool) error {
	if err != nil {
		return err
	}
	if first && !res.FirstRun() || !first && !res.AlreadyDone() {
		return fmt.Errorf("got %v, want first run %v", res, first)
	}
	return nil
}

type status string

var machine = statemachine.Must(statemachine.New(statemachine.Edge(status("created"), status("paid"))))

// stepsOp is an operation of a database step (a ledger row) and an
// outside step that calls nothing.
func stepsOp[TTx any](e *env[TTx], n int) *dedupe.Operation[TTx] {
	return &dedupe.Operation[TTx]{Name: "rt", Steps: []dedupe.Step[TTx]{
		{Name: "write", InTx: func(ctx context.Context, tx TTx, st dedupe.StepState) ([]byte, error) {
			return nil, e.h.Tx(tx).LedgerInsert(ctx, fmt.Sprint("steps", n), 100)
		}},
		{Name: "call", Outside: func(ctx context.Context, st dedupe.StepState) ([]byte, error) { return response, nil }},
	}}
}

func paths[TTx any]() []path[TTx] {
	store := func(e *env[TTx]) *dedupe.Store[TTx] {
		s, err := dedupe.New(e.d)
		if err != nil {
			panic(err)
		}
		return s
	}
	req := func(n int) dedupe.Request {
		k := fmt.Sprintf("k%d", n)
		return dedupe.Request{Scope: "rt", Key: k, Fingerprint: dedupe.Fingerprint([]byte(k))}
	}
	do := func(ctx context.Context, e *env[TTx], n int, first bool) error {
		return e.withTx(ctx, func(tx TTx) error {
			res, err := store(e).Do(ctx, tx, req(n), func(ctx context.Context) error {
				return e.h.Tx(tx).LedgerInsert(ctx, fmt.Sprint("do", n), 100)
			})
			return want(res, err, first)
		})
	}
	doResponse := func(ctx context.Context, e *env[TTx], n int, first bool) error {
		return e.withTx(ctx, func(tx TTx) error {
			res, err := store(e).DoResponse(ctx, tx, req(n), func(ctx context.Context) ([]byte, error) {
				return response, e.h.Tx(tx).LedgerInsert(ctx, fmt.Sprint("resp", n), 100)
			})
			return want(res, err, first)
		})
	}
	runFavor := func(ctx context.Context, e *env[TTx], n int, first bool, favor dedupe.Favor) error {
		s, err := dedupe.New(e.d, dedupe.WithFavor(favor))
		if err != nil {
			return err
		}
		res, err := s.Run(ctx, req(n), func(ctx context.Context, tx TTx) ([]byte, error) {
			return response, e.h.Tx(tx).LedgerInsert(ctx, fmt.Sprint("run", n), 100)
		})
		return want(res, err, first)
	}
	run := func(ctx context.Context, e *env[TTx], n int, first bool) error {
		return runFavor(ctx, e, n, first, dedupe.FavorDefault)
	}
	claim := func(ctx context.Context, e *env[TTx], n int) (*dedupe.Lease, error) {
		l, res, err := store(e).Claim(ctx, req(n), time.Minute)
		return l, want(res, err, true)
	}
	order := func(ctx context.Context, e *env[TTx], n int) (int64, error) {
		return e.h.Pool().OrderInsert(ctx, fmt.Sprint("o", n), fmt.Sprint("c", n), 100)
	}
	insert := func(ctx context.Context, e *env[TTx], n int, first bool) error {
		return e.withTx(ctx, func(tx TTx) error {
			res, err := uniqueInserter(e).Insert(ctx, tx, "orders_code_key", func(ctx context.Context) error {
				_, err := e.h.Tx(tx).OrderInsert(ctx, fmt.Sprint("u", n), fmt.Sprint("cu", n), 100)
				return err
			})
			return want(res, err, first)
		})
	}
	insertOne := func(ctx context.Context, e *env[TTx], n int, first bool) error {
		return e.withTx(ctx, func(tx TTx) error {
			res, err := uniqueInserter(e).InsertOne(ctx, tx, "orders_code_key", func(ctx context.Context) error {
				_, err := e.h.Tx(tx).OrderInsert(ctx, fmt.Sprint("u", n), fmt.Sprint("cu", n), 100)
				return err
			})
			return want(res, err, first)
		})
	}
	inserted := func(ctx context.Context, e *env[TTx], n int, first bool) error {
		return e.withTx(ctx, func(tx TTx) error {
			rows, err := e.h.Tx(tx).OrderInsertIfAbsent(ctx, fmt.Sprint("u", n), fmt.Sprint("cu", n), 100)
			if err != nil {
				return err
			}
			res, err := unique.Inserted(ctx, rows)
			return want(res, err, first)
		})
	}
	update := func(ctx context.Context, e *env[TTx], id int64, first bool) error {
		return e.withTx(ctx, func(tx TTx) error {
			b := e.h.Tx(tx)
			rows, err := b.OrderAddAmount(ctx, id, 1, 100)
			if err != nil {
				return err
			}
			res, err := optimistic.Update(ctx, rows, 1, func(ctx context.Context) (int64, error) { return b.OrderGetVersion(ctx, id) })
			return want(res, err, first)
		})
	}
	transition := func(ctx context.Context, e *env[TTx], id int64, first bool) error {
		return e.withTx(ctx, func(tx TTx) error {
			b := e.h.Tx(tx)
			res, err := machine.Transition(ctx, "created", "paid",
				func(ctx context.Context) (int64, error) { return b.OrderSetStatus(ctx, id, "created", "paid") },
				func(ctx context.Context) (status, error) { s, err := b.OrderGetStatus(ctx, id); return status(s), err })
			return want(res, err, first)
		})
	}
	tokens := func(e *env[TTx]) *token.Store[TTx] {
		s, err := token.New(e.d)
		if err != nil {
			panic(err)
		}
		return s
	}
	consume := func(ctx context.Context, e *env[TTx], tok string, n int, first bool) error {
		return e.withTx(ctx, func(tx TTx) error {
			res, err := tokens(e).Consume(ctx, tx, "rt", tok)
			if err == nil && res.FirstRun() {
				err = e.h.Tx(tx).LedgerInsert(ctx, fmt.Sprint("tok", n), 100)
			}
			return want(res, err, first)
		})
	}
	handle := func(ctx context.Context, e *env[TTx], n int, first bool) error {
		in, err := inbox.New(e.d, "rt")
		if err != nil {
			return err
		}
		res, err := in.Handle(ctx, fmt.Sprint("m", n), func(ctx context.Context, tx TTx) error {
			return e.h.Tx(tx).LedgerInsert(ctx, fmt.Sprint("msg", n), 100)
		})
		return want(res, err, first)
	}
	handleBatch := func(ctx context.Context, e *env[TTx], n int, first bool) error {
		in, err := inbox.New(e.d, "rt")
		if err != nil {
			return err
		}
		ids := make([]string, batchSize)
		for i := range ids {
			ids[i] = fmt.Sprintf("b%d-%d", n, i)
		}
		res, err := in.HandleBatch(ctx, ids, func(ctx context.Context, tx TTx, fresh []string) error {
			// One statement for the batch's effects, as a bulk insert is.
			return e.h.Tx(tx).LedgerInsert(ctx, fmt.Sprint("batch", n), int64(len(fresh)))
		})
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.FirstRun() != first {
				return fmt.Errorf("got %v, want first run %v", r, first)
			}
		}
		return nil
	}
	post := func(ctx context.Context, e *env[TTx], n int, first bool) error {
		m, err := httpidem.New(e.d, func(*http.Request) string { return "u" })
		if err != nil {
			return err
		}
		h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx, ok := httpidem.TxFrom[TTx](r.Context())
			if !ok {
				http.Error(w, "no transaction", http.StatusInternalServerError)
				return
			}
			if err := e.h.Tx(tx).LedgerInsert(r.Context(), fmt.Sprint("http", n), 100); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(response)
		}))
		r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/orders", strings.NewReader(`{"amount":100}`))
		r.Header.Set("Idempotency-Key", fmt.Sprintf(`"h%d"`, n))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusCreated {
			return fmt.Errorf("status %d: %s", rec.Code, rec.Body)
		}
		if replayed := rec.Header().Get("Idempotent-Replayed") == "true"; replayed == first {
			return fmt.Errorf("replayed %v, want first run %v", replayed, first)
		}
		return nil
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	return []path[TTx]{
		{"bare tx: INSERT (reference)", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error {
				return e.withTx(ctx, func(tx TTx) error { return e.h.Tx(tx).LedgerInsert(ctx, fmt.Sprint("bare", n), 100) })
			})
		}},
		{"bare tx: UPDATE (reference)", func(ctx context.Context, e *env[TTx], n int) error {
			id, err := order(ctx, e, n)
			if err != nil {
				return err
			}
			return e.measure(func() error {
				return e.withTx(ctx, func(tx TTx) error { _, err := e.h.Tx(tx).OrderAddAmount(ctx, id, 1, 100); return err })
			})
		}},
		{"dedupe.Do first run", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { return do(ctx, e, n, true) })
		}},
		{"dedupe.Do replay", func(ctx context.Context, e *env[TTx], n int) error {
			if err := do(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error { return do(ctx, e, n, false) })
		}},
		{"dedupe.DoResponse first run", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { return doResponse(ctx, e, n, true) })
		}},
		{"dedupe.DoResponse replay", func(ctx context.Context, e *env[TTx], n int) error {
			if err := doResponse(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error { return doResponse(ctx, e, n, false) })
		}},
		{"dedupe.Run first run", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { return run(ctx, e, n, true) })
		}},
		{"dedupe.Run replay", func(ctx context.Context, e *env[TTx], n int) error {
			if err := run(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error { return run(ctx, e, n, false) })
		}},
		{"dedupe.Run takeover of a lapsed lease", func(ctx context.Context, e *env[TTx], n int) error {
			if _, err := claim(testclock.With(ctx, t0), e, n); err != nil {
				return err
			}
			later := testclock.With(ctx, t0.Add(2*time.Minute))
			return e.measure(func() error { return run(later, e, n, true) })
		}},
		{"dedupe.Run first run, FavorFirstRuns", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { return runFavor(ctx, e, n, true, dedupe.FavorFirstRuns) })
		}},
		{"dedupe.Run replay, FavorFirstRuns", func(ctx context.Context, e *env[TTx], n int) error {
			if err := run(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error { return runFavor(ctx, e, n, false, dedupe.FavorFirstRuns) })
		}},
		{"dedupe.Run takeover of a lapsed lease, FavorFirstRuns", func(ctx context.Context, e *env[TTx], n int) error {
			if _, err := claim(testclock.With(ctx, t0), e, n); err != nil {
				return err
			}
			later := testclock.With(ctx, t0.Add(2*time.Minute))
			return e.measure(func() error { return runFavor(later, e, n, true, dedupe.FavorFirstRuns) })
		}},
		{"dedupe.Run first run, FavorRepeats", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { return runFavor(ctx, e, n, true, dedupe.FavorRepeats) })
		}},
		{"dedupe.Run replay, FavorRepeats", func(ctx context.Context, e *env[TTx], n int) error {
			if err := run(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error { return runFavor(ctx, e, n, false, dedupe.FavorRepeats) })
		}},
		{"dedupe.Run first run, WithNoWait", func(ctx context.Context, e *env[TTx], n int) error {
			s, err := dedupe.New(e.d, dedupe.WithNoWait())
			if err != nil {
				return err
			}
			return e.measure(func() error {
				res, err := s.Run(ctx, req(n), func(ctx context.Context, tx TTx) ([]byte, error) {
					return response, e.h.Tx(tx).LedgerInsert(ctx, fmt.Sprint("run", n), 100)
				})
				return want(res, err, true)
			})
		}},
		{"dedupe.Do first run, WithNoWait", func(ctx context.Context, e *env[TTx], n int) error {
			s, err := dedupe.New(e.d, dedupe.WithNoWait())
			if err != nil {
				return err
			}
			return e.measure(func() error {
				return e.withTx(ctx, func(tx TTx) error {
					res, err := s.Do(ctx, tx, req(n), func(ctx context.Context) error {
						return e.h.Tx(tx).LedgerInsert(ctx, fmt.Sprint("do", n), 100)
					})
					return want(res, err, true)
				})
			})
		}},
		{"lease Claim", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { _, err := claim(ctx, e, n); return err })
		}},
		{"lease Complete", func(ctx context.Context, e *env[TTx], n int) error {
			l, err := claim(ctx, e, n)
			if err != nil {
				return err
			}
			return e.measure(func() error { return store(e).Complete(ctx, l, response) })
		}},
		{"lease Release", func(ctx context.Context, e *env[TTx], n int) error {
			l, err := claim(ctx, e, n)
			if err != nil {
				return err
			}
			return e.measure(func() error { return store(e).Release(ctx, l) })
		}},
		{"dedupe.RunSteps first run, two steps", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error {
				res, err := store(e).RunSteps(ctx, req(n), nil, stepsOp(e, n))
				return want(res, err, true)
			})
		}},
		{"dedupe.RunSteps first run, one database step", func(ctx context.Context, e *env[TTx], n int) error {
			op := stepsOp(e, n)
			op.Steps = op.Steps[:1]
			return e.measure(func() error {
				res, err := store(e).RunSteps(ctx, req(n), nil, op)
				return want(res, err, true)
			})
		}},
		{"dedupe.RunSteps replay", func(ctx context.Context, e *env[TTx], n int) error {
			if _, err := store(e).RunSteps(ctx, req(n), nil, stepsOp(e, n)); err != nil {
				return err
			}
			return e.measure(func() error {
				res, err := store(e).RunSteps(ctx, req(n), nil, stepsOp(e, n))
				return want(res, err, false)
			})
		}},
		{"unique.Insert first run", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { return insert(ctx, e, n, true) })
		}},
		{"unique.Insert duplicate", func(ctx context.Context, e *env[TTx], n int) error {
			if err := insert(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error { return insert(ctx, e, n, false) })
		}},
		{"unique.InsertOrGet duplicate", func(ctx context.Context, e *env[TTx], n int) error {
			if err := insert(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error {
				return e.withTx(ctx, func(tx TTx) error {
					b := e.h.Tx(tx)
					code := fmt.Sprint("u", n)
					_, res, err := uniqueInsertOrGet(ctx, uniqueInserter(e), tx,
						func(ctx context.Context) (int64, error) { return b.OrderInsert(ctx, code, fmt.Sprint("cu", n), 100) },
						func(ctx context.Context) (int64, error) { o, err := b.OrderGetByCode(ctx, code); return o.ID, err })
					return want(res, err, false)
				})
			})
		}},
		{"unique.Insert, 10 first runs in one tx", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error {
				return e.withTx(ctx, func(tx TTx) error {
					for i := range 10 {
						res, err := uniqueInserter(e).Insert(ctx, tx, "orders_code_key", func(ctx context.Context) error {
							_, err := e.h.Tx(tx).OrderInsert(ctx, fmt.Sprint("u", n, "-", i), fmt.Sprint("cu", n, "-", i), 100)
							return err
						})
						if err := want(res, err, true); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}},
		{"unique.InsertOne first run", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { return insertOne(ctx, e, n, true) })
		}},
		{"unique.InsertOne duplicate", func(ctx context.Context, e *env[TTx], n int) error {
			if err := insertOne(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error { return insertOne(ctx, e, n, false) })
		}},
		{"unique.InsertOneOrGet duplicate", func(ctx context.Context, e *env[TTx], n int) error {
			if err := insertOne(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error {
				return e.withTx(ctx, func(tx TTx) error {
					b := e.h.Tx(tx)
					code := fmt.Sprint("u", n)
					_, res, err := unique.InsertOneOrGet(ctx, uniqueInserter(e), tx, "orders_code_key",
						func(ctx context.Context) (int64, error) { return b.OrderInsert(ctx, code, fmt.Sprint("cu", n), 100) },
						func(ctx context.Context) (int64, error) { o, err := b.OrderGetByCode(ctx, code); return o.ID, err })
					return want(res, err, false)
				})
			})
		}},
		{"unique.Inserted first run", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { return inserted(ctx, e, n, true) })
		}},
		{"unique.Inserted duplicate", func(ctx context.Context, e *env[TTx], n int) error {
			if err := inserted(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error { return inserted(ctx, e, n, false) })
		}},
		{"unique.Inserted duplicate + read", func(ctx context.Context, e *env[TTx], n int) error {
			if err := inserted(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error {
				return e.withTx(ctx, func(tx TTx) error {
					b := e.h.Tx(tx)
					code := fmt.Sprint("u", n)
					rows, err := b.OrderInsertIfAbsent(ctx, code, fmt.Sprint("cu", n), 100)
					if err != nil {
						return err
					}
					res, err := unique.Inserted(ctx, rows)
					if err == nil && res.AlreadyDone() {
						_, err = b.OrderGetByCode(ctx, code)
					}
					return want(res, err, false)
				})
			})
		}},
		{"optimistic.Update first run", func(ctx context.Context, e *env[TTx], n int) error {
			id, err := order(ctx, e, n)
			if err != nil {
				return err
			}
			return e.measure(func() error { return update(ctx, e, id, true) })
		}},
		{"optimistic.Update repeat", func(ctx context.Context, e *env[TTx], n int) error {
			id, err := order(ctx, e, n)
			if err == nil {
				err = update(ctx, e, id, true)
			}
			if err != nil {
				return err
			}
			return e.measure(func() error { return update(ctx, e, id, false) })
		}},
		{"statemachine.Transition first run", func(ctx context.Context, e *env[TTx], n int) error {
			id, err := order(ctx, e, n)
			if err != nil {
				return err
			}
			return e.measure(func() error { return transition(ctx, e, id, true) })
		}},
		{"statemachine.Transition repeat", func(ctx context.Context, e *env[TTx], n int) error {
			id, err := order(ctx, e, n)
			if err == nil {
				err = transition(ctx, e, id, true)
			}
			if err != nil {
				return err
			}
			return e.measure(func() error { return transition(ctx, e, id, false) })
		}},
		{"token.Issue", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { _, err := tokens(e).Issue(ctx, "rt"); return err })
		}},
		{"token.Consume first run", func(ctx context.Context, e *env[TTx], n int) error {
			tok, err := tokens(e).Issue(ctx, "rt")
			if err != nil {
				return err
			}
			return e.measure(func() error { return consume(ctx, e, tok, n, true) })
		}},
		{"token.Consume repeat", func(ctx context.Context, e *env[TTx], n int) error {
			tok, err := tokens(e).Issue(ctx, "rt")
			if err == nil {
				err = consume(ctx, e, tok, n, true)
			}
			if err != nil {
				return err
			}
			return e.measure(func() error { return consume(ctx, e, tok, n, false) })
		}},
		{"inbox.Handle first run", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { return handle(ctx, e, n, true) })
		}},
		{"inbox.Handle replay", func(ctx context.Context, e *env[TTx], n int) error {
			if err := handle(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error { return handle(ctx, e, n, false) })
		}},
		{"inbox.HandleBatch of 100 ids, first run", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { return handleBatch(ctx, e, n, true) })
		}},
		{"inbox.HandleBatch of 100 ids, replay", func(ctx context.Context, e *env[TTx], n int) error {
			if err := handleBatch(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error { return handleBatch(ctx, e, n, false) })
		}},
		{"httpidem first run", func(ctx context.Context, e *env[TTx], n int) error {
			return e.measure(func() error { return post(ctx, e, n, true) })
		}},
		{"httpidem replay", func(ctx context.Context, e *env[TTx], n int) error {
			if err := post(ctx, e, n, true); err != nil {
				return err
			}
			return e.measure(func() error { return post(ctx, e, n, false) })
		}},
	}
}

// warmups runs each path this often before counting, so that every
// statement is prepared on every pooled connection; tries counts it this
// often and keeps the fewest: a statement database/sql or pgx has not yet
// prepared on the connection it picks costs a prepare more, never less.
const (
	warmups = 4
	tries   = 3
)

func count[TTx any](t *testing.T, e *env[TTx]) map[string]wire.Counts {
	ctx := context.Background()
	got := map[string]wire.Counts{}
	n := 0
	for _, p := range paths[TTx]() {
		var best wire.Counts
		for i := range warmups + tries {
			n++
			if err := p.run(ctx, e, n); err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
			if i < warmups {
				continue
			}
			if i == warmups || e.got.RoundTrips < best.RoundTrips {
				best.RoundTrips = e.got.RoundTrips
			}
			if i == warmups || e.got.Statements < best.Statements {
				best.Statements = e.got.Statements
			}
		}
		got[p.name] = best
	}
	return got
}

func TestRoundTrips(t *testing.T) {
	measured := map[string]map[string]wire.Counts{}
	t.Run("postgres", func(t *testing.T) { measured["postgres"] = count(t, postgresEnv(t)) })
	t.Run("pgsql", func(t *testing.T) { measured["pgsql"] = count(t, pgsqlEnv(t)) })
	t.Run("mysql", func(t *testing.T) { measured["mysql"] = count(t, mysqlEnv(t)) })
	t.Run("sqlite", func(t *testing.T) { measured["sqlite"] = count(t, sqliteEnv(t)) })

	var bad []string
	var names []string
	for name := range documented {
		names = append(names, name)
	}
	for _, p := range paths[pgx.Tx]() {
		if _, ok := documented[p.name]; !ok {
			bad = append(bad, p.name+": not in the documented table")
		}
	}
	sort.Strings(names)
	for _, name := range names {
		doc := documented[name]
		check := func(dialect string, wantRT, wantSt int) {
			m, ok := measured[dialect]
			if !ok {
				return // skipped
			}
			c, ok := m[name]
			if !ok {
				bad = append(bad, fmt.Sprintf("%s: documented, not measured", name))
				return
			}
			if dialect != "sqlite" && c.RoundTrips != wantRT {
				bad = append(bad, fmt.Sprintf("%s on %s: %d round trips, documented %d", name, dialect, c.RoundTrips, wantRT))
			}
			if c.Statements != wantSt {
				bad = append(bad, fmt.Sprintf("%s on %s: %d statements, documented %d", name, dialect, c.Statements, wantSt))
			}
		}
		check("postgres", doc.pgRT, doc.pgSt)
		check("pgsql", doc.pgsqlRT, doc.pgsqlSt)
		check("mysql", doc.myRT, doc.mySt)
		check("sqlite", 0, doc.liteSt)
	}
	if len(bad) > 0 || testing.Verbose() {
		var b strings.Builder
		for _, p := range paths[pgx.Tx]() {
			pg, ps, my, lite := measured["postgres"][p.name], measured["pgsql"][p.name], measured["mysql"][p.name], measured["sqlite"][p.name]
			fmt.Fprintf(&b, "\t%q: {%d, %d, %d, %d, %d, %d, %d},\n", p.name, pg.RoundTrips, pg.Statements,
				ps.RoundTrips, ps.Statements, my.RoundTrips, my.Statements, lite.Statements)
		}
		t.Logf("measured (pgRT, pgSt, pgsqlRT, pgsqlSt, myRT, mySt, liteSt):\n%s", b.String())
	}
	if len(bad) > 0 {
		t.Fatalf("round trips or statements changed; if on purpose, update the table in counts_test.go and docs/benchmarks.md:\n%s", strings.Join(bad, "\n"))
	}
}
