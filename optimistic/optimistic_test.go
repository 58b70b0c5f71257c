package optimistic

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/sqlonce/sqlonce"
)

func version[V any](v V) func(context.Context) (V, error) {
	return func(context.Context) (V, error) { return v, nil }
}

func failing[V any](err error) func(context.Context) (V, error) {
	return func(context.Context) (V, error) {
		var zero V
		return zero, err
	}
}

func TestUpdate(t *testing.T) {
	ctx := context.Background()
	errRead := errors.New("read failed")
	for _, tc := range []struct {
		name     string
		rows     int64
		expected int64
		current  func(context.Context) (int64, error)
		want     sqlonce.Outcome
		wantErr  error
	}{
		{"one row", 1, 3, version[int64](3), sqlonce.FirstRun, nil},
		{"moved on", 0, 3, version[int64](4), sqlonce.AlreadyDone, nil},
		{"moved far on", 0, 3, version[int64](40), sqlonce.AlreadyDone, nil},
		{"stale read", 0, 3, version[int64](3), 0, sqlonce.ErrStaleRead},
		{"never stored", 0, 3, version[int64](2), 0, sqlonce.ErrInvalidArgument},
		{"gone sql", 0, 3, failing[int64](sql.ErrNoRows), 0, sqlonce.ErrNotFound},
		{"gone wrapped", 0, 3, failing[int64](fmt.Errorf("get version: %w", sql.ErrNoRows)), 0, sqlonce.ErrNotFound},
		{"gone sentinel", 0, 3, failing[int64](sqlonce.ErrNotFound), 0, sqlonce.ErrNotFound},
		{"read error", 0, 3, failing[int64](errRead), 0, errRead},
		{"two rows", 2, 3, version[int64](4), 0, sqlonce.ErrTooManyRows},
		{"negative rows", -1, 3, version[int64](4), 0, sqlonce.ErrInvalidArgument},
		{"nil current, zero rows", 0, 3, nil, 0, sqlonce.ErrInvalidArgument},
		// A nil current would only fail on a repeat, the rare path: it is
		// refused on the first run too.
		{"nil current, one row", 1, 3, nil, 0, sqlonce.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Update(ctx, tc.rows, tc.expected, tc.current)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if res.Outcome != tc.want {
				t.Fatalf("outcome = %v, want %v", res.Outcome, tc.want)
			}
			if errors.Is(err, errRead) && errors.Is(err, sqlonce.ErrNotFound) {
				t.Fatalf("a failed read reported as not found: %v", err)
			}
			if (err != nil) != (res.Outcome == 0) {
				t.Fatalf("result %v with error %v", res, err)
			}
		})
	}
}

func TestUpdateStaleReadIsRetryable(t *testing.T) {
	_, err := Update(context.Background(), 0, int64(7), version[int64](7))
	if !sqlonce.IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = false", err)
	}
}

func TestUpdateCurrentNotCalledOnFirstRun(t *testing.T) {
	called := false
	res, err := Update(context.Background(), 1, 1, func(context.Context) (int, error) {
		called = true
		return 1, nil
	})
	if err != nil || !res.FirstRun() || called {
		t.Fatalf("got %v, %v, current called %v", res, err, called)
	}
	for _, rows := range []int64{2, -1} {
		if _, err := Update(context.Background(), rows, 1, func(context.Context) (int, error) {
			called = true
			return 1, nil
		}); err == nil || called {
			t.Fatalf("rows %d: err %v, current called %v", rows, err, called)
		}
	}
}

// Versions need not be integers: a timestamp string or any ordered type
// works, compared with cmp.Compare.
func TestUpdateOtherVersionTypes(t *testing.T) {
	ctx := context.Background()
	res, err := Update(ctx, 0, "2024-01-01T00:00:00Z", version("2024-01-01T00:00:01Z"))
	if err != nil || !res.AlreadyDone() {
		t.Fatalf("string version: %v, %v", res, err)
	}
	type rev uint32
	res, err = Update(ctx, 0, rev(9), version(rev(10)))
	if err != nil || !res.AlreadyDone() {
		t.Fatalf("uint32 version: %v, %v", res, err)
	}
	if _, err := Update(ctx, 0, 1.5, version(1.5)); !errors.Is(err, sqlonce.ErrStaleRead) {
		t.Fatalf("float version: %v", err)
	}
}
