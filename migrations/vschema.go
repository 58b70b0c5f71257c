package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// ErrNoVindex is returned (wrapped, naming the tables and the ALTER VSCHEMA
// statements to run) by Up and a NewProvider provider's runs through
// Vitess's vtgate on a sharded keyspace whose VSchema has no vindex for one
// of sqlonce's tables: vtgate routes no statement to such a table, so the
// version table could be created but never written. Nothing is created.
var ErrNoVindex = errors.New("sqlonce/migrations: a table of a sharded keyspace has no vindex")

// vindexes are sqlonce's tables with the vindex docs/deployments.md
// (Vitess) gives each, and the statement that creates that vindex.
var vindexes = []struct{ table, vindex, create, add string }{
	{TableName, "hash", "ALTER VSCHEMA CREATE VINDEX hash USING hash",
		"ALTER VSCHEMA ON " + TableName + " ADD VINDEX hash(version_id) USING hash"},
	{"sqlonce_keys", "xxhash", "ALTER VSCHEMA CREATE VINDEX xxhash USING xxhash",
		"ALTER VSCHEMA ON sqlonce_keys ADD VINDEX xxhash(scope) USING xxhash"},
	{"sqlonce_tokens", "xxhash", "ALTER VSCHEMA CREATE VINDEX xxhash USING xxhash",
		"ALTER VSCHEMA ON sqlonce_tokens ADD VINDEX xxhash(scope) USING xxhash"},
}

// checkVSchema returns an error matching ErrNoVindex when conn is a vtgate
// session on a sharded keyspace (database: the session's DATABASE()) whose
// VSchema lacks one of sqlonce's tables. Anything else passes: another
// server, a session on one shard (keyspace:shard), a keyspace of one
// shard, and migrations into another keyspace (schema set), whose VSchema
// SHOW VSCHEMA TABLES does not list.
func checkVSchema(ctx context.Context, conn querier, schema, database string) error {
	var version string
	if err := conn.QueryRowContext(ctx, "SELECT @@version").Scan(&version); err != nil {
		return fmt.Errorf("sqlonce/migrations: version: %w", err)
	}
	if !strings.HasSuffix(version, "-Vitess") || schema != "" || database == "" || strings.ContainsAny(database, ":@") {
		return nil
	}
	shards, err := column(ctx, conn, "SHOW VITESS_SHARDS", 0)
	if err != nil {
		return fmt.Errorf("sqlonce/migrations: shards: %w", err)
	}
	n := 0
	for _, s := range shards {
		if strings.HasPrefix(s, database+"/") {
			n++
		}
	}
	if n < 2 {
		return nil
	}
	tables, err := column(ctx, conn, "SHOW VSCHEMA TABLES", 0)
	if err != nil {
		return fmt.Errorf("sqlonce/migrations: vschema tables: %w", err)
	}
	names, err := column(ctx, conn, "SHOW VSCHEMA VINDEXES", -1)
	if err != nil {
		return fmt.Errorf("sqlonce/migrations: vschema vindexes: %w", err)
	}
	has := func(list []string, s string) bool {
		for _, x := range list {
			if strings.EqualFold(x, s) {
				return true
			}
		}
		return false
	}
	var missing, stmts []string
	for _, v := range vindexes {
		if has(tables, v.table) {
			continue
		}
		missing = append(missing, v.table)
		if !has(names, v.vindex) && !has(stmts, v.create) {
			stmts = append(stmts, v.create)
		}
		stmts = append(stmts, v.add)
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: keyspace %s is sharded and its VSchema has no vindex for %s, so vtgate would route no statement to it; "+
		"nothing was created: run through vtgate %s; then Up again (docs/deployments.md, Vitess; sqlonce_keys and sqlonce_tokens "+
		"take the vindex of the business rows their scope names)",
		ErrNoVindex, database, strings.Join(missing, ", "), strings.Join(stmts, "; "))
}

// querier is a *sql.DB or a *sql.Conn.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// column returns column i of q's rows as text; i < 0: the column named
// "Name" (SHOW VSCHEMA VINDEXES: Keyspace, Name, Type, ...).
func column(ctx context.Context, conn querier, q string, i int) ([]string, error) {
	rows, err := conn.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	if i < 0 {
		for j, c := range cols {
			if strings.EqualFold(c, "name") || strings.EqualFold(c, "vindex name") {
				i = j
			}
		}
		if i < 0 {
			return nil, fmt.Errorf("%s: no name column in %v", q, cols)
		}
	}
	var out []string
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for j := range vals {
		ptrs[j] = &vals[j]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		out = append(out, vals[i].String)
	}
	return out, rows.Err()
}
