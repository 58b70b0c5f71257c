package migrate_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// fleetCase is a fresh place for a fleet's migrations: handles open with
// open(dsn), Up with opts.
type fleetCase struct {
	name    string
	dialect migrations.Dialect
	// dsn is where each instance connects; schema, when set, is given
	// to Up as WithSchema and does not exist yet.
	dsn, schema string
	// verify opens a handle on which the migrated tables are found
	// unqualified.
	verifyDSN string
}

func (c fleetCase) driverName() string {
	switch c.dialect {
	case migrations.MySQL:
		return "mysql"
	case migrations.SQLite:
		return "sqlite"
	}
	return "pgx"
}

func (c fleetCase) open(dsn string) (*sql.DB, error) {
	if c.dialect == migrations.SQLite {
		return modernc.Open(dsn)
	}
	return sql.Open(c.driverName(), dsn)
}

func (c fleetCase) opts() []migrations.Option {
	if c.schema == "" {
		return nil
	}
	return []migrations.Option{migrations.WithSchema(c.schema)}
}

// fleetCases are fresh places on each database: PostgreSQL with and
// without WithSchema (the schema not created yet), MariaDB with and
// without a database option (the database not created yet), and a SQLite
// file.
func fleetCases(t *testing.T) []fleetCase {
	t.Helper()
	pgSchema, pgDSN := testdb.EmptyPostgres(t)
	own := ownPostgresSchema(t)
	ownDSN := strings.Replace(pgDSN, "search_path="+pgSchema, "search_path="+own, 1)

	_, myDSN := testdb.EmptyMySQL(t)
	myOwn, myOwnDSN := testdb.EmptyMySQL(t)
	admin := sqlDB(t, "mysql", myDSN)
	if _, err := admin.Exec("DROP DATABASE " + myOwn); err != nil { // Up creates it
		t.Fatal(err)
	}
	lite := testdb.EmptySQLite(t)
	return []fleetCase{
		{name: "postgres", dialect: migrations.Postgres, dsn: pgDSN, verifyDSN: pgDSN},
		{name: "postgres-schema", dialect: migrations.Postgres, dsn: pgDSN, schema: own, verifyDSN: ownDSN},
		{name: "mysql", dialect: migrations.MySQL, dsn: myDSN, verifyDSN: myDSN},
		{name: "mysql-database", dialect: migrations.MySQL, dsn: myDSN, schema: myOwn, verifyDSN: myOwnDSN},
		{name: "sqlite", dialect: migrations.SQLite, dsn: lite, verifyDSN: lite},
	}
}

// A fleet starting at once migrates once: instances, each with a handle of
// its own as separate processes have, all run Up at the same moment on a
// fresh schema (database, file). Every call succeeds, the version table
// holds each version once, and the tables work.
func TestFleetUp(t *testing.T) {
	const instances = 6
	for _, c := range fleetCases(t) {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			dbs := make([]*sql.DB, instances)
			for i := range dbs {
				db, err := c.open(c.dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				if err := db.PingContext(ctx); err != nil {
					t.Fatal(err)
				}
				dbs[i] = db
			}
			start := make(chan struct{})
			errs := make([]error, instances)
			var wg sync.WaitGroup
			for i, db := range dbs {
				wg.Go(func() {
					<-start
					errs[i] = migrations.Up(ctx, db, c.dialect, c.opts()...)
				})
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Errorf("instance %d: %v", i, err)
				}
			}
			wantMigratedOnce(t, c)
		})
	}
}

// The same with separate processes: each a child of this test binary
// (TestFleetUpChild) that runs Up at an agreed moment.
func TestFleetUpProcesses(t *testing.T) {
	const instances = 4
	for _, c := range fleetCases(t) {
		t.Run(c.name, func(t *testing.T) {
			at := time.Now().Add(2 * time.Second).UnixNano()
			cmds := make([]*exec.Cmd, instances)
			outs := make([]strings.Builder, instances)
			for i := range cmds {
				cmd := exec.Command(os.Args[0], "-test.run=^TestFleetUpChild$", "-test.count=1")
				cmd.Env = append(os.Environ(),
					"SQLONCE_FLEET_DIALECT="+string(c.dialect),
					"SQLONCE_FLEET_DSN="+c.dsn,
					"SQLONCE_FLEET_SCHEMA="+c.schema,
					"SQLONCE_FLEET_AT="+strconv.FormatInt(at, 10))
				cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[i] = cmd
			}
			for i, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Errorf("instance %d: %v\n%s", i, err, outs[i].String())
				}
			}
			wantMigratedOnce(t, c)
		})
	}
}

// TestFleetUpChild is one instance of TestFleetUpProcesses; it does nothing
// when run on its own.
func TestFleetUpChild(t *testing.T) {
	d := os.Getenv("SQLONCE_FLEET_DIALECT")
	if d == "" {
		t.Skip("an instance of TestFleetUpProcesses")
	}
	c := fleetCase{dialect: migrations.Dialect(d), dsn: os.Getenv("SQLONCE_FLEET_DSN"), schema: os.Getenv("SQLONCE_FLEET_SCHEMA")}
	at, err := strconv.ParseInt(os.Getenv("SQLONCE_FLEET_AT"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	db, err := c.open(c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.Unix(0, at)))
	if err := migrations.Up(ctx, db, c.dialect, c.opts()...); err != nil {
		t.Fatalf("Up: %v", err)
	}
}

// wantMigratedOnce checks that the version table of c holds each version
// 0..latest once, applied, and that a dedupe claim works on the tables.
func wantMigratedOnce(t *testing.T, c fleetCase) {
	t.Helper()
	db, err := c.open(c.verifyDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query("SELECT version_id, count(*) FROM " + migrations.TableName + " GROUP BY version_id ORDER BY version_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var v, n int64
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d×%d", v, n))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for v := range latest + 1 {
		want = append(want, fmt.Sprintf("%d×1", v))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("version table: %v (version×rows), want %v", got, want)
	}
	for _, table := range tables {
		if !tableExists(t, db, c.dialect, table) {
			t.Fatalf("%s missing", table)
		}
	}
	switch c.dialect {
	case migrations.MySQL:
		wantOnce(t, sqlWorks(t, db, testdrv.MySQL(t, db)))
	case migrations.SQLite:
		d, err := sqlitedriver.New(db)
		if err != nil {
			t.Fatal(err)
		}
		wantOnce(t, sqlWorks(t, db, d))
	default:
		wantOnce(t, sqlWorks(t, db, testdrv.PgSQL(t, db)))
	}
}
