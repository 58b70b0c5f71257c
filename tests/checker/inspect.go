package checker

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// dbState is the database as the checker reads it back after a run: the
// only source of truth about what happened.
type dbState struct {
	ledger map[string][]int64 // ref -> amounts (the writers' attempt ids)
	orders map[string]orderRow
	keys   map[string]keyRow // "scope:key"
}

type orderRow struct {
	id               int64
	customer, status string
	amount, version  int64
}

type keyRow struct {
	response    []byte
	state       int16
	token       int64
	lockedUntil sql.NullTime
}

const (
	stateDone   = 1
	stateLeased = 2
)

// snapshot reads the tables through a connection of its own (the DSN the
// harness gives), with plain SQL that both dialects accept.
func snapshot[TTx any](ctx context.Context, db harness.DB[TTx]) (*dbState, error) {
	name := map[string]string{"postgres": "pgx", "mysql": "mysql", "sqlite": "sqlite"}[db.Dialect()]
	sdb, err := sql.Open(name, db.DSN())
	if err != nil {
		return nil, err
	}
	defer sdb.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// After a restart the server may still be coming up.
	if err := retryConn(ctx, func() error { return sdb.PingContext(ctx) }); err != nil {
		return nil, err
	}
	s := &dbState{ledger: map[string][]int64{}, orders: map[string]orderRow{}, keys: map[string]keyRow{}}

	rows, err := sdb.QueryContext(ctx, "SELECT ref, amount FROM ledger")
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	for rows.Next() {
		var ref string
		var amount int64
		if err := rows.Scan(&ref, &amount); err != nil {
			rows.Close()
			return nil, err
		}
		s.ledger[ref] = append(s.ledger[ref], amount)
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}

	rows, err = sdb.QueryContext(ctx, "SELECT id, code, customer, amount, status, version FROM orders")
	if err != nil {
		return nil, fmt.Errorf("orders: %w", err)
	}
	for rows.Next() {
		var o orderRow
		var code string
		if err := rows.Scan(&o.id, &code, &o.customer, &o.amount, &o.status, &o.version); err != nil {
			rows.Close()
			return nil, err
		}
		s.orders[code] = o
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("orders: %w", err)
	}

	rows, err = sdb.QueryContext(ctx, "SELECT scope, idempotency_key, response, state, token, locked_until FROM sqlonce_keys")
	if err != nil {
		return nil, fmt.Errorf("sqlonce_keys: %w", err)
	}
	for rows.Next() {
		var scope, key []byte
		var k keyRow
		var lockedUntil any = &k.lockedUntil
		var lockedUS sql.NullInt64 // SQLite stores microseconds since the epoch
		if db.Dialect() == "sqlite" {
			lockedUntil = &lockedUS
		}
		if err := rows.Scan(&scope, &key, &k.response, &k.state, &k.token, lockedUntil); err != nil {
			rows.Close()
			return nil, err
		}
		if lockedUS.Valid {
			k.lockedUntil = sql.NullTime{Time: time.UnixMicro(lockedUS.Int64), Valid: true}
		}
		s.keys[string(scope)+":"+string(key)] = k
	}
	if err := closeRows(rows); err != nil {
		return nil, fmt.Errorf("sqlonce_keys: %w", err)
	}
	return s, nil
}

func closeRows(rows *sql.Rows) error {
	err := rows.Err()
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return err
}
