package dedupe_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// A payment request retried three times charges once. The key claim and
// the ledger write commit together.
func Example() {
	ctx := context.Background()
	pool := postgres("dedupe")
	defer pool.Close()

	store, err := dedupe.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}
	charge := func(idemKey string) {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := store.Do(ctx, tx, dedupe.Request{Scope: "payments", Key: idemKey},
				func(ctx context.Context) error {
					_, err := tx.Exec(ctx, "INSERT INTO ledger (ref, amount) VALUES ($1, $2)", idemKey, 100)
					return err
				})
			if err != nil {
				return err
			}
			fmt.Println(idemKey, res)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	for range 3 {
		charge("pay-7f3a")
	}

	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM ledger").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("ledger rows:", n)
	// Output:
	// pay-7f3a first run
	// pay-7f3a already done
	// pay-7f3a already done
	// ledger rows: 1
}

// The same with database/sql on MySQL or MariaDB.
func Example_mysql() {
	ctx := context.Background()
	db := mariadb("dedupe")
	defer db.Close()

	store, err := dedupe.New(mysqldriver.New(db))
	if err != nil {
		panic(err)
	}
	for range 2 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		res, err := store.Do(ctx, tx, dedupe.Request{Scope: "orders-consumer", Key: "msg-0001"},
			func(ctx context.Context) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, ?)", "msg-0001", 5)
				return err
			})
		if err != nil {
			_ = tx.Rollback()
			panic(err)
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
		fmt.Println(res)
	}
	// Output:
	// first run
	// already done
}

// A repeat gets the first run's answer back, byte for byte.
func ExampleStore_DoResponse() {
	ctx := context.Background()
	pool := postgres("dedupe_response")
	defer pool.Close()
	store, err := dedupe.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}

	createOrder := func() {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := store.DoResponse(ctx, tx, dedupe.Request{Scope: "client-42", Key: "create-order-1"},
				func(ctx context.Context) ([]byte, error) {
					var id int64
					err := tx.QueryRow(ctx, "INSERT INTO orders (code) VALUES ('A-1') RETURNING id").Scan(&id)
					return fmt.Appendf(nil, `{"order_id":%d}`, id), err
				})
			if err != nil {
				return err
			}
			fmt.Printf("%v: %s\n", res, res.Response)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	createOrder()
	createOrder()
	// Output:
	// first run: {"order_id":1}
	// already done: {"order_id":1}
}

type receipt struct {
	OrderID int64  `json:"order_id"`
	Status  string `json:"status"`
}

// DoJSON records and replays a Go value.
func ExampleDoJSON() {
	ctx := context.Background()
	pool := postgres("dedupe_json")
	defer pool.Close()
	store, err := dedupe.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}
	req := dedupe.Request{Scope: "client-42", Key: "checkout-9", Fingerprint: dedupe.Fingerprint([]byte("POST /checkout"), []byte(`{"cart":9}`))}
	for range 2 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			r, res, err := dedupe.DoJSON(ctx, store, tx, req, func(ctx context.Context) (receipt, error) {
				var id int64
				err := tx.QueryRow(ctx, "INSERT INTO orders (code, status) VALUES ('C-9', 'paid') RETURNING id").Scan(&id)
				return receipt{OrderID: id, Status: "paid"}, err
			})
			if err != nil {
				return err
			}
			fmt.Printf("%v: %+v\n", res, r)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// first run: {OrderID:1 Status:paid}
	// already done: {OrderID:1 Status:paid}
}

// Caller-supplied serial numbers: the scope is the authenticated caller, so
// two callers' serial number 1 never collide, and neither can read the
// other's answer.
func Example_serialNumbers() {
	ctx := context.Background()
	db := mariadb("dedupe_serial")
	defer db.Close()
	store, err := dedupe.New(mysqldriver.New(db))
	if err != nil {
		panic(err)
	}
	submit := func(caller, serial string) {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{})
		if err != nil {
			panic(err)
		}
		defer tx.Rollback()
		res, err := store.DoResponse(ctx, tx, dedupe.Request{Scope: caller, Key: serial},
			func(ctx context.Context) ([]byte, error) {
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, 1)", caller+"/"+serial)
				return []byte("accepted by " + caller), err
			})
		if err != nil {
			panic(err)
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
		fmt.Printf("%s #%s: %v (%s)\n", caller, serial, res, res.Response)
	}
	submit("alice", "1")
	submit("bob", "1")
	submit("alice", "1")
	// Output:
	// alice #1: first run (accepted by alice)
	// bob #1: first run (accepted by bob)
	// alice #1: already done (accepted by alice)
}

// postgres does what a program does once at start-up: it connects to
// PostgreSQL (SQLONCE_POSTGRES_DSN, or the local default below), installs
// sqlonce's tables with migrations.Up and creates the business tables.
// Each example works in a schema of its own, emptied on every run, so that
// its output is the same each time.
func postgres(name string) *pgxpool.Pool {
	ctx := context.Background()
	dsn := os.Getenv("SQLONCE_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		panic(err)
	}
	schema := "example_" + name
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	// sqlonce's tables: goose runs on database/sql.
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		panic(err)
	}
	// The business tables the examples write.
	if _, err := pool.Exec(ctx, `
		CREATE TABLE orders (
		    id      bigserial PRIMARY KEY,
		    code    text   NOT NULL CONSTRAINT orders_code_key UNIQUE,
		    amount  bigint NOT NULL DEFAULT 0,
		    status  text   NOT NULL DEFAULT 'created',
		    version bigint NOT NULL DEFAULT 1
		);
		CREATE TABLE ledger (
		    id     bigserial PRIMARY KEY,
		    ref    text   NOT NULL,
		    amount bigint NOT NULL
		)`); err != nil {
		panic(err)
	}
	return pool
}

// mariadb does what a program does once at start-up: it connects to
// MySQL or MariaDB (SQLONCE_MYSQL_DSN, or the local default below),
// installs sqlonce's tables with migrations.Up and creates the business tables.
// Each example works in a database of its own, emptied on every run, so
// that its output is the same each time.
func mariadb(name string) *sql.DB {
	ctx := context.Background()
	dsn := os.Getenv("SQLONCE_MYSQL_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		panic(err)
	}
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	defer admin.Close()
	cfg.DBName = "example_" + name
	for _, q := range []string{"DROP DATABASE IF EXISTS " + cfg.DBName, "CREATE DATABASE " + cfg.DBName} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			panic(err)
		}
	}
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
		panic(err)
	}
	// The business tables the examples write.
	if _, err := db.ExecContext(ctx, `
		CREATE TABLE orders (
		    id      BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
		    code    VARCHAR(64) NOT NULL,
		    amount  BIGINT      NOT NULL DEFAULT 0,
		    status  VARCHAR(32) NOT NULL DEFAULT 'created',
		    version BIGINT      NOT NULL DEFAULT 1,
		    UNIQUE KEY orders_code_key (code)
		)`); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `
		CREATE TABLE ledger (
		    id     BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
		    ref    VARCHAR(64) NOT NULL,
		    amount BIGINT      NOT NULL
		)`); err != nil {
		panic(err)
	}
	return db
}
