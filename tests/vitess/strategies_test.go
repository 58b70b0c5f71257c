package vitess

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/token"
	"github.com/sqlonce/sqlonce/unique"
)

// TestTokenRepeats: a token consumed in one transaction is AlreadyDone in
// the next, an unknown token ErrUnknown and a token presented in another
// tenant's scope ErrOtherScope, each answered in the tenant's transaction
// after its order was written on the tenant's shard. The reason a consume
// changed nothing is read on the scope's shard, by the hash and the scope;
// only a token with no row of the scope is read by its hash alone, which
// vtgate sends to every shard.
func TestTokenRepeats(t *testing.T) {
	_, db := setup(t)
	tokens, err := token.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b := tenantsOnTwoShards(t, db)
	sa, sb := strconv.FormatInt(a, 10), strconv.FormatInt(b, 10)
	tok, err := tokens.Issue(ctx, sa)
	if err != nil {
		t.Fatal(err)
	}
	other, err := tokens.Issue(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	consume := func(scope string, tenant int64, tok string) (sqlonce.Result, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", tenant, fmt.Sprintf("tokrep-%d", time.Now().UnixNano())); err != nil {
			return sqlonce.Result{}, err
		}
		res, err := tokens.Consume(ctx, tx, scope, tok)
		if err != nil {
			return res, err
		}
		return res, tx.Commit()
	}
	if res, err := consume(sa, a, tok); err != nil || !res.FirstRun() {
		t.Fatalf("first consume: %v, %v", res, err)
	}
	if res, err := consume(sa, a, tok); err != nil || res.Outcome != sqlonce.AlreadyDone {
		t.Errorf("repeat: %v, %v; want AlreadyDone", res, err)
	}
	// Another first character: a token that was never issued (one that
	// began with "x" made "x"+tok[1:] the token itself now and then).
	unknown := "x" + tok[1:]
	if tok[0] == 'x' {
		unknown = "y" + tok[1:]
	}
	if _, err := consume(sa, a, unknown); !errors.Is(err, token.ErrUnknown) {
		t.Errorf("unknown token: %v; want ErrUnknown", err)
	}
	if _, err := consume(sa, a, other); !errors.Is(err, token.ErrOtherScope) {
		t.Errorf("another tenant's token: %v; want ErrOtherScope", err)
	}
}

// TestUniqueCrossShard: unique's insert of a row on another shard than the
// transaction's first write answers vtgate's refusal, never FirstRun or
// AlreadyDone; a duplicate on the tenant's shard answers AlreadyDone.
func TestUniqueCrossShard(t *testing.T) {
	_, db := setup(t)
	u, err := unique.New(testdrv.MySQL(t, db))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, b := tenantsOnTwoShards(t, db)
	id := fmt.Sprintf("uniq-%d", time.Now().UnixNano())
	insert := func(tenant int64, one bool) (sqlonce.Result, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", a, fmt.Sprintf("%s-first-%d", id, time.Now().UnixNano())); err != nil {
			return sqlonce.Result{}, err
		}
		do := u.Insert
		if one {
			do = u.InsertOne
		}
		res, err := do(ctx, tx, "PRIMARY", func(ctx context.Context) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (tenant_id, order_id, amount) VALUES (?, ?, 1)", tenant, id)
			return err
		})
		if err != nil {
			return res, err
		}
		return res, tx.Commit()
	}
	for _, one := range []bool{false, true} {
		if res, err := insert(b, one); err == nil || !mysqldriver.IsCrossShard(err) {
			t.Errorf("one=%v: insert on another shard: %v, %v; want the cross-shard refusal", one, res, err)
		}
	}
	if n := count(t, db, "SELECT COUNT(*) FROM orders WHERE order_id LIKE ?", id+"%"); n != 0 {
		t.Fatalf("%d rows committed by refused transactions", n)
	}
	if res, err := insert(a, false); err != nil || !res.FirstRun() {
		t.Fatalf("first insert: %v, %v", res, err)
	}
	for _, one := range []bool{false, true} {
		if res, err := insert(a, one); err != nil || res.Outcome != sqlonce.AlreadyDone {
			t.Errorf("one=%v: repeat: %v, %v; want AlreadyDone", one, res, err)
		}
	}
}
