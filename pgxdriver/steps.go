package pgxdriver

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgdb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

func (e engine) StepGet(ctx context.Context, tx pgx.Tx, k driver.Key, now time.Time) (driver.StepRow, bool, error) {
	r, err := e.q.KeyStepGet(ctx, e.on(tx), pgdb.KeyStepGetParams{Now: pgNow(now), Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key})
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.StepRow{}, false, nil
	}
	if err != nil {
		return driver.StepRow{}, false, err
	}
	return driver.StepRow{Fingerprint: r.Fingerprint, Response: r.Response, State: r.State, Token: r.Token, Leased: r.Leased, Expired: r.Expired}, true, nil
}

func (e engine) StepStart(ctx context.Context, tx pgx.Tx, k driver.Key, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (int64, bool, error) {
	token, err := e.q.KeyStepStart(ctx, e.on(tx), pgdb.KeyStepStartParams{
		Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Fingerprint: driver.NonNil(fingerprint),
		Recovery: recovery, Now: pgNow(now), LeaseUs: lease.Microseconds(), TtlUs: ttl.Microseconds(),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return token, err == nil, err
}

func (e engine) StepRestart(ctx context.Context, tx pgx.Tx, k driver.Key, token int64, read, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (bool, error) {
	n, err := e.q.KeyStepRestart(ctx, e.on(tx), pgdb.KeyStepRestartParams{
		ReadRecovery: read, Fingerprint: driver.NonNil(fingerprint), Recovery: recovery, Now: pgNow(now), LeaseUs: lease.Microseconds(), TtlUs: ttl.Microseconds(),
		Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) StepResume(ctx context.Context, tx pgx.Tx, k driver.Key, token int64, read, recovery []byte, lease time.Duration, now time.Time) (bool, error) {
	n, err := e.q.KeyStepResume(ctx, e.on(tx), pgdb.KeyStepResumeParams{
		ReadRecovery: read, Recovery: recovery, Now: pgNow(now), LeaseUs: lease.Microseconds(),
		Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) StepSave(ctx context.Context, tx pgx.Tx, k driver.Key, token int64, recovery []byte, lease time.Duration, now time.Time) (bool, error) {
	n, err := e.q.KeyStepSave(ctx, e.on(tx), pgdb.KeyStepSaveParams{
		Recovery: recovery, Now: pgNow(now), LeaseUs: lease.Microseconds(),
		Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) StepRedrive(ctx context.Context, tx pgx.Tx, k driver.Key, token int64, read, recovery []byte, ttl time.Duration, now time.Time) (bool, error) {
	n, err := e.q.KeyStepRedrive(ctx, e.on(tx), pgdb.KeyStepRedriveParams{
		ReadResponse: read, Recovery: recovery, Now: pgNow(now), TtlUs: ttl.Microseconds(),
		Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) StepStuck(ctx context.Context, tx pgx.Tx, ns driver.Namespace, limit int, now time.Time) ([]driver.Key, error) {
	rows, err := e.q.KeyStepStuck(ctx, e.on(tx), pgdb.KeyStepStuckParams{Namespace: int16(ns), Now: pgNow(now), MaxRows: int32(limit)})
	if err != nil {
		return nil, err
	}
	keys := make([]driver.Key, len(rows))
	for i, r := range rows {
		keys[i] = driver.Key{Namespace: ns, Scope: r.Scope, Key: r.IdempotencyKey}
	}
	return keys, nil
}
