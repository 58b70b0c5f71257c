package mysqldriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// errVtgateOutbox refuses the outbox through vtgate on a sharded
// keyspace: its claim walks the whole table in seq order and checks each
// ordering key's earlier messages, which on a sharded keyspace are a
// scatter over every shard inside one transaction, and seq (an
// AUTO_INCREMENT) is per shard. On an unsharded keyspace, or a session on
// one shard, the outbox works as on MySQL.
var errVtgateOutbox = fmt.Errorf("%w: mysqldriver: the outbox is not supported through vtgate on a sharded keyspace: "+
	"its claim reads the messages of every shard in seq order within one transaction; keep sqlonce_outbox on an unsharded keyspace, "+
	"with a driver whose DSN names that keyspace (docs/deployments.md, Vitess)", sqlonce.ErrInvalidArgument)

// checkOutbox is the checks every outbox call passes: the server's
// (Galera, vtgate's transaction mode), then, through vtgate, that the
// keyspace is not sharded.
func (e engine) checkOutbox(ctx context.Context, tx *sql.Tx) error {
	if err := e.checkTx(ctx, tx); err != nil {
		return err
	}
	if !e.wsrep.vtgate {
		return nil
	}
	targets, err := e.vtgateShards(ctx, tx)
	if err != nil {
		return err
	}
	if len(targets) > 1 {
		return errVtgateOutbox
	}
	return nil
}

// OutboxInsert is one INSERT ... ON DUPLICATE KEY UPDATE id = id: a
// taken id changes nothing and the answer's insert id is then 0, while a
// new row's is its seq (rows affected cannot tell: an unchanged row
// counts 1 for a client with clientFoundRows=true). Only a taken id costs
// a second statement, the stored fingerprint's read.
func (e engine) OutboxInsert(ctx context.Context, tx *sql.Tx, m driver.OutboxMessage, now time.Time) (bool, []byte, error) {
	if err := e.checkOutbox(ctx, tx); err != nil {
		return false, nil, err
	}
	res, err := e.q.OutboxInsert(ctx, e.on(tx), mysqldb.OutboxInsertParams{
		ID: []byte(m.ID), Topic: []byte(m.Topic), OrderingKey: []byte(m.OrderingKey), Payload: nonNil(m.Payload),
		Headers: nonNil(m.Headers), Fingerprint: nonNil(m.Fingerprint), Now: myNow(now),
	})
	if err != nil {
		return false, nil, err
	}
	if id, err := res.LastInsertId(); err != nil || id != 0 {
		return err == nil, nil, err
	}
	stored, err := e.q.OutboxFingerprint(ctx, e.on(tx), []byte(m.ID))
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil, nil
	}
	return false, stored, err
}

// nonNil makes a nil slice an empty BLOB: the columns are NOT NULL.
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// OutboxClaim is two statements: the locking read that picks the due
// messages (FOR UPDATE SKIP LOCKED, MariaDB 10.6 and MySQL 8.0 on), then
// the UPDATE that leases them, by their seqs; MySQL has no UPDATE ...
// RETURNING. The rows are this transaction's from the first statement on,
// so the tokens the second writes are the read ones plus one.
func (e engine) OutboxClaim(ctx context.Context, tx *sql.Tx, limit int, lease time.Duration, now time.Time) ([]driver.OutboxClaimed, error) {
	if err := e.checkOutbox(ctx, tx); err != nil {
		return nil, err
	}
	rows, err := e.q.OutboxClaimLock(ctx, e.onLimit(tx, limit), mysqldb.OutboxClaimLockParams{Now: myNow(now), Limit: int32(limit)})
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	out := make([]driver.OutboxClaimed, len(rows))
	var seqs strings.Builder
	for i, r := range rows {
		if i > 0 {
			seqs.WriteByte(',')
		}
		seqs.WriteString(strconv.FormatInt(r.Seq, 10))
		out[i] = driver.OutboxClaimed{
			OutboxLease: driver.OutboxLease{Seq: r.Seq, Token: r.LeaseToken + 1},
			OutboxMessage: driver.OutboxMessage{
				ID: string(r.ID), Topic: string(r.Topic), OrderingKey: string(r.OrderingKey),
				Payload: r.Payload, Headers: r.Headers, Fingerprint: r.Fingerprint,
			},
			Attempts: r.Attempts,
			Created:  r.CreatedAt.UTC(),
		}
	}
	driver.SortOutboxClaimed(out)
	n, err := e.q.OutboxClaimLease(ctx, e.on(tx), mysqldb.OutboxClaimLeaseParams{
		Now: myNow(now), LeaseUs: lease.Microseconds(),
		FirstSeq: out[0].Seq, LastSeq: out[len(out)-1].Seq, Seqs: seqs.String(),
	})
	if err != nil {
		return nil, err
	}
	if n != int64(len(out)) {
		return nil, fmt.Errorf("mysqldriver: outbox claim leased %d of the %d messages it locked", n, len(out))
	}
	return out, nil
}

// literalLimit runs a SELECT whose last placeholder is its LIMIT's with
// the limit written into the statement, through vtgate: there a prepared
// SELECT's LIMIT ? reaches the shard as LIMIT null (1064, Vitess v0.24 on
// a keyspace:shard session), while a DELETE's is bound.
type literalLimit struct {
	mysqldb.DBTX
	limit int
}

func (l literalLimit) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if i := strings.LastIndex(query, "LIMIT ?"); i >= 0 && len(args) > 0 && strings.LastIndexByte(query, '?') == i+len("LIMIT ?")-1 {
		query = query[:i] + "LIMIT " + strconv.Itoa(l.limit) + query[i+len("LIMIT ?"):]
		args = args[:len(args)-1]
	}
	return l.DBTX.QueryContext(ctx, query, args...)
}

// onLimit is e.on(tx), with the limit written into the statement through
// vtgate (literalLimit).
func (e engine) onLimit(tx *sql.Tx, limit int) mysqldb.DBTX {
	if e.wsrep.vtgate {
		return literalLimit{e.on(tx), limit}
	}
	return e.on(tx)
}

func (e engine) OutboxSent(ctx context.Context, tx *sql.Tx, leases []driver.OutboxLease, now time.Time) (int64, error) {
	if err := e.checkOutbox(ctx, tx); err != nil || len(leases) == 0 {
		return 0, err
	}
	first, last := leases[0].Seq, leases[0].Seq
	var pairs strings.Builder
	for i, l := range leases {
		if i > 0 {
			pairs.WriteByte(',')
		}
		pairs.WriteString(strconv.FormatInt(l.Seq, 10) + ":" + strconv.FormatInt(l.Token, 10))
		first, last = min(first, l.Seq), max(last, l.Seq)
	}
	return e.q.OutboxSent(ctx, e.on(tx), mysqldb.OutboxSentParams{Now: myNow(now), FirstSeq: first, LastSeq: last, Leases: pairs.String()})
}

func (e engine) OutboxFailed(ctx context.Context, tx *sql.Tx, lease driver.OutboxLease, errText string, retryAt time.Time, park bool, now time.Time) (bool, error) {
	if err := e.checkOutbox(ctx, tx); err != nil {
		return false, err
	}
	state := driver.OutboxPending
	if park {
		state = driver.OutboxParked
	}
	n, err := e.q.OutboxFailed(ctx, e.on(tx), mysqldb.OutboxFailedParams{
		NewState: state, LastError: driver.OutboxErrorText(errText), RetryAt: myNow(retryAt), Now: myNow(now),
		Seq: lease.Seq, LeaseToken: lease.Token,
	})
	return n == 1, err
}

func (e engine) OutboxPurge(ctx context.Context, tx *sql.Tx, limit int, sentBefore time.Time) (int64, error) {
	if err := e.checkOutbox(ctx, tx); err != nil {
		return 0, err
	}
	return e.q.OutboxPurge(ctx, e.on(tx), mysqldb.OutboxPurgeParams{
		SentBefore: sql.NullTime{Time: sentBefore.UTC(), Valid: true}, Limit: int32(limit),
	})
}

func (e engine) OutboxGet(ctx context.Context, tx *sql.Tx, id string, now time.Time) (driver.OutboxRow, bool, error) {
	if err := e.checkOutbox(ctx, tx); err != nil {
		return driver.OutboxRow{}, false, err
	}
	r, err := e.q.OutboxGet(ctx, e.on(tx), mysqldb.OutboxGetParams{Now: myNow(now), ID: []byte(id)})
	if errors.Is(err, sql.ErrNoRows) {
		return driver.OutboxRow{}, false, nil
	}
	if err != nil {
		return driver.OutboxRow{}, false, err
	}
	return outboxRow(mysqldb.OutboxListRow(r)), true, nil
}

func (e engine) OutboxList(ctx context.Context, tx *sql.Tx, state int16, afterSeq int64, limit int, now time.Time) ([]driver.OutboxRow, error) {
	if err := e.checkOutbox(ctx, tx); err != nil {
		return nil, err
	}
	rows, err := e.q.OutboxList(ctx, e.onLimit(tx, limit), mysqldb.OutboxListParams{
		Now: myNow(now), State: state, AfterSeq: afterSeq, Limit: int32(limit),
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

func outboxRow(r mysqldb.OutboxListRow) driver.OutboxRow {
	return driver.OutboxRow{
		Seq: r.Seq,
		OutboxMessage: driver.OutboxMessage{
			ID: string(r.ID), Topic: string(r.Topic), OrderingKey: string(r.OrderingKey),
			Payload: r.Payload, Headers: r.Headers, Fingerprint: r.Fingerprint,
		},
		State: r.State, Attempts: r.Attempts, LastError: r.LastError, Leased: r.Leased == 1,
		Created: r.CreatedAt.UTC(), Available: r.AvailableAt.UTC(),
		Sent: myTime(r.SentAt), LockedUntil: myTime(r.LockedUntil),
	}
}

// myTime is a nullable time column; NULL is the zero time.
func myTime(t sql.NullTime) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time.UTC()
}

func (e engine) OutboxRedrive(ctx context.Context, tx *sql.Tx, id string, now time.Time) (bool, error) {
	if err := e.checkOutbox(ctx, tx); err != nil {
		return false, err
	}
	n, err := e.q.OutboxRedrive(ctx, e.on(tx), mysqldb.OutboxRedriveParams{Now: myNow(now), ID: []byte(id)})
	return n == 1, err
}

func (e engine) OutboxForget(ctx context.Context, tx *sql.Tx, id string, force bool, now time.Time) (bool, error) {
	if err := e.checkOutbox(ctx, tx); err != nil {
		return false, err
	}
	f := 0
	if force {
		f = 1
	}
	n, err := e.q.OutboxForget(ctx, e.on(tx), mysqldb.OutboxForgetParams{ID: []byte(id), Forced: f, Now: myNow(now)})
	return n == 1, err
}

func (e engine) OutboxStats(ctx context.Context, tx *sql.Tx, now time.Time) (driver.OutboxStats, error) {
	if err := e.checkOutbox(ctx, tx); err != nil {
		return driver.OutboxStats{}, err
	}
	r, err := e.q.OutboxStats(ctx, e.on(tx))
	if err != nil {
		return driver.OutboxStats{}, err
	}
	s := driver.OutboxStats{Pending: r.Pending, Parked: r.Parked, Sent: r.Sent}
	if r.Pending > 0 {
		s.OldestPending = r.OldestPending.UTC()
	}
	return s, nil
}

var _ driver.Outbox[*sql.Tx] = engine{}
