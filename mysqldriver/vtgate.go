package mysqldriver

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/dbsqlc/mysqldb"
	"github.com/sqlonce/sqlonce/internal/driver"
)

var _ driver.ClaimChecker[*sql.Tx] = engine{}

// Vitess's vtgate speaks MySQL's protocol and passes a tablet's MySQL
// error on with its number and SQLSTATE, its message wrapped:
//
//	target: ks.-80.primary: vttablet: rpc error: code = AlreadyExists desc = Duplicate entry 'a' for key 'PRIMARY' (errno 1062) (sqlstate 23000) (CallerID: ...): Sql: "...", BindVars: {...}
//
// so 1062, 1213 and 1205 classify as they do from MySQL itself. Its own
// errors come as 1317 (its ABORTED, CANCELED, DEADLINE_EXCEEDED) and 1105
// (most of the rest).

// vtgate's messages that classifyVtgate reads.
var (
	// A transaction under transaction_mode=single wrote on a second
	// shard: vtgate refused the statement and rolled back the whole
	// transaction on every shard it had touched; the session is out of
	// any transaction, so the statements after it run in autocommit, and
	// a later COMMIT answers OK on nothing.
	vtMultiDB = "multi-db transaction attempted"
	// A tablet ended the shard's transaction (its transaction killer, a
	// tablet restart): vterrors.TxClosed. While a statement of the
	// transaction runs, the killer's reason comes behind one "in use:"
	// per layer that found the connection busy.
	vtTxClosed = regexp.MustCompile(`transaction ([a-z0-9:]+) (?:ended|not found|(?:in use: )+for tx killer rollback)`)
	// No tablet serves the shard (its primary is down or being replaced):
	// vtrpc UNAVAILABLE, as vtgate words it.
	// vtgate keeps a transaction's SAVEPOINT and ROLLBACK TO statements
	// and replays them on the tablet when it begins the transaction on a
	// shard. On a reserved connection (a session that set a system
	// variable vtgate reserves one for, such as tx_isolation) it can keep
	// them past the transaction: after a deadlock ended the shard's
	// transaction, the savepoint's ROLLBACK TO answers OK and is kept, and
	// the next transaction on that session fails at its first statement,
	// at the replayed "begin": 1305 "SAVEPOINT ... does not exist". That
	// transaction has done nothing, and vtgate has dropped the statements:
	// run it again.
	vtStaleSavepoint = regexp.MustCompile(`does not exist \(errno 1305\).*Sql: "begin"`)
	// A tablet's error, as vtgate wraps it.
	vtTablet      = regexp.MustCompile(`target: [^ ]+: vttablet: `)
	vtUnavailable = regexp.MustCompile(`code = Unavailable|no healthy tablet available|no valid tablet|primary is not serving|tablet: .* is not serving|operation not allowed in state (?:NOT_SERVING|SHUTTING_DOWN)`)
)

// classifyVtgate classifies vtgate's own errors (1317, 1105, 1305). The same
// numbers from MySQL or MariaDB themselves (1317: KILL QUERY, a statement
// timeout, which leave the transaction as it was) never match these
// messages and are not classified.
func classifyVtgate(e *mysql.MySQLError) driver.Class {
	switch {
	case e.Number == errQueryInterrupted && strings.Contains(e.Message, vtMultiDB):
		// Not retryable: the same transaction reaches the same shards.
		return driver.TxRolledBack
	case e.Number == errQueryInterrupted && vtTxClosed.MatchString(e.Message):
		return driver.Retryable | driver.TxRolledBack
	case (e.Number == crServerGone || e.Number == crServerLost) && vtTablet.MatchString(e.Message):
		// The tablet's MySQL connection died under the shard's
		// transaction (killed, or the server restarted): the transaction
		// is gone. vtgate answers the next statement with 1317 "transaction
		// ... ended", and the one after it begins a new transaction on
		// the shard, inside the client's: no further statement of this
		// transaction may be sent, or it commits apart from the rest. Not
		// retryable, as a connection killed on MySQL itself (1927) is not.
		return driver.ConnLost | driver.TxRolledBack
	case e.Number == errSpNotExist:
		if vtStaleSavepoint.MatchString(e.Message) {
			return driver.Retryable | driver.TxRolledBack
		}
		return 0
	case vtUnavailable.MatchString(e.Message):
		// Whether a statement sent on reached the tablet is unknown, and
		// the shard's transaction is lost with it: run it again from the
		// start, unless this was the COMMIT (ConnLost there answers
		// ErrCommitUnknown, which is not retryable).
		return driver.ConnLost | driver.Retryable | driver.TxRolledBack
	}
	return 0
}

// IsCrossShard reports whether an error of err's tree is vtgate's refusal
// of a transaction that wrote on a second shard under
// transaction_mode=single (1317 "multi-db transaction attempted"). vtgate
// has then rolled the whole transaction back on every shard: roll back
// (or let sqlonce do it) and do not commit, since the session is out of
// the transaction and a COMMIT would answer OK for work that is gone.
// Such a transaction never succeeds as written: the rows it touches must
// be on the shard of its key (see docs/deployments.md, Vitess).
//
// It is also true of the error sqlonce returns when it finds, after work
// that returned no error, that vtgate has rolled the transaction back
// under it (the work swallowed the refusal and went on): the call fails
// instead of answering FirstRun for work that is gone.
func IsCrossShard(err error) bool {
	return driver.Walk(err, func(e error) bool {
		if e == errVtgateClaimGone || e == errVtgateTxGone {
			return true
		}
		myErr, ok := e.(*mysql.MySQLError)
		return ok && myErr.Number == errQueryInterrupted && strings.Contains(myErr.Message, vtMultiDB)
	})
}

// errVtgateClaimGone is the answer, through vtgate, when a transaction no
// longer holds the claim it made before the work, although the work
// returned no error: vtgate rolled the transaction back during the work
// (most likely a statement reaching a second shard, refused with 1317
// under transaction_mode=single, which the work swallowed), and the work's
// statements after that ran in autocommit. Classified as 1317's refusal:
// the transaction is gone (TxRolledBack), not retryable (IsCrossShard).
var errVtgateClaimGone = errors.New("mysqldriver: vtgate rolled the transaction back during the work, which went on: " +
	"the key's claim is gone and a COMMIT would answer OK on nothing; a statement of the work reached a second shard " +
	"(1317 multi-db transaction attempted) or its shard's transaction ended, and the work did not return that error; " +
	"roll back, return every error of the work's statements, and keep its rows on the shard of its key (docs/deployments.md, Vitess)")

// CheckClaim, through vtgate, reads the claim made with token in tx: a
// plain read, which sees tx's own row while tx holds it, and runs in
// autocommit and finds none once vtgate has rolled tx back. Elsewhere it
// answers nil without a round trip: on MySQL and MariaDB a rollback
// under the work comes with an error the work's statement returned (a
// deadlock), which the package documents must be returned.
func (e engine) CheckClaim(ctx context.Context, tx *sql.Tx, k driver.Key, token int64) error {
	if !e.wsrep.done.Load() || !e.wsrep.vtgate {
		return nil
	}
	held, err := e.q.KeyClaimHeld(ctx, e.on(tx), mysqldb.KeyClaimHeldParams{
		Namespace: int16(k.Namespace), Scope: []byte(k.Scope), IdempotencyKey: []byte(k.Key), Token: token,
	})
	if err != nil {
		return err
	}
	if held != 1 {
		return errVtgateClaimGone
	}
	return nil
}

// errVtgateTxGone is the answer, through vtgate, when a write that
// records a key's progress after the work (an operation's recovery point,
// a lease's Complete in a transaction) finds its transaction gone: vtgate
// rolled it back during the work, most likely for a statement reaching a
// second shard (1317 under transaction_mode=single), which the work
// swallowed. The session is then out of any transaction: the write would
// commit on its own, in autocommit, and record as done work that was
// rolled back. Classified as 1317's refusal (IsCrossShard, TxRolledBack,
// not retryable).
var errVtgateTxGone = errors.New("mysqldriver: vtgate rolled the transaction back during the work, which went on: " +
	"the key's progress is not recorded, since it would commit alone, in autocommit, without the work; a statement of the work reached a second shard " +
	"(1317 multi-db transaction attempted) or its shard's transaction ended, and the work did not return that error; " +
	"return every error of the work's statements, and keep its rows on the shard of its key (docs/deployments.md, Vitess)")

// The statements of vtgateInTx's probe. vtgate runs a SAVEPOINT in every
// shard's transaction of the session, keeps it for the shards the
// transaction reaches later, and answers OK outside a transaction; it
// refuses a RELEASE SAVEPOINT outside a transaction with 1305 ("SAVEPOINT
// does not exist"), without reaching a shard.
const (
	sqlProbeSavepoint = "SAVEPOINT sqlonce_in_tx"
	sqlProbeRelease   = "RELEASE SAVEPOINT sqlonce_in_tx"
	errSavepointGone  = 1305 // ER_SP_DOES_NOT_EXIST
)

// vtgateInTx, through vtgate, checks that tx is still a transaction
// before a write that records a key's progress after work that ran in tx
// (StepSave, Complete): it answers errVtgateTxGone when vtgate has rolled
// tx back under the work. Off vtgate, and in autocommit (driver.AutoTx),
// it answers nil without a round trip: on MySQL and MariaDB a rollback
// under the work comes with an error the work's statement returned (a
// deadlock), which the package documents must be returned. A claim made
// in tx (Do's) is checked by CheckClaim instead, in one round trip; an
// operation's key and a lease were claimed before tx began, and only
// tx's state tells.
func (e engine) vtgateInTx(ctx context.Context, tx *sql.Tx) error {
	if tx == driver.AutoTx || !e.wsrep.done.Load() || !e.wsrep.vtgate {
		return nil
	}
	if _, err := tx.ExecContext(ctx, sqlProbeSavepoint); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, sqlProbeRelease)
	var myErr *mysql.MySQLError
	if errors.As(err, &myErr) && myErr.Number == errSavepointGone {
		return errVtgateTxGone
	}
	return err
}

// vtgateDuplicateKeyName extracts the key name from a 1062 message as
// vtgate wraps it: the server's message is followed by
// " (errno 1062) (sqlstate 23000)" and vttablet's context. The first
// such marker is the server's (vtgate reads the number from it too); the
// duplicate value the server quoted before it is at most 64 characters.
func vtgateDuplicateKeyName(msg string) (string, bool) {
	const suffix = "' (errno 1062) (sqlstate 23000)"
	i := strings.Index(msg, suffix)
	if i < 0 {
		return "", false
	}
	const marker = " for key '"
	head := msg[:i]
	j := strings.LastIndex(head, marker)
	if j < 0 {
		return "", false
	}
	return head[j+len(marker):], true
}

// isVtgate reports whether a server's version is vtgate's (8.4.6-Vitess
// in v0.24: the MySQL version it claims, then -Vitess).
func isVtgate(version string) bool { return strings.HasSuffix(version, "-Vitess") }

// sqlTxMode reads the session's transaction mode, which vtgate answers
// itself without reaching a shard.
const sqlTxMode = "SELECT @@transaction_mode"

// vtgateErr returns the refusal for a vtgate session whose transactions
// may commit on several shards one after the other (transaction_mode
// MULTI, vtgate's default): a key's claim on one shard and its work on
// another would then commit apart, and a failure between the two
// commits keeps one without the other. SINGLE refuses a transaction's
// statement that reaches a second shard (and rolls the transaction back);
// TWOPC commits across shards atomically. err is the probe's own failure.
func vtgateErr(ctx context.Context, q querier) (refusal, err error) {
	var mode string
	if err := q.QueryRowContext(ctx, sqlTxMode).Scan(&mode); err != nil {
		return nil, err
	}
	switch strings.ToUpper(mode) {
	case "SINGLE", "TWOPC":
		return nil, nil
	}
	return fmt.Errorf("%w: mysqldriver: the server is Vitess's vtgate and the session's transaction_mode is %q: "+
		"a transaction that reaches two shards commits on one and then on the other, so a key could commit without its work; "+
		"add transaction_mode=%%27single%%27 to the DSN (go-sql-driver/mysql sets it on every connection), "+
		"or run vtgate with --transaction_mode=SINGLE (or TWOPC), and keep each key on the shard of its work (docs/deployments.md, Vitess)",
		sqlonce.ErrInvalidArgument, mode), nil
}

// errVtgateLockWait refuses a claim with a bounded lock wait (dedupe's
// WithNoWait, WithLockWait) through vtgate. The bound is a SET of the
// session's innodb_lock_wait_timeout, which vtgate checks by running a
// query on the keyspace's first shard, inside the transaction: under
// transaction_mode=single a claim whose key lives on another shard then
// fails as a cross-shard transaction (1317), depending on where the key
// hashes. Refused on a sharded keyspace, rather than on some keys; a
// session on one shard (keyspace:shard in the DSN) or a keyspace of one
// shard runs it as MariaDB does.
//
// It matches driver.ErrShardedLockWait as well, by which httpidem and
// grpcidem (whose Stores claim WithNoWait) answer it as not retryable.
var errVtgateLockWait = fmt.Errorf("%w: %w: mysqldriver: a bounded lock wait (dedupe.WithNoWait, WithLockWait; httpidem's and grpcidem's claims) is not supported through vtgate on a sharded keyspace: "+
	"its SET innodb_lock_wait_timeout runs on the keyspace's first shard inside the transaction, which makes a key on another shard "+
	"a cross-shard transaction; use a Store without it, or keep its keys on an unsharded keyspace, with a driver whose DSN names that keyspace "+
	"(docs/deployments.md, Vitess)", sqlonce.ErrInvalidArgument, driver.ErrShardedLockWait)
