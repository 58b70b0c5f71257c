// Package grpcidem is a unary gRPC server interceptor with httpidem's
// contract: a client that retries a call with the same key (metadata
// "idempotency-key") gets the first response back, and the work is done
// once. It shares sqlonce's transport-neutral core with httpidem, and is a
// module of its own so that only its importers depend on grpc-go.
//
//	drv, err := pgxdriver.New(pool)
//	...
//	i, err := grpcidem.New(drv, func(ctx context.Context) string {
//		return callerID(ctx) // the authenticated caller
//	})
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(i.Unary()))
//
//	func (s *server) Pay(ctx context.Context, in *pb.PayRequest) (*pb.PayReply, error) {
//		tx, ok := grpcidem.TxFrom[pgx.Tx](ctx)
//		if !ok {
//			return nil, status.Error(codes.Internal, "no transaction")
//		}
//		// Writes through tx commit together with the key and the reply.
//		...
//	}
//
// # The contract, mapped to gRPC
//
//	HTTP (httpidem)                      gRPC (grpcidem)
//	Idempotency-Key header               "idempotency-key" metadata, one value
//	missing or malformed key: 400        InvalidArgument
//	no authenticated caller: 401         Unauthenticated
//	key scoped by caller                 key scoped by caller
//	fingerprint: method, route, body     fingerprint: full method, request message (deterministic)
//	key reused elsewhere: 422            FailedPrecondition (WithKeyReuseCode)
//	first request still running: 409     Aborted
//	replay, Idempotent-Replayed: true    recorded message, header "idempotent-replayed: true"
//	outcome unknown after COMMIT: 500    Unavailable (retry with the same key)
//	database takes no writes: 503        Unavailable (not carried out; retry with the same key)
//	answer too large to record: 500      ResourceExhausted (over WithMaxResponseSize)
//	any other error, rolled back: 500    Internal
//
// "Outcome unknown" is answered only when the driver's COMMIT lost its
// connection on the way (sqlonce.ErrCommitUnknown): an error the database
// answered, such as PostgreSQL's 25P02 for a transaction a failed
// statement left aborted, rolled back, and is Internal.
// A database that refuses writes (sqlonce.ErrReadOnly: a standby, a
// read-only replica, a primary a failover is demoting) is Unavailable
// too, the call not carried out: retried with the same key once the
// server reaches a primary, it runs once.
//
// A recorded response is the response message as a google.protobuf.Any,
// at most [WithMaxResponseSize] bytes (dedupe.MaxResponseSize, 16 MiB - 1,
// by default); a larger one cannot be recorded, and the call fails
// ResourceExhausted with its work rolled back and its key free.
//
// On SQLite, which runs one writing transaction at a time, a repeat that
// arrives while the first call runs waits at BEGIN for the first call's
// transaction and then gets its recorded response (or runs, if it rolled
// back), rather than Aborted.
//
// [WithMetadataKey] reads the key from another metadata key (say
// "x-idempotency-key"), as httpidem's WithKeyHeader does from another
// header field, and [WithKeyReuseCode] answers a reused key
// InvalidArgument or AlreadyExists, as httpidem's WithKeyReuseStatus
// answers 400 or 409. The metadata value is the key as it is: it has
// no quoted form.
//
// Only successful responses are recorded: a handler error rolls the
// transaction back, is returned as is, and leaves the key free, so that a
// retry runs the handler again (httpidem's RecordSuccess). The handler may
// run more than once for one call when the database reports a deadlock or
// a serialization failure; keep effects outside the database out of it.
// The response message is recorded as a google.protobuf.Any, so its type
// must be linked into the server (it is, as the handler returns it).
//
// # Observing
//
// An Interceptor built on a driver from sqlonce.Observe reports one
// sqlonce.Event per handled call (strategy "grpcidem", operation "Serve",
// the scope of the key): first_run, replayed, in_progress, key_reuse or
// error, the handler's time in Event.Work and the transaction's attempts.
// The gRPC code answered is not in the Event (Event.HTTPStatus stays 0).
// Its own dedupe.Store does not report the call again.
package grpcidem
