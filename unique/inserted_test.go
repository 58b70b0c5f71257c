package unique_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/unique"
)

func TestInserted(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		rows int64
		want sqlonce.Outcome
		err  error
	}{
		{1, sqlonce.FirstRun, nil},
		{0, sqlonce.AlreadyDone, nil},
		{2, 0, sqlonce.ErrTooManyRows},
		{-1, 0, sqlonce.ErrInvalidArgument},
	} {
		res, err := unique.Inserted(ctx, tc.rows)
		if res.Outcome != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("Inserted(%d) = %v, %v; want %v, %v", tc.rows, res, err, tc.want, tc.err)
		}
	}
}
