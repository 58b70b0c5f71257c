package obs

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// Of returns the Observer attached to d by sqlonce.Observe, or nil.
func Of[TTx any](d sqlonce.Driver[TTx]) sqlonce.Observer {
	if o, ok := d.(interface{ Observer() sqlonce.Observer }); ok {
		return o.Observer()
	}
	return nil
}

// FromContext returns the Observer that sqlonce.ContextWithObserver put in
// ctx, or nil.
func FromContext(ctx context.Context) sqlonce.Observer {
	o, _ := ctx.Value(driver.ObserverKey{}).(sqlonce.Observer)
	return o
}

// Op is one operation being observed. Keep it on the stack: Start returns
// it by value.
type Op struct {
	o         sqlonce.Observer
	e         sqlonce.Event
	workStart time.Time
	last      error
	key       string
	takeover  bool
	res       sqlonce.Result
	err       error
}

// Start begins observing an operation; o may be nil. key is the
// operation's idempotency key or token, or "": the Event never holds it,
// and the errors it carries have it redacted.
func Start(o sqlonce.Observer, strategy, operation, scope, key string) Op {
	if o == nil {
		return Op{}
	}
	return Op{o: o, key: key, e: sqlonce.Event{Strategy: strategy, Operation: operation, Scope: scope, Start: time.Now()}}
}

// On reports whether the operation has an Observer.
func (op *Op) On() bool { return op.o != nil }

// Decided marks the moment the key was decided (claimed or found), which
// ends Event.Wait. Only the first call counts.
func (op *Op) Decided() {
	if op.o != nil && op.e.Wait == 0 {
		op.e.Wait = time.Since(op.e.Start)
	}
}

// WorkStart marks the caller's function starting; it also ends the wait.
func (op *Op) WorkStart() {
	if op.o == nil {
		return
	}
	op.Decided()
	op.workStart = time.Now()
}

// WorkEnd marks the caller's function returning.
func (op *Op) WorkEnd() {
	if op.o != nil && !op.workStart.IsZero() {
		op.e.Work += time.Since(op.workStart)
		op.workStart = time.Time{}
	}
}

// Tried counts an attempt of a transaction that ended with err.
func (op *Op) Tried(err error) {
	if op.o == nil {
		return
	}
	if op.e.Attempts > 0 && op.last != nil {
		op.e.RetryCause = op.last
	}
	op.last = err
	op.e.Attempts++
}

// Retried counts a retry that is no transaction of the Store's (an
// outside step called again) after cause.
func (op *Op) Retried(cause error) {
	if op.o == nil {
		return
	}
	op.e.RetryCause = cause
	op.last = nil
	op.e.Attempts++
}

// Attempt sets the attempt number reported: an outbox publish's, counted
// over the relay's rounds rather than the operation's transactions.
func (op *Op) Attempt(n int) {
	if op.o != nil {
		op.e.Attempts = n
	}
}

// Takeover records that the claim took over an expired key or a lapsed
// lease.
func (op *Op) Takeover() { op.takeover = true }

// Rows records a Purge's count.
func (op *Op) Rows(n int64) { op.e.Rows = n }

// Status records an HTTP status code.
func (op *Op) Status(code int) { op.e.HTTPStatus = code }

// Scope sets the scope when it is known only after Start.
func (op *Op) Scope(scope string) { op.e.Scope = scope }

// End reports the operation with its result and error to the Observer,
// and returns the error the operation returns: err, marked with
// sqlonce.ErrReadOnly when the server refused a write (see
// driver.ReadOnlyError). Every operation's exit goes through End, Done or
// EndBatch, as
//
//	defer func() { err = op.End(ctx, res, err) }()
//
// so that the mark is made in one place. An operation that answers a
// Result ends with an Outcome or an error; neither means that End runs
// deferred while a panic (the caller's function's) unwinds, and it
// reports ErrPanicked (and returns err unchanged: the panic goes on).
func (op *Op) End(ctx context.Context, res sqlonce.Result, err error) error {
	err = driver.ReadOnlyError(err)
	reported := err
	if op.o != nil && err == nil && res.Outcome == 0 {
		reported = ErrPanicked
	}
	op.end(ctx, res, reported)
	return err
}

// ErrPanicked is the Event.Err of an operation left by a panic.
var ErrPanicked = errors.New("sqlonce: the operation panicked")

func (op *Op) end(ctx context.Context, res sqlonce.Result, err error) {
	if op.o == nil {
		return
	}
	e := &op.e
	e.Duration = time.Since(e.Start)
	e.Err = redact(err, op.key)
	e.RetryCause = redact(e.RetryCause, op.key)
	e.ResponseSize = len(res.Response)
	if e.Attempts == 0 {
		e.Attempts = 1
	}
	e.Status = Status(res, err)
	if e.Status == sqlonce.EventFirstRun && op.takeover {
		e.Status = sqlonce.EventTakeover
	}
	op.o.Observe(ctx, *e)
}

// Set keeps res and err for EndSet, for an operation whose result is
// known deep inside it and reported where it started.
func (op *Op) Set(res sqlonce.Result, err error) {
	if op.o != nil {
		op.res, op.err = res, err
	}
}

// EndSet is End with what Set kept.
func (op *Op) EndSet(ctx context.Context) { op.End(ctx, op.res, op.err) }

// Done is End for an operation that answers no Result. An error that
// matches one of answers is the operation's answer rather than a failure
// (Inspect's ErrNotFound): it is reported as no error, and returned.
func (op *Op) Done(ctx context.Context, err error, answers ...error) error {
	err = driver.ReadOnlyError(err)
	reported := err
	for _, a := range answers {
		if errors.Is(err, a) {
			reported = nil
		}
	}
	op.end(ctx, sqlonce.Result{}, reported)
	return err
}

// EndBatch is End for a batch: one Event, FirstRun when any key was
// fresh, AlreadyDone when none was, with the number of fresh keys in
// Rows; done for an empty batch. It returns err as End does.
func (op *Op) EndBatch(ctx context.Context, results []sqlonce.Result, err error) error {
	err = driver.ReadOnlyError(err)
	if op.o == nil {
		return err
	}
	if len(results) == 0 {
		op.end(ctx, sqlonce.Result{}, err)
		return err
	}
	res, fresh := Batch(results)
	op.Rows(fresh)
	op.end(ctx, res, err)
	return err
}

// Batch sums up a batch's results as one Result for its Event: FirstRun
// when any key was fresh, AlreadyDone when none was, and the number of
// fresh keys.
func Batch(results []sqlonce.Result) (res sqlonce.Result, fresh int64) {
	for _, r := range results {
		if r.FirstRun() {
			res.Outcome = sqlonce.FirstRun
			fresh++
		} else if res.Outcome == 0 {
			res.Outcome = sqlonce.AlreadyDone
		}
	}
	return res, fresh
}

// Status classifies a strategy's answer.
func Status(res sqlonce.Result, err error) sqlonce.EventStatus {
	switch {
	case err == nil:
		switch res.Outcome {
		case sqlonce.FirstRun:
			return sqlonce.EventFirstRun
		case sqlonce.AlreadyDone:
			if res.Response != nil {
				return sqlonce.EventReplayed
			}
			return sqlonce.EventAlreadyDone
		}
		return sqlonce.EventOK
	case errors.Is(err, sqlonce.ErrInProgress):
		return sqlonce.EventInProgress
	case errors.Is(err, sqlonce.ErrKeyReuse):
		return sqlonce.EventKeyReuse
	case errors.Is(err, sqlonce.ErrLeaseLost):
		return sqlonce.EventLeaseLost
	}
	return sqlonce.EventError
}

// Bare returns d without its Observer, for a strategy that reports its
// operations itself and builds on another that would report them too.
func Bare[TTx any](d sqlonce.Driver[TTx]) sqlonce.Driver[TTx] {
	if Of(d) == nil {
		return d
	}
	return bare[TTx]{d}
}

type bare[TTx any] struct{ d sqlonce.Driver[TTx] }

func (b bare[TTx]) Engine() driver.Engine[TTx] { return b.d.Engine() }

// minRawKey is the shortest key that redact replaces where it appears
// unquoted (a database's message: MySQL's "Duplicate entry 'scope-key'");
// a shorter one would mangle the rest of the message ("Error 1062").
const minRawKey = 6

// redact hides key in err's message, keeping err for errors.Is and
// errors.As: always where it is quoted, as sqlonce's errors name it, and
// anywhere when it is at least minRawKey bytes long.
func redact(err error, key string) error {
	if err == nil || key == "" {
		return err
	}
	return &redacted{err: err, key: key}
}

type redacted struct {
	err error
	key string
}

func (r *redacted) Error() string {
	msg := strings.ReplaceAll(r.err.Error(), strconv.Quote(r.key), `"<key>"`)
	if len(r.key) >= minRawKey {
		msg = strings.ReplaceAll(msg, r.key, "<key>")
	}
	return msg
}
func (r *redacted) Unwrap() error { return r.err }

// opKey is the context key of With.
type opKey struct{}

// With returns ctx carrying op, for a call into a dedupe.Store made by a
// package built on it (the inbox, httpidem), which observes the operation
// as its own: the Store reports attempts, waits and work to op instead of
// an Op of its own.
func With(ctx context.Context, op *Op) context.Context {
	return context.WithValue(ctx, opKey{}, op)
}

// Take returns the Op With put in ctx, or nil, and ctx without it, so that
// a Store that fn calls in turn observes its own operation.
func Take(ctx context.Context) (*Op, context.Context) {
	op, _ := ctx.Value(opKey{}).(*Op)
	if op == nil {
		return nil, ctx
	}
	return op, context.WithValue(ctx, opKey{}, (*Op)(nil))
}
