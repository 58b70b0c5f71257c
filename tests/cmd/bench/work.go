package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Work is what the database server wrote for one request, on average over
// a technique's timed run: the server's work per operation, beside the
// time it took.
//
// On PostgreSQL every figure is read back from the WAL (pg_walinspect) and
// kept to the records of the run's own schema and of the transactions that
// wrote there, so other sessions on the server do not count. On MariaDB
// rows come from the run's database's table statistics (userstat), while
// redo bytes are the server's log sequence number moving: everything the
// server logged meanwhile, other sessions included (RedoGlobal).
type Work struct {
	// LogBytes is WAL (PostgreSQL) or redo (MariaDB) bytes per request,
	// commit records included; FPIBytes the part of it that is full-page
	// images (PostgreSQL).
	LogBytes float64 `json:"log_bytes"`
	FPIBytes float64 `json:"fpi_bytes,omitempty"`
	// Rows is table rows written per request: inserted, updated or
	// deleted (heap records on PostgreSQL, rows changed on MariaDB).
	Rows float64 `json:"rows"`
	// HOT is the updates among Rows that stayed on their page and wrote no
	// index entry (PostgreSQL).
	HOT float64 `json:"hot,omitempty"`
	// Locks is rows locked without being written (PostgreSQL's heap LOCK
	// records: FOR UPDATE, FOR KEY SHARE, ON CONFLICT's check).
	Locks float64 `json:"locks,omitempty"`
	// IndexEntries is index tuples written per request: B-tree leaf
	// inserts and BRIN summary changes on PostgreSQL; rows changed times
	// the table's indexes on MariaDB (its statistics count no finer).
	IndexEntries float64 `json:"index_entries"`
	// Commits is commit or abort records per request (PostgreSQL).
	Commits float64 `json:"commits,omitempty"`
	// RedoGlobal: LogBytes counts the whole server's redo, not only the
	// run's.
	RedoGlobal bool `json:"redo_global,omitempty"`
}

// meter ends a measurement started by a backend's workStart: ops is the
// number of requests answered meanwhile.
type meter func(ctx context.Context, ops int64) (Work, error)

// medianWork is the median of each figure over rounds.
func medianWork(ws []Work) *Work {
	if len(ws) == 0 {
		return nil
	}
	pick := func(f func(Work) float64) float64 {
		xs := make([]float64, len(ws))
		for i, w := range ws {
			xs[i] = f(w)
		}
		return median(xs)
	}
	return &Work{
		LogBytes:     pick(func(w Work) float64 { return w.LogBytes }),
		FPIBytes:     pick(func(w Work) float64 { return w.FPIBytes }),
		Rows:         pick(func(w Work) float64 { return w.Rows }),
		HOT:          pick(func(w Work) float64 { return w.HOT }),
		Locks:        pick(func(w Work) float64 { return w.Locks }),
		IndexEntries: pick(func(w Work) float64 { return w.IndexEntries }),
		Commits:      pick(func(w Work) float64 { return w.Commits }),
		RedoGlobal:   slices.ContainsFunc(ws, func(w Work) bool { return w.RedoGlobal }),
	}
}

// --- PostgreSQL: the WAL, read back with pg_walinspect ---

// enableWork creates pg_walinspect (in the run's schema, so that it goes
// with it, unless the database has it already) and notes where it lives.
// Without it the work columns stay empty.
func (b *pgBackend) enableWork(ctx context.Context) error {
	_, err := b.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_walinspect SCHEMA "+b.schema)
	if err != nil {
		return err
	}
	return b.pool.QueryRow(ctx,
		"SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'pg_walinspect'").Scan(&b.walinspect)
}

// pgWorkQuery sums the WAL records between two positions that touch a
// relation of the run's schema (its tables, indexes and TOAST), and every
// record of the transactions that wrote one (their commits), or whose
// subtransaction (a savepoint) did.
const pgWorkQuery = `
WITH ours AS (
    SELECT array_agg(pg_relation_filenode(c.oid)::oid) AS nodes
    FROM pg_class AS c
    WHERE c.relnamespace = $3::regnamespace
       OR c.oid IN (SELECT t.reltoastrelid FROM pg_class AS t WHERE t.relnamespace = $3::regnamespace)
       OR c.oid IN (SELECT i.indexrelid FROM pg_index AS i JOIN pg_class AS t ON i.indrelid = t.reltoastrelid
                    WHERE t.relnamespace = $3::regnamespace)
), r AS (
    SELECT w.xid::text::bigint AS xid, w.resource_manager AS rm, w.record_type AS rt,
           w.record_length AS len, w.fpi_length AS fpi,
           ARRAY(SELECT m[1]::oid FROM regexp_matches(coalesce(w.block_ref, ''), 'rel \d+/\d+/(\d+)', 'g') AS m) AS rels,
           CASE WHEN w.resource_manager = 'Transaction' THEN
               string_to_array(trim(substring(w.description FROM 'subxacts:([ 0-9]+)')), ' ')::bigint[]
           END AS subxacts
    FROM %s.pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn) AS w
), x AS (
    SELECT DISTINCT r.xid FROM r, ours WHERE r.rels && ours.nodes AND r.xid <> 0
), mine AS (
    SELECT r.* FROM r, ours
    WHERE r.rels && ours.nodes OR r.xid IN (SELECT xid FROM x)
       OR r.subxacts && ARRAY(SELECT xid FROM x)
)
SELECT coalesce(sum(len), 0)::bigint,
       coalesce(sum(fpi), 0)::bigint,
       count(*) FILTER (WHERE rm = 'Heap' AND rt ~ '^(INSERT|UPDATE|HOT_UPDATE|DELETE)')
         + count(*) FILTER (WHERE rm = 'Heap2' AND rt ~ '^MULTI_INSERT'),
       count(*) FILTER (WHERE rm = 'Heap' AND rt ~ '^HOT_UPDATE'),
       count(*) FILTER (WHERE rm = 'Heap' AND rt ~ '^LOCK'),
       count(*) FILTER (WHERE (rm = 'Btree' AND rt ~ '^INSERT_(LEAF|POST)') OR (rm = 'BRIN' AND rt ~ '^(INSERT|UPDATE|SAMEPAGE_UPDATE)')),
       count(*) FILTER (WHERE rm = 'Transaction' AND rt ~ '^(COMMIT|ABORT)')
FROM mine`

func (b *pgBackend) workStart(ctx context.Context) (meter, error) {
	if b.walinspect == "" {
		return nil, nil
	}
	var start string
	if err := b.pool.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&start); err != nil {
		return nil, err
	}
	return func(ctx context.Context, ops int64) (Work, error) {
		var end string
		var moved bool
		if err := b.pool.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text, pg_current_wal_flush_lsn() > $1::pg_lsn", start).Scan(&end, &moved); err != nil {
			return Work{}, err
		}
		if !moved { // nothing was written: pg_walinspect refuses an empty range
			return Work{}, nil
		}
		var logBytes, fpi, rows, hot, locks, idx, commits int64
		err := b.pool.QueryRow(ctx, fmt.Sprintf(pgWorkQuery, pgx.Identifier{b.walinspect}.Sanitize()), start, end, b.schema).
			Scan(&logBytes, &fpi, &rows, &hot, &locks, &idx, &commits)
		if err != nil {
			// pg_walinspect may have gone with another run's schema: create
			// it again for the next round.
			_ = b.enableWork(ctx)
			return Work{}, fmt.Errorf("read the WAL: %w", err)
		}
		n := float64(max(ops, 1))
		return Work{
			LogBytes: float64(logBytes) / n, FPIBytes: float64(fpi) / n,
			Rows: float64(rows) / n, HOT: float64(hot) / n, Locks: float64(locks) / n,
			IndexEntries: float64(idx) / n, Commits: float64(commits) / n,
		}, nil
	}, nil
}

// --- MariaDB: table statistics and the redo log's sequence number ---

// enableWork turns MariaDB's table statistics on (userstat) for the run,
// if they are off; close turns them off again.
func (b *myBackend) enableWork(ctx context.Context) error {
	var on string
	if err := b.db.QueryRowContext(ctx, "SELECT @@GLOBAL.userstat").Scan(&on); err != nil {
		return err
	}
	if on == "0" || on == "OFF" {
		if _, err := b.db.ExecContext(ctx, "SET GLOBAL userstat = 1"); err != nil {
			return err
		}
		b.userstatSet = true
	}
	b.work = true
	return nil
}

type mySnapshot struct {
	lsn, rows, indexed int64
}

func (b *myBackend) snapshot(ctx context.Context) (mySnapshot, error) {
	var s mySnapshot
	var name string
	if err := b.db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Innodb_lsn_current'").Scan(&name, &s.lsn); err != nil {
		return s, err
	}
	err := b.db.QueryRowContext(ctx, `
		SELECT coalesce(sum(ROWS_CHANGED), 0), coalesce(sum(ROWS_CHANGED_X_INDEXES), 0)
		FROM information_schema.TABLE_STATISTICS WHERE TABLE_SCHEMA = ?`, b.dbName).Scan(&s.rows, &s.indexed)
	return s, err
}

func (b *myBackend) workStart(ctx context.Context) (meter, error) {
	if !b.work {
		return nil, nil
	}
	before, err := b.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, ops int64) (Work, error) {
		after, err := b.snapshot(ctx)
		if err != nil {
			return Work{}, err
		}
		n := float64(max(ops, 1))
		return Work{
			LogBytes:     float64(after.lsn-before.lsn) / n,
			Rows:         float64(after.rows-before.rows) / n,
			IndexEntries: float64(after.indexed-before.indexed) / n,
			RedoGlobal:   true,
		}, nil
	}, nil
}

// disableWork restores userstat as the run found it.
func (b *myBackend) disableWork(ctx context.Context, admin *sql.DB) {
	if b.userstatSet {
		_, _ = admin.ExecContext(ctx, "SET GLOBAL userstat = 0")
	}
}
