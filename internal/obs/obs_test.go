package obs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/sqlonce/sqlonce"
)

func TestRedact(t *testing.T) {
	for _, c := range []struct {
		key, msg, want string
	}{
		{"k1", `key "k1" in scope "s": Error 1062: Duplicate entry 's-k1'`, `key "<key>" in scope "s": Error 1062: Duplicate entry 's-k1'`},
		{"order-42", `key "order-42": Duplicate entry 's-order-42'`, `key "<key>": Duplicate entry 's-<key>'`},
		{"1", `key "1": Error 1062`, `key "<key>": Error 1062`},
	} {
		err := redact(fmt.Errorf("%s: %w", c.msg, sqlonce.ErrKeyReuse), c.key)
		if got, want := err.Error(), c.want+": "+sqlonce.ErrKeyReuse.Error(); got != want {
			t.Errorf("key %q:\n got %s\nwant %s", c.key, got, want)
		}
		if !errors.Is(err, sqlonce.ErrKeyReuse) {
			t.Errorf("key %q: redacted error no longer matches", c.key)
		}
	}
}

func TestOpWithoutObserver(t *testing.T) {
	op := Start(nil, "dedupe", "Do", "s", "k")
	op.WorkStart()
	op.WorkEnd()
	op.Tried(errors.New("x"))
	op.End(context.Background(), sqlonce.Result{}, nil)
	if op.On() || !op.e.Start.IsZero() {
		t.Fatalf("an Op without an Observer recorded %+v", op.e)
	}
	if n := testing.AllocsPerRun(100, func() {
		op := Start(nil, "dedupe", "Do", "s", "k")
		op.Decided()
		op.End(context.Background(), sqlonce.Result{Outcome: sqlonce.FirstRun}, nil)
	}); n != 0 {
		t.Fatalf("%v allocations without an Observer", n)
	}
}

func TestAttempts(t *testing.T) {
	var got sqlonce.Event
	o := sqlonce.ObserverFunc(func(_ context.Context, e sqlonce.Event) { got = e })
	op := Start(o, "dedupe", "Run", "s", "key-secret")
	first := fmt.Errorf("key %q: %w", "key-secret", sqlonce.ErrStaleRead)
	op.Tried(first)
	op.Tried(nil)
	op.End(context.Background(), sqlonce.Result{Outcome: sqlonce.AlreadyDone, Response: []byte("abc")}, nil)
	if got.Attempts != 2 || !errors.Is(got.RetryCause, sqlonce.ErrStaleRead) || got.Outcome != sqlonce.EventReplayed || got.ResponseSize != 3 {
		t.Fatalf("event %+v", got)
	}
	if msg := got.RetryCause.Error(); msg != `key "<key>": `+sqlonce.ErrStaleRead.Error() {
		t.Fatalf("retry cause %q", msg)
	}
}

// BenchmarkOp is what one observed operation costs the CPU, apart from
// any database: the calls a Store.Run makes on its Op, with no Observer,
// a no-op one, and SlogObserver writing JSON to io.Discard. Compare with
// tests/bench BenchmarkObserve, the same over real databases.
func BenchmarkOp(b *testing.B) {
	ctx := context.Background()
	res := sqlonce.Result{Outcome: sqlonce.AlreadyDone, Response: []byte("receipt")}
	for _, c := range []struct {
		name string
		o    sqlonce.Observer
	}{
		{"none", nil},
		{"noop", sqlonce.ObserverFunc(func(context.Context, sqlonce.Event) {})},
		{"slog", sqlonce.SlogObserver(slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug})))},
		{"slog_filtered", sqlonce.SlogObserver(slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})))},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				op := Start(c.o, "dedupe", "Run", "payments", "key-1")
				op.WorkStart()
				op.WorkEnd()
				op.Tried(nil)
				op.Decided()
				op.End(ctx, res, nil)
			}
		})
	}
}

func TestPanicIsAnError(t *testing.T) {
	var got sqlonce.Event
	o := sqlonce.ObserverFunc(func(_ context.Context, e sqlonce.Event) { got = e })
	func() {
		defer func() { _ = recover() }()
		op := Start(o, "dedupe", "Do", "s", "k")
		defer func() { op.End(context.Background(), sqlonce.Result{}, nil) }()
		panic("fn")
	}()
	if got.Outcome != sqlonce.EventError || !errors.Is(got.Err, ErrPanicked) {
		t.Fatalf("a panicking operation reported %v (%v)", got.Outcome, got.Err)
	}
	op := Start(o, "dedupe", "Complete", "s", "k")
	op.Done(context.Background(), nil)
	if got.Outcome != sqlonce.EventDone || got.Err != nil {
		t.Fatalf("Done reported %v (%v)", got.Outcome, got.Err)
	}
}
