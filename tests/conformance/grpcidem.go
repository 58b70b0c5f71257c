package conformance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/grpcidem"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

// grpcOrders is a real grpc-go server on loopback with grpcidem in front
// of one unary method, /test.Orders/Place, taking and returning
// wrapperspb.StringValue (no protoc needed): it writes one ledger row
// (ref: the request's value) in the call's transaction and answers a
// value unique to the run.
type grpcOrders[TTx any] struct {
	conn *grpc.ClientConn
	runs atomic.Int64
	// hook runs after the ledger write; it may block or fail the call.
	hook func(ctx context.Context, in string) error
}

const grpcPlace = "/test.Orders/Place"

func startGRPC[TTx any](t *testing.T, db harness.DB[TTx], hook func(ctx context.Context, in string) error) *grpcOrders[TTx] {
	t.Helper()
	return startGRPCOn(t, db, db.Driver(), hook)
}

// startGRPCOn is startGRPC with the interceptor on drv (an observed one).
func startGRPCOn[TTx any](t *testing.T, db harness.DB[TTx], drv sqlonce.Driver[TTx], hook func(ctx context.Context, in string) error) *grpcOrders[TTx] {
	t.Helper()
	g := &grpcOrders[TTx]{hook: hook}
	ic, err := grpcidem.New(drv, func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-user"); len(v) == 1 {
			return v[0] // stands in for real authentication
		}
		return ""
	})
	must(t, err)
	place := func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		n := g.runs.Add(1)
		tx, ok := grpcidem.TxFrom[TTx](ctx)
		if !ok {
			return nil, status.Error(codes.Internal, "no transaction")
		}
		if err := db.Tx(tx).LedgerInsert(ctx, in.GetValue(), 1); err != nil {
			return nil, err
		}
		if g.hook != nil {
			if err := g.hook(ctx, in.GetValue()); err != nil {
				return nil, err
			}
		}
		return wrapperspb.String(fmt.Sprintf("placed %s, run %d, %d", in.GetValue(), n, time.Now().UnixNano())), nil
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Orders",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Place",
			Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, req any) (any, error) { return place(ctx, req.(*wrapperspb.StringValue)) }
				return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: grpcPlace}, h)
			},
		}},
	}, struct{}{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	g.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	t.Cleanup(func() { g.conn.Close() })
	return g
}

// call places an order as user with key ("" for none).
func (g *grpcOrders[TTx]) call(ctx context.Context, user, key, ref string) (string, bool, error) {
	md := metadata.MD{}
	if user != "" {
		md.Set("x-user", user)
	}
	if key != "" {
		md.Set(grpcidem.MetadataKey, key)
	}
	out := new(wrapperspb.StringValue)
	var header metadata.MD
	err := g.conn.Invoke(metadata.NewOutgoingContext(ctx, md), grpcPlace, wrapperspb.String(ref), out, grpc.Header(&header))
	replayed := len(header.Get(grpcidem.ReplayedKey)) == 1 && header.Get(grpcidem.ReplayedKey)[0] == "true"
	return out.GetValue(), replayed, err
}

func wantCode(t testing.TB, what string, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want %v", what, err, code)
	}
}

func runGRPCIdem[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Run("ReplayReuseAndKeys", func(t *testing.T) {
		db := f(t, 0)
		g := startGRPC(t, db, nil)
		ctx := ctxT(t)
		first, replayed, err := g.call(ctx, "alice", "k1", "a")
		must(t, err)
		if replayed {
			t.Fatal("a first response marked as replayed")
		}
		for range 2 {
			again, replayed, err := g.call(ctx, "alice", "k1", "a")
			must(t, err)
			if again != first || !replayed {
				t.Fatalf("repeat: %q replayed=%v, want %q replayed", again, replayed, first)
			}
		}
		_, _, err = g.call(ctx, "alice", "k1", "b")
		wantCode(t, "key reused with another message", err, codes.FailedPrecondition)
		_, _, err = g.call(ctx, "alice", "", "c")
		wantCode(t, "no key", err, codes.InvalidArgument)
		_, _, err = g.call(ctx, "", "k9", "c")
		wantCode(t, "no caller", err, codes.Unauthenticated)
		_, _, err = g.call(ctx, "alice", strings.Repeat("k", sqlonce.MaxKeyLen+1), "c")
		wantCode(t, "a key of 256 bytes", err, codes.InvalidArgument)
		_, _, err = g.call(ctx, "alice", strings.Repeat("k", sqlonce.MaxKeyLen), "c")
		must(t, err)                                        // 255 bytes is the longest key
		bob, replayed, err := g.call(ctx, "bob", "k1", "a") // scoped by caller
		must(t, err)
		if replayed || bob == first {
			t.Fatal("bob got alice's response")
		}
		if n := g.runs.Load(); n != 3 {
			t.Fatalf("handler ran %d times, want 3", n)
		}
		ddLedger(t, db, "a", 2)
		ddLedger(t, db, "b", 0)
		ddLedger(t, db, "c", 1)
	})

	// On an observed driver, each handled call is one Event of its own,
	// and the interceptor's dedupe store does not report it again.
	t.Run("Observed", func(t *testing.T) {
		db := f(t, 0)
		rec := &recorder{}
		g := startGRPCOn(t, db, sqlonce.Observe(db.Driver(), rec), nil)
		ctx := ctxT(t)
		_, _, err := g.call(ctx, "alice", "k1", "a")
		must(t, err)
		_, _, err = g.call(ctx, "alice", "k1", "a")
		must(t, err)
		_, _, err = g.call(ctx, "alice", "k1", "b")
		wantCode(t, "key reused with another message", err, codes.FailedPrecondition)
		got := rec.count("grpcidem", "Serve")
		want := map[sqlonce.EventOutcome]int{sqlonce.EventFirstRun: 1, sqlonce.EventReplayed: 1, sqlonce.EventKeyReuse: 1}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("grpcidem Serve events %v, want %v", got, want)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if len(rec.events) != 3 {
			t.Fatalf("%d events, want the 3 of grpcidem: %v", len(rec.events), rec.events)
		}
		if e := rec.events[0]; e.Scope == "" || e.Attempts != 1 || e.Work <= 0 {
			t.Fatalf("first call's event %+v: want its scope, 1 attempt and the handler's time", e)
		}
	})

	t.Run("HandlerErrorRollsBackAndFreesTheKey", func(t *testing.T) {
		db := f(t, 0)
		var fail atomic.Bool
		fail.Store(true)
		g := startGRPC(t, db, func(context.Context, string) error {
			if fail.Swap(false) {
				return status.Error(codes.FailedPrecondition, "out of stock")
			}
			return nil
		})
		ctx := ctxT(t)
		_, _, err := g.call(ctx, "alice", "k", "x")
		if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || st.Message() != "out of stock" {
			t.Fatalf("the handler's own error: %v", err)
		}
		ok, replayed, err := g.call(ctx, "alice", "k", "x")
		must(t, err)
		if replayed {
			t.Fatal("the failed call was recorded")
		}
		again, replayed, err := g.call(ctx, "alice", "k", "x")
		must(t, err)
		if again != ok || !replayed {
			t.Fatalf("repeat: %q replayed=%v", again, replayed)
		}
		ddLedger(t, db, "x", 1) // the failed run rolled back
	})

	t.Run("ConcurrentDuplicates", func(t *testing.T) {
		db := f(t, Racers+4)
		if db.Dialect() != "sqlite" {
			warm(t, db, Racers+4)
		}
		g := startGRPC(t, db, func(context.Context, string) error {
			time.Sleep(50 * time.Millisecond) // keep the first call in flight
			return nil
		})
		type result struct {
			out      string
			replayed bool
			err      error
		}
		results := make([]result, Racers)
		noErrors(t, race(Racers, func(i int) error {
			out, replayed, err := g.call(ctxT(t), "alice", "pay-1", "pay")
			results[i] = result{out, replayed, err}
			return nil
		}))
		var firsts, replays, aborted int
		var first string
		for _, r := range results {
			switch {
			case r.err == nil && !r.replayed:
				firsts++
				first = r.out
			case r.err == nil:
				replays++
			case status.Code(r.err) == codes.Aborted:
				aborted++
			default:
				t.Fatalf("unexpected: %v", r.err)
			}
		}
		if firsts != 1 {
			t.Fatalf("%d first responses, want 1 (%d replays, %d aborted)", firsts, replays, aborted)
		}
		for _, r := range results {
			if r.replayed && r.out != first {
				t.Fatalf("replay %q, want %q", r.out, first)
			}
		}
		if n := g.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		ddLedger(t, db, "pay", 1)
		t.Logf("1 first response, %d replays, %d aborted", replays, aborted)
	})

	t.Run("NoHandleRefused", func(t *testing.T) {
		_, err := grpcidem.New[TTx](nil, func(context.Context) string { return "p" })
		if !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("nil driver: %v", err)
		}
	})
}
