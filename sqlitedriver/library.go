package sqlitedriver

import (
	"context"
	"database/sql"
	"fmt"
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
// wrongly rather than fail. A handle it accepts is SQLite's, so its
// transactions need no dialect probe.
//
// The library is told by the package of db.Driver()'s type
// (driver.SQLDialect), without a round trip. A database/sql driver that
// SQLDialect does not know (a tracing wrapper around one of them, or
// another database altogether) is asked for one error, a statement that
// does not parse, and accepted if that error is a supported library's.
func checkLibrary(db *sql.DB) error {
	dialect, pkg := driver.SQLDialect(db)
	if pkg == pkgModernc || pkg == pkgMattn {
		return nil
	}
	why := "its errors are not theirs"
	if dialect == "" {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		_, err := db.ExecContext(ctx, probeSQL)
		if err != nil && driver.Walk(err, func(e error) bool {
			_, ok := code(e)
			return ok
		}) {
			return nil
		}
		if err != nil {
			why = fmt.Sprintf("its error for a statement that does not parse is %T (%v)", err, err)
		}
	} else if dialect != driver.SQLite {
		// Another database's handle: the error names the driver to use.
		return driver.WrongHandle(db, driver.SQLite, "sqlitedriver", sqlonce.ErrInvalidArgument)
	}
	return fmt.Errorf("%w: sqlitedriver: the *sql.DB's database/sql driver is %T, from %s, and %s: sqlonce recognises the errors of %s and %s only (ncruces/go-sqlite3 is not supported)",
		sqlonce.ErrInvalidArgument, db.Driver(), pkg, why, pkgModernc, pkgMattn)
}
