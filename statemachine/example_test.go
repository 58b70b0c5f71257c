package statemachine_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/statemachine"
)

type Status string

const (
	Created   Status = "created"
	Paid      Status = "paid"
	Shipped   Status = "shipped"
	Cancelled Status = "cancelled"
)

var orderStates = statemachine.Must(statemachine.New(
	statemachine.Edge(Created, Paid),
	statemachine.Edge(Paid, Shipped),
	statemachine.Edge(Created, Cancelled),
))

// A payment callback arrives three times, the last after the order shipped;
// a cancellation arrives after payment.
func ExampleMachine_Transition() {
	ctx := context.Background()
	pool := postgres("statemachine")
	defer pool.Close()

	var id int64
	if err := pool.QueryRow(ctx, "INSERT INTO orders (code) VALUES ('S-1') RETURNING id").Scan(&id); err != nil {
		panic(err)
	}
	move := func(from, to Status) {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := orderStates.Transition(ctx, from, to,
				func(ctx context.Context) (int64, error) {
					tag, err := tx.Exec(ctx, "UPDATE orders SET status = $1 WHERE id = $2 AND status = $3", to, id, from)
					return tag.RowsAffected(), err
				},
				func(ctx context.Context) (Status, error) {
					var s Status
					err := tx.QueryRow(ctx, "SELECT status FROM orders WHERE id = $1", id).Scan(&s)
					return s, err
				})
			if err != nil {
				return err
			}
			fmt.Printf("%s -> %s: %v\n", from, to, res)
			return nil
		})
		var terr *statemachine.TransitionError[Status]
		if errors.As(err, &terr) {
			fmt.Printf("%s -> %s: refused, order is %s (%v)\n", from, to, terr.Current, errors.Is(err, sqlonce.ErrInvalidTransition))
		} else if err != nil {
			panic(err)
		}
	}
	move(Created, Paid)
	move(Created, Paid)
	move(Paid, Shipped)
	move(Created, Paid)
	move(Created, Cancelled)
	// Output:
	// created -> paid: first run
	// created -> paid: already done
	// paid -> shipped: first run
	// created -> paid: already done
	// created -> cancelled: refused, order is shipped (true)
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
		)`); err != nil {
		panic(err)
	}
	return pool
}
