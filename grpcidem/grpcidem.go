package grpcidem

import (
	"context"
	"fmt"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/idem"
	"github.com/sqlonce/sqlonce/internal/obs"
	"github.com/sqlonce/sqlonce/internal/storecfg"
)

const (
	// MetadataKey is the request metadata key that carries the
	// idempotency key (gRPC metadata keys are lower case), unless
	// WithMetadataKey names another.
	MetadataKey = "idempotency-key"

	// ReplayedKey is set to "true" in the response header metadata of a
	// replayed response.
	ReplayedKey = "idempotent-replayed"
)

// Interceptor makes unary gRPC methods idempotent per key. Build one with
// New; install Unary with grpc.ChainUnaryInterceptor. It is safe for
// concurrent use.
type Interceptor[TTx any] struct {
	options
	principal func(ctx context.Context) string
	runner    idem.Runner[TTx]
	observer  sqlonce.Observer
}

// New returns an Interceptor on the driver, whose database handle begins
// the transactions. principal names the authenticated caller of a call
// (from its peer certificate or token): keys are scoped by it. It returns
// an error matching sqlonce.ErrInvalidArgument for a nil driver or one
// not built by its package's New, a nil principal, or a bad option (the
// error names it).
func New[TTx any](d sqlonce.Driver[TTx], principal func(ctx context.Context) string, opts ...Option) (*Interceptor[TTx], error) {
	if d == nil || d.Engine() == nil {
		return nil, fmt.Errorf("%w: grpcidem: %s", sqlonce.ErrInvalidArgument, driver.NotBuilt)
	}
	if principal == nil {
		return nil, fmt.Errorf("%w: grpcidem: nil principal func", sqlonce.ErrInvalidArgument)
	}
	c := options{ttl: dedupe.DefaultTTL, maxResponse: dedupe.MaxResponseSize, key: MetadataKey, reuseCode: codes.FailedPrecondition}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: grpcidem: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	e := d.Engine()
	// HTTP and gRPC keys share httpidem's namespace; their scopes differ
	// by kind ('g'), so neither can answer for the other.
	store, err := dedupe.New(obs.Bare(d), dedupe.WithNoWait(), dedupe.WithTTL(c.ttl), dedupe.WithMaxResponseSize(c.maxResponse),
		func(o *storecfg.Options) error {
			o.Namespace = driver.NamespaceHTTP
			return nil
		})
	if err != nil {
		return nil, err
	}
	return &Interceptor[TTx]{options: c, principal: principal, runner: idem.Runner[TTx]{Store: store, RunTx: e.InTx, Run: true}, observer: obs.Of(d)}, nil
}

type txKey[TTx any] struct{}

// TxFrom returns the transaction the call's handler runs in: do the
// handler's database work in it, and it commits with the key and the
// recorded response. ok is false (and tx the zero value) for calls the
// interceptor passes through, outside the interceptor, and when TTx is
// not the driver's transaction type.
func TxFrom[TTx any](ctx context.Context) (tx TTx, ok bool) {
	tx, ok = ctx.Value(txKey[TTx]{}).(TTx)
	return tx, ok
}

// Unary returns the unary server interceptor.
//
// A handled call must carry exactly one MetadataKey value (or one of the
// key WithMetadataKey names) of 1 to 255 bytes of UTF-8 (InvalidArgument otherwise) and an authenticated caller
// (Unauthenticated). Its fingerprint is the full method and the request
// message, marshaled deterministically. The handler runs in a
// transaction that also claims the key and records the response message:
// a repeat with the same fingerprint gets the recorded message, with
// ReplayedKey in its header metadata; another fingerprint is
// FailedPrecondition (the key was used for another call; WithKeyReuseCode
// chooses another code); a repeat while
// the first call runs is Aborted (retry later, unchanged; on SQLite the
// repeat waits at BEGIN instead and gets the replay, see the package
// documentation); when the connection to the database is lost at COMMIT
// (sqlonce.ErrCommitUnknown) the outcome is unknown and the call fails
// Unavailable, to be retried with the same key; a response over
// WithMaxResponseSize is ResourceExhausted, rolled back. A handler error
// rolls the transaction back and is returned as is: only successful
// responses are recorded, so a retry runs the handler again. A claim the
// database refuses for the way it is set up (the keys on a sharded Vitess
// keyspace, where a claim that does not wait for a held key cannot be
// bounded) is FailedPrecondition, which clients do not retry, its message
// saying that the call was not carried out and that the keys need an
// unsharded keyspace. Any other error, the database's included (it rolled
// back), is Internal.
func (i *Interceptor[TTx]) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if i.methods != nil && !i.methods[info.FullMethod] {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		vals := md.Get(i.key)
		switch {
		case len(vals) == 0:
			return nil, status.Errorf(codes.InvalidArgument, "this method requires an %s metadata value with a unique key per call, sent again unchanged on every retry", i.key)
		case len(vals) > 1:
			return nil, status.Errorf(codes.InvalidArgument, "one %s metadata value, not %d", i.key, len(vals))
		case vals[0] == "" || len(vals[0]) > sqlonce.MaxKeyLen || !utf8.ValidString(vals[0]):
			return nil, status.Errorf(codes.InvalidArgument, "the %s value must be 1 to %d bytes of UTF-8", i.key, sqlonce.MaxKeyLen)
		}
		principal := i.principal(ctx)
		if principal == "" {
			return nil, status.Error(codes.Unauthenticated, "idempotency keys are kept per authenticated caller; authenticate the call")
		}
		msg, ok := req.(proto.Message)
		if !ok {
			return nil, status.Errorf(codes.Internal, "grpcidem: request of type %T is not a protocol buffer message", req)
		}
		body, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
		if err != nil {
			return nil, status.Error(codes.Internal, "grpcidem: the request could not be fingerprinted")
		}
		dreq := &dedupe.Request{
			Scope:       idem.Scope('g', principal),
			Key:         vals[0],
			Fingerprint: dedupe.Fingerprint([]byte("grpc"), []byte(info.FullMethod), body),
		}
		var (
			resp       any
			handlerErr error
			panicked   any
		)
		op := obs.Start(i.observer, "grpcidem", "Serve", dreq.Scope, dreq.Key)
		defer op.EndSet(ctx)
		res, out, err := i.runner.Serve(ctx, dreq, func(ctx context.Context, tx TTx) ([]byte, error) {
			op.WorkStart()
			resp, handlerErr, panicked = call(handler, context.WithValue(ctx, txKey[TTx]{}, tx), req)
			op.WorkEnd()
			if panicked != nil {
				return nil, idem.ErrPanicked
			}
			if handlerErr != nil {
				return nil, &idem.Failure{Err: handlerErr}
			}
			m, ok := resp.(proto.Message)
			if !ok {
				return nil, fmt.Errorf("grpcidem: response of type %T is not a protocol buffer message", resp)
			}
			a, err := anypb.New(m)
			if err != nil {
				return nil, err
			}
			return proto.MarshalOptions{Deterministic: true}.Marshal(a)
		}, &op)
		if panicked != nil {
			panic(panicked)
		}
		switch out {
		case idem.Answered:
			return resp, handlerErr
		case idem.Replayed:
			var a anypb.Any
			if err := proto.Unmarshal(res.Response, &a); err != nil {
				return nil, status.Error(codes.Internal, "the recorded response could not be read")
			}
			m, err := a.UnmarshalNew()
			if err != nil {
				return nil, status.Error(codes.Internal, "the recorded response could not be read")
			}
			_ = grpc.SetHeader(ctx, metadata.Pairs(ReplayedKey, "true"))
			return m, nil
		case idem.InProgress:
			return nil, status.Error(codes.Aborted, "a call with this idempotency key is still being processed; retry it unchanged later")
		case idem.Reused:
			return nil, status.Error(i.reuseCode, "this idempotency key was used with a different call; use a new key for a new call")
		case idem.Unknown:
			return nil, status.Error(codes.Unavailable, "the outcome of the call is unknown: the connection to the database was lost while it committed; retry it unchanged, with the same idempotency key")
		case idem.TooLarge:
			return nil, status.Error(codes.ResourceExhausted, "the response is larger than this server records; the call was not carried out")
		case idem.ReadOnly:
			return nil, status.Error(codes.Unavailable, "the service cannot carry out calls now; the call was not carried out: retry it later with the same idempotency key")
		case idem.Refused:
			// Not retryable: the same call fails until the server is set
			// up otherwise (Internal told clients to retry it).
			return nil, status.Error(codes.FailedPrecondition, idem.RefusedDetail(err, "call", "idempotency key"))
		case idem.Gone:
			return nil, status.FromContextError(ctx.Err()).Err()
		default:
			return nil, status.Error(codes.Internal, "the call was not carried out; retry it with the same idempotency key")
		}
	}
}

// call runs the handler and returns what it panicked with, if it did.
func call(h grpc.UnaryHandler, ctx context.Context, req any) (resp any, err error, panicked any) {
	defer func() { panicked = recover() }()
	resp, err = h(ctx, req)
	return resp, err, nil
}
