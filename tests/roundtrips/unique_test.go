package roundtrips

import (
	"context"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/unique"
)

func uniqueInserter[TTx any](e *env[TTx]) *unique.Inserter[TTx] { return unique.New(e.d) }

func uniqueInsertOrGet[TTx any](ctx context.Context, u *unique.Inserter[TTx], tx TTx, insert, get func(context.Context) (int64, error)) (int64, sqlonce.Result, error) {
	return unique.InsertOrGet(ctx, u, tx, "orders_code_key", insert, get)
}
