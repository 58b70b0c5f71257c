package vitess

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/vitess"
)

// TestMigrationsUpWithoutVindex: migrations.Up through vtgate on a fresh
// sharded keyspace whose VSchema has no vindex for sqlonce's tables names
// the cause (ErrNoVindex, the tables and the ALTER VSCHEMA statements) and
// creates nothing on any shard; once the VSchema is applied as
// docs/deployments.md gives it, a fleet running Up at once migrates once.
// Its own cluster: the shared one's keyspace has the VSchema.
func TestMigrationsUpWithoutVindex(t *testing.T) {
	c, err := vitess.Start(2)
	if err != nil {
		if testdb.InCI() {
			t.Fatalf("CI=true and the Vitess cluster did not come up: %v", err)
		}
		t.Skipf("no Vitess cluster: %v", err)
	}
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := open(t, c.DSN(vitess.Keyspace))

	err = migrations.Up(ctx, db, migrations.MySQL)
	if !errors.Is(err, migrations.ErrNoVindex) {
		t.Fatalf("Up without the vindexes: %v, want ErrNoVindex", err)
	}
	for _, want := range []string{
		migrations.TableName, "sqlonce_keys", "sqlonce_tokens",
		"ALTER VSCHEMA ON " + migrations.TableName + " ADD VINDEX hash(version_id) USING hash",
		"ALTER VSCHEMA CREATE VINDEX hash USING hash", "docs/deployments.md",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	// Nothing left on either shard.
	for _, shard := range vitess.Shards {
		sdb := open(t, c.DSN(vitess.Keyspace+":"+shard))
		var n int
		if err := sdb.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables WHERE table_name LIKE 'sqlonce%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("shard %s: %d sqlonce tables left by the refused Up", shard, n)
		}
	}

	// The VSchema as documented; then instances starting at once.
	for _, s := range vitess.VSchema {
		if _, err := db.ExecContext(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	const instances = 4
	errs := make([]error, instances)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range instances {
		idb := open(t, c.DSN(vitess.Keyspace))
		wg.Go(func() {
			<-start
			errs[i] = migrations.Up(ctx, idb, migrations.MySQL)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("instance %d after the VSchema: %v", i, err)
		}
	}
	rows, err := db.QueryContext(ctx, "SELECT version_id, COUNT(*) FROM "+migrations.TableName+" GROUP BY version_id ORDER BY version_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []int64
	for rows.Next() {
		var v, n int64
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("version %d recorded %d times", v, n)
		}
		got = append(got, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || got[0] != 0 || got[3] != 3 {
		t.Errorf("versions %v, want 0 to 3", got)
	}
}
