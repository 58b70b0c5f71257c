package sqlonceotel

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqlonce/sqlonce"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/sqlonce/sqlonce/sqlonceotel"

// The metric instruments, by name.
const (
	// MetricOperations counts operations, by strategy, operation, status
	// and error.type.
	MetricOperations = "sqlonce.operations"
	// MetricDuration is the histogram of operation durations, in seconds,
	// retries included, by strategy, operation and status.
	MetricDuration = "sqlonce.operation.duration"
	// MetricWait is the histogram of the time operations took to decide
	// their key (claim round trips and waits for another transaction
	// holding it), in seconds, by strategy, operation and status.
	MetricWait = "sqlonce.wait.duration"
	// MetricRetries counts the transactions sqlonce ran again, by
	// strategy, operation and error.type of the cause.
	MetricRetries = "sqlonce.retries"
)

// Attribute keys of sqlonce's own; the others follow OpenTelemetry's
// semantic conventions (db.system.name, db.operation.name, error.type,
// http.response.status_code).
const (
	AttrStrategy     = attribute.Key("sqlonce.strategy")
	AttrOperation    = attribute.Key("sqlonce.operation")
	AttrStatus       = attribute.Key("sqlonce.status")
	AttrScope        = attribute.Key("sqlonce.scope")
	AttrAttempts     = attribute.Key("sqlonce.attempts")
	AttrResponseSize = attribute.Key("sqlonce.response.size")
	AttrRows         = attribute.Key("sqlonce.rows")
	AttrWait         = attribute.Key("sqlonce.wait.duration")
	AttrWork         = attribute.Key("sqlonce.work.duration")

	attrDBSystem    = attribute.Key("db.system.name")
	attrDBOperation = attribute.Key("db.operation.name")
	attrErrorType   = attribute.Key("error.type")
	attrHTTPStatus  = attribute.Key("http.response.status_code")
)

// Option configures an Observer. New applies the options in order and
// fails on a bad one with an error that matches sqlonce.ErrInvalidArgument
// and names the option.
type Option func(*options) error

type options struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	dbSystem string
	noSpans  bool
}

// optionError is the error of a bad option, which it names.
func optionError(option, format string, args ...any) error {
	return fmt.Errorf("%w: sqlonceotel: "+option+": "+format, append([]any{sqlonce.ErrInvalidArgument}, args...)...)
}

// WithMeterProvider sets the MeterProvider (otel.GetMeterProvider() by
// default); nil is refused.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) error {
		if mp == nil {
			return optionError("WithMeterProvider", "nil MeterProvider")
		}
		o.mp = mp
		return nil
	}
}

// WithTracerProvider sets the TracerProvider (otel.GetTracerProvider() by
// default); nil is refused.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) error {
		if tp == nil {
			return optionError("WithTracerProvider", "nil TracerProvider")
		}
		o.tp = tp
		return nil
	}
}

// WithDBSystem sets the db.system.name attribute of every span and
// metric: "postgresql", "mariadb", "mysql" or "sqlite", as OpenTelemetry's
// semantic conventions spell them (lower-case letters, digits, '.' and
// '_'; anything else, "" included, is refused). Without it the attribute
// is left out.
func WithDBSystem(name string) Option {
	return func(o *options) error {
		ok := name != ""
		for i := 0; ok && i < len(name); i++ {
			c := name[i]
			ok = 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_'
		}
		if !ok {
			return optionError("WithDBSystem", "%q is not a db.system.name value (postgresql, mariadb, mysql, sqlite)", name)
		}
		o.dbSystem = name
		return nil
	}
}

// WithoutSpans records metrics only.
func WithoutSpans() Option {
	return func(o *options) error {
		o.noSpans = true
		return nil
	}
}

// Observer records sqlonce's events as OpenTelemetry metrics and spans.
// Attach it with sqlonce.Observe (and sqlonce.ContextWithObserver for
// optimistic and statemachine). It is safe for concurrent use.
type Observer struct {
	tracer   trace.Tracer
	ops      metric.Int64Counter
	dur      metric.Float64Histogram
	wait     metric.Float64Histogram
	retries  metric.Int64Counter
	dbSystem string
}

var _ sqlonce.Observer = (*Observer)(nil)

// New returns an Observer on the configured providers. It returns an
// error matching sqlonce.ErrInvalidArgument for a nil or bad option (the
// error names it), and an error when an instrument cannot be created.
func New(opts ...Option) (*Observer, error) {
	var c options
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("sqlonceotel: %w: option %d is nil", sqlonce.ErrInvalidArgument, i)
		}
		if err := opt(&c); err != nil {
			return nil, err
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	m := c.mp.Meter(ScopeName)
	o := &Observer{dbSystem: c.dbSystem}
	if !c.noSpans {
		o.tracer = c.tp.Tracer(ScopeName)
	}
	var err error
	if o.ops, err = m.Int64Counter(MetricOperations, metric.WithUnit("{operation}"),
		metric.WithDescription("sqlonce operations, by strategy, operation and status")); err != nil {
		return nil, fmt.Errorf("sqlonceotel: %w", err)
	}
	buckets := metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
	if o.dur, err = m.Float64Histogram(MetricDuration, metric.WithUnit("s"), buckets,
		metric.WithDescription("duration of sqlonce operations, retries included")); err != nil {
		return nil, fmt.Errorf("sqlonceotel: %w", err)
	}
	if o.wait, err = m.Float64Histogram(MetricWait, metric.WithUnit("s"), buckets,
		metric.WithDescription("time sqlonce operations took to decide their key, waits for other transactions included")); err != nil {
		return nil, fmt.Errorf("sqlonceotel: %w", err)
	}
	if o.retries, err = m.Int64Counter(MetricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("transactions sqlonce ran again, by the kind of error that caused it")); err != nil {
		return nil, fmt.Errorf("sqlonceotel: %w", err)
	}
	return o, nil
}

// Observe records e: the counters and histograms, and a span from e.Start
// to its end, child of the span in ctx.
func (o *Observer) Observe(ctx context.Context, e sqlonce.Event) {
	base := make([]attribute.KeyValue, 0, 5)
	base = append(base, AttrStrategy.String(e.Strategy), AttrOperation.String(e.Operation))
	if o.dbSystem != "" {
		base = append(base, attrDBSystem.String(o.dbSystem))
	}
	withStatus := append(base, AttrStatus.String(e.Status.String()))
	errType := sqlonce.ErrorType(e.Err)
	counted := withStatus
	if errType != "" {
		counted = append(withStatus[:len(withStatus):len(withStatus)], attrErrorType.String(errType))
	}
	o.ops.Add(ctx, 1, metric.WithAttributes(counted...))
	o.dur.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(withStatus...))
	if e.Wait > 0 {
		o.wait.Record(ctx, e.Wait.Seconds(), metric.WithAttributes(withStatus...))
	}
	if e.Attempts > 1 {
		cause := append(base[:len(base):len(base)], attrErrorType.String(sqlonce.ErrorType(e.RetryCause)))
		o.retries.Add(ctx, int64(e.Attempts-1), metric.WithAttributes(cause...))
	}
	if o.tracer != nil {
		o.span(ctx, e, counted)
	}
}

func (o *Observer) span(ctx context.Context, e sqlonce.Event, attrs []attribute.KeyValue) {
	name := e.Strategy + "." + e.Operation
	attrs = append(attrs[:len(attrs):len(attrs)],
		attrDBOperation.String(name),
		AttrAttempts.Int(max(e.Attempts, 1)),
	)
	if e.Scope != "" {
		attrs = append(attrs, AttrScope.String(e.Scope))
	}
	if e.Wait > 0 {
		attrs = append(attrs, AttrWait.Float64(e.Wait.Seconds()))
	}
	if e.Work > 0 {
		attrs = append(attrs, AttrWork.Float64(e.Work.Seconds()))
	}
	if e.ResponseSize > 0 {
		attrs = append(attrs, AttrResponseSize.Int(e.ResponseSize))
	}
	if e.Rows > 0 {
		attrs = append(attrs, AttrRows.Int64(e.Rows))
	}
	if e.HTTPStatus != 0 {
		attrs = append(attrs, attrHTTPStatus.Int(e.HTTPStatus))
	}
	_, span := o.tracer.Start(ctx, name,
		trace.WithTimestamp(e.Start),
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...),
	)
	// A refusal (in progress, key reuse) is the answer to a repeat, not a
	// failure of the operation; an error and a lost lease are.
	if e.Err != nil && (e.Status == sqlonce.EventError || e.Status == sqlonce.EventLeaseLost) {
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End(trace.WithTimestamp(e.Start.Add(e.Duration)))
}
