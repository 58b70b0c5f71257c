package sqlitedriver

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// probeTimeout bounds checkLibrary's probe.
const probeTimeout = 5 * time.Second

// probeSQL fails to parse on every SQL database, with no lock taken.
const probeSQL = "sqlonce probe: not a statement"

// checkLibrary refuses a *sql.DB whose errors do not come from one of the
// SQLite libraries the driver recognises: with any other, a busy database
// or a duplicate key would go unrecognised, and sqlonce would answer
// wrongly rather than fail.
//
// The library is told by the package path of db.Driver()'s type, without
// a round trip. A database/sql driver of another package (a tracing
// wrapper around one of them, or another database altogether) is asked
// for one error, a statement that does not parse, and accepted if that
// error is a supported library's.
func checkLibrary(db *sql.DB) error {
	pkg := pkgOf(db.Driver())
	if pkg == pkgModernc || pkg == pkgMattn {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	_, err := db.ExecContext(ctx, probeSQL)
	if err != nil && driver.Walk(err, func(e error) bool {
		_, ok := code(e)
		return ok
	}) {
		return nil
	}
	why := "its errors are not theirs"
	if err != nil {
		why = fmt.Sprintf("its error for a statement that does not parse is %T (%v)", err, err)
	}
	return fmt.Errorf("%w: sqlitedriver: the *sql.DB's database/sql driver is %T, from %s, and %s: sqlonce recognises the errors of %s and %s only (ncruces/go-sqlite3 is not supported)",
		sqlonce.ErrInvalidArgument, db.Driver(), pkg, why, pkgModernc, pkgMattn)
}

func pkgOf(v any) string {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "<nil>"
	}
	return t.PkgPath()
}
