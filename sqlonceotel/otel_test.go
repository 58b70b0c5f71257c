package sqlonceotel_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/httpidem"
	"github.com/sqlonce/sqlonce/internal/exampledb"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/mysqldriver"
	"github.com/sqlonce/sqlonce/pgxdriver"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
	"github.com/sqlonce/sqlonce/sqlonceotel"
)

// need skips t when a database server does not answer, except under
// CI=true, where that is a failure.
func need(t *testing.T, what string, ping func() error) {
	t.Helper()
	if err := ping(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s does not answer: %v", what, err)
		}
		t.Skipf("%s does not answer (%v); set SQLONCE_POSTGRES_DSN / SQLONCE_MYSQL_DSN", what, err)
	}
}

func pgDSN() string {
	if s := os.Getenv("SQLONCE_POSTGRES_DSN"); s != "" {
		return s
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func myDSN() string {
	if s := os.Getenv("SQLONCE_MYSQL_DSN"); s != "" {
		return s
	}
	return "root@tcp(127.0.0.1:3306)/test?parseTime=true"
}

func TestPostgres(t *testing.T) {
	need(t, "PostgreSQL", func() error {
		c, err := pgx.Connect(context.Background(), pgDSN())
		if err == nil {
			c.Close(context.Background())
		}
		return err
	})
	pool := exampledb.Postgres("sqlonceotel")
	defer pool.Close()
	countRows := func(ctx context.Context, q string) int64 {
		var n int64
		if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	work := func(ctx context.Context, tx pgx.Tx, ref string) error {
		_, err := tx.Exec(ctx, "INSERT INTO ledger (ref, amount) VALUES ($1, 1)", ref)
		return err
	}
	drv, err := pgxdriver.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	run(t, "postgresql", drv, countRows, work)
	runHTTP(t, "postgresql", drv, work)
}

func TestMariaDB(t *testing.T) {
	need(t, "MariaDB", func() error {
		db, err := sql.Open("mysql", myDSN())
		if err != nil {
			return err
		}
		defer db.Close()
		return db.Ping()
	})
	db := exampledb.MySQL("sqlonceotel")
	defer db.Close()
	drv, err := mysqldriver.New(db)
	if err != nil {
		t.Fatal(err)
	}
	runSQL(t, "mariadb", drv, db)
}

func TestSQLite(t *testing.T) {
	ctx := context.Background()
	db, err := modernc.Open(filepath.Join(t.TempDir(), "otel.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE ledger (id INTEGER PRIMARY KEY, ref TEXT NOT NULL, amount INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	d, err := sqlitedriver.New(db)
	if err != nil {
		t.Fatal(err)
	}
	runSQL(t, "sqlite", d, db)
}

func runSQL(t *testing.T, system string, d sqlonce.Driver[*sql.Tx], db *sql.DB) {
	countRows := func(ctx context.Context, q string) int64 {
		var n int64
		if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	work := func(ctx context.Context, tx *sql.Tx, ref string) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, 1)", ref)
		return err
	}
	run(t, system, d, countRows, work)
	runHTTP(t, system, d, work)
}

// run races Store.Run calls on a few keys through an Observer on the SDK's
// in-memory readers, then checks the metrics and spans against the rows
// the database holds: first runs = rows of sqlonce_keys = ledger rows,
// replays = calls - rows.
func run[TTx any](t *testing.T, system string, d sqlonce.Driver[TTx], count func(context.Context, string) int64, work func(context.Context, TTx, string) error) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	o, err := sqlonceotel.New(sqlonceotel.WithMeterProvider(mp), sqlonceotel.WithTracerProvider(tp), sqlonceotel.WithDBSystem(system))
	if err != nil {
		t.Fatal(err)
	}
	store, err := dedupe.New(sqlonce.Observe(d, o))
	if err != nil {
		t.Fatal(err)
	}

	const keys, perKey = 6, 5
	calls := keys * perKey
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := dedupe.Request{Scope: "otel", Key: fmt.Sprintf("key-%d", i%keys), Fingerprint: dedupe.Fingerprint([]byte("same"))}
			_, err := store.Run(ctx, req, func(ctx context.Context, tx TTx) ([]byte, error) {
				return []byte("receipt"), work(ctx, tx, req.Key)
			})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// One key reuse: the same key with another request.
	_, err = store.Run(ctx, dedupe.Request{Scope: "otel", Key: "key-0", Fingerprint: dedupe.Fingerprint([]byte("other"))},
		func(ctx context.Context, tx TTx) ([]byte, error) { return nil, nil })
	if !strings.Contains(sqlonce.ErrorType(err), "key_reuse") {
		t.Fatalf("key reuse: %v", err)
	}

	rows := count(ctx, "SELECT COUNT(*) FROM sqlonce_keys")
	ledger := count(ctx, "SELECT COUNT(*) FROM ledger")
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	ops := map[string]int64{}
	var durations, retries uint64
	var retrySum int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case sqlonceotel.MetricOperations:
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					if v, _ := dp.Attributes.Value("db.system.name"); v.AsString() != system {
						t.Errorf("db.system.name %q", v.AsString())
					}
					outcome, _ := dp.Attributes.Value(sqlonceotel.AttrStatus)
					ops[outcome.AsString()] += dp.Value
				}
			case sqlonceotel.MetricDuration:
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					durations += dp.Count
				}
			case sqlonceotel.MetricRetries:
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					retries++
					retrySum += dp.Value
				}
			}
		}
	}
	t.Logf("%s: %d calls + 1 key reuse; sqlonce_keys %d rows, ledger %d rows; %s %v; %d durations; %s %d",
		system, calls, rows, ledger, sqlonceotel.MetricOperations, ops, durations, sqlonceotel.MetricRetries, retrySum)
	if rows != keys || ledger != keys || ops["first_run"] != rows {
		t.Fatalf("first_run %d, sqlonce_keys rows %d, ledger rows %d, want %d", ops["first_run"], rows, ledger, keys)
	}
	if ops["replayed"] != int64(calls)-rows || ops["key_reuse"] != 1 {
		t.Fatalf("replayed %d (want calls-rows = %d), key_reuse %d (want 1)", ops["replayed"], int64(calls)-rows, ops["key_reuse"])
	}
	if durations != uint64(calls+1) {
		t.Fatalf("%d durations recorded, want %d", durations, calls+1)
	}

	ended := spans.Ended()
	if len(ended) != calls+1 {
		t.Fatalf("%d spans, want %d", len(ended), calls+1)
	}
	var attempts int64
	byOutcome := map[string]int{}
	for _, s := range ended {
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range s.Attributes() {
			attrs[kv.Key] = kv.Value
		}
		if s.Name() != "dedupe.Run" || attrs["db.operation.name"].AsString() != "dedupe.Run" ||
			attrs["db.system.name"].AsString() != system || attrs[sqlonceotel.AttrScope].AsString() != "otel" {
			t.Fatalf("span %s: %v", s.Name(), attrs)
		}
		if d := s.EndTime().Sub(s.StartTime()); d <= 0 || d > time.Minute {
			t.Fatalf("span %s lasts %v", s.Name(), d)
		}
		outcome := attrs[sqlonceotel.AttrStatus].AsString()
		byOutcome[outcome]++
		attempts += attrs[sqlonceotel.AttrAttempts].AsInt64() - 1
		if outcome == "key_reuse" && attrs["error.type"].AsString() != "key_reuse" {
			t.Fatalf("key reuse span: error.type %q", attrs["error.type"].AsString())
		}
		for _, kv := range s.Attributes() {
			if strings.Contains(kv.Value.Emit(), "key-") {
				t.Fatalf("span attribute %s holds a key: %s", kv.Key, kv.Value.Emit())
			}
		}
	}
	if int64(byOutcome["first_run"]) != rows || int64(byOutcome["replayed"]) != int64(calls)-rows {
		t.Fatalf("spans by outcome %v; database %d rows", byOutcome, rows)
	}
	if attempts != retrySum {
		t.Fatalf("spans count %d retries, %s %d", attempts, sqlonceotel.MetricRetries, retrySum)
	}
}

// runHTTP sends one request twice and a third with another body through
// an httpidem Middleware on an observed driver: three httpidem.Serve
// spans, with http.response.status_code 201, 201 and 422.
func runHTTP[TTx any](t *testing.T, system string, d sqlonce.Driver[TTx], work func(context.Context, TTx, string) error) {
	spans := tracetest.NewSpanRecorder()
	o, err := sqlonceotel.New(sqlonceotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))),
		sqlonceotel.WithMeterProvider(sdkmetric.NewMeterProvider()), sqlonceotel.WithDBSystem(system))
	if err != nil {
		t.Fatal(err)
	}
	m, err := httpidem.New(sqlonce.Observe(d, o), func(*http.Request) string { return "user-1" })
	if err != nil {
		t.Fatal(err)
	}
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := httpidem.TxFrom[TTx](r.Context())
		if err := work(r.Context(), tx, "http"); err != nil {
			httpidem.Fail(r.Context(), err)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	for _, body := range []string{"a", "a", "b"} {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", `"order-77"`)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	var got []string
	for _, s := range spans.Ended() {
		attrs := attribute.NewSet(s.Attributes()...)
		status, _ := attrs.Value("http.response.status_code")
		outcome, _ := attrs.Value(sqlonceotel.AttrStatus)
		got = append(got, fmt.Sprint(s.Name(), " ", outcome.AsString(), " ", status.AsInt64()))
	}
	if want := "[httpidem.Serve first_run 201 httpidem.Serve replayed 201 httpidem.Serve key_reuse 422]"; fmt.Sprint(got) != want {
		t.Fatalf("spans %v, want %s", got, want)
	}
}

// The core module's go.mod must never require OpenTelemetry: only the
// programs that import sqlonceotel pay for it.
func TestCoreModuleHasNoOTel(t *testing.T) {
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "go.opentelemetry.io") {
		t.Fatal("the core module's go.mod requires go.opentelemetry.io")
	}
	if !strings.Contains(string(b), "module github.com/sqlonce/sqlonce\n") {
		t.Fatalf("../go.mod is not the core module's")
	}
}
