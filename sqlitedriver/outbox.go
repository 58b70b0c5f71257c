package sqlitedriver

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/sqlitedb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// The outbox on SQLite: one writer at a time (the transactions sqlonce
// begins are BEGIN IMMEDIATE), so a claim is a plain UPDATE ... RETURNING:
// no other claim runs beside it. A statement is a call into the library,
// not a round trip, so OutboxSent marks its leases one statement each.

func (e engine) OutboxInsert(ctx context.Context, tx *sql.Tx, m driver.OutboxMessage, now time.Time) (bool, []byte, error) {
	n, err := e.q.OutboxInsert(ctx, e.on(tx), sqlitedb.OutboxInsertParams{
		ID: m.ID, Topic: m.Topic, OrderingKey: m.OrderingKey, Payload: nonNil(m.Payload),
		Headers: nonNil(m.Headers), Fingerprint: nonNil(m.Fingerprint), Now: liteNow(now),
	})
	if err != nil || n == 1 {
		return n == 1, nil, err
	}
	stored, err := e.q.OutboxFingerprint(ctx, e.on(tx), m.ID)
	return false, stored, err
}

// nonNil makes a nil slice an empty BLOB: the columns are NOT NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func (e engine) OutboxClaim(ctx context.Context, tx *sql.Tx, limit int, lease time.Duration, now time.Time) ([]driver.OutboxClaimed, error) {
	rows, err := e.q.OutboxClaim(ctx, e.on(tx), sqlitedb.OutboxClaimParams{
		Now: liteNow(now), LeaseUs: lease.Microseconds(), MaxRows: int64(limit),
	})
	if err != nil {
		return nil, err
	}
	out := make([]driver.OutboxClaimed, len(rows))
	for i, r := range rows {
		out[i] = driver.OutboxClaimed{
			OutboxLease: driver.OutboxLease{Seq: r.Seq, Token: r.LeaseToken},
			OutboxMessage: driver.OutboxMessage{
				ID: r.ID, Topic: r.Topic, OrderingKey: r.OrderingKey,
				Payload: r.Payload, Headers: r.Headers, Fingerprint: r.Fingerprint,
			},
			Attempts: int32(r.Attempts),
			Created:  time.UnixMicro(r.CreatedAt).UTC(),
		}
	}
	driver.SortOutboxClaimed(out)
	return out, nil
}

func (e engine) OutboxSent(ctx context.Context, tx *sql.Tx, leases []driver.OutboxLease, now time.Time) (int64, error) {
	var total int64
	for _, l := range leases {
		n, err := e.q.OutboxSent(ctx, e.on(tx), sqlitedb.OutboxSentParams{Now: liteNow(now), Seq: l.Seq, LeaseToken: l.Token})
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

func (e engine) OutboxFailed(ctx context.Context, tx *sql.Tx, lease driver.OutboxLease, errText string, retryAt time.Time, park bool, now time.Time) (bool, error) {
	state := int64(driver.OutboxPending)
	if park {
		state = int64(driver.OutboxParked)
	}
	n, err := e.q.OutboxFailed(ctx, e.on(tx), sqlitedb.OutboxFailedParams{
		NewState: state, LastError: driver.OutboxErrorText(errText), RetryAt: liteNow(retryAt), Now: liteNow(now),
		Seq: lease.Seq, LeaseToken: lease.Token,
	})
	return n == 1, err
}

func (e engine) OutboxPurge(ctx context.Context, tx *sql.Tx, limit int, sentBefore time.Time) (int64, error) {
	return e.q.OutboxPurge(ctx, e.on(tx), sqlitedb.OutboxPurgeParams{SentBefore: sentBefore.UnixMicro(), MaxRows: int64(limit)})
}

func (e engine) OutboxGet(ctx context.Context, tx *sql.Tx, id string, now time.Time) (driver.OutboxRow, bool, error) {
	r, err := e.q.OutboxGet(ctx, e.on(tx), sqlitedb.OutboxGetParams{Now: liteNow(now), ID: id})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.OutboxRow{}, false, nil
	}
	if err != nil {
		return driver.OutboxRow{}, false, err
	}
	return outboxRow(sqlitedb.OutboxListRow(r)), true, nil
}

func (e engine) OutboxList(ctx context.Context, tx *sql.Tx, state int16, afterSeq int64, limit int, now time.Time) ([]driver.OutboxRow, error) {
	rows, err := e.q.OutboxList(ctx, e.on(tx), sqlitedb.OutboxListParams{
		Now: liteNow(now), State: int64(state), AfterSeq: afterSeq, MaxRows: int64(limit),
	})
	if err != nil {
		return nil, err
	}
	out := make([]driver.OutboxRow, len(rows))
	for i, r := range rows {
		out[i] = outboxRow(r)
	}
	return out, nil
}

func outboxRow(r sqlitedb.OutboxListRow) driver.OutboxRow {
	return driver.OutboxRow{
		Seq: r.Seq,
		OutboxMessage: driver.OutboxMessage{
			ID: r.ID, Topic: r.Topic, OrderingKey: r.OrderingKey,
			Payload: r.Payload, Headers: r.Headers, Fingerprint: r.Fingerprint,
		},
		State: int16(r.State), Attempts: int32(r.Attempts), LastError: r.LastError,
		Leased:      r.Leased == 1,
		Created:     time.UnixMicro(r.CreatedAt).UTC(),
		Available:   time.UnixMicro(r.AvailableAt).UTC(),
		Sent:        liteTime(r.SentAt),
		LockedUntil: liteTime(r.LockedUntil),
	}
}

// liteTime is a nullable time column; NULL is the zero time.
func liteTime(t sql.NullInt64) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return time.UnixMicro(t.Int64).UTC()
}

func (e engine) OutboxRedrive(ctx context.Context, tx *sql.Tx, id string, now time.Time) (bool, error) {
	n, err := e.q.OutboxRedrive(ctx, e.on(tx), sqlitedb.OutboxRedriveParams{Now: liteNow(now), ID: id})
	return n == 1, err
}

func (e engine) OutboxForget(ctx context.Context, tx *sql.Tx, id string, force bool, now time.Time) (bool, error) {
	f := int64(0)
	if force {
		f = 1
	}
	n, err := e.q.OutboxForget(ctx, e.on(tx), sqlitedb.OutboxForgetParams{ID: id, Force: f, Now: liteNow(now)})
	return n == 1, err
}

func (e engine) OutboxStats(ctx context.Context, tx *sql.Tx, now time.Time) (driver.OutboxStats, error) {
	r, err := e.q.OutboxStats(ctx, e.on(tx))
	if err != nil {
		return driver.OutboxStats{}, err
	}
	s := driver.OutboxStats{Pending: r.Pending, Parked: r.Parked, Sent: r.Sent}
	if r.Pending > 0 {
		s.OldestPending = time.UnixMicro(r.OldestPending).UTC()
	}
	return s, nil
}

var _ driver.Outbox[*sql.Tx] = engine{}
