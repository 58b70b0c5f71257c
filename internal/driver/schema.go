package driver

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Schema qualifies sqlonce's statements with the schema (PostgreSQL) or
// database (MySQL/MariaDB) that holds its tables. A nil *Schema leaves
// them as they are: the tables the connection finds (search_path, the
// DSN's database).
type Schema struct {
	name   string
	quoted string
	cache  sync.Map // statement -> qualified statement
}

// schemaName is what a schema name may be: an unquoted identifier on both
// servers, lower case (as PostgreSQL folds it, and a name MySQL compares
// alike on every file system), at most 63 bytes (PostgreSQL's limit).
var schemaName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// NewSchema validates name and returns the Schema that puts sqlonce's
// tables in it, quoted for dialect (Postgres or MySQL). An invalid name
// is an error the driver wraps in sqlonce.ErrInvalidArgument.
func NewSchema(dialect, name string) (*Schema, error) {
	if !schemaName.MatchString(name) {
		return nil, fmt.Errorf("schema name %q: want a lower-case letter or _, then lower-case letters, digits or _, at most 63 bytes", name)
	}
	q := `"` + name + `"`
	if dialect == MySQL {
		q = "`" + name + "`"
	}
	return &Schema{name: name, quoted: q}, nil
}

// Name returns the schema's name, unquoted; "" for a nil Schema.
func (s *Schema) Name() string {
	if s == nil {
		return ""
	}
	return s.name
}

// Quoted returns the schema's name, quoted for its dialect.
func (s *Schema) Quoted() string { return s.quoted }

// tableRef finds sqlonce's table names where they are not already
// qualified: a name preceded by a dot or a quote's closing is left alone.
var tableRef = regexp.MustCompile("(^|[^.\\w\"`])(sqlonce_(?:keys|tokens|outbox|goose_db_version))\\b")

// Qualify returns query with sqlonce's tables (sqlonce_keys, sqlonce_outbox,
// sqlonce_tokens) qualified by the schema; query itself for a nil Schema.
// The name inside a string literal ('sqlonce_keys'::regclass) is
// qualified too, which is what a regclass cast wants.
func (s *Schema) Qualify(query string) string {
	if s == nil {
		return query
	}
	if q, ok := s.cache.Load(query); ok {
		return q.(string)
	}
	q := tableRef.ReplaceAllString(query, "${1}"+s.quoted+".${2}")
	s.cache.Store(query, q)
	return q
}

// SQLDBTX is what database/sql's generated queries run on.
type SQLDBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
}

// SQLOn returns db with every statement qualified by s; db itself for a
// nil Schema.
func (s *Schema) SQLOn(db SQLDBTX) SQLDBTX {
	if s == nil {
		return db
	}
	return sqlQualified{db, s}
}

type sqlQualified struct {
	db SQLDBTX
	s  *Schema
}

func (q sqlQualified) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return q.db.ExecContext(ctx, q.s.Qualify(query), args...)
}

func (q sqlQualified) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return q.db.QueryContext(ctx, q.s.Qualify(query), args...)
}

func (q sqlQualified) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return q.db.QueryRowContext(ctx, q.s.Qualify(query), args...)
}

func (q sqlQualified) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return q.db.PrepareContext(ctx, q.s.Qualify(query))
}

// NewMySQLTarget returns a Schema that qualifies sqlonce's tables with a
// name used as written, quoted with backquotes: a Vitess target
// (keyspace:shard), which vtgate reads in a statement's table qualifier
// and sends the statement to that shard alone. The name comes from the
// server (SHOW VITESS_SHARDS), not from a caller.
func NewMySQLTarget(target string) *Schema {
	return &Schema{name: target, quoted: "`" + strings.ReplaceAll(target, "`", "``") + "`"}
}
