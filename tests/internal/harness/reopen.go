package harness

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// Settings are connection settings for Reopen, per dialect; the other
// dialect's are ignored. SQLite has none: Reopen gives it a second pool.
type Settings struct {
	// MySQL are DSN parameters as go-sql-driver/mysql takes them: its own
	// options (clientFoundRows=true) and session system variables it sets
	// on every connection (innodb_snapshot_isolation=ON).
	MySQL map[string]string
	// Postgres are run-time parameters set on every connection.
	Postgres map[string]string
	// Addr, when set, is the "host:port" the pool dials instead of the
	// server's (or, behind a PgBouncer, the bouncer's): a proxy in front
	// of it (tests/internal/faultproxy). DSN() still names the server
	// itself, except behind a PgBouncer.
	Addr string
}

// Reopen returns db seen through a pool of its own (maxConns connections,
// closed when t ends) whose connections carry s, for cases that show what a
// connection setting changes. Both views share the same tables. An error
// means the server refused the settings (a variable it does not know).
func Reopen[TTx any](t testing.TB, db DB[TTx], maxConns int, s Settings) (DB[TTx], error) {
	t.Helper()
	ctx := context.Background()
	var out any
	switch d := any(db).(type) {
	case *pgDB:
		if d.reopenDSN != nil {
			dsn := d.reopenDSN(t, s.Postgres)
			if s.Addr != "" {
				// The bouncer seen through a proxy in front of it.
				u, err := url.Parse(dsn)
				if err != nil {
					return nil, err
				}
				u.Host = s.Addr
				dsn = u.String()
			}
			r := bouncedPgx(t, dsn, d.db.Schema, maxConns)
			r.reopenDSN = d.reopenDSN
			if err := r.db.Pool.Ping(ctx); err != nil {
				return nil, err
			}
			out = r
			break
		}
		cfg, err := pgxpool.ParseConfig(d.db.DSN)
		if err != nil {
			return nil, err
		}
		for k, v := range s.Postgres {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
		if s.Addr != "" {
			host, port, err := net.SplitHostPort(s.Addr)
			if err != nil {
				return nil, err
			}
			p, err := strconv.ParseUint(port, 10, 16)
			if err != nil {
				return nil, err
			}
			cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
		}
		cfg.MaxConns = int32(maxConns)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		t.Cleanup(pool.Close)
		if err := pool.Ping(ctx); err != nil {
			return nil, err
		}
		out = &pgDB{db: &testdb.Postgres{Pool: pool, Schema: d.db.Schema, DSN: d.db.DSN}, driver: testdrv.Pgx(t, pool)}
	case *pgSQLDB:
		dsn := d.dsn
		if d.reopenDSN != nil {
			dsn = d.reopenDSN(t, s.Postgres)
		} else {
			for k, v := range s.Postgres {
				dsn += "&" + url.QueryEscape(k) + "=" + url.QueryEscape(v)
			}
		}
		r := newPgSQL(t, d.sqlDriver, dsn, maxConns)
		r.reopenDSN = d.reopenDSN
		if err := r.db.PingContext(ctx); err != nil {
			return nil, err
		}
		out = r
	case *myDB:
		cfg, err := mysql.ParseDSN(d.db.DSN)
		if err != nil {
			return nil, err
		}
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		for k, v := range s.MySQL {
			switch k {
			case "clientFoundRows":
				cfg.ClientFoundRows = v == "true"
			default:
				cfg.Params[k] = v
			}
		}
		if s.Addr != "" {
			cfg.Addr = s.Addr
		}
		dsn := cfg.FormatDSN()
		sqlDB, err := sql.Open("mysql", dsn)
		if err != nil {
			return nil, err
		}
		sqlDB.SetMaxOpenConns(maxConns)
		sqlDB.SetMaxIdleConns(maxConns)
		t.Cleanup(func() { sqlDB.Close() })
		if err := sqlDB.PingContext(ctx); err != nil {
			return nil, err
		}
		if s.Addr != "" {
			dsn = d.db.DSN
		}
		r := &myDB{db: &testdb.MySQL{DB: sqlDB, Name: d.db.Name, DSN: dsn}, driver: testdrv.MySQL(t, sqlDB)}
		if d.levels != nil {
			r.levels = newLevelPools(t, dsn, maxConns)
		}
		r.kill = d.kill
		out = r
	case *spreadDB:
		var nodes []DB[*sql.Tx]
		for _, n := range d.nodes {
			r, err := Reopen(t, n, maxConns, s)
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, r)
		}
		out = Spread(nodes)
	case *liteDB:
		// SQLite takes no settings: a second pool on the same file.
		sqlDB, err := sql.Open(d.db.Lib.DriverName, d.db.DSN)
		if err != nil {
			return nil, err
		}
		sqlDB.SetMaxOpenConns(maxConns)
		sqlDB.SetMaxIdleConns(maxConns)
		t.Cleanup(func() { sqlDB.Close() })
		if err := sqlDB.PingContext(ctx); err != nil {
			return nil, err
		}
		out = newLiteDB(t, &testdb.SQLite{DB: sqlDB, Path: d.db.Path, DSN: d.db.DSN, Lib: d.db.Lib}, maxConns)
	default:
		return nil, fmt.Errorf("harness: Reopen: unknown DB %T", db)
	}
	return out.(DB[TTx]), nil
}
