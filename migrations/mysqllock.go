package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	sqldriver "database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/pressly/goose/v3/lock"
)

// mysqlLockWait bounds the wait for another instance's migrations, in
// seconds, as goose's session lockers do (5 minutes).
const mysqlLockWait = 300

// mysqlLocker serialises concurrent runs of the MySQL migrations of a
// database: a user-level lock (GET_LOCK) named after the database and the
// version table (mysqlLockName), taken on a connection of its own and
// released (RELEASE_LOCK) on it when the migrations end. A user-level lock
// belongs to its session: it also ends when the connection does, or the
// process dies.
//
// Up holds it around the whole of goose's run: goose's Up first checks
// for pending migrations without its locker, creating the version table
// if it finds none, and MySQL commits a CREATE TABLE at once, so
// instances starting together would race there (duplicate zero versions,
// "missing zero version migration"). A provider of NewProvider holds it
// as goose's locker, around the migrations only.
//
// Through Vitess's vtgate it first checks the keyspace's VSchema
// (checkVSchema), before anything is created.
//
// It runs without the lock where it cannot take one: a handle that gives
// no second connection within secondConnWait (db.SetMaxOpenConns(1)), and
// Galera nodes that refuse GET_LOCK (MariaDB before MDEV-31325: 1235
// "GET_LOCK in cluster (WSREP_ON=ON)"). Concurrent runs then race as
// goose's do, and all but one may fail.
type mysqlLocker struct {
	database string // WithSchema's name, or "": the connection's DATABASE()
	mu       sync.Mutex
	conn     *sql.Conn // holding the lock named name
	name     string
}

var _ lock.Locker = (*mysqlLocker)(nil)

func (l *mysqlLocker) Lock(ctx context.Context, db *sql.DB) error {
	var current sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&current); err != nil {
		return fmt.Errorf("sqlonce/migrations: lock: %w", err)
	}
	if err := checkVSchema(ctx, db, l.database, current.String); err != nil {
		return err
	}
	name := l.database
	if name == "" {
		name = current.String
	}
	name = mysqlLockName(name)
	if db.Stats().MaxOpenConnections == 1 {
		return nil // no second connection: no lock
	}
	cctx, cancel := context.WithTimeout(ctx, secondConnWait)
	conn, err := db.Conn(cctx)
	cancel()
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil // no second connection: no lock
	}
	if err != nil {
		return fmt.Errorf("sqlonce/migrations: lock %s: %w", name, err)
	}
	var got sql.NullInt64
	err = conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, mysqlLockWait).Scan(&got)
	if err != nil && strings.Contains(err.Error(), "WSREP_ON") {
		_ = conn.Close()
		return nil // Galera refuses user-level locks: no lock
	}
	if err == nil && (!got.Valid || got.Int64 != 1) {
		err = fmt.Errorf("another session held it for %d s (GET_LOCK answered %v)", mysqlLockWait, got)
	}
	if err != nil {
		_ = conn.Close()
		return fmt.Errorf("sqlonce/migrations: lock %s: %w", name, err)
	}
	l.mu.Lock()
	l.conn, l.name = conn, name
	l.mu.Unlock()
	return nil
}

func (l *mysqlLocker) Unlock(ctx context.Context, _ *sql.DB) error {
	l.mu.Lock()
	conn, name := l.conn, l.name
	l.conn, l.name = nil, ""
	l.mu.Unlock()
	if conn == nil {
		return nil // no lock taken
	}
	var released sql.NullInt64
	err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&released)
	if err != nil {
		err = fmt.Errorf("sqlonce/migrations: unlock %s: %w", name, err)
		// The session's end releases the lock: close the connection
		// rather than return it to the pool holding it.
		_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
	}
	return errors.Join(err, conn.Close())
}

// mysqlLockName is the user-level lock of the migrations of database db:
// user-level locks belong to the server, so the name holds the database.
// MySQL refuses names longer than 64 characters; a longer one is hashed.
func mysqlLockName(db string) string {
	name := db + "." + TableName
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return TableName + "." + hex.EncodeToString(sum[:16])
}
