package pgsqldriver

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgsqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

func (e engine) StepGet(ctx context.Context, tx *sql.Tx, k driver.Key, now time.Time) (_ driver.StepRow, _ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	r, err := e.q.KeyStepGet(ctx, e.on(tx), pgsqldb.KeyStepGetParams{Now: pgNow(now), Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.StepRow{}, false, nil
	}
	if err != nil {
		return driver.StepRow{}, false, err
	}
	return driver.StepRow{Fingerprint: r.Fingerprint, Response: r.Response, State: r.State, Token: r.Token, Leased: r.Leased, Expired: r.Expired}, true, nil
}

func (e engine) StepStart(ctx context.Context, tx *sql.Tx, k driver.Key, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (_ int64, _ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	token, err := e.q.KeyStepStart(ctx, e.on(tx), pgsqldb.KeyStepStartParams{
		Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Fingerprint: driver.NonNil(fingerprint),
		Recovery: recovery, Now: pgNow(now), LeaseUs: lease.Microseconds(), TtlUs: ttl.Microseconds(),
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return token, err == nil, err
}

func (e engine) StepRestart(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, read, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (_ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	n, err := e.q.KeyStepRestart(ctx, e.on(tx), pgsqldb.KeyStepRestartParams{
		ReadRecovery: read, Fingerprint: driver.NonNil(fingerprint), Recovery: recovery, Now: pgNow(now), LeaseUs: lease.Microseconds(), TtlUs: ttl.Microseconds(),
		Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) StepRedrive(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, read, recovery []byte, ttl time.Duration, now time.Time) (_ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	n, err := e.q.KeyStepRedrive(ctx, e.on(tx), pgsqldb.KeyStepRedriveParams{
		ReadResponse: read, Recovery: recovery, Now: pgNow(now), TtlUs: ttl.Microseconds(),
		Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) StepResume(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, read, recovery []byte, lease time.Duration, now time.Time) (_ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	n, err := e.q.KeyStepResume(ctx, e.on(tx), pgsqldb.KeyStepResumeParams{
		ReadRecovery: read, Recovery: recovery, Now: pgNow(now), LeaseUs: lease.Microseconds(),
		Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) StepSave(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, recovery []byte, lease time.Duration, now time.Time) (_ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	n, err := e.q.KeyStepSave(ctx, e.on(tx), pgsqldb.KeyStepSaveParams{
		Recovery: recovery, Now: pgNow(now), LeaseUs: lease.Microseconds(),
		Namespace: int16(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) StepStuck(ctx context.Context, tx *sql.Tx, ns driver.Namespace, limit int, now time.Time) (_ []driver.Key, err error) {
	defer func() { err = canceled(ctx, err) }()
	rows, err := e.q.KeyStepStuck(ctx, e.on(tx), pgsqldb.KeyStepStuckParams{Namespace: int16(ns), Now: pgNow(now), MaxRows: int32(limit)})
	if err != nil {
		return nil, err
	}
	keys := make([]driver.Key, len(rows))
	for i, r := range rows {
		keys[i] = driver.Key{Namespace: ns, Scope: r.Scope, Key: r.IdempotencyKey}
	}
	return keys, nil
}
