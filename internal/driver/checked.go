package driver

import (
	"context"
	"database/sql"
	"time"
)

// Checked is an Engine on *sql.Tx whose every call first passes Check: a
// driver's Engine returns one when its DialectCheck is not settled at New.
// Its Capabilities are the engine's, each behind the check.
type Checked struct {
	Engine[*sql.Tx]
	Check *DialectCheck
	// DB is the driver's handle (may be nil), probed by the calls that
	// run on it rather than on a caller's transaction.
	DB *sql.DB
}

var _ Engine[*sql.Tx] = Checked{}

// Capabilities returns the engine's, each behind the check: every field
// the engine sets, Checked sets (TestCheckedKeepsCapabilities). The
// capabilities that run on the driver's handle answer ErrNoRun without
// one (never, for a driver its package's New built), for the generic path.
func (c Checked) Capabilities() Capabilities[*sql.Tx] {
	in := c.Engine.Capabilities()
	var out Capabilities[*sql.Tx]
	if in.Runner != nil {
		out.Runner = checkedRunner{c, in.Runner}
	}
	if in.BatchClaimer != nil {
		out.BatchClaimer = checkedBatchClaimer{c, in.BatchClaimer}
	}
	if in.BatchRunner != nil {
		out.BatchRunner = checkedBatchRunner{c, in.BatchRunner}
	}
	if in.Autocommitter != nil {
		out.Autocommitter = checkedAutocommitter{c, in.Autocommitter}
	}
	if in.DuplicateInTx != nil {
		// Called after Guard, which passed the check on tx.
		out.DuplicateInTx = in.DuplicateInTx
	}
	if in.ClaimChecker != nil {
		out.ClaimChecker = checkedClaimChecker{c, in.ClaimChecker}
	}
	if in.OutboxListener != nil {
		out.OutboxListener = checkedOutboxListener{c, in.OutboxListener}
	}
	return out
}

type checkedRunner struct {
	c Checked
	r Runner[*sql.Tx]
}

func (r checkedRunner) Run(ctx context.Context, p RunParams, fn func(ctx context.Context, tx *sql.Tx) ([]byte, error)) (RunResult, error) {
	if r.c.DB == nil {
		return RunResult{}, ErrNoRun // the generic path, through the checked calls
	}
	if err := r.c.Check.Err(ctx, r.c.DB); err != nil {
		return RunResult{}, err
	}
	return r.r.Run(ctx, p, fn)
}

type checkedBatchClaimer struct {
	c Checked
	b BatchClaimer[*sql.Tx]
}

func (b checkedBatchClaimer) ClaimBatch(ctx context.Context, tx *sql.Tx, p BatchParams) ([]BatchClaim, error) {
	if err := b.c.Check.Err(ctx, b.c.on(tx)); err != nil {
		return nil, err
	}
	return b.b.ClaimBatch(ctx, tx, p)
}

type checkedBatchRunner struct {
	c Checked
	b BatchRunner[*sql.Tx]
}

func (b checkedBatchRunner) RunBatch(ctx context.Context, p BatchParams, fn func(ctx context.Context, tx *sql.Tx, claims []BatchClaim) error) error {
	if b.c.DB == nil {
		return ErrNoRun // ClaimBatch in InTx, through the checked calls
	}
	if err := b.c.Check.Err(ctx, b.c.DB); err != nil {
		return err
	}
	return b.b.RunBatch(ctx, p, fn)
}

type checkedAutocommitter struct {
	c Checked
	a Autocommitter[*sql.Tx]
}

func (a checkedAutocommitter) Autocommit(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if a.c.DB == nil {
		return ErrNoRun // a transaction, through the checked calls
	}
	// Settled on the handle before fn runs: the calls fn makes, given
	// AutoTx, probe nothing then.
	if err := a.c.Check.Err(ctx, a.c.DB); err != nil {
		return err
	}
	return a.a.Autocommit(ctx, fn)
}

type checkedClaimChecker struct {
	c  Checked
	cc ClaimChecker[*sql.Tx]
}

func (c checkedClaimChecker) CheckClaim(ctx context.Context, tx *sql.Tx, k Key, token int64) error {
	if err := c.c.Check.Err(ctx, c.c.on(tx)); err != nil {
		return err
	}
	return c.cc.CheckClaim(ctx, tx, k, token)
}

func (c Checked) Guard(ctx context.Context, tx *sql.Tx, single bool, fn func(ctx context.Context) error) error {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return err
	}
	return c.Engine.Guard(ctx, tx, single, fn)
}

func (c Checked) Claim(ctx context.Context, tx *sql.Tx, p ClaimParams) (Claim, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return Claim{}, err
	}
	return c.Engine.Claim(ctx, tx, p)
}

func (c Checked) SetResponse(ctx context.Context, tx *sql.Tx, k Key, token int64, response []byte) error {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return err
	}
	return c.Engine.SetResponse(ctx, tx, k, token, response)
}

func (c Checked) Unclaim(ctx context.Context, tx *sql.Tx, k Key, token int64) error {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return err
	}
	return c.Engine.Unclaim(ctx, tx, k, token)
}

func (c Checked) Complete(ctx context.Context, tx *sql.Tx, k Key, token int64, response []byte, ttl time.Duration, now time.Time) (bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return false, err
	}
	return c.Engine.Complete(ctx, tx, k, token, response, ttl, now)
}

func (c Checked) Release(ctx context.Context, tx *sql.Tx, k Key, token int64, now time.Time) (bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return false, err
	}
	return c.Engine.Release(ctx, tx, k, token, now)
}

func (c Checked) Extend(ctx context.Context, tx *sql.Tx, k Key, token int64, lease time.Duration, now time.Time) (bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return false, err
	}
	return c.Engine.Extend(ctx, tx, k, token, lease, now)
}

func (c Checked) Inspect(ctx context.Context, tx *sql.Tx, k Key, now time.Time) (KeyInfo, bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return KeyInfo{}, false, err
	}
	return c.Engine.Inspect(ctx, tx, k, now)
}

func (c Checked) Forget(ctx context.Context, tx *sql.Tx, k Key, force bool, now time.Time) (bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return false, err
	}
	return c.Engine.Forget(ctx, tx, k, force, now)
}

func (c Checked) Purge(ctx context.Context, tx *sql.Tx, limit int, now time.Time) (int64, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return 0, err
	}
	return c.Engine.Purge(ctx, tx, limit, now)
}

func (c Checked) InTx(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if c.DB != nil {
		if err := c.Check.Err(ctx, c.DB); err != nil {
			return err
		}
	}
	return c.Engine.InTx(ctx, fn)
}

func (c Checked) TokenInsert(ctx context.Context, tx *sql.Tx, hash []byte, scope string, ttl time.Duration, now time.Time) error {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return err
	}
	return c.Engine.TokenInsert(ctx, tx, hash, scope, ttl, now)
}

func (c Checked) TokenConsume(ctx context.Context, tx *sql.Tx, hash []byte, scope string, now time.Time) (TokenConsumed, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return TokenConsumed{}, err
	}
	return c.Engine.TokenConsume(ctx, tx, hash, scope, now)
}

func (c Checked) TokenGet(ctx context.Context, tx *sql.Tx, hash []byte, now time.Time) (TokenState, bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return TokenState{}, false, err
	}
	return c.Engine.TokenGet(ctx, tx, hash, now)
}

func (c Checked) TokenPurge(ctx context.Context, tx *sql.Tx, limit int, now time.Time) (int64, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return 0, err
	}
	return c.Engine.TokenPurge(ctx, tx, limit, now)
}

// on is what the check probes for a call given tx: the handle for AutoTx.
func (c Checked) on(tx *sql.Tx) querier {
	if tx == AutoTx && c.DB != nil {
		return c.DB
	}
	return tx
}

func (c Checked) StepGet(ctx context.Context, tx *sql.Tx, k Key, now time.Time) (StepRow, bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return StepRow{}, false, err
	}
	return c.Engine.StepGet(ctx, tx, k, now)
}

func (c Checked) StepResume(ctx context.Context, tx *sql.Tx, k Key, token int64, read, recovery []byte, lease time.Duration, now time.Time) (bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return false, err
	}
	return c.Engine.StepResume(ctx, tx, k, token, read, recovery, lease, now)
}

func (c Checked) StepSave(ctx context.Context, tx *sql.Tx, k Key, token int64, recovery []byte, lease time.Duration, now time.Time) (bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return false, err
	}
	return c.Engine.StepSave(ctx, tx, k, token, recovery, lease, now)
}

func (c Checked) StepStuck(ctx context.Context, tx *sql.Tx, ns Namespace, limit int, now time.Time) ([]Key, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return nil, err
	}
	return c.Engine.StepStuck(ctx, tx, ns, limit, now)
}

func (c Checked) StepRedrive(ctx context.Context, tx *sql.Tx, k Key, token int64, read, recovery []byte, ttl time.Duration, now time.Time) (bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return false, err
	}
	return c.Engine.StepRedrive(ctx, tx, k, token, read, recovery, ttl, now)
}

func (c Checked) StepStart(ctx context.Context, tx *sql.Tx, k Key, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (int64, bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return 0, false, err
	}
	return c.Engine.StepStart(ctx, tx, k, fingerprint, recovery, lease, ttl, now)
}

func (c Checked) StepRestart(ctx context.Context, tx *sql.Tx, k Key, token int64, read, fingerprint, recovery []byte, lease, ttl time.Duration, now time.Time) (bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return false, err
	}
	return c.Engine.StepRestart(ctx, tx, k, token, read, fingerprint, recovery, lease, ttl, now)
}

func (c Checked) OutboxInsert(ctx context.Context, tx *sql.Tx, m OutboxMessage, now time.Time) (bool, []byte, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return false, nil, err
	}
	return c.Engine.OutboxInsert(ctx, tx, m, now)
}

func (c Checked) OutboxClaim(ctx context.Context, tx *sql.Tx, limit int, lease time.Duration, now time.Time) ([]OutboxClaimed, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return nil, err
	}
	return c.Engine.OutboxClaim(ctx, tx, limit, lease, now)
}

func (c Checked) OutboxSent(ctx context.Context, tx *sql.Tx, leases []OutboxLease, now time.Time) (int64, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return 0, err
	}
	return c.Engine.OutboxSent(ctx, tx, leases, now)
}

func (c Checked) OutboxFailed(ctx context.Context, tx *sql.Tx, lease OutboxLease, errText string, retryAt time.Time, park bool, now time.Time) (bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return false, err
	}
	return c.Engine.OutboxFailed(ctx, tx, lease, errText, retryAt, park, now)
}

func (c Checked) OutboxPurge(ctx context.Context, tx *sql.Tx, limit int, sentBefore time.Time) (int64, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return 0, err
	}
	return c.Engine.OutboxPurge(ctx, tx, limit, sentBefore)
}

func (c Checked) OutboxGet(ctx context.Context, tx *sql.Tx, id string, now time.Time) (OutboxRow, bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return OutboxRow{}, false, err
	}
	return c.Engine.OutboxGet(ctx, tx, id, now)
}

func (c Checked) OutboxList(ctx context.Context, tx *sql.Tx, state int16, afterSeq int64, limit int, now time.Time) ([]OutboxRow, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return nil, err
	}
	return c.Engine.OutboxList(ctx, tx, state, afterSeq, limit, now)
}

func (c Checked) OutboxRedrive(ctx context.Context, tx *sql.Tx, id string, now time.Time) (bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return false, err
	}
	return c.Engine.OutboxRedrive(ctx, tx, id, now)
}

func (c Checked) OutboxForget(ctx context.Context, tx *sql.Tx, id string, force bool, now time.Time) (bool, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return false, err
	}
	return c.Engine.OutboxForget(ctx, tx, id, force, now)
}

func (c Checked) OutboxStats(ctx context.Context, tx *sql.Tx, now time.Time) (OutboxStats, error) {
	if err := c.Check.Err(ctx, c.on(tx)); err != nil {
		return OutboxStats{}, err
	}
	return c.Engine.OutboxStats(ctx, tx, now)
}

type checkedOutboxListener struct {
	c Checked
	l OutboxListener
}

// OutboxListen runs on the driver's handle: ErrNoRun without one (the
// relay then polls).
func (l checkedOutboxListener) OutboxListen(ctx context.Context, ready, wake func()) error {
	if l.c.DB == nil {
		return ErrNoRun
	}
	if err := l.c.Check.Err(ctx, l.c.DB); err != nil {
		return err
	}
	return l.l.OutboxListen(ctx, ready, wake)
}
