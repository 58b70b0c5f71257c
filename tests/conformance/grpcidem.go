package conformance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
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
	"github.com/sqlonce/sqlonce/dedupe"
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
	ic   *grpcidem.Interceptor[TTx]
	runs atomic.Int64
	// hook runs after the ledger write; it may block or fail the call.
	hook func(ctx context.Context, in string) error
	// pad, when above 0, makes the response at least that many bytes.
	pad atomic.Int64
}

const grpcPlace = "/test.Orders/Place"

func startGRPC[TTx any](t *testing.T, db harness.DB[TTx], hook func(ctx context.Context, in string) error) *grpcOrders[TTx] {
	t.Helper()
	return startGRPCOn(t, db, db.Driver(), hook)
}

// startGRPCOn is startGRPC with the interceptor on drv (an observed one)
// and opts.
func startGRPCOn[TTx any](t *testing.T, db harness.DB[TTx], drv sqlonce.Driver[TTx], hook func(ctx context.Context, in string) error, opts ...grpcidem.Option) *grpcOrders[TTx] {
	t.Helper()
	g := &grpcOrders[TTx]{hook: hook}
	var err error
	g.ic, err = grpcidem.New(drv, func(ctx context.Context) string {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("x-user"); len(v) == 1 {
			return v[0] // stands in for real authentication
		}
		return ""
	}, opts...)
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
		out := fmt.Sprintf("placed %s, run %d, %d", in.GetValue(), n, time.Now().UnixNano())
		if pad := int(g.pad.Load()); pad > len(out) {
			out += strings.Repeat("p", pad-len(out))
		}
		return wrapperspb.String(out), nil
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(g.ic.Unary()))
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
	// Support finds a client's key by principal and forgets it: the
	// client's repeat then runs the handler again.
	t.Run("InspectForget", func(t *testing.T) {
		db := f(t, 0)
		g := startGRPC(t, db, nil)
		ctx := ctxT(t)
		_, err := g.ic.Inspect(ctx, "alice", "k1")
		wantErr(t, "inspect before the call", err, sqlonce.ErrNotFound)
		first, _, err := g.call(ctx, "alice", "k1", "a")
		must(t, err)
		info, err := g.ic.Inspect(ctx, "alice", "k1")
		must(t, err)
		if info.State != dedupe.KeyDone || info.Scope != "alice" || info.Key != "k1" || !info.HasResponse {
			t.Fatalf("inspect: %+v", info)
		}
		_, err = g.ic.Inspect(ctx, "bob", "k1")
		wantErr(t, "inspect as another principal", err, sqlonce.ErrNotFound)
		wantErr(t, "forget as another principal", g.ic.Forget(ctx, "bob", "k1"), sqlonce.ErrNotFound)
		if again, replayed, err := g.call(ctx, "alice", "k1", "a"); err != nil || !replayed || again != first {
			t.Fatalf("repeat: %q replayed %v %v", again, replayed, err)
		}
		must(t, g.ic.Forget(ctx, "alice", "k1"))
		wantErr(t, "forget again", g.ic.Forget(ctx, "alice", "k1"), sqlonce.ErrNotFound)
		if again, replayed, err := g.call(ctx, "alice", "k1", "a"); err != nil || replayed || again == first || g.runs.Load() != 2 {
			t.Fatalf("repeat after Forget: %q replayed %v %v, %d runs; want the handler run again", again, replayed, err, g.runs.Load())
		}
		ddLedger(t, db, "a", 2)
	})
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
		want := map[sqlonce.EventStatus]int{sqlonce.EventFirstRun: 1, sqlonce.EventReplayed: 1, sqlonce.EventKeyReuse: 1}
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

	// A response the interceptor cannot record fails ResourceExhausted:
	// the call's work rolled back and the key is free, so a retry that
	// answers less runs and is recorded. Not Unavailable ("outcome
	// unknown"): nothing reached COMMIT.
	t.Run("TooLargeResourceExhausted", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			opts  []grpcidem.Option
			limit int
		}{
			// The default limit is dedupe.MaxResponseSize; the 17 MiB.
			{"Default", nil, 17 << 20},
			{"WithMaxResponseSize", []grpcidem.Option{grpcidem.WithMaxResponseSize(1 << 10)}, 1 << 10},
		} {
			t.Run(tc.name, func(t *testing.T) {
				db := f(t, 0)
				g := startGRPCOn(t, db, db.Driver(), nil, tc.opts...)
				ctx := ctxT(t)
				g.pad.Store(int64(tc.limit + 1))
				_, _, err := g.call(ctx, "alice", "big", "big")
				wantCode(t, "a response over the limit", err, codes.ResourceExhausted)
				ddLedger(t, db, "big", 0)
				ddKeys(t, db, 0)
				g.pad.Store(0)
				first, replayed, err := g.call(ctx, "alice", "big", "big")
				must(t, err)
				if replayed {
					t.Fatal("the refused response was recorded")
				}
				again, replayed, err := g.call(ctx, "alice", "big", "big")
				must(t, err)
				if again != first || !replayed {
					t.Fatalf("repeat: %q replayed=%v, want the first", again, replayed)
				}
				ddLedger(t, db, "big", 1)
			})
		}
	})

	t.Run("WithMaxResponseSizeRefusesOutOfRange", func(t *testing.T) {
		db := f(t, 0)
		for _, n := range []int{-1, dedupe.MaxResponseSize + 1} {
			_, err := grpcidem.New(db.Driver(), func(context.Context) string { return "p" }, grpcidem.WithMaxResponseSize(n))
			if !errors.Is(err, sqlonce.ErrInvalidArgument) {
				t.Fatalf("WithMaxResponseSize(%d): %v", n, err)
			}
		}
	})

	// A repeat while the first call holds its key is Aborted at once, and
	// the first call's answer is unaffected; on SQLite the repeat waits
	// at BEGIN and gets the replay, as the package doc says.
	t.Run("InProgressAborted", func(t *testing.T) {
		db := f(t, 4)
		entered := make(chan struct{})
		release := make(chan struct{})
		var once sync.Once
		g := startGRPC(t, db, func(ctx context.Context, in string) error {
			if in != "held" {
				return nil
			}
			once.Do(func() { close(entered) })
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		ctx := ctxT(t)
		type result struct {
			out      string
			replayed bool
			err      error
		}
		firstDone := make(chan result, 1)
		go func() {
			out, replayed, err := g.call(ctx, "alice", "k", "held")
			firstDone <- result{out, replayed, err}
		}()
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatal("the first call never reached its handler")
		}
		if db.Dialect() == "sqlite" {
			repeat := make(chan result, 1)
			go func() {
				out, replayed, err := g.call(ctx, "alice", "k", "held")
				repeat <- result{out, replayed, err}
			}()
			close(release)
			first, again := <-firstDone, <-repeat
			must(t, first.err)
			must(t, again.err)
			if !again.replayed || again.out != first.out {
				t.Fatalf("SQLite repeat: %q replayed=%v, want the replay of %q", again.out, again.replayed, first.out)
			}
		} else {
			_, _, err := g.call(ctx, "alice", "k", "held")
			wantCode(t, "a repeat while the first call runs", err, codes.Aborted)
			close(release)
			first := <-firstDone
			must(t, first.err)
			again, replayed, err := g.call(ctx, "alice", "k", "held")
			must(t, err)
			if !replayed || again != first.out {
				t.Fatalf("repeat after the first: %q replayed=%v, want %q", again, replayed, first.out)
			}
		}
		if n := g.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		ddLedger(t, db, "held", 1)
	})

	// A handler that ignores a failed statement leaves a PostgreSQL
	// transaction aborted: recording the response fails with 25P02 and
	// the database rolls back. The call fails Internal (not carried out),
	// not Unavailable: no connection was lost, nothing committed.
	t.Run("RolledBackByTheDatabaseInternal", func(t *testing.T) {
		db := f(t, 0)
		if db.Dialect() != "postgres" {
			t.Skip(onlyPGAborts)
		}
		g := startGRPC(t, db, func(ctx context.Context, in string) error {
			tx, _ := grpcidem.TxFrom[TTx](ctx)
			b := db.Tx(tx)
			_, _ = b.OrderInsert(ctx, "dup-"+in, "c", 1)
			_, _ = b.OrderInsert(ctx, "dup-"+in, "c", 1) // 23505, ignored
			return nil
		})
		ctx := ctxT(t)
		for range 2 {
			_, _, err := g.call(ctx, "alice", "aborted", "aborted")
			wantCode(t, "a transaction the database rolled back", err, codes.Internal)
		}
		ddLedger(t, db, "aborted", 0)
		ddKeys(t, db, 0)
	})

	t.Run("NoHandleRefused", func(t *testing.T) {
		_, err := grpcidem.New[TTx](nil, func(context.Context) string { return "p" })
		if !errors.Is(err, sqlonce.ErrInvalidArgument) {
			t.Fatalf("nil driver: %v", err)
		}
	})
}
