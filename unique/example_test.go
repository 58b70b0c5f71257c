package unique_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/unique"
)

// The client generated the order code; a retried request inserts nothing
// new, and the transaction goes on to commit its other writes.
func ExampleInserter_Insert() {
	ctx := context.Background()
	pool := postgres("unique")
	defer pool.Close()

	ins, err := unique.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}
	for range 2 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := ins.Insert(ctx, tx, "orders_code_key", func(ctx context.Context) error {
				_, err := tx.Exec(ctx, "INSERT INTO orders (code, amount) VALUES ('ORD-2026-0001', 250)")
				return err
			})
			if err != nil {
				return err
			}
			fmt.Println(res)
			// Still usable after a duplicate, on PostgreSQL too.
			_, err = tx.Exec(ctx, "INSERT INTO ledger (ref, amount) VALUES ('audit', 0)")
			return err
		})
		if err != nil {
			panic(err)
		}
	}
	var orders, audits int
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM ledger)").Scan(&orders, &audits); err != nil {
		panic(err)
	}
	fmt.Println("orders:", orders, "audit rows:", audits)
	// Output:
	// first run
	// already done
	// orders: 1 audit rows: 2
}

// A repeat gets the row the first call inserted.
func ExampleInsertOrGet() {
	ctx := context.Background()
	pool := postgres("unique_get")
	defer pool.Close()

	ins, err := unique.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}
	for range 2 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			id, res, err := unique.InsertOrGet(ctx, ins, tx, "orders_code_key",
				func(ctx context.Context) (id int64, err error) {
					err = tx.QueryRow(ctx, "INSERT INTO orders (code) VALUES ('ORD-7') RETURNING id").Scan(&id)
					return id, err
				},
				func(ctx context.Context) (id int64, err error) {
					err = tx.QueryRow(ctx, "SELECT id FROM orders WHERE code = 'ORD-7'").Scan(&id)
					return id, err
				})
			fmt.Println(res, "order", id)
			return err
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// first run order 1
	// already done order 1
}

// The insert is one statement, as a sqlc-generated call is: on MySQL,
// MariaDB and SQLite InsertOne runs it without a savepoint, in the round
// trips of the bare transaction, and InsertOneOrGet reads the existing row
// on a repeat.
func ExampleInsertOneOrGet() {
	ctx := context.Background()
	db := mariadb("unique_one")
	defer db.Close()

	ins, err := unique.New(mysqldriver.New(db))
	if err != nil {
		panic(err)
	}
	for range 2 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		id, res, err := unique.InsertOneOrGet(ctx, ins, tx, "orders_code_key",
			func(ctx context.Context) (int64, error) {
				r, err := tx.ExecContext(ctx, "INSERT INTO orders (code, amount) VALUES (?, ?)", "ORD-9", 250)
				if err != nil {
					return 0, err
				}
				return r.LastInsertId()
			},
			func(ctx context.Context) (id int64, err error) {
				// A locking read: under REPEATABLE READ a plain SELECT
				// reads the transaction's snapshot.
				err = tx.QueryRowContext(ctx, "SELECT id FROM orders WHERE code = ? LOCK IN SHARE MODE", "ORD-9").Scan(&id)
				return id, err
			})
		if err != nil {
			_ = tx.Rollback()
			panic(err)
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
		fmt.Println(res, "order", id)
	}
	// Output:
	// first run order 1
	// already done order 1
}

// On PostgreSQL an INSERT that cannot fail on its key needs no savepoint:
// ON CONFLICT (code) DO NOTHING inserts no row on a repeat, and Inserted
// judges the affected-rows count, as sqlc's :execrows returns it. A
// duplicate on another unique constraint is still an error.
func ExampleInserted() {
	ctx := context.Background()
	pool := postgres("unique_rows")
	defer pool.Close()

	for range 2 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx,
				"INSERT INTO orders (code, amount) VALUES ($1, $2) ON CONFLICT (code) DO NOTHING", "ORD-42", 250)
			if err != nil {
				return err
			}
			res, err := unique.Inserted(ctx, tag.RowsAffected())
			if err != nil {
				return err
			}
			var id int64
			if err := tx.QueryRow(ctx, "SELECT id FROM orders WHERE code = $1", "ORD-42").Scan(&id); err != nil {
				return err
			}
			fmt.Println(res, "order", id)
			return nil
		})
		if err != nil {
			panic(err)
		}
	}
	// Output:
	// first run order 1
	// already done order 1
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

// mariadb does the same on MySQL or MariaDB (SQLONCE_MYSQL_DSN, or the
// local default below), in a database of the example's own.
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
	// The business table the example writes.
	if _, err := db.ExecContext(ctx, `
		CREATE TABLE orders (
		    id     BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
		    code   VARCHAR(64) NOT NULL,
		    amount BIGINT      NOT NULL DEFAULT 0,
		    UNIQUE KEY orders_code_key (code)
		)`); err != nil {
		panic(err)
	}
	return db
}
