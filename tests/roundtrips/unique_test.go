package roundtrips

import (
	"context"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/unique"
)

func uniqueInserter[TTx any](e *env[TTx]) *unique.Inserter[TTx] {
	ins, err := unique.New(e.d)
	if err != nil {
		panic(err) // e.d is a driver the env built: never nil
	}
	return ins
}

func uniqueInsertOrGet[TTx any](ctx context.Context, u *unique.Inserter[TTx], tx TTx, insert, get func(context.Context) (int64, error)) (int64, sqlonce.Result, error) {
	return unique.InsertOrGet(ctx, u, tx, "orders_code_key", insert, get)
}
