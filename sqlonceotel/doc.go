// Package sqlonceotel records sqlonce's operations as OpenTelemetry
// metrics and spans. It is a module of its own
// (github.com/sqlonce/sqlonce/sqlonceotel): the core module does not
// require OpenTelemetry, and a program pays for it only by importing this
// package.
//
// Attach an [Observer] to the driver once; every strategy built on it
// reports:
//
//	obs, err := sqlonceotel.New(sqlonceotel.WithDBSystem("postgresql"))
//	pg, err := pgxdriver.New(pool)
//	...
//	drv := sqlonce.Observe(pg, obs)
//	store, err := dedupe.New(drv)
//
// For optimistic and statemachine, which take no driver, put it in the
// context with sqlonce.ContextWithObserver.
//
// # Metrics
//
//   - sqlonce.operations (counter): operations by sqlonce.strategy,
//     sqlonce.operation, sqlonce.status (first_run, already_done,
//     replayed, in_progress, key_reuse, lease_lost, takeover,
//     ok, error) and, for failures, error.type (sqlonce.ErrorType).
//     The replay rate is replayed / all; the 409 rate of httpidem is
//     in_progress / all (key reuse is answered 422: key_reuse / all).
//   - sqlonce.operation.duration (histogram, s): whole operations,
//     retries included.
//   - sqlonce.wait.duration (histogram, s): the time taken to decide the
//     key, waits for another transaction holding it included.
//   - sqlonce.retries (counter): transactions sqlonce ran again, by the
//     error.type of the cause.
//
// Attributes are bounded sets: the scope, which grows with tenants or
// principals, is on spans only, and the key is nowhere.
//
// # Spans
//
// One span per operation, named "<strategy>.<Operation>" ("dedupe.Run"),
// of kind internal, with db.system.name (WithDBSystem), db.operation.name,
// error.type and, for httpidem, http.response.status_code, following
// OpenTelemetry's semantic conventions, plus sqlonce.scope,
// sqlonce.status, sqlonce.attempts, sqlonce.wait.duration,
// sqlonce.work.duration and sqlonce.response.size. A span is made when
// the operation ends, with its real start and end times, as a child of
// the span in the operation's ctx; spans started inside the caller's
// function are its siblings. Errors and lost leases set the span's status
// to Error; refusals (in progress, key reuse) answer a repeat and do not.
package sqlonceotel
