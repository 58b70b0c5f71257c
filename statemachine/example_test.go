package statemachine_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/exampledb"
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
	pool := exampledb.Postgres("statemachine")
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
