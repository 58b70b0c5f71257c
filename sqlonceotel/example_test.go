package sqlonceotel_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/sqlonceotel"
)

// Count replays: three requests with one key make one first run and two
// replays. In production the MeterProvider exports to a collector; the
// ManualReader here reads the counter back.
func Example() {
	ctx := context.Background()
	_, drv, done := openDB(tables)
	defer done()

	reader := sdkmetric.NewManualReader()
	obs, err := sqlonceotel.New(
		sqlonceotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		sqlonceotel.WithDBSystem("sqlite"),
	)
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(sqlonce.Observe(drv, obs))
	if err != nil {
		panic(err)
	}
	for range 3 {
		_, err := store.Run(ctx, dedupe.Request{Scope: "payments", Key: "pay-1"},
			func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
				_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES ('pay-1', 10)")
				return []byte("ok"), err
			})
		if err != nil {
			panic(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != sqlonceotel.MetricOperations {
			continue
		}
		for _, outcome := range []string{"first_run", "replayed"} {
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, _ := dp.Attributes.Value(sqlonceotel.AttrStatus); v.AsString() == outcome {
					fmt.Println(outcome, dp.Value)
				}
			}
		}
	}
	// Output:
	// first_run 1
	// replayed 2
}

// tables are the business tables the examples write.
const tables = `
CREATE TABLE ledger (
    id     INTEGER PRIMARY KEY,
    ref    TEXT    NOT NULL,
    amount INTEGER NOT NULL
);`

// openDB does what a program does once at start-up: it opens a SQLite
// database (here a new file, removed by done), installs sqlonce's tables
// with migrations.Up, creates the business tables and builds the driver.
// On PostgreSQL or MySQL only the handle and the driver differ: see
// pgxdriver, pgsqldriver and mysqldriver.
func openDB(tables string) (db *sql.DB, drv *sqlitedriver.Driver, done func()) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "sqlonce-example-")
	if err != nil {
		panic(err)
	}
	db, err = modernc.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	done = func() { db.Close(); os.RemoveAll(dir) }
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, tables); err != nil {
		panic(err)
	}
	drv, err = sqlitedriver.New(db)
	if err != nil {
		panic(err)
	}
	return db, drv, done
}
