package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb"
)

// A MySQL case's database is built from a template migrated once per
// server and test process: its tables as SHOW CREATE TABLE prints them
// (foreign keys included) and the rows of its goose version tables. goose
// parsing the migrations for every case took a quarter of TestMySQL's
// CPU in the test process under -race (its parser clears a 4 MiB pooled
// buffer per line whenever the pool is empty), for the same tables every
// time. The migrations themselves run for each template, and every test
// that migrates (tests/migrate, migrations.Up's own tests) still does.
type mysqlTemplate struct {
	tables []string // CREATE TABLE statements
	rows   []mysqlRows
}

// mysqlRows are the rows of a goose version table.
type mysqlRows struct {
	table string
	rows  [][]any // id, version_id, is_applied, tstamp
}

var myTemplates struct {
	sync.Mutex
	by map[string]*mysqlTemplate // by server DSN
}

// mysqlTemplateOf returns the template of server, migrating one on first
// use in a database dropped once it is read.
func mysqlTemplateOf(ctx context.Context, server string) (*mysqlTemplate, error) {
	myTemplates.Lock()
	defer myTemplates.Unlock()
	if tm, ok := myTemplates.by[server]; ok {
		return tm, nil
	}
	admin, err := mysqlAdmin(server)
	if err != nil {
		return nil, err
	}
	name := uniqueName("tmpl_")
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	defer admin.ExecContext(context.Background(), "DROP DATABASE "+name) //nolint:errcheck // a leftover template is dropped with the server's test databases
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		return nil, err
	}
	cfg.DBName = name
	cfg.ParseTime = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.MySQL); err != nil {
		return nil, fmt.Errorf("sqlonce migrations: %w", err)
	}
	if err := bizdb.Migrate(ctx, db, "mysql"); err != nil {
		return nil, err
	}
	var names []string
	rows, err := db.QueryContext(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY table_name")
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return nil, err
		}
		names = append(names, n)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	tm := &mysqlTemplate{}
	for _, n := range names {
		var table, create string
		if err := db.QueryRowContext(ctx, "SHOW CREATE TABLE "+n).Scan(&table, &create); err != nil {
			return nil, fmt.Errorf("show create table %s: %w", n, err)
		}
		tm.tables = append(tm.tables, create)
		if !strings.HasSuffix(n, "goose_db_version") {
			continue
		}
		vr, err := db.QueryContext(ctx, "SELECT id, version_id, is_applied, tstamp FROM "+n+" ORDER BY id")
		if err != nil {
			return nil, err
		}
		r := mysqlRows{table: n}
		for vr.Next() {
			var id, version int64
			var applied bool
			var ts any
			if err := vr.Scan(&id, &version, &applied, &ts); err != nil {
				vr.Close()
				return nil, err
			}
			r.rows = append(r.rows, []any{id, version, applied, ts})
		}
		if err := vr.Close(); err != nil {
			return nil, err
		}
		tm.rows = append(tm.rows, r)
	}
	if myTemplates.by == nil {
		myTemplates.by = map[string]*mysqlTemplate{}
	}
	myTemplates.by[server] = tm
	return tm, nil
}

// create makes tm's tables and version rows in db's database, on one
// connection with foreign key checks off while the tables are made (SHOW
// CREATE TABLE's order is by name, not by reference).
func (tm *mysqlTemplate) create(ctx context.Context, db *sql.DB) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ExecContext(ctx, "SET SESSION foreign_key_checks = 0"); err != nil {
		return err
	}
	for _, stmt := range tm.tables {
		if _, err := c.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	for _, r := range tm.rows {
		for _, row := range r.rows {
			if _, err := c.ExecContext(ctx, "INSERT INTO "+r.table+" (id, version_id, is_applied, tstamp) VALUES (?, ?, ?, ?)", row...); err != nil {
				return fmt.Errorf("%s: %w", r.table, err)
			}
		}
	}
	_, err = c.ExecContext(ctx, "SET SESSION foreign_key_checks = 1")
	return err
}
