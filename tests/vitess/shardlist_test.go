package vitess

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
	"github.com/sqlonce/sqlonce/tests/internal/wire"
)

// TestBoundedClaimListsShardsOnce: a claim with a bounded lock wait
// (WithNoWait) through vtgate needs the number of the keyspace's shards
// (refused on more than one, where vtgate runs the SET on the first). The
// MySQL driver lists them (SHOW VITESS_SHARDS, and SELECT DATABASE()
// without WithDatabase) once per handle, at the first such claim, and
// not at every claim as it did: counted on the wire (a proxy in front of
// vtgate), every claim after the first sends nothing for it.
//
//   - On the sharded keyspace the claim is refused: after the first, the
//     refusal costs no statement (it cost 2, then 1 with WithDatabase).
//   - On a session pinned to the key's shard (keyspace:shard) the claim
//     runs: it costs the SET of the bound and its restore more than the
//     same claim without a bound, nothing else (it cost SELECT DATABASE()
//     more).
func TestBoundedClaimListsShardsOnce(t *testing.T) {
	c, db := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := wire.Start(t, "mysql", fmt.Sprintf("127.0.0.1:%d", c.Port), 0)
	viaProxy := func(dsn string) string {
		return strings.Replace(dsn, fmt.Sprintf("tcp(127.0.0.1:%d)", c.Port), "tcp("+p.Addr()+")", 1)
	}
	const claims = 5

	// doCounted runs Do in a transaction of h's and returns the
	// statements sent during Do alone (BEGIN and ROLLBACK not counted).
	doCounted := func(t *testing.T, h *sql.DB, s *dedupe.Store[*sql.Tx], scope, key string) (int, error) {
		t.Helper()
		tx, err := h.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		p.Reset()
		_, err = s.Do(ctx, tx, dedupe.Request{Scope: scope, Key: key}, func(context.Context) error { return nil })
		n := p.Counts().Statements
		if err == nil {
			err = tx.Commit()
		}
		return n, err
	}

	for _, withDB := range []bool{false, true} {
		t.Run(fmt.Sprintf("Keyspace/WithDatabase=%v", withDB), func(t *testing.T) {
			h := open(t, viaProxy(c.DSN(vitess.Keyspace, single)))
			var opts []mysqldriver.Option
			if withDB {
				opts = append(opts, mysqldriver.WithDatabase(vitess.Keyspace))
			}
			noWait, err := dedupe.New(testdrv.MySQL(t, h, opts...), dedupe.WithNoWait())
			if err != nil {
				t.Fatal(err)
			}
			a, _ := tenantsOnTwoShards(t, db)
			for i := range claims {
				n, err := doCounted(t, h, noWait, fmt.Sprint(a), fmt.Sprintf("listonce-%d-%d", i, time.Now().UnixNano()))
				if !errors.Is(err, sqlonce.ErrInvalidArgument) {
					t.Fatalf("claim %d: Do WithNoWait on the sharded keyspace: %v, want ErrInvalidArgument", i, err)
				}
				t.Logf("claim %d: %d statements", i, n)
				if i > 0 && n != 0 {
					t.Errorf("claim %d: the refusal sent %d statements, want 0: the shards are listed once per handle", i, n)
				}
			}
		})
	}

	t.Run("Pinned", func(t *testing.T) {
		a, _ := tenantsOnTwoShards(t, db)
		shard := shardOf(t, db, a)
		h := open(t, viaProxy(c.DSN(vitess.Keyspace+":"+shard, single, "interpolateParams=true")))
		drv := testdrv.MySQL(t, h)
		noWait, err := dedupe.New(drv, dedupe.WithNoWait())
		if err != nil {
			t.Fatal(err)
		}
		plain, err := dedupe.New(drv)
		if err != nil {
			t.Fatal(err)
		}
		scope := fmt.Sprint(a)
		run := time.Now().UnixNano()
		for i := range claims {
			nPlain, err := doCounted(t, h, plain, scope, fmt.Sprintf("plain-%d-%d", i, run))
			if err != nil {
				t.Fatalf("claim %d: Do: %v", i, err)
			}
			nBounded, err := doCounted(t, h, noWait, scope, fmt.Sprintf("nowait-%d-%d", i, run))
			if err != nil {
				t.Fatalf("claim %d: Do WithNoWait on a session pinned to shard %s: %v", i, shard, err)
			}
			t.Logf("claim %d: %d statements, %d with the bound", i, nPlain, nBounded)
			if i > 0 && nBounded != nPlain+2 {
				t.Errorf("claim %d: a bounded claim sent %d statements, one without a bound %d: want 2 more (the SET and its restore), nothing to list the shards",
					i, nBounded, nPlain)
			}
		}
	})
}
