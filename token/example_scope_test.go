package token_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/sqlonce/sqlonce/token"
)

// openDB, in example_test.go, sets the database up as a program does at
// start-up; inTx runs a function in a transaction.

func Example_scope() {
	ctx := context.Background()
	db, drv, done := openDB(tables)
	defer done()

	tokens, err := token.New(drv)
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
