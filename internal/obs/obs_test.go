package obs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
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
	if got.Attempts != 2 || !errors.Is(got.RetryCause, sqlonce.ErrStaleRead) || got.Status != sqlonce.EventReplayed || got.ResponseSize != 3 {
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
	if got.Status != sqlonce.EventError || !errors.Is(got.Err, ErrPanicked) {
		t.Fatalf("a panicking operation reported %v (%v)", got.Status, got.Err)
	}
	op := Start(o, "dedupe", "Complete", "s", "k")
	op.Done(context.Background(), nil)
	if got.Status != sqlonce.EventOK || got.Err != nil {
		t.Fatalf("Done reported %v (%v)", got.Status, got.Err)
	}
}

// errRefused stands for a driver's "the server takes no writes" error.
type errRefused struct{}

func (errRefused) Error() string { return "cannot execute INSERT in a read-only transaction" }

func init() {
	driver.Register(driver.ClassifierFunc(func(err error) driver.Class {
		if _, ok := err.(errRefused); ok {
			return driver.ReadOnly
		}
		return 0
	}))
}

type events []sqlonce.Event

func (e *events) Observe(_ context.Context, ev sqlonce.Event) { *e = append(*e, ev) }

// Every exit (End, Done, EndBatch), with or without an Observer, returns
// a refused write marked with ErrReadOnly and reports the marked error;
// Done reports an error among its answers as none, and returns it.
func TestExitsMarkReadOnly(t *testing.T) {
	ctx := context.Background()
	refused := fmt.Errorf("claim: %w", errRefused{})
	for _, o := range []*events{nil, {}} {
		var obsv sqlonce.Observer
		if o != nil {
			obsv = o
		}
		exits := map[string]func(op *Op) error{
			"End":      func(op *Op) error { return op.End(ctx, sqlonce.Result{}, refused) },
			"Done":     func(op *Op) error { return op.Done(ctx, refused) },
			"EndBatch": func(op *Op) error { return op.EndBatch(ctx, []sqlonce.Result{{}}, refused) },
		}
		for name, exit := range exits {
			op := Start(obsv, "dedupe", name, "s", "k")
			err := exit(&op)
			if !errors.Is(err, sqlonce.ErrReadOnly) || !errors.Is(err, refused) {
				t.Errorf("%s (observer %v): returned %v, want ErrReadOnly with the cause", name, o != nil, err)
			}
		}
		if o != nil {
			for _, ev := range *o {
				if !errors.Is(ev.Err, sqlonce.ErrReadOnly) {
					t.Errorf("%s reported %v, want ErrReadOnly", ev.Operation, ev.Err)
				}
			}
		}
	}
	o := &events{}
	op := Start(o, "dedupe", "Inspect", "s", "k")
	nf := fmt.Errorf("key %q: %w", "k", sqlonce.ErrNotFound)
	if err := op.Done(ctx, nf, sqlonce.ErrNotFound); err != nf {
		t.Errorf("Done returned %v, want the answer %v", err, nf)
	}
	if len(*o) != 1 || (*o)[0].Err != nil {
		t.Errorf("an answer was reported as %+v, want no error", *o)
	}
}

// TestRetried: a retry that is no transaction (an outside step called
// again) counts as an attempt, its cause kept past later successful
// transactions.
func TestRetried(t *testing.T) {
	var got sqlonce.Event
	o := sqlonce.ObserverFunc(func(_ context.Context, e sqlonce.Event) { got = e })
	op := Start(o, "dedupe", "RunSteps", "s", "k")
	op.Tried(nil)
	op.Retried(sqlonce.ErrStaleRead)
	op.Tried(nil)
	op.Tried(nil)
	op.End(context.Background(), sqlonce.Result{Outcome: sqlonce.FirstRun}, nil)
	if got.Attempts != 4 || !errors.Is(got.RetryCause, sqlonce.ErrStaleRead) {
		t.Fatalf("event %+v", got)
	}
}
