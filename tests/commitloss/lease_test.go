package commitloss

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// TestPostgresLeaseComplete: on PostgreSQL a lease's Complete is one
// statement in autocommit, its own COMMIT. The proxy cuts the connection
// at that statement, after the server ran it or before it saw it:
// Complete answers ErrCommitUnknown either way, and the key is done with
// the response exactly when the server ran the statement.
func TestPostgresLeaseComplete(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db := testdb.NewPostgres(t, 4)
			cfg, err := pgxpool.ParseConfig(db.DSN)
			if err != nil {
				t.Fatal(err)
			}
			p := faultproxy.Start(t, faultproxy.Postgres, net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port)), 0,
				faultproxy.CommitsAlso(func(stmt string) bool { return strings.Contains(stmt, "-- name: KeyComplete ") }))
			host, port, _ := net.SplitHostPort(p.Addr())
			cfg.ConnConfig.Host = host
			fmt.Sscan(port, &cfg.ConnConfig.Port)
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			proxied, err := dedupe.New(testdrv.Pgx(t, pool))
			if err != nil {
				t.Fatal(err)
			}
			direct, err := dedupe.New(testdrv.Pgx(t, db.Pool))
			if err != nil {
				t.Fatal(err)
			}

			req := dedupe.Request{Scope: "cl-lease", Key: "k"}
			lease, res, err := proxied.Claim(ctx, req, time.Minute)
			if err != nil || !res.FirstRun() {
				t.Fatalf("claim: %v, %v", res, err)
			}
			p.ArmNext(mode.fault)
			err = proxied.Complete(ctx, lease, []byte("done"))
			if cuts(p) != 1 {
				t.Fatalf("the proxy cut %d statements, want 1 (Complete: %v)", cuts(p), err)
			}
			t.Logf("cut at Complete: %v", err)
			if !errors.Is(err, sqlonce.ErrCommitUnknown) || !sqlonce.IsCommitUnknown(err) {
				t.Fatalf("Complete: got %v, want an error matching ErrCommitUnknown", err)
			}

			// A duplicate on a direct connection sees what the server did.
			_, res, err = direct.Claim(ctx, req, time.Minute)
			switch {
			case mode.committed && (err != nil || !res.AlreadyDone() || string(res.Response) != "done"):
				t.Fatalf("after a Complete the server ran: got %v %q, %v; want AlreadyDone \"done\"", res, res.Response, err)
			case !mode.committed && !errors.Is(err, sqlonce.ErrInProgress):
				t.Fatalf("after a Complete the server never saw: got %v, %v; want ErrInProgress (still leased)", res, err)
			}
		})
	}
}
