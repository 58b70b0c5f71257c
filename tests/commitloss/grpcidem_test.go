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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/grpcidem"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

// checkGRPC is checkHTTP for grpcidem: a real grpc-go server on loopback
// whose database connection the proxy cuts at COMMIT. The call fails
// Unavailable (outcome unknown, retry with the same key), and the retry
// replays the response when the server had committed, or runs the call
// when it had not: one ledger row either way.
func checkGRPC[TTx any](t *testing.T, proxied sqlonce.Driver[TTx], p *faultproxy.Proxy, mode cutMode,
	insert func(ctx context.Context, tx TTx, ref string) error, count func(ref string) int64) {
	t.Helper()
	ic, err := grpcidem.New(proxied, func(context.Context) string { return "alice" })
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Pay",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Pay",
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/test.Pay/Pay"}, func(ctx context.Context, req any) (any, error) {
					tx, ok := grpcidem.TxFrom[TTx](ctx)
					if !ok {
						return nil, status.Error(codes.Internal, "no transaction")
					}
					if err := insert(ctx, tx, "grpc"); err != nil {
						return nil, err
					}
					return wrapperspb.String("paid"), nil
				})
			},
		}},
	}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	call := func() (string, bool, error) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), grpcidem.MetadataKey, t.Name())
		out := new(wrapperspb.StringValue)
		var header metadata.MD
		err := conn.Invoke(ctx, "/test.Pay/Pay", wrapperspb.String("x"), out, grpc.Header(&header))
		return out.GetValue(), len(header.Get(grpcidem.ReplayedKey)) > 0, err
	}

	p.ArmNext(mode.fault)
	_, _, err = call()
	if cuts(p) != 1 {
		t.Fatalf("the proxy cut %d COMMITs, want 1 (%v)", cuts(p), err)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("cut at COMMIT: %v, want Unavailable (outcome unknown)", err)
	}
	t.Logf("cut at COMMIT: %v", err)
	out, replayed, err := call()
	if err != nil || out != "paid" || replayed != mode.committed {
		t.Fatalf("retry: %q replayed=%v %v, want \"paid\" replayed=%v", out, replayed, err, mode.committed)
	}
	if n := count("grpc"); n != 1 {
		t.Fatalf("%d ledger rows, want exactly 1", n)
	}
}

func TestGRPCIdemPostgres(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
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
			defer pool.Close()
			checkGRPC(t, pgxdriver.New(pool), p, mode,
				func(ctx context.Context, tx pgx.Tx, ref string) error {
					_, err := tx.Exec(ctx, "INSERT INTO ledger_cl (ref, amount) VALUES ($1, 1)", ref)
					return err
				},
				func(ref string) int64 {
					var n int64
					if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM ledger_cl WHERE ref = $1", ref).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				})
		})
	}
}

func TestGRPCIdemMySQL(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
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
			checkGRPC(t, mysqldriver.New(proxied), p, mode,
				func(ctx context.Context, tx *sql.Tx, ref string) error {
					_, err := tx.ExecContext(ctx, "INSERT INTO ledger_cl (ref, amount) VALUES (?, 1)", ref)
					return err
				},
				func(ref string) int64 {
					var n int64
					if err := db.DB.QueryRowContext(ctx, "SELECT count(*) FROM ledger_cl WHERE ref = ?", ref).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				})
		})
	}
}
