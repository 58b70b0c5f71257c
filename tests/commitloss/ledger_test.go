package commitloss

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// ledger is a database of the test's own with a ledger_cl table, reached
// through a proxy that can cut a COMMIT (proxied) and directly (direct).
type ledger[TTx any] struct {
	proxied, direct sqlonce.Driver[TTx]
	proxy           *faultproxy.Proxy
	// insert writes one ledger row for ref in tx.
	insert func(ctx context.Context, tx TTx, ref string) error
	// count counts ref's ledger rows, directly.
	count func(ref string) int64
}

// eachMode runs check in a subtest per cut mode, on a ledger open makes.
func eachMode[TTx any](t *testing.T, open func(t *testing.T, ctx context.Context) *ledger[TTx],
	check func(t *testing.T, ctx context.Context, l *ledger[TTx], mode cutMode)) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			check(t, ctx, open(t, ctx), mode)
		})
	}
}

func postgresLedger(t *testing.T, ctx context.Context) *ledger[pgx.Tx] {
	t.Helper()
	db := testdb.NewPostgres(t, 4)
	if _, err := db.Pool.Exec(ctx, "CREATE TABLE ledger_cl (ref text NOT NULL, amount bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	p := faultproxy.Start(t, faultproxy.Postgres, net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port)), 0)
	host, port, _ := net.SplitHostPort(p.Addr())
	cfg.ConnConfig.Host = host
	fmt.Sscan(port, &cfg.ConnConfig.Port)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &ledger[pgx.Tx]{
		proxied: testdrv.Pgx(t, pool), direct: testdrv.Pgx(t, db.Pool), proxy: p,
		insert: func(ctx context.Context, tx pgx.Tx, ref string) error {
			_, err := tx.Exec(ctx, "INSERT INTO ledger_cl (ref, amount) VALUES ($1, 1)", ref)
			return err
		},
		count: func(ref string) int64 {
			var n int64
			if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM ledger_cl WHERE ref = $1", ref).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
	}
}

func mysqlLedger(t *testing.T, ctx context.Context) *ledger[*sql.Tx] {
	t.Helper()
	db := testdb.NewMySQL(t, 4)
	if _, err := db.DB.ExecContext(ctx, "CREATE TABLE ledger_cl (ref VARCHAR(255) NOT NULL, amount BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	p := faultproxy.Start(t, faultproxy.MySQL, cfg.Addr, 0)
	cfg.Addr = p.Addr()
	cfg.Net = "tcp"
	proxied, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxied.Close() })
	return &ledger[*sql.Tx]{
		proxied: testdrv.MySQL(t, proxied), direct: testdrv.MySQL(t, db.DB), proxy: p,
		insert: func(ctx context.Context, tx *sql.Tx, ref string) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO ledger_cl (ref, amount) VALUES (?, 1)", ref)
			return err
		},
		count: func(ref string) int64 {
			var n int64
			if err := db.DB.QueryRowContext(ctx, "SELECT count(*) FROM ledger_cl WHERE ref = ?", ref).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
	}
}
