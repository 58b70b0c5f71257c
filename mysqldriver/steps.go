package mysqldriver

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

func (e engine) StepGet(ctx context.Context, tx *sql.Tx, k driver.Key, now time.Time) (driver.StepRow, bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return driver.StepRow{}, false, err
	}
	r, err := e.q.KeyStepGet(ctx, e.on(tx), mysqldb.KeyStepGetParams{Now: myNow(now), Namespace: int16(k.Namespace), Scope: []byte(k.Scope), IdempotencyKey: []byte(k.Key)})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.StepRow{}, false, nil
	}
	if err != nil {
		return driver.StepRow{}, false, err
	}
	return driver.StepRow{Fingerprint: r.Fingerprint, Response: r.Response, State: r.State, Token: r.Token, Leased: r.Leased == 1, Expired: r.Expired == 1}, true, nil
}

// StepResume changes the token, and StepSave the recovery point, which
// grows at every step: MySQL, which counts changed rows, counts the row.
func (e engine) StepStart(ctx context.Context, tx *sql.Tx, k driver.Key, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (int64, bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return 0, false, err
	}
	if tx != driver.AutoTx && e.wsrep.done.Load() && e.wsrep.vtgate && !e.wsrep.inTx {
		// Through vtgate, no LAST_INSERT_ID(x) in a transaction (see
		// Claim): start the key in autocommit, which vtgate allows.
		return 0, false, driver.ErrNoRun
	}
	res, err := e.q.KeyStepStart(ctx, e.on(tx), mysqldb.KeyStepStartParams{
		Namespace: int16(k.Namespace), Scope: []byte(k.Scope), IdempotencyKey: []byte(k.Key), Fingerprint: driver.NonNil(fingerprint),
		Recovery: recovery, Now: myNow(now), LeaseUs: lease.Microseconds(), TtlUs: ttl.Microseconds(),
	})
	if duplicate(err, "PRIMARY") {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	// No RETURNING on MySQL: LAST_INSERT_ID(token) in the INSERT answers it.
	token, err := res.LastInsertId()
	return token, err == nil, err
}

func (e engine) StepRestart(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, read, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return false, err
	}
	n, err := e.q.KeyStepRestart(ctx, e.on(tx), mysqldb.KeyStepRestartParams{
		ReadRecovery: read, Fingerprint: driver.NonNil(fingerprint), Recovery: recovery, Now: myNow(now), LeaseUs: lease.Microseconds(), TtlUs: ttl.Microseconds(),
		Namespace: int16(k.Namespace), Scope: []byte(k.Scope), IdempotencyKey: []byte(k.Key), Token: token,
	})
	return n == 1, err
}

func (e engine) StepResume(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, read, recovery []byte, lease time.Duration, now time.Time) (bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return false, err
	}
	n, err := e.q.KeyStepResume(ctx, e.on(tx), mysqldb.KeyStepResumeParams{
		ReadRecovery: read, Recovery: recovery, Now: myNow(now), LeaseUs: lease.Microseconds(),
		Namespace: int16(k.Namespace), Scope: []byte(k.Scope), IdempotencyKey: []byte(k.Key), Token: token,
	})
	return n == 1, err
}

func (e engine) StepSave(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, recovery []byte, lease time.Duration, now time.Time) (bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return false, err
	}
	// After a database step's work, in its transaction: not over a
	// transaction vtgate rolled back (see vtgateInTx).
	if err := e.vtgateInTx(ctx, tx); err != nil {
		return false, err
	}
	n, err := e.q.KeyStepSave(ctx, e.on(tx), mysqldb.KeyStepSaveParams{
		Recovery: recovery, Now: myNow(now), LeaseUs: lease.Microseconds(),
		Namespace: int16(k.Namespace), Scope: []byte(k.Scope), IdempotencyKey: []byte(k.Key), Token: token,
	})
	return n == 1, err
}

func (e engine) StepRedrive(ctx context.Context, tx *sql.Tx, k driver.Key, token int64, read, recovery []byte, ttl time.Duration, now time.Time) (bool, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return false, err
	}
	n, err := e.q.KeyStepRedrive(ctx, e.on(tx), mysqldb.KeyStepRedriveParams{
		ReadResponse: read, Recovery: recovery, Now: myNow(now), TtlUs: ttl.Microseconds(),
		Namespace: int16(k.Namespace), Scope: []byte(k.Scope), IdempotencyKey: []byte(k.Key), Token: token,
	})
	return n == 1, err
}

func (e engine) StepStuck(ctx context.Context, tx *sql.Tx, ns driver.Namespace, limit int, now time.Time) ([]driver.Key, error) {
	if err := e.checkTx(ctx, tx); err != nil {
		return nil, err
	}
	rows, err := e.q.KeyStepStuck(ctx, e.on(tx), mysqldb.KeyStepStuckParams{Namespace: int16(ns), Now: myNow(now), Limit: int32(limit)})
	if err != nil {
		return nil, err
	}
	keys := make([]driver.Key, len(rows))
	for i, r := range rows {
		keys[i] = driver.Key{Namespace: ns, Scope: string(r.Scope), Key: string(r.IdempotencyKey)}
	}
	return keys, nil
}
