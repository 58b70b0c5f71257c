package token_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/internal/exampledb"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/token"
)

// A checkout form carries a one-time token. The user double-clicks
// "Pay": the first submit consumes the token together with the order
// insert, the second finds it consumed and inserts nothing.
func Example() {
	ctx := context.Background()
	pool := exampledb.Postgres("token")
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
	db := exampledb.MySQL("token")
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
