package commitloss

import (
	"context"
	"database/sql"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sqlonce/sqlonce/grpcidem"
)

// checkGRPC is checkHTTP for grpcidem: a real grpc-go server on loopback
// whose database connection the proxy cuts at COMMIT. The call fails
// Unavailable (outcome unknown, retry with the same key), and the retry
// replays the response when the server had committed, or runs the call
// when it had not: one ledger row either way.
func checkGRPC[TTx any](t *testing.T, _ context.Context, l *ledger[TTx], mode cutMode) {
	t.Helper()
	ic, err := grpcidem.New(l.proxied, func(context.Context) string { return "alice" })
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
					if err := l.insert(ctx, tx, "grpc"); err != nil {
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

	l.proxy.ArmNext(mode.fault)
	_, _, err = call()
	if cuts(l.proxy) != 1 {
		t.Fatalf("the proxy cut %d COMMITs, want 1 (%v)", cuts(l.proxy), err)
	}
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("cut at COMMIT: %v, want Unavailable (outcome unknown)", err)
	}
	t.Logf("cut at COMMIT: %v", err)
	// The retry may meet the cut session's transaction still holding the
	// key on the server (MySQL ends it once it notices the connection
	// gone) and get Aborted, "retry later": retried, as a client does.
	out, replayed, err := call()
	for deadline := time.Now().Add(30 * time.Second); status.Code(err) == codes.Aborted && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		out, replayed, err = call()
	}
	if err != nil || out != "paid" || replayed != mode.committed {
		t.Fatalf("retry: %q replayed=%v %v, want \"paid\" replayed=%v", out, replayed, err, mode.committed)
	}
	if n := l.count("grpc"); n != 1 {
		t.Fatalf("%d ledger rows, want exactly 1", n)
	}
}

func TestGRPCIdemPostgres(t *testing.T) { eachMode(t, postgresLedger, checkGRPC[pgx.Tx]) }

func TestGRPCIdemMySQL(t *testing.T) { eachMode(t, mysqlLedger, checkGRPC[*sql.Tx]) }
