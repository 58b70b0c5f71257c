package commitloss

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// paths are the two ways Store.Run commits: the driver's own run (pgx's
// pipeline with COMMIT in the last batch; MySQL's transaction) and, for a
// Store that must not wait, a claim in a transaction of sqlonce's own
// (the driver's InTx).
var paths = []struct {
	name string
	opts []dedupe.Option
}{
	{"Run", nil},
	{"InTx", []dedupe.Option{dedupe.WithNoWait()}},
}

// cutMode is where the proxy cuts the client's connection at COMMIT.
type cutMode struct {
	name      string
	fault     faultproxy.Fault
	committed bool // the server committed before the cut
}

// modes: LoseReply forwards the COMMIT, waits for the server's answer
// (it committed) and resets the client's connection instead of passing
// the answer on; LoseCommit resets it without forwarding the COMMIT (the
// server rolls back). Either way the client's COMMIT fails with a lost
// connection and cannot tell which happened.
var modes = []cutMode{
	{"AfterServerCommitted", faultproxy.LoseReply, true},
	{"BeforeServerSawCommit", faultproxy.LoseCommit, false},
}

// cuts is the number of COMMITs the proxy cut.
func cuts(p *faultproxy.Proxy) int64 {
	c := p.Counts()
	return c.Fired[faultproxy.LoseReply] + c.Fired[faultproxy.LoseCommit]
}

// check runs one Store.Run through the proxy, cut at COMMIT, then resends
// it with the same key on a direct connection, and counts the effect.
func check[TTx any](t *testing.T, ctx context.Context, proxied, direct sqlonce.Driver[TTx], p *faultproxy.Proxy,
	opts []dedupe.Option, mode cutMode, insert func(ctx context.Context, tx TTx, ref string) error, count func(ref string) int64) {
	t.Helper()
	cut, err := dedupe.New(proxied, opts...)
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(direct, opts...)
	if err != nil {
		t.Fatal(err)
	}
	req := dedupe.Request{Scope: "cl", Key: t.Name()}
	fn := func(ctx context.Context, tx TTx) ([]byte, error) {
		return []byte("paid"), insert(ctx, tx, req.Key)
	}

	p.ArmNext(mode.fault)
	res, err := cut.Run(ctx, req, fn)
	if cuts(p) != 1 {
		t.Fatalf("the proxy cut %d COMMITs, want 1 (Run: %v, %v)", cuts(p), res, err)
	}
	t.Logf("cut at COMMIT: %v", err)
	if !errors.Is(err, sqlonce.ErrCommitUnknown) || !sqlonce.IsCommitUnknown(err) {
		t.Fatalf("got %v, %v; want an error matching ErrCommitUnknown", res, err)
	}
	if !driver.Classify(err).Has(driver.ConnLost) {
		t.Fatalf("%v: the lost connection's own error is not in the chain", err)
	}
	if sqlonce.IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = true: a transaction that may have committed is not run again blindly", err)
	}

	// The resend with the same key.
	res, err = store.Run(ctx, req, fn)
	if err != nil {
		t.Fatal(err)
	}
	want := sqlonce.FirstRun
	if mode.committed {
		want = sqlonce.AlreadyDone
	}
	if res.Outcome != want || string(res.Response) != "paid" {
		t.Fatalf("resend: got %v %q, want %v \"paid\"", res.Outcome, res.Response, want)
	}
	if n := count(req.Key); n != 1 {
		t.Fatalf("%d ledger rows for the key, want exactly 1", n)
	}
}

func TestPostgres(t *testing.T) {
	for _, path := range paths {
		for _, mode := range modes {
			t.Run(path.name+"/"+mode.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				db := testdb.NewPostgres(t, 4)
				_, err := db.Pool.Exec(ctx, "CREATE TABLE ledger_cl (ref text NOT NULL, amount bigint NOT NULL)")
				if err != nil {
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
				defer pool.Close()
				insert := func(ctx context.Context, tx pgx.Tx, ref string) error {
					_, err := tx.Exec(ctx, "INSERT INTO ledger_cl (ref, amount) VALUES ($1, 1)", ref)
					return err
				}
				count := func(ref string) int64 {
					var n int64
					if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM ledger_cl WHERE ref = $1", ref).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				}
				check(t, ctx, pgxdriver.New(pool), pgxdriver.New(db.Pool), p, path.opts, mode, insert, count)
			})
		}
	}
}

func TestMySQL(t *testing.T) {
	for _, path := range paths {
		for _, mode := range modes {
			t.Run(path.name+"/"+mode.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
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
				defer proxied.Close()
				insert := func(ctx context.Context, tx *sql.Tx, ref string) error {
					_, err := tx.ExecContext(ctx, "INSERT INTO ledger_cl (ref, amount) VALUES (?, 1)", ref)
					return err
				}
				count := func(ref string) int64 {
					var n int64
					if err := db.DB.QueryRowContext(ctx, "SELECT count(*) FROM ledger_cl WHERE ref = ?", ref).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				}
				check(t, ctx, mysqldriver.New(proxied), mysqldriver.New(db.DB), p, path.opts, mode, insert, count)
			})
		}
	}
}
