package migrations_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// Apply sqlonce's migrations at start-up; a second run finds nothing to do.
// On PostgreSQL or MySQL/MariaDB pass their *sql.DB and migrations.Postgres
// or migrations.MySQL.
func ExampleUp() {
	ctx := context.Background()
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

	for range 2 {
		if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
			panic(err)
		}
	}
	p, err := migrations.NewProvider(migrations.SQLite, db)
	if err != nil {
		panic(err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("version:", v, "table:", migrations.TableName)
	// Output: version: 4 table: sqlonce_goose_db_version
}
