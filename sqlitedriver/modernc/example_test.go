package modernc_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// Open a database file with modernc.org/sqlite, configured as sqlonce
// needs, and build the driver on it.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "sqlonce-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	db, err := modernc.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	drv, err := sqlitedriver.New(db)
	if err != nil {
		panic(err)
	}
	fmt.Println(drv != nil, db.Stats().MaxOpenConnections)
	// Output: true 16
}
