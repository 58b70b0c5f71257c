package token_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/token"
)

// A checkout form carries a one-time token. The user double-clicks
// "Pay": the first submit consumes the token together with the order
// insert, the second finds it consumed and inserts nothing.
func Example() {
	ctx := context.Background()
	pool := postgres("token")
	defer pool.Close()

	tokens, err := token.New(pgxdriver.New(pool))
	if err != nil {
		panic(err)
	}
	scope := "checkout:session-81f2"
	tok, err := tokens.Issue(ctx, scope) // rendered into the form
	if err != nil {
		panic(err)
	}

	submit := func(formToken string) {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := tokens.Consume(ctx, tx, scope, formToken)
			if err != nil {
				return err
			}
			fmt.Println("submit:", res)
			if res.AlreadyDone() {
				return nil
			}
			_, err = tx.Exec(ctx, "INSERT INTO orders (code, amount) VALUES ('ord-1', 4200)")
			return err
		})
		if err != nil {
			fmt.Println("refused:", errors.Is(err, token.ErrUnknown))
		}
	}
	submit(tok)
	submit(tok)
	submit("forged-" + tok[7:])

	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&n); err != nil {
		panic(err)
	}
	fmt.Println("orders:", n)
	// Output:
	// submit: first run
	// submit: already done
	// refused: true
	// orders: 1
}

// A token is bound to its scope: one issued to one user's session cannot
// be spent by another's.
func Example_mysql() {
	ctx := context.Background()
	db := mariadb("token")
	defer db.Close()

	tokens, err := token.New(mysqldriver.New(db))
	if err != nil {
		panic(err)
	}
	tok, err := tokens.Issue(ctx, "transfer:alice")
	if err != nil {
		panic(err)
	}
	for _, scope := range []string{"transfer:mallory", "transfer:alice"} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		res, err := tokens.Consume(ctx, tx, scope, tok)
		switch {
		case errors.Is(err, token.ErrOtherScope):
			fmt.Println(scope, "refused: other scope")
			_ = tx.Rollback()
			continue
		case err != nil:
			panic(err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES ('transfer-1', -100)"); err != nil {
			panic(err)
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
		fmt.Println(scope, res)
	}
	// Output:
	// transfer:mallory refused: other scope
	// transfer:alice first run
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
