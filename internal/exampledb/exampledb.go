package exampledb

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/sqlonce/sqlonce/migrations"
)

func postgresDSN() string {
	if dsn := os.Getenv("SQLONCE_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func mysqlDSN() string {
	if dsn := os.Getenv("SQLONCE_MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/test?parseTime=true"
}

// Main runs the package's tests. When a database the examples need does not
// answer and CI is not "true", it runs only the Test functions and says
// which variable to set; under CI=true the examples run and fail.
func Main(m *testing.M, needPostgres, needMySQL bool) {
	flag.Parse()
	var missing []string
	if needPostgres {
		if err := pingPostgres(); err != nil {
			missing = append(missing, fmt.Sprintf("PostgreSQL (set SQLONCE_POSTGRES_DSN): %v", err))
		}
	}
	if needMySQL {
		if err := pingMySQL(); err != nil {
			missing = append(missing, fmt.Sprintf("MySQL/MariaDB (set SQLONCE_MYSQL_DSN): %v", err))
		}
	}
	if len(missing) > 0 && os.Getenv("CI") != "true" {
		fmt.Fprintf(os.Stderr, "skipping examples, no database: %s\n", strings.Join(missing, "; "))
		if f := flag.Lookup("test.run"); f != nil && f.Value.String() == "" {
			_ = f.Value.Set("^Test")
		}
	}
	os.Exit(m.Run())
}

func pingPostgres() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, postgresDSN())
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

func pingMySQL() error {
	db, err := sql.Open("mysql", mysqlDSN())
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

const pgTables = `
CREATE TABLE orders (
    id       bigserial PRIMARY KEY,
    code     text   NOT NULL CONSTRAINT orders_code_key UNIQUE,
    amount   bigint NOT NULL DEFAULT 0,
    status   text   NOT NULL DEFAULT 'created',
    version  bigint NOT NULL DEFAULT 1
);
CREATE TABLE ledger (
    id     bigserial PRIMARY KEY,
    ref    text   NOT NULL,
    amount bigint NOT NULL
);`

var myTables = []string{`
CREATE TABLE orders (
    id       BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    code     VARCHAR(64) NOT NULL,
    amount   BIGINT      NOT NULL DEFAULT 0,
    status   VARCHAR(32) NOT NULL DEFAULT 'created',
    version  BIGINT      NOT NULL DEFAULT 1,
    UNIQUE KEY orders_code_key (code)
)`, `
CREATE TABLE ledger (
    id     BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    ref    VARCHAR(64) NOT NULL,
    amount BIGINT      NOT NULL
)`}

// Postgres returns a pool on a fresh schema "example_<name>". It panics on
// failure: examples have no *testing.T.
func Postgres(name string) *pgxpool.Pool {
	ctx := context.Background()
	schema := "example_" + name
	admin, err := pgx.Connect(ctx, postgresDSN())
	if err != nil {
		panic(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	cfg, err := pgxpool.ParseConfig(postgresDSN())
	if err != nil {
		panic(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, pgTables); err != nil {
		panic(err)
	}
	return pool
}

// MySQL returns a handle on a fresh database "example_<name>".
func MySQL(name string) *sql.DB {
	ctx := context.Background()
	dbName := "example_" + name
	admin, err := sql.Open("mysql", mysqlDSN())
	if err != nil {
		panic(err)
	}
	defer admin.Close()
	for _, q := range []string{"DROP DATABASE IF EXISTS " + dbName, "CREATE DATABASE " + dbName} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			panic(err)
		}
	}
	cfg, err := mysql.ParseDSN(mysqlDSN())
	if err != nil {
		panic(err)
	}
	cfg.DBName = dbName
	cfg.ParseTime = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		panic(err)
	}
	if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
		panic(err)
	}
	for _, q := range myTables {
		if _, err := db.ExecContext(ctx, q); err != nil {
			panic(err)
		}
	}
	return db
}
