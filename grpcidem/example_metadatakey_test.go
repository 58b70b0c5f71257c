package grpcidem_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sqlonce/sqlonce/grpcidem"
)

// Clients that already send their key as "x-idempotency-key": the
// interceptor reads that metadata key, and no other.
func ExampleWithMetadataKey() {
	_, drv, done := openDB(tables)
	defer done()

	ic, err := grpcidem.New(drv, func(ctx context.Context) string { return "alice" },
		grpcidem.WithMetadataKey("x-idempotency-key"))
	if err != nil {
		panic(err)
	}
	var orders atomic.Int64
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
					return wrapperspb.String(fmt.Sprintf("order %d: %s", orders.Add(1), req.(*wrapperspb.StringValue).GetValue())), nil
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

	call := func(mdKey, key string) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), mdKey, key)
		out := new(wrapperspb.StringValue)
		var header metadata.MD
		if err := conn.Invoke(ctx, "/shop.Orders/Place", wrapperspb.String("book"), out, grpc.Header(&header)); err != nil {
			fmt.Println(status.Code(err), "naming x-idempotency-key:", strings.Contains(status.Convert(err).Message(), "x-idempotency-key"))
			return
		}
		fmt.Printf("%s replayed=%v\n", out.GetValue(), len(header.Get(grpcidem.ReplayedKey)) > 0)
	}
	call("x-idempotency-key", "o-1")
	call("x-idempotency-key", "o-1") // a retry
	call("idempotency-key", "o-2")   // not the key this server reads
	// Output:
	// order 1: book replayed=false
	// order 1: book replayed=true
	// InvalidArgument naming x-idempotency-key: true
}
