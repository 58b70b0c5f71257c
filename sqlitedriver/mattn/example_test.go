package mattn_test

import (
	"database/sql"

	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/mattn"
)

// With mattn/go-sqlite3 imported by the program (import _
// "github.com/mattn/go-sqlite3"), open the database with the DSN sqlonce
// needs and build the driver on it. (Not run here: the sqlonce module
// does not require that library; the tests module runs the whole
// conformance suite on it.)
func ExampleDSN() {
	db, err := sql.Open(mattn.DriverName, mattn.DSN("app.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(sqlitedriver.MaxOpenConns)
	drv, err := sqlitedriver.New(db)
	if err != nil {
		panic(err)
	}
	_ = drv
}
