package sqlitedriver

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/sqlitedb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

func (e engine) StepGet(ctx context.Context, tx *sql.Tx, k driver.Key, now time.Time) (driver.StepRow, bool, error) {
	r, err := e.q.KeyStepGet(ctx, e.on(tx), sqlitedb.KeyStepGetParams{Now: liteNow(now), Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.StepRow{}, false, nil
	}
	if err != nil {
		return driver.StepRow{}, false, err
	}
	return driver.StepRow{Fingerprint: r.Fingerprint, Response: r.Response, State: int16(r.State), Token: r.Token, Leased: r.Leased == 1, Expired: r.Expired == 1}, true, nil
}

func (e engine) StepStart(ctx context.Context, tx *sql.Tx, k driver.Key, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (int64, bool, error) {
	token, err := e.q.KeyStepStart(ctx, e.on(tx), sqlitedb.KeyStepStartParams{
		Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Fingerprint: driver.NonNil(fingerprint),
		Recovery: recovery, Now: liteNow(now), LeaseUs: lease.Microseconds(), TtlUs: ttl.Microseconds(),
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return token, err == nil, err
}

func (e engine) StepRestart(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, read, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (bool, error) {
	n, err := e.q.KeyStepRestart(ctx, e.on(tx), sqlitedb.KeyStepRestartParams{
		ReadRecovery: read, Fingerprint: driver.NonNil(fingerprint), Recovery: recovery, Now: liteNow(now), LeaseUs: lease.Microseconds(), TtlUs: ttl.Microseconds(),
		Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) StepResume(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, read, recovery []byte, lease time.Duration, now time.Time) (bool, error) {
	n, err := e.q.KeyStepResume(ctx, e.on(tx), sqlitedb.KeyStepResumeParams{
		ReadRecovery: read, Recovery: recovery, Now: liteNow(now), LeaseUs: lease.Microseconds(),
		Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) StepSave(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, recovery []byte, lease time.Duration, now time.Time) (bool, error) {
	n, err := e.q.KeyStepSave(ctx, e.on(tx), sqlitedb.KeyStepSaveParams{
		Recovery: recovery, Now: liteNow(now), LeaseUs: lease.Microseconds(),
		Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) StepRedrive(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, read, recovery []byte, ttl time.Duration, now time.Time) (bool, error) {
	n, err := e.q.KeyStepRedrive(ctx, e.on(tx), sqlitedb.KeyStepRedriveParams{
		ReadResponse: read, Recovery: recovery, Now: liteNow(now), TtlUs: ttl.Microseconds(),
		Namespace: int64(k.Namespace), Scope: k.Scope, IdempotencyKey: k.Key, Token: token,
	})
	return n == 1, err
}

func (e engine) StepStuck(ctx context.Context, tx *sql.Tx, ns driver.Namespace, limit int, now time.Time) ([]driver.Key, error) {
	rows, err := e.q.KeyStepStuck(ctx, e.on(tx), sqlitedb.KeyStepStuckParams{Namespace: int64(ns), Now: liteNow(now), MaxRows: int64(limit)})
	if err != nil {
		return nil, err
	}
	keys := make([]driver.Key, len(rows))
	for i, r := range rows {
		keys[i] = driver.Key{Namespace: ns, Scope: r.Scope, Key: r.IdempotencyKey}
	}
	return keys, nil
}
