package migrations

import (
	"context"
	"database/sql"

	"github.com/pressly/goose/v3/database"
)

// mysqlStore is goose's MySQL store with a version-table check that names
// the connection's database as a value: goose's own compares
// information_schema.tables.table_schema with DATABASE(), which Vitess's
// vtgate answers with the keyspace's name while the tablets' tables are
// in vt_<keyspace>, so that the table never looks present and every Up
// after the first fails creating it again (1050). vtgate maps a
// table_schema given as a value to the keyspace's database; MySQL and
// MariaDB compare it as they would DATABASE().
type mysqlStore struct{ database.Store }

func newMySQLStore(table string) (database.Store, error) {
	s, err := database.NewStore(database.DialectMySQL, table)
	if err != nil {
		return nil, err
	}
	return mysqlStore{s}, nil
}

func (s mysqlStore) TableExists(ctx context.Context, db database.DBTxConn) (bool, error) {
	var name sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&name); err != nil {
		return false, err
	}
	if !name.Valid {
		// No database selected: goose's check looks in every one.
		if t, ok := s.Store.(interface {
			TableExists(context.Context, database.DBTxConn) (bool, error)
		}); ok {
			return t.TableExists(ctx, db)
		}
	}
	var exists bool
	err := db.QueryRowContext(ctx,
		"SELECT COUNT(*) > 0 FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
		name.String, TableName).Scan(&exists)
	return exists, err
}
