package inbox_test

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

	"github.com/sqlonce/sqlonce/inbox"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// delivery stands in for a broker's message: an id the producer gave it,
// the same in every delivery, and the ack the consumer sends.
type delivery struct {
	id     string
	amount int64
}

func (d delivery) Ack() { fmt.Println("ack", d.id) }
func (d delivery) Nak() { fmt.Println("nak", d.id) }

// A consumer writes each payment message to the ledger. The broker
// delivers pay-1 twice (its first ack was lost) and pay-2 again after the
// first attempt failed: the ledger gets each payment once.
func Example() {
	ctx := context.Background()
	pool := postgres("inbox")
	defer pool.Close()

	in, err := inbox.New(pgxdriver.New(pool), "ledger-writer")
	if err != nil {
		panic(err)
	}
	failOnce := true
	for _, msg := range []delivery{{"pay-1", 100}, {"pay-1", 100}, {"pay-2", 250}, {"pay-2", 250}} {
		res, err := in.Handle(ctx, msg.id, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO ledger (ref, amount) VALUES ($1, $2)", msg.id, msg.amount); err != nil {
				return err
			}
			if msg.id == "pay-2" && failOnce {
				failOnce = false
				return errors.New("downstream check failed") // rolls the insert back
			}
			return nil
		})
		if err != nil {
			msg.Nak()
			continue
		}
		fmt.Print(res, ": ")
		msg.Ack() // after the commit, never before
	}

	var n, sum int64
	if err := pool.QueryRow(ctx, "SELECT count(*), sum(amount) FROM ledger").Scan(&n, &sum); err != nil {
		panic(err)
	}
	fmt.Println("ledger rows:", n, "total:", sum)
	// Output:
	// first run: ack pay-1
	// already done: ack pay-1
	// nak pay-2
	// first run: ack pay-2
	// ledger rows: 2 total: 350
}

// A consumer that runs its own transactions uses HandleTx, commits, then
// acks.
func ExampleInbox_HandleTx() {
	ctx := context.Background()
	db := mariadb("inbox")
	defer db.Close()

	in, err := inbox.New(mysqldriver.New(db), "order-projector")
	if err != nil {
		panic(err)
	}
	apply := func(msg delivery) error {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		defer tx.Rollback()
		res, err := in.HandleTx(ctx, tx, msg.id, func(ctx context.Context) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (code, amount) VALUES (?, ?)", msg.id, msg.amount)
			return err
		})
		if err != nil {
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		fmt.Print(res, ": ")
		msg.Ack()
		return nil
	}
	for _, msg := range []delivery{{"order-created-7", 4200}, {"order-created-7", 4200}} {
		if err := apply(msg); err != nil {
			panic(err)
		}
	}
	// Output:
	// first run: ack order-created-7
	// already done: ack order-created-7
}

// A consumer that pulls messages in batches applies each batch in one
// transaction: the ids are claimed in one statement, and fn gets only the
// ids not applied before. pay-1 was applied by an earlier batch whose ack
// was lost.
func ExampleInbox_HandleBatch() {
	ctx := context.Background()
	pool := postgres("inbox_batch")
	defer pool.Close()

	in, err := inbox.New(pgxdriver.New(pool), "ledger-writer")
	if err != nil {
		panic(err)
	}
	amounts := map[string]int64{"pay-1": 100, "pay-2": 250, "pay-3": 50}
	apply := func(ctx context.Context, tx pgx.Tx, fresh []string) error {
		for _, id := range fresh {
			if _, err := tx.Exec(ctx, "INSERT INTO ledger (ref, amount) VALUES ($1, $2)", id, amounts[id]); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := in.HandleBatch(ctx, []string{"pay-1"}, apply); err != nil {
		panic(err)
	}
	batch := []string{"pay-1", "pay-2", "pay-3"}
	res, err := in.HandleBatch(ctx, batch, apply)
	if err != nil {
		panic(err) // nak the batch: nothing of it was applied
	}
	for i, r := range res {
		fmt.Println(batch[i], r) // ack each message, after the commit
	}

	var n, sum int64
	if err := pool.QueryRow(ctx, "SELECT count(*), sum(amount) FROM ledger").Scan(&n, &sum); err != nil {
		panic(err)
	}
	fmt.Println("ledger rows:", n, "total:", sum)
	// Output:
	// pay-1 already done
	// pay-2 first run
	// pay-3 first run
	// ledger rows: 3 total: 400
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
