package grpcidem_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sqlonce/sqlonce/grpcidem"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/pgxdriver"
)

// A unary method made idempotent on PostgreSQL: the retry gets the first
// response, marked as replayed; the key reused for another call is
// refused. The service is declared by hand with wrapperspb messages, as
// generated code would declare it.
func Example() {
	pool := postgres("grpcidem")
	defer pool.Close()

	ic, err := grpcidem.New(pgxdriver.New(pool), func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		return md.Get("x-user")[0] // stands in for real authentication
	})
	if err != nil {
		panic(err)
	}
	var orders atomic.Int64
	place := func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		tx, ok := grpcidem.TxFrom[pgx.Tx](ctx)
		if !ok {
			return nil, status.Error(codes.Internal, "no transaction")
		}
		_ = tx // the order's writes go through tx
		return wrapperspb.String(fmt.Sprintf("order %d: %s", orders.Add(1), in.GetValue())), nil
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "shop.Orders",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Place",
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: "/shop.Orders/Place"}, func(ctx context.Context, req any) (any, error) {
					return place(ctx, req.(*wrapperspb.StringValue))
				})
			},
		}},
	}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	call := func(key, item string) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice", grpcidem.MetadataKey, key)
		out := new(wrapperspb.StringValue)
		var header metadata.MD
		if err := conn.Invoke(ctx, "/shop.Orders/Place", wrapperspb.String(item), out, grpc.Header(&header)); err != nil {
			fmt.Println(status.Code(err), status.Convert(err).Message())
			return
		}
		fmt.Printf("%s replayed=%v\n", out.GetValue(), len(header.Get(grpcidem.ReplayedKey)) > 0)
	}
	call("3f0c6b2e-order", "book")
	call("3f0c6b2e-order", "book") // a retry
	call("3f0c6b2e-order", "lamp") // the key reused
	// Output:
	// order 1: book replayed=false
	// order 1: book replayed=true
	// FailedPrecondition this idempotency key was used with a different call; use a new key for a new call
}

// postgres does what a program does once at start-up: it connects to
// PostgreSQL (SQLONCE_POSTGRES_DSN, or the local default below), installs
// sqlonce's tables with migrations.Up and creates the business table.
// Each example works in a schema of its own, emptied on every run, so that
// its output is the same each time.
func postgres(name string) *pgxpool.Pool {
	ctx := context.Background()
	dsn := os.Getenv("SQLONCE_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		panic(err)
	}
	schema := "example_" + name
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	// sqlonce's tables: goose runs on database/sql.
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		panic(err)
	}
	// The business table the examples write.
	if _, err := pool.Exec(ctx, `
		CREATE TABLE ledger (
		    id     bigserial PRIMARY KEY,
		    ref    text   NOT NULL,
		    amount bigint NOT NULL
		)`); err != nil {
		panic(err)
	}
	return pool
}
