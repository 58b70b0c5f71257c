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
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
)

// TestOutboxShardedRefused: on the sharded keyspace every outbox call is
// refused, naming the fix (an unsharded keyspace), and writes nothing; on
// a session targeted at one shard (keyspace:shard) the outbox works as on
// MariaDB: insert, duplicate, claim, sent.
func TestOutboxShardedRefused(t *testing.T) {
	c, db := setup(t)
	ctx := context.Background()
	id := fmt.Sprintf("vt-outbox-%d", time.Now().UnixNano())
	m := driver.OutboxMessage{ID: id, Topic: "orders", OrderingKey: "k", Payload: []byte("p"), Fingerprint: []byte("fp")}

	inTx := func(db *sql.DB, fn func(e driver.Engine[*sql.Tx], tx *sql.Tx) error) error {
		d, err := mysqldriver.New(db)
		if err != nil {
			t.Fatal(err)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := fn(d.Engine(), tx); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	}

	err := inTx(db, func(e driver.Engine[*sql.Tx], tx *sql.Tx) error {
		_, _, err := e.OutboxInsert(ctx, tx, m, time.Time{})
		return err
	})
	if !errors.Is(err, sqlonce.ErrInvalidArgument) || !strings.Contains(err.Error(), "unsharded keyspace") {
		t.Fatalf("OutboxInsert on the sharded keyspace: %v, want ErrInvalidArgument naming an unsharded keyspace", err)
	}
	err = inTx(db, func(e driver.Engine[*sql.Tx], tx *sql.Tx) error {
		_, err := e.OutboxClaim(ctx, tx, 10, time.Minute, time.Time{})
		return err
	})
	if !errors.Is(err, sqlonce.ErrInvalidArgument) {
		t.Fatalf("OutboxClaim on the sharded keyspace: %v, want ErrInvalidArgument", err)
	}

	shard := open(t, c.DSN(vitess.Keyspace+":"+vitess.Shards[0], single, "parseTime=true"))
	if err := inTx(shard, func(e driver.Engine[*sql.Tx], tx *sql.Tx) error {
		for i, want := range []bool{true, false} {
			ins, stored, err := e.OutboxInsert(ctx, tx, m, time.Time{})
			if err != nil {
				return err
			}
			if ins != want || (!ins && string(stored) != "fp") {
				return fmt.Errorf("insert %d on a shard: inserted %v, stored %q", i, ins, stored)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var claimed []driver.OutboxClaimed
	if err := inTx(shard, func(e driver.Engine[*sql.Tx], tx *sql.Tx) error {
		var err error
		claimed, err = e.OutboxClaim(ctx, tx, 1000, time.Hour, time.Now().Add(time.Second))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var lease *driver.OutboxLease
	for _, cl := range claimed {
		if cl.ID == id {
			lease = &cl.OutboxLease
		}
	}
	if lease == nil {
		t.Fatalf("claim on a shard: %d messages, not %s", len(claimed), id)
	}
	if err := inTx(shard, func(e driver.Engine[*sql.Tx], tx *sql.Tx) error {
		n, err := e.OutboxSent(ctx, tx, []driver.OutboxLease{*lease}, time.Time{})
		if err == nil && n != 1 {
			err = fmt.Errorf("sent: %d marked, want 1", n)
		}
		if err == nil {
			var rows []driver.OutboxRow
			rows, err = e.OutboxList(ctx, tx, driver.OutboxSent, lease.Seq-1, 1, time.Time{})
			if err == nil && (len(rows) != 1 || rows[0].ID != id) {
				err = fmt.Errorf("list of the sent: %+v", rows)
			}
		}
		if err == nil {
			_, err = e.OutboxStats(ctx, tx, time.Time{})
		}
		if err == nil {
			_, err = e.OutboxPurge(ctx, tx, 1, time.Now().Add(time.Hour))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}
