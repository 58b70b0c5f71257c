package grpcidem_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sqlonce/sqlonce/grpcidem"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// A unary method made idempotent: the retry gets the first
// response, marked as replayed; the key reused for another call is
// refused. The service is declared by hand with wrapperspb messages, as
// generated code would declare it.
func Example() {
	_, drv, done := openDB(tables)
	defer done()

	ic, err := grpcidem.New(drv, func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		return md.Get("x-user")[0] // stands in for real authentication
	})
	if err != nil {
		panic(err)
	}
	var orders atomic.Int64
	place := func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		tx, ok := grpcidem.TxFrom[*sql.Tx](ctx)
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

// tables are the business tables the service writes.
const tables = `
CREATE TABLE orders (
    id      INTEGER PRIMARY KEY,
    code    TEXT    NOT NULL,
    amount  INTEGER NOT NULL DEFAULT 0,
    status  TEXT    NOT NULL DEFAULT 'created',
    version INTEGER NOT NULL DEFAULT 1
);
CREATE UNIQUE INDEX orders_code_key ON orders (code);`

// openDB does what a program does once at start-up: it opens a SQLite
// database (here a new file, removed by done), installs sqlonce's tables
// with migrations.Up, creates the business tables and builds the driver.
// On PostgreSQL or MySQL only the handle and the driver differ: see
// pgxdriver, pgsqldriver and mysqldriver.
func openDB(tables string) (db *sql.DB, drv *sqlitedriver.Driver, done func()) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlonce-example-")
	if err != nil {
		panic(err)
	}
	db, err = modernc.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	done = func() { db.Close(); os.RemoveAll(dir) }
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, tables); err != nil {
		panic(err)
	}
	drv, err = sqlitedriver.New(db)
	if err != nil {
		panic(err)
	}
	return db, drv, done
}
