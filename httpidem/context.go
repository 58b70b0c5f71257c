package httpidem

import (
	"context"

	"github.com/sqlonce/sqlonce/dedupe"
)

type txKey[TTx any] struct{}

type leaseKey struct{}

type failKey struct{}

// failure is where Fail leaves a handler's error for the attempt that
// runs the handler.
type failure struct{ err error }

// Fail tells the middleware that the request failed with err, typically an
// error from the handler's transaction: call it, then write the error
// answer as usual. The middleware records nothing and rolls the
// transaction back, whatever the status; when sqlonce.IsRetryable(err)
// (a deadlock, a serialization failure: the database asks for the
// transaction to run again) transactional mode runs the handler again in
// a new transaction and drops this attempt's answer, otherwise the client
// gets the handler's answer. Without Fail the middleware cannot see such
// an error behind a 500, and a transaction the database has aborted fails
// to record the answer instead: the client then gets a 500 problem and
// nothing is recorded. In lease mode Fail releases the lease.
func Fail(ctx context.Context, err error) {
	if f, ok := ctx.Value(failKey{}).(*failure); ok && err != nil {
		f.err = err
	}
}

// TxFrom returns the transaction transactional mode runs the request's
// handler in. Do the handler's database work in it: it commits together
// with the key and the recorded response, or rolls back with them. Every
// request transactional mode handles runs in one, including a request
// without a key where WithRequired lets it go without: nothing is
// recorded for it, and its transaction commits or rolls back as the
// RecordFunc decides for the answer's status, as with a key.
//
// ok is false, and tx the zero value (a nil pgx.Tx or *sql.Tx), in lease
// mode, for requests whose method the middleware does not handle (GET
// unless WithMethods says otherwise), outside the middleware, and when
// TTx is not the driver's transaction type. A handler must check ok
// before using tx:
//
//	tx, ok := httpidem.TxFrom[pgx.Tx](r.Context())
//	if !ok {
//		http.Error(w, "not in a transaction", http.StatusInternalServerError)
//		return
//	}
func TxFrom[TTx any](ctx context.Context) (tx TTx, ok bool) {
	tx, ok = ctx.Value(txKey[TTx]{}).(TTx)
	return tx, ok
}

// LeaseFrom returns the lease lease mode holds while the request's handler
// runs. Pass its Token on to outside systems that can refuse a stale
// writer. ok is false in transactional mode.
func LeaseFrom(ctx context.Context) (l *dedupe.Lease, ok bool) {
	l, ok = ctx.Value(leaseKey{}).(*dedupe.Lease)
	return l, ok
}
