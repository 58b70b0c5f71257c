package sqlonce

import (
	"context"
	"time"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// Observer receives one Event for every operation a strategy ends. It is
// called synchronously, after the operation, in the caller's goroutine and
// with the caller's ctx, so it must be safe for concurrent use and quick:
// hand slow work (a network export) to a goroutine of its own. It must not
// keep e.Err's referents or change them.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc is an Observer made of a function.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f(ctx, e).
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Observers returns an Observer that passes every event to each of obs in
// turn, skipping nil ones: logs and metrics side by side.
func Observers(obs ...Observer) Observer {
	var list []Observer
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
		}
	}
	return ObserverFunc(func(ctx context.Context, e Event) {
		for _, o := range list {
			o.Observe(ctx, e)
		}
	})
}

// Event describes one operation of a strategy, as an Observer receives it.
// It never holds the idempotency key, which may be a secret a client chose,
// nor the request or the response: only their scope and sizes.
type Event struct {
	// Strategy is the package that ran the operation: "dedupe", "unique",
	// "token", "inbox", "outbox", "httpidem", "grpcidem", "optimistic" or
	// "statemachine".
	Strategy string
	// Operation is the method called: "Do", "DoResponse", "Run", "Claim",
	// "Complete", "Purge", "Insert", "Consume", "Handle", "Transition"...
	Operation string
	// Scope is the key's namespace (dedupe, inbox, httpidem, token), the
	// constraint (unique), or "from->to" (statemachine); empty where the
	// operation has none.
	Scope string
	// Status is what the operation found or did (its Result's Outcome,
	// told apart further, or the kind of its failure).
	Status EventStatus
	// Err is the error the operation returned, nil on success. Statuses
	// EventInProgress, EventKeyReuse and EventLeaseLost come with theirs. It matches what
	// the call's error matches (errors.Is, errors.As), but its message
	// shows the idempotency key as <key>: wherever sqlonce's errors quote
	// it, and anywhere else (a database's message) when it is at least 6
	// bytes long. ErrorType(Err) names its kind in a few fixed words.
	Err error
	// Start is when the operation began, by the application's clock.
	Start time.Time
	// Duration is how long the whole operation took, retries included.
	Duration time.Duration
	// Wait is how long the operation took to decide the key, from its start
	// to the moment it could run the caller's function or answer without
	// it: the claim's round trips and any wait for another transaction
	// holding the key. Zero where the strategy does not claim a key.
	Wait time.Duration
	// Work is the time spent in the caller's function (over every attempt,
	// when the operation ran it more than once). Zero when it did not run.
	Work time.Duration
	// Attempts is how many times the operation ran its transaction: more
	// than 1 when sqlonce retried a transaction of its own after a
	// deadlock, a serialization failure or a stale read. For dedupe's
	// operations of several steps, every transaction of the run counts,
	// and so does every call of an outside step that its Step.Retry made
	// again.
	Attempts int
	// RetryCause is the error that made the last retry (Attempts > 1;
	// nil when no attempt failed), its key redacted as Err's is.
	RetryCause error
	// ResponseSize is the size in bytes of the response recorded (first
	// run) or replayed (already done); 0 where there is none.
	ResponseSize int
	// Rows is the number of rows a Purge deleted.
	Rows int64
	// HTTPStatus is the status code httpidem answered with (httpidem only).
	HTTPStatus int
}

// EventStatus classifies an Event: what the operation found or did.
type EventStatus uint8

const (
	// EventError means the operation failed for a reason not classified
	// below; Event.Err says which.
	EventError EventStatus = iota
	// EventFirstRun means this call did the work (Result FirstRun).
	EventFirstRun
	// EventAlreadyDone means an earlier call did the work and recorded no
	// response (Result AlreadyDone).
	EventAlreadyDone
	// EventReplayed means an earlier call did the work and its recorded
	// response was handed back (Result AlreadyDone with a Response).
	EventReplayed
	// EventInProgress means another caller held the key (ErrInProgress).
	EventInProgress
	// EventKeyReuse means the key came back with another request
	// (ErrKeyReuse).
	EventKeyReuse
	// EventLeaseLost means a lease operation found its token no longer
	// current (ErrLeaseLost).
	EventLeaseLost
	// EventTakeover means this call did the work after taking over an
	// expired key or a lapsed lease (Result FirstRun): a lapsed lease is a
	// holder that crashed or overran. PostgreSQL's and MySQL's drivers
	// tell it; on SQLite, whose claim is one upsert, such a call reports
	// EventFirstRun.
	EventTakeover
	// EventOK means an operation that answers no Result succeeded: a
	// lease's Complete, Release or Extend, a Purge, a token's Issue.
	EventOK
)

var statusNames = [...]string{
	EventError:       "error",
	EventFirstRun:    "first_run",
	EventAlreadyDone: "already_done",
	EventReplayed:    "replayed",
	EventInProgress:  "in_progress",
	EventKeyReuse:    "key_reuse",
	EventLeaseLost:   "lease_lost",
	EventTakeover:    "takeover",
	EventOK:          "ok",
}

// String returns the status in snake case ("first_run", "replayed",
// "key_reuse", "ok"...), fit for a metric attribute or a log field.
func (s EventStatus) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown"
}

// Observe returns d with obs attached: every strategy built on the
// returned Driver (dedupe, unique, token, inbox, httpidem) reports each of
// its operations to obs. Attach it once, where the driver is made:
//
//	pg, err := pgxdriver.New(pool)
//	...
//	drv := sqlonce.Observe(pg, sqlonce.SlogObserver(logger))
//
// A nil obs returns d itself. optimistic and statemachine take no driver:
// they report to the Observer that ContextWithObserver put in their ctx.
func Observe[TTx any](d Driver[TTx], obs Observer) Driver[TTx] {
	if obs == nil || d == nil {
		return d
	}
	return observed[TTx]{d: d, obs: obs}
}

type observed[TTx any] struct {
	d   Driver[TTx]
	obs Observer
}

func (o observed[TTx]) Engine() driver.Engine[TTx] { return o.d.Engine() }

// Observer returns the attached Observer. The strategies find it with a
// type assertion; it is not part of the Driver interface.
func (o observed[TTx]) Observer() Observer { return o.obs }

// ContextWithObserver returns a copy of ctx that carries obs, for the
// strategies that take no driver (optimistic, statemachine): they report
// the operations run with that ctx to obs. Strategies built on a Driver
// report to the Driver's Observer only.
func ContextWithObserver(ctx context.Context, obs Observer) context.Context {
	return context.WithValue(ctx, driver.ObserverKey{}, obs)
}
