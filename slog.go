package sqlonce

import (
	"context"
	"errors"
	"log/slog"
)

// SlogObserver returns an Observer that logs every Event to logger, one
// record with the message "sqlonce" per operation:
//
//   - Debug: first runs, and operations that answer no Result (a lease's
//     Complete, a Purge), the everyday traffic;
//   - Info: repeats (already done, replayed), refusals (in progress, key
//     reuse), takeovers of an expired key or a lapsed lease, and any
//     operation that sqlonce had to retry;
//   - Warn: a lost lease, bad input (ErrInvalidKey, ErrInvalidArgument,
//     ErrResponseTooLarge) and a canceled context;
//   - Error: every other error.
//
// Its attributes are strategy, operation, scope, status, duration, and
// where they apply wait, work, attempts, retry_cause, response_size, rows,
// http_status, error_type and error. The key is never logged: error
// messages show it as "<key>" (see Event.Err). A record below the
// logger's level costs an Enabled call and nothing else. A nil logger
// uses slog.Default().
func SlogObserver(logger *slog.Logger) Observer {
	if logger == nil {
		logger = slog.Default()
	}
	return slogObserver{logger}
}

type slogObserver struct{ l *slog.Logger }

func (s slogObserver) Observe(ctx context.Context, e Event) {
	level := slogLevel(e)
	if !s.l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 13)
	attrs = append(attrs,
		slog.String("strategy", e.Strategy),
		slog.String("operation", e.Operation),
		slog.String("scope", e.Scope),
		slog.String("status", e.Status.String()),
		slog.Duration("duration", e.Duration),
	)
	if e.Wait > 0 {
		attrs = append(attrs, slog.Duration("wait", e.Wait))
	}
	if e.Work > 0 {
		attrs = append(attrs, slog.Duration("work", e.Work))
	}
	if e.Attempts > 1 {
		attrs = append(attrs, slog.Int("attempts", e.Attempts))
		if e.RetryCause != nil {
			attrs = append(attrs, slog.String("retry_cause", e.RetryCause.Error()))
		}
	}
	if e.ResponseSize > 0 {
		attrs = append(attrs, slog.Int("response_size", e.ResponseSize))
	}
	if e.Rows > 0 {
		attrs = append(attrs, slog.Int64("rows", e.Rows))
	}
	if e.HTTPStatus != 0 {
		attrs = append(attrs, slog.Int("http_status", e.HTTPStatus))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error_type", ErrorType(e.Err)), slog.String("error", e.Err.Error()))
	}
	s.l.LogAttrs(ctx, level, "sqlonce", attrs...)
}

func slogLevel(e Event) slog.Level {
	switch e.Status {
	case EventFirstRun, EventOK:
		if e.Attempts > 1 {
			return slog.LevelInfo
		}
		return slog.LevelDebug
	case EventAlreadyDone, EventReplayed, EventInProgress, EventKeyReuse, EventTakeover:
		return slog.LevelInfo
	case EventLeaseLost:
		return slog.LevelWarn
	}
	switch {
	case errors.Is(e.Err, ErrInvalidKey), errors.Is(e.Err, ErrInvalidArgument),
		errors.Is(e.Err, ErrResponseTooLarge), errors.Is(e.Err, context.Canceled):
		return slog.LevelWarn
	}
	return slog.LevelError
}
