package sqlonceotel_test

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/sqlonceotel"
)

// Count replays: three requests with one key make one first run and two
// replays. In production the MeterProvider exports to a collector; the
// ManualReader here reads the counter back.
func Example() {
	ctx := context.Background()
	pool := postgres("sqlonceotel_example")
	defer pool.Close()

	reader := sdkmetric.NewManualReader()
	obs, err := sqlonceotel.New(
		sqlonceotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		sqlonceotel.WithDBSystem("postgresql"),
	)
	if err != nil {
		panic(err)
	}
	store, err := dedupe.New(sqlonce.Observe(pgxdriver.New(pool), obs))
	if err != nil {
		panic(err)
	}
	for range 3 {
		_, err := store.Run(ctx, dedupe.Request{Scope: "payments", Key: "pay-1"},
			func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
				_, err := tx.Exec(ctx, "INSERT INTO ledger (ref, amount) VALUES ('pay-1', 10)")
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
				if v, _ := dp.Attributes.Value(sqlonceotel.AttrOutcome); v.AsString() == outcome {
					fmt.Println(outcome, dp.Value)
				}
			}
		}
	}
	// Output:
	// first_run 1
	// replayed 2
}

// postgres does what a program does once at start-up: it connects to
// PostgreSQL (SQLONCE_POSTGRES_DSN, or the local default below), installs
// sqlonce's tables with migrations.Up and creates the business table.
// Each example works in a schema of its own, emptied on every run, so that
// its output is the same each time.
func postgres(name string) *pgxpool.Pool {
	ctx := context.Background()
	dsn := os.Getenv("SQLONCE_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		panic(err)
	}
	schema := "example_" + name
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	// sqlonce's tables: goose runs on database/sql.
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		panic(err)
	}
	// The business table the examples write.
	if _, err := pool.Exec(ctx, `
		CREATE TABLE ledger (
		    id     bigserial PRIMARY KEY,
		    ref    text   NOT NULL,
		    amount bigint NOT NULL
		)`); err != nil {
		panic(err)
	}
	return pool
}
