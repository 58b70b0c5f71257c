package migrate_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	_ "github.com/lib/pq"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// Up and NewProvider refuse a dialect that does not match the handle's
// database/sql driver, naming both and the dialect to use, before any
// SQL: no version table, no schema, nothing left behind. Before, Up of
// migrations.MySQL on a PostgreSQL handle failed inside goose with
// "function database() does not exist".
func TestUpDialectMismatch(t *testing.T) {
	ctx := ctxSchema(t)
	pgSchema, pgDSN := testdb.EmptyPostgres(t)
	myName, myDSN := testdb.EmptyMySQL(t)
	pg := sqlDB(t, "pgx", pgDSN)
	pq := sqlDB(t, "postgres", pgDSN)
	my := sqlDB(t, "mysql", myDSN)
	lite, err := modernc.Open(testdb.EmptySQLite(t))
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	for _, c := range []struct {
		name    string
		db      *sql.DB
		dialect migrations.Dialect
		names   []string // what the error names
	}{
		{"pgx handle, mysql", pg, migrations.MySQL, []string{"dialect mysql", "PostgreSQL", "github.com/jackc/pgx/v5/stdlib", "use migrations.Postgres"}},
		{"pgx handle, sqlite", pg, migrations.SQLite, []string{"dialect sqlite", "PostgreSQL", "github.com/jackc/pgx/v5/stdlib", "use migrations.Postgres"}},
		{"lib/pq handle, mysql", pq, migrations.MySQL, []string{"dialect mysql", "PostgreSQL", "github.com/lib/pq", "use migrations.Postgres"}},
		{"mysql handle, postgres", my, migrations.Postgres, []string{"dialect postgres", "MySQL/MariaDB", "github.com/go-sql-driver/mysql", "use migrations.MySQL"}},
		{"mysql handle, sqlite", my, migrations.SQLite, []string{"dialect sqlite", "MySQL/MariaDB", "github.com/go-sql-driver/mysql", "use migrations.MySQL"}},
		{"sqlite handle, postgres", lite, migrations.Postgres, []string{"dialect postgres", "SQLite", "modernc.org/sqlite", "use migrations.SQLite"}},
		{"sqlite handle, mysql", lite, migrations.MySQL, []string{"dialect mysql", "SQLite", "modernc.org/sqlite", "use migrations.SQLite"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			errs := map[string]error{
				"Up":                 migrations.Up(ctx, c.db, c.dialect),
				"Up with WithSchema": migrations.Up(ctx, c.db, c.dialect, migrations.WithSchema("sqlonce_mismatch")),
			}
			_, errs["NewProvider"] = migrations.NewProvider(c.dialect, c.db)
			for what, err := range errs {
				if !errors.Is(err, sqlonce.ErrInvalidArgument) {
					t.Errorf("%s: %v, want ErrInvalidArgument", what, err)
					continue
				}
				for _, s := range c.names {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%s: %q does not name %q", what, err, s)
					}
				}
			}
		})
	}
	if err := migrations.Up(ctx, nil, migrations.Postgres); !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Errorf("Up on a nil handle: %v, want ErrInvalidArgument", err)
	}
	if _, err := migrations.NewProvider(migrations.Postgres, nil); !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Errorf("NewProvider on a nil handle: %v, want ErrInvalidArgument", err)
	}
	wantNoTables(t, ctx, pg, my, lite, pgSchema, myName)
	for what, q := range map[string]string{
		"PostgreSQL schema": "SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'sqlonce_mismatch'",
	} {
		var n int
		if err := pg.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s created", what)
		}
	}
	var n int
	if err := my.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.schemata WHERE schema_name = 'sqlonce_mismatch'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Error("MySQL database sqlonce_mismatch created")
	}
}

// wantNoTables fails t if the PostgreSQL schema pgSchema, the MySQL
// database myName or the SQLite file holds a table: what was refused ran
// no SQL.
func wantNoTables(t *testing.T, ctx context.Context, pg, my, lite *sql.DB, pgSchema, myName string) {
	t.Helper()
	for what, c := range map[string]struct {
		db  *sql.DB
		q   string
		arg []any
	}{
		"PostgreSQL": {pg, "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1", []any{pgSchema}},
		"MySQL":      {my, "SELECT count(*) FROM information_schema.tables WHERE table_schema = ?", []any{myName}},
		"SQLite":     {lite, "SELECT count(*) FROM sqlite_schema WHERE type = 'table'", nil},
	} {
		var n int
		if err := c.db.QueryRowContext(ctx, c.q, c.arg...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n != 0 {
			t.Errorf("%s: %d tables, want none", what, n)
		}
	}
}
