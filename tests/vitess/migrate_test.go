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
// creates nothing on any shard, with no VSchema and with the documented one
// but the version table's line; once the VSchema is applied as
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

	// An empty VSchema, then the documented one without the version
	// table's vindex (the case): each Up names what is missing
	// and leaves nothing on either shard.
	addVersion := "ALTER VSCHEMA ON " + migrations.TableName + " ADD VINDEX hash(version_id) USING hash"
	var others []string
	for _, s := range vitess.VSchema {
		if s != addVersion {
			others = append(others, s)
		}
	}
	for _, step := range []struct {
		apply         []string
		want, notWant []string
	}{
		{nil, []string{migrations.TableName, "sqlonce_keys", "sqlonce_tokens", addVersion,
			"ALTER VSCHEMA CREATE VINDEX hash USING hash", "ALTER VSCHEMA CREATE VINDEX xxhash USING xxhash", "docs/deployments.md"}, nil},
		{others, []string{migrations.TableName, addVersion, "docs/deployments.md"},
			[]string{"sqlonce_keys,", "CREATE VINDEX hash"}},
	} {
		for _, s := range step.apply {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		err := migrations.Up(ctx, db, migrations.MySQL)
		if !errors.Is(err, migrations.ErrNoVindex) {
			t.Errorf("Up without the vindexes: %v, want ErrNoVindex", err)
		} else {
			for _, want := range step.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}
			for _, not := range step.notWant {
				if strings.Contains(err.Error(), not) {
					t.Errorf("error %q names %q, which is there", err, not)
				}
			}
		}
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
		if t.Failed() {
			t.FailNow()
		}
	}

	// The version table's vindex, as documented; then instances starting
	// at once.
	if _, err := db.ExecContext(ctx, addVersion); err != nil {
		t.Fatalf("%s: %v", addVersion, err)
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
	if len(got) != 5 || got[0] != 0 || got[4] != 4 {
		t.Errorf("versions %v, want 0 to 4", got)
	}
}
