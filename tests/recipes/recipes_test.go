// Package recipes shows, and tests, how the PostgreSQL users of sqlx,
// GORM, bun and ent reach the *sql.Tx that pgsqldriver's strategies take:
// each recipe races Racers goroutines on the same keys through the ORM's
// own transaction and counts the effects in the database.
package recipes

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	entdialect "entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	gormpg "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

const (
	// Racers run at once, Keys distinct keys among them: each key is
	// claimed by Racers/Keys goroutines together.
	Racers = 32
	Keys   = 4
)

// open returns a handle on a schema of t's own, with sqlonce's and the
// business tables.
func open(t *testing.T) *sql.DB {
	t.Helper()
	pg := testdb.NewPostgres(t, 2)
	db, err := sql.Open("pgx", pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(Racers + 2)
	t.Cleanup(func() { db.Close() })
	return db
}

// race runs attempt Racers times at once, key i%Keys each, retrying while
// sqlonce.IsRetryable, and checks that each key's work ran once: one
// ledger row per key, one FirstRun per key, the rest AlreadyDone.
func race(t *testing.T, db *sql.DB, attempt func(ctx context.Context, key string) (sqlonce.Result, error)) {
	t.Helper()
	ctx := context.Background()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first = map[string]int{}
		errs  []error
	)
	for i := range Racers {
		wg.Go(func() {
			key := fmt.Sprintf("order-%d", i%Keys)
			for {
				res, err := attempt(ctx, key)
				if sqlonce.IsRetryable(err) {
					continue
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if res.FirstRun() {
					first[key]++
				}
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	rows, err := db.QueryContext(ctx, "SELECT ref, count(*) FROM ledger GROUP BY ref")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	counted := map[string]int{}
	for rows.Next() {
		var ref string
		var n int
		if err := rows.Scan(&ref, &n); err != nil {
			t.Fatal(err)
		}
		counted[ref] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for k := range Keys {
		key := fmt.Sprintf("order-%d", k)
		if counted[key] != 1 || first[key] != 1 {
			t.Errorf("key %s: %d ledger rows, %d first runs; want 1 and 1", key, counted[key], first[key])
		}
	}
	if len(counted) != Keys {
		t.Errorf("ledger refs %v, want %d keys", counted, Keys)
	}
}

func request(key string) dedupe.Request { return dedupe.Request{Scope: "payments", Key: key} }

// sqlx: *sqlx.Tx embeds the *sql.Tx.
func TestSQLX(t *testing.T) {
	xdb := sqlx.NewDb(open(t), "pgx")
	store, err := dedupe.New(testdrv.PgSQL(t, xdb.DB))
	if err != nil {
		t.Fatal(err)
	}
	race(t, xdb.DB, func(ctx context.Context, key string) (sqlonce.Result, error) {
		tx, err := xdb.BeginTxx(ctx, nil)
		if err != nil {
			return sqlonce.Result{}, err
		}
		defer tx.Rollback()
		res, err := store.Do(ctx, tx.Tx, request(key), func(ctx context.Context) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES ($1, $2)", key, 100)
			return err
		})
		if err != nil {
			return res, err
		}
		return res, tx.Commit()
	})
}

// GORM: the *sql.Tx is the ConnPool of the transaction's Statement.
func TestGORM(t *testing.T) {
	db := open(t)
	gdb, err := gorm.Open(gormpg.New(gormpg.Config{Conn: db}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := gdb.DB()
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(testdrv.PgSQL(t, sqlDB))
	if err != nil {
		t.Fatal(err)
	}
	type Ledger struct {
		ID     int64
		Ref    string
		Amount int64
	}
	race(t, db, func(ctx context.Context, key string) (res sqlonce.Result, err error) {
		err = gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
			if !ok {
				return fmt.Errorf("GORM's transaction holds a %T, not a *sql.Tx", tx.Statement.ConnPool)
			}
			res, err = store.Do(ctx, sqlTx, request(key), func(ctx context.Context) error {
				return tx.Table("ledger").Create(&Ledger{Ref: key, Amount: 100}).Error
			})
			return err
		})
		return res, err
	})
}

// bun: bun.Tx embeds the *sql.Tx.
func TestBun(t *testing.T) {
	bdb := bun.NewDB(open(t), pgdialect.New())
	store, err := dedupe.New(testdrv.PgSQL(t, bdb.DB))
	if err != nil {
		t.Fatal(err)
	}
	type Ledger struct {
		bun.BaseModel `bun:"table:ledger"`
		ID            int64 `bun:"id,pk,autoincrement"`
		Ref           string
		Amount        int64
	}
	race(t, bdb.DB, func(ctx context.Context, key string) (res sqlonce.Result, err error) {
		err = bdb.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			res, err = store.Do(ctx, tx.Tx, request(key), func(ctx context.Context) error {
				_, err := tx.NewInsert().Model(&Ledger{Ref: key, Amount: 100}).Exec(ctx)
				return err
			})
			return err
		})
		return res, err
	})
}

// ent: a transaction of ent's dialect/sql driver holds the *sql.Tx. No
// generated client is needed to show it: ent's generated code runs its
// statements through the same entsql.Tx.
func TestEnt(t *testing.T) {
	drv := entsql.OpenDB(entdialect.Postgres, open(t))
	store, err := dedupe.New(testdrv.PgSQL(t, drv.DB()))
	if err != nil {
		t.Fatal(err)
	}
	race(t, drv.DB(), func(ctx context.Context, key string) (sqlonce.Result, error) {
		etx, err := drv.BeginTx(ctx, nil)
		if err != nil {
			return sqlonce.Result{}, err
		}
		defer etx.Rollback()
		sqlTx := etx.(*entsql.Tx).Tx.(*sql.Tx)
		res, err := store.Do(ctx, sqlTx, request(key), func(ctx context.Context) error {
			q, args := entsql.Dialect(entdialect.Postgres).Insert("ledger").Columns("ref", "amount").Values(key, 100).Query()
			var r sql.Result
			return etx.Exec(ctx, q, args, &r)
		})
		if err != nil {
			return res, err
		}
		return res, etx.Commit()
	})
}
