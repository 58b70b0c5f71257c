package keys

import (
	"fmt"
	"reflect"

	"github.com/sqlonce/sqlonce"
)

// CheckTx returns an error matching sqlonce.ErrInvalidArgument when tx is
// nil: a nil interface (pgx.Tx) or an interface or pointer holding a nil
// pointer (a nil *sql.Tx, a nil *pgxpool.Tx in a pgx.Tx). Every call that
// takes the caller's transaction checks it before any SQL runs: database/sql
// would panic on a nil *sql.Tx, and a driver that fell back to its handle
// would commit the key at once, outside any transaction.
func CheckTx[TTx any](tx TTx) error {
	v := reflect.ValueOf(any(tx))
	if !v.IsValid() {
		return fmt.Errorf("%w: nil transaction", sqlonce.ErrInvalidArgument)
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		if v.IsNil() {
			return fmt.Errorf("%w: nil transaction (%T)", sqlonce.ErrInvalidArgument, any(tx))
		}
	}
	return nil
}
