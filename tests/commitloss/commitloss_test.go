package commitloss

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
)

// paths are the two ways Store.Run commits: the driver's own run (pgx's
// pipeline with COMMIT in the last batch; MySQL's transaction) and, for a
// Store that must not wait, a claim in a transaction of sqlonce's own
// (the driver's InTx).
var paths = []struct {
	name string
	opts []dedupe.Option
}{
	{"Run", nil},
	{"InTx", []dedupe.Option{dedupe.WithNoWait()}},
}

// cutMode is where the proxy cuts the client's connection at COMMIT.
type cutMode struct {
	name      string
	fault     faultproxy.Fault
	committed bool // the server committed before the cut
}

// modes: LoseReply forwards the COMMIT, waits for the server's answer
// (it committed) and resets the client's connection instead of passing
// the answer on; LoseCommit resets it without forwarding the COMMIT (the
// server rolls back). Either way the client's COMMIT fails with a lost
// connection and cannot tell which happened.
var modes = []cutMode{
	{"AfterServerCommitted", faultproxy.LoseReply, true},
	{"BeforeServerSawCommit", faultproxy.LoseCommit, false},
}

// cuts is the number of COMMITs the proxy cut.
func cuts(p *faultproxy.Proxy) int64 {
	c := p.Counts()
	return c.Fired[faultproxy.LoseReply] + c.Fired[faultproxy.LoseCommit]
}

// check runs one Store.Run through the proxy, cut at COMMIT, then resends
// it with the same key on a direct connection, and counts the effect.
func check[TTx any](t *testing.T, ctx context.Context, l *ledger[TTx], opts []dedupe.Option, mode cutMode) {
	t.Helper()
	p := l.proxy
	cut, err := dedupe.New(l.proxied, opts...)
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(l.direct, opts...)
	if err != nil {
		t.Fatal(err)
	}
	req := dedupe.Request{Scope: "cl", Key: t.Name()}
	fn := func(ctx context.Context, tx TTx) ([]byte, error) {
		return []byte("paid"), l.insert(ctx, tx, req.Key)
	}

	p.ArmNext(mode.fault)
	res, err := cut.Run(ctx, req, fn)
	if cuts(p) != 1 {
		t.Fatalf("the proxy cut %d COMMITs, want 1 (Run: %v, %v)", cuts(p), res, err)
	}
	t.Logf("cut at COMMIT: %v", err)
	if !errors.Is(err, sqlonce.ErrCommitUnknown) || !sqlonce.IsCommitUnknown(err) {
		t.Fatalf("got %v, %v; want an error matching ErrCommitUnknown", res, err)
	}
	if !driver.Classify(err).Has(driver.ConnLost) {
		t.Fatalf("%v: the lost connection's own error is not in the chain", err)
	}
	if sqlonce.IsRetryable(err) {
		t.Fatalf("IsRetryable(%v) = true: a transaction that may have committed is not run again blindly", err)
	}

	// The resend with the same key. It may meet the cut session's
	// transaction still holding the key on the server (MySQL ends it once
	// it notices the connection gone, later under load) and get
	// ErrInProgress, "retry later": retried, as a client does.
	res, err = store.Run(ctx, req, fn)
	for deadline := time.Now().Add(30 * time.Second); errors.Is(err, sqlonce.ErrInProgress) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		res, err = store.Run(ctx, req, fn)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := sqlonce.FirstRun
	if mode.committed {
		want = sqlonce.AlreadyDone
	}
	if res.Outcome != want || string(res.Response) != "paid" {
		t.Fatalf("resend: got %v %q, want %v \"paid\"", res.Outcome, res.Response, want)
	}
	if n := l.count(req.Key); n != 1 {
		t.Fatalf("%d ledger rows for the key, want exactly 1", n)
	}
}

// eachPath runs check on each of Run's commit paths and cut modes, on a
// ledger open makes.
func eachPath[TTx any](t *testing.T, open func(t *testing.T, ctx context.Context) *ledger[TTx]) {
	for _, path := range paths {
		t.Run(path.name, func(t *testing.T) {
			eachMode(t, open, func(t *testing.T, ctx context.Context, l *ledger[TTx], mode cutMode) {
				check(t, ctx, l, path.opts, mode)
			})
		})
	}
}

func TestPostgres(t *testing.T) { eachPath(t, postgresLedger) }

func TestMySQL(t *testing.T) { eachPath(t, mysqlLedger) }
