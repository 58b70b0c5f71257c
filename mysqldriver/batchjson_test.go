package mysqldriver

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/exampledb"
)

// Every shape of the batch claim answers alike: the RETURNING one that
// MariaDB runs, the JSON_TABLE one that MySQL 8 runs, and the generated
// statements that MariaDB 10.5 runs, each forced here on the MariaDB or
// MySQL server at hand, with and without clientFoundRows (an unchanged
// row counts as affected): new keys are won, existing ones are not, a
// mixed batch tells them apart.
func TestClaimBatchShapes(t *testing.T) {
	dsn := os.Getenv("SQLONCE_MYSQL_DSN")
	if dsn == "" {
		dsn = "root@tcp(127.0.0.1:3306)/test?parseTime=true"
	}
	if err := ping(dsn); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("MySQL/MariaDB does not answer: %v", err)
		}
		t.Skipf("MySQL/MariaDB does not answer (set SQLONCE_MYSQL_DSN): %v", err)
	}
	// A database of this run's own: two runs at once (a CI loop and a
	// developer's) must not drop each other's.
	name := fmt.Sprintf("batch_shapes_%d_%d", os.Getpid(), rand.IntN(1_000_000))
	exampledb.MySQL(name).Close()
	t.Cleanup(func() {
		admin, err := sql.Open("mysql", dsn)
		if err == nil {
			_, err = admin.Exec("DROP DATABASE IF EXISTS example_" + name)
			admin.Close()
		}
		if err != nil {
			t.Errorf("drop the test's database: %v", err)
		}
	})
	ctx := context.Background()
	for _, shape := range []int32{shapeReturning, shapeJSONTable, shapeNumbers} {
		for _, found := range []bool{false, true} {
			t.Run(fmt.Sprintf("shape%d/clientFoundRows=%v", shape, found), func(t *testing.T) {
				cfg, err := mysql.ParseDSN(dsn)
				if err != nil {
					t.Fatal(err)
				}
				cfg.DBName, cfg.ParseTime, cfg.ClientFoundRows = "example_"+name, true, found
				db, err := sql.Open("mysql", cfg.FormatDSN())
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				d, err := New(db)
				if err != nil {
					t.Fatal(err)
				}
				e := d.e
				e.batch = &batchShape{}
				e.batch.first.Store(shape)
				scope := fmt.Sprintf("s%d-%v", shape, found)
				claim := func(keys ...string) (won string) {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						t.Fatal(err)
					}
					defer tx.Rollback()
					cs, err := e.ClaimBatch(ctx, tx, driver.BatchParams{Scope: scope, Keys: keys, TTL: time.Hour})
					if err != nil {
						t.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						t.Fatal(err)
					}
					for _, c := range cs {
						switch {
						case !c.Decided:
							won += "?"
						case c.Won:
							won += "W"
						default:
							won += "-"
						}
					}
					return won
				}
				for _, step := range []struct {
					keys []string
					want string
				}{
					{[]string{"a", "b", "c"}, "WWW"},
					{[]string{"a", "b", "c"}, "---"},
					{[]string{"a", "d"}, "-W"},
					{[]string{"e"}, "W"},
					{[]string{"e"}, "-"},
				} {
					if got := claim(step.keys...); got != step.want {
						t.Fatalf("claim of %v: %s, want %s (W won, - existed)", step.keys, got, step.want)
					}
				}
				if got := e.batch.first.Load(); got != shape {
					t.Fatalf("the server refused shape %d", shape)
				}
			})
		}
	}
}

func ping(dsn string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}
