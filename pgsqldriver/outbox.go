package pgsqldriver

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/sqlonce/sqlonce/internal/dbsqlc/pgsqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// OutboxInsert is one statement: the INSERT ... ON CONFLICT DO NOTHING and
// the pg_notify beside it (queries/postgres/outbox.sql), or the INSERT
// alone when m.NoNotify is set. Only a taken id costs a second one, the
// stored fingerprint's read.
func (e engine) OutboxInsert(ctx context.Context, tx *sql.Tx, m driver.OutboxMessage, now time.Time) (_ bool, _ []byte, err error) {
	defer func() { err = canceled(ctx, err) }()
	insert := func() (bool, error) {
		return e.q.OutboxInsert(ctx, e.on(tx), pgsqldb.OutboxInsertParams{
			ID: m.ID, Topic: m.Topic, OrderingKey: m.OrderingKey, Payload: nonNil(m.Payload),
			Headers: nonNil(m.Headers), Fingerprint: nonNil(m.Fingerprint), Now: pgNow(now),
			Channel: driver.OutboxChannel,
		})
	}
	if m.NoNotify {
		insert = func() (bool, error) {
			return e.q.OutboxInsertNoNotify(ctx, e.on(tx), pgsqldb.OutboxInsertNoNotifyParams{
				ID: m.ID, Topic: m.Topic, OrderingKey: m.OrderingKey, Payload: nonNil(m.Payload),
				Headers: nonNil(m.Headers), Fingerprint: nonNil(m.Fingerprint), Now: pgNow(now),
			})
		}
	}
	inserted, err := insert()
	if err != nil || inserted {
		return inserted, nil, err
	}
	stored, err := e.q.OutboxFingerprint(ctx, e.on(tx), m.ID)
	if errors.Is(err, sql.ErrNoRows) {
		// The row in the way was deleted since (forgotten, purged): the
		// caller sees a conflict with no fingerprint, and may retry.
		return false, nil, nil
	}
	return false, stored, err
}

// nonNil makes a nil slice an empty bytea: the columns are NOT NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func (e engine) OutboxClaim(ctx context.Context, tx *sql.Tx, limit int, lease time.Duration, now time.Time) (_ []driver.OutboxClaimed, err error) {
	defer func() { err = canceled(ctx, err) }()
	rows, err := e.q.OutboxClaim(ctx, e.on(tx), pgsqldb.OutboxClaimParams{
		Now: pgNow(now), LeaseUs: lease.Microseconds(), MaxRows: int32(limit),
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
			Attempts: r.Attempts,
			Created:  r.CreatedAt,
		}
	}
	driver.SortOutboxClaimed(out)
	return out, nil
}

func pgTime(t sql.NullTime) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}

func (e engine) OutboxSent(ctx context.Context, tx *sql.Tx, leases []driver.OutboxLease, now time.Time) (_ int64, err error) {
	defer func() { err = canceled(ctx, err) }()
	if len(leases) == 0 {
		return 0, nil
	}
	var seqs, pairs strings.Builder
	for i, l := range leases {
		if i > 0 {
			seqs.WriteByte(',')
			pairs.WriteByte(',')
		}
		seqs.WriteString(strconv.FormatInt(l.Seq, 10))
		pairs.WriteString(strconv.FormatInt(l.Seq, 10) + ":" + strconv.FormatInt(l.Token, 10))
	}
	return e.q.OutboxSent(ctx, e.on(tx), pgsqldb.OutboxSentParams{Now: pgNow(now), Seqs: seqs.String(), Leases: pairs.String()})
}

func (e engine) OutboxFailed(ctx context.Context, tx *sql.Tx, lease driver.OutboxLease, errText string, retryAt time.Time, park bool, now time.Time) (_ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	state := driver.OutboxPending
	if park {
		state = driver.OutboxParked
	}
	n, err := e.q.OutboxFailed(ctx, e.on(tx), pgsqldb.OutboxFailedParams{
		NewState: state, LastError: driver.OutboxErrorText(errText), RetryAt: pgNow(retryAt), Now: pgNow(now),
		Seq: lease.Seq, LeaseToken: lease.Token,
	})
	return n == 1, err
}

func (e engine) OutboxPurge(ctx context.Context, tx *sql.Tx, limit int, sentBefore time.Time) (_ int64, err error) {
	defer func() { err = canceled(ctx, err) }()
	return e.q.OutboxPurge(ctx, e.on(tx), pgsqldb.OutboxPurgeParams{
		SentBefore: sentBefore, MaxRows: int32(limit),
	})
}

func (e engine) OutboxGet(ctx context.Context, tx *sql.Tx, id string, now time.Time) (_ driver.OutboxRow, _ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	r, err := e.q.OutboxGet(ctx, e.on(tx), pgsqldb.OutboxGetParams{Now: pgNow(now), ID: id})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.OutboxRow{}, false, nil
	}
	if err != nil {
		return driver.OutboxRow{}, false, err
	}
	return outboxRow(pgsqldb.OutboxListRow(r)), true, nil
}

func (e engine) OutboxList(ctx context.Context, tx *sql.Tx, state int16, afterSeq int64, limit int, now time.Time) (_ []driver.OutboxRow, err error) {
	defer func() { err = canceled(ctx, err) }()
	rows, err := e.q.OutboxList(ctx, e.on(tx), pgsqldb.OutboxListParams{
		Now: pgNow(now), State: state, AfterSeq: afterSeq, MaxRows: int32(limit),
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

func outboxRow(r pgsqldb.OutboxListRow) driver.OutboxRow {
	return driver.OutboxRow{
		Seq: r.Seq,
		OutboxMessage: driver.OutboxMessage{
			ID: r.ID, Topic: r.Topic, OrderingKey: r.OrderingKey,
			Payload: r.Payload, Headers: r.Headers, Fingerprint: r.Fingerprint,
		},
		State: r.State, Attempts: r.Attempts, LastError: r.LastError, Leased: r.Leased,
		Created: r.CreatedAt, Available: r.AvailableAt,
		Sent: pgTime(r.SentAt), LockedUntil: pgTime(r.LockedUntil),
	}
}

func (e engine) OutboxRedrive(ctx context.Context, tx *sql.Tx, id string, now time.Time) (_ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	n, err := e.q.OutboxRedrive(ctx, e.on(tx), pgsqldb.OutboxRedriveParams{Now: pgNow(now), ID: id})
	return n == 1, err
}

func (e engine) OutboxForget(ctx context.Context, tx *sql.Tx, id string, force bool, now time.Time) (_ bool, err error) {
	defer func() { err = canceled(ctx, err) }()
	n, err := e.q.OutboxForget(ctx, e.on(tx), pgsqldb.OutboxForgetParams{ID: id, Force: force, Now: pgNow(now)})
	return n == 1, err
}

func (e engine) OutboxStats(ctx context.Context, tx *sql.Tx, now time.Time) (_ driver.OutboxStats, err error) {
	defer func() { err = canceled(ctx, err) }()
	r, err := e.q.OutboxStats(ctx, e.on(tx))
	if err != nil {
		return driver.OutboxStats{}, err
	}
	s := driver.OutboxStats{Pending: r.Pending, Parked: r.Parked, Sent: r.Sent}
	if r.Pending > 0 {
		s.OldestPending = r.OldestPending
	}
	return s, nil
}

var _ driver.Outbox[*sql.Tx] = engine{}
