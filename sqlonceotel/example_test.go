package sqlonceotel_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/internal/exampledb"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/sqlonceotel"
)

// Count replays: three requests with one key make one first run and two
// replays. In production the MeterProvider exports to a collector; the
// ManualReader here reads the counter back.
func Example() {
	ctx := context.Background()
	pool := exampledb.Postgres("sqlonceotel_example")
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
