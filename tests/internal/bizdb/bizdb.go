// Package bizdb holds the example business tables (orders, ledger) that the
// tests and docs run the strategies against, and their sqlc-generated
// queries (pgbiz, mysqlbiz, sqlitebiz). They stand for an application's
// own tables.
package bizdb

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

//go:embed schema
var schema embed.FS

// Migrate creates the business tables with goose, in their own version
// table, the way an application migrates its schema next to sqlonce's.
func Migrate(ctx context.Context, db *sql.DB, dialect string) error {
	sub, err := fs.Sub(schema, "schema/"+dialect)
	if err != nil {
		return err
	}
	gd := goose.DialectPostgres
	switch dialect {
	case "mysql":
		gd = goose.DialectMySQL
	case "sqlite":
		gd = goose.DialectSQLite3
	}
	p, err := goose.NewProvider(gd, db, sub, goose.WithTableName("business_goose_db_version"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return err
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("business migrations: %w", err)
	}
	return nil
}
