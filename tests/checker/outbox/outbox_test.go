package outbox

import (
	"context"
	"database/sql"
	"flag"
	"io"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx", for the checks' reads

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/outbox"
	"github.com/sqlonce/sqlonce/outbox/natsjs"
	"github.com/sqlonce/sqlonce/tests/internal/faultproxy"
	"github.com/sqlonce/sqlonce/tests/internal/galera"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/pgbouncer"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

var messagesFlag = flag.Int("outbox.messages", 0, "business transactions per configuration (default 300; 100 under -short)")

func TestMain(m *testing.M) {
	flag.Parse()
	if IsRelayChild() {
		os.Exit(m.Run())
	}
	// Connections cut at COMMIT are the point; the driver's log of each
	// one is noise.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	code := m.Run()
	galera.StopShared()
	pgbouncer.Stop()
	os.Exit(code)
}

// TestRelayChild is a relay process of a run (RelayMain): the test binary
// started again by the run with the environment that names its database
// and broker. Run on its own, it does nothing.
func TestRelayChild(t *testing.T) {
	if !IsRelayChild() {
		t.Skip("a relay process of the outbox checker's runs")
	}
	if err := RelayMain(); err != nil {
		t.Fatal(err)
	}
}

// poolSize is each pool's bound: the producers', the consumer's.
const poolSize = 8

func TestPostgres(t *testing.T) {
	t.Parallel()
	db := harness.Postgres(t, poolSize)
	via, p := throughProxy(t, db, db.DSN())
	check(t, natsOrSkip(t), Config[pgx.Tx]{
		DB: db, Producers: []harness.DB[pgx.Tx]{via}, Proxies: []*faultproxy.Proxy{p},
		Reader: reader(t, "pgx", db.DSN()),
		Relay:  RelayTarget{Dialect: "postgres", DSNs: []string{db.DSN()}},
	})
}

// TestPostgresRabbitMQ is TestPostgres with RabbitMQ as the broker: the
// relays publish with publisher confirms (outbox/rabbitmq) to a durable
// exchange, the consumer reads a durable queue with a prefetch of one, and
// the node is killed with SIGKILL and started again mid-run.
func TestPostgresRabbitMQ(t *testing.T) {
	testdb.Long(t)
	t.Parallel()
	db := harness.Postgres(t, poolSize)
	via, p := throughProxy(t, db, db.DSN())
	b, err := newRabbitMQ(t)
	if err != nil {
		t.Fatalf("RabbitMQ: %v", err)
	}
	check(t, b, Config[pgx.Tx]{
		DB: db, Producers: []harness.DB[pgx.Tx]{via}, Proxies: []*faultproxy.Proxy{p},
		Reader: reader(t, "pgx", db.DSN()),
		Relay:  RelayTarget{Dialect: "postgres", DSNs: []string{db.DSN()}},
	})
}

func TestMySQL(t *testing.T) {
	t.Parallel()
	db := harness.MySQL(t, poolSize)
	via, p := throughProxy(t, db, db.DSN())
	check(t, natsOrSkip(t), Config[*sql.Tx]{
		DB: db, Producers: []harness.DB[*sql.Tx]{via}, Proxies: []*faultproxy.Proxy{p},
		Reader: reader(t, "mysql", db.DSN()),
		Relay:  RelayTarget{Dialect: "mysql", DSNs: []string{db.DSN()}},
	})
}

// TestSQLite runs the relays as processes of their own on the database
// file the producers and the consumer write: SQLite has no connection to
// cut, so no COMMIT is cut.
func TestSQLite(t *testing.T) {
	t.Parallel()
	db := harness.SQLite(t, poolSize)
	check(t, natsOrSkip(t), Config[*sql.Tx]{
		DB:     db,
		Reader: reader(t, testdb.Modernc.DriverName, db.DSN()),
		Relay:  RelayTarget{Dialect: "sqlite", DSNs: []string{db.DSN()}, SQLDriver: testdb.Modernc.DriverName},
	})
}

// TestPgBouncer runs producers, relays and consumer through a PgBouncer
// in transaction pooling mode (pgx in exec mode), the producers' COMMITs
// cut by a proxy between them and the bouncer.
func TestPgBouncer(t *testing.T) {
	testdb.Long(t)
	t.Parallel()
	db := harness.PgBouncerPgx("exec")(t, poolSize)
	via, p := throughProxy(t, db, db.DSN())
	check(t, natsOrSkip(t), Config[pgx.Tx]{
		DB: db, Producers: []harness.DB[pgx.Tx]{via}, Proxies: []*faultproxy.Proxy{p},
		Reader: reader(t, "pgx", db.DSN()),
		Relay:  RelayTarget{Dialect: "postgres", DSNs: []string{db.DSN()}},
	})
}

// TestGalera runs on a three-node MariaDB Galera cluster: producer i
// writes through node i%3, each node behind a proxy that cuts COMMITs,
// relay i reads and marks through node i%3, the consumer applies through
// node 1. Sessions read with wsrep_sync_wait=1 (galera.Params).
func TestGalera(t *testing.T) {
	t.Parallel()
	c := galera.Shared(t)
	nodes := harness.MySQLNodes(t, poolSize, c.DSNs("", galera.Params...)...)
	cfg := Config[*sql.Tx]{DB: nodes[0], Reader: reader(t, "mysql", nodes[0].DSN())}
	for _, n := range nodes {
		via, p := throughProxy(t, n, n.DSN())
		cfg.Producers = append(cfg.Producers, via)
		cfg.Proxies = append(cfg.Proxies, p)
		cfg.Relay.DSNs = append(cfg.Relay.DSNs, n.DSN())
	}
	cfg.Relay.Dialect = "mysql"
	check(t, natsOrSkip(t), cfg)
}

// TestDualWriteIsCaught shows that the checks can fail: producers that
// publish each message to the broker inside their transaction, before
// COMMIT, instead of enqueueing it (the dual write the outbox replaces),
// are caught delivering and applying the messages of transactions that
// rolled back, and the outbox holds none of the committed ones.
func TestDualWriteIsCaught(t *testing.T) {
	t.Parallel()
	db := harness.SQLite(t, poolSize)
	b := natsOrSkip(t)
	pub, err := natsjs.New(b.js, natsjs.WithSubjectPrefix(subjectPrefix))
	if err != nil {
		t.Fatal(err)
	}
	rep := Run(t, b, Config[*sql.Tx]{
		DB:     db,
		Reader: reader(t, testdb.Modernc.DriverName, db.DSN()),
		Relay:  RelayTarget{Dialect: "sqlite", DSNs: []string{db.DSN()}, SQLDriver: testdb.Modernc.DriverName},
		Enqueue: func(ctx context.Context, _ *sql.Tx, m outbox.Message) (sqlonce.Result, error) {
			return sqlonce.Result{Outcome: sqlonce.FirstRun}, pub.Publish(ctx, m)
		},
		Messages: 60, Duration: time.Second, Relays: 1, RelayKills: -1, BrokerRestarts: -1, Drain: 10 * time.Second,
	})
	rep.Log(t.Logf, 5)
	var delivered, notInOutbox int
	for _, v := range rep.Violations {
		switch {
		case strings.Contains(v, "of a transaction that rolled back was delivered"):
			delivered++
		case strings.Contains(v, "a committed message: sqlonce: row not found"):
			notInOutbox++
		}
	}
	if delivered == 0 || delivered != rep.Counts[cRolledBack] {
		t.Errorf("%d rolled-back messages found delivered, want all %d", delivered, rep.Counts[cRolledBack])
	}
	if notInOutbox == 0 || notInOutbox != rep.Counts[cCommitted] {
		t.Errorf("%d committed messages found missing from the outbox, want all %d", notInOutbox, rep.Counts[cCommitted])
	}
}

// TestWithoutInboxIsCaught shows that the exactly-once check can fail: a
// consumer that applies every delivery without the inbox is caught
// applying twice the messages it got again after a crash between its
// commit and its ack.
func TestWithoutInboxIsCaught(t *testing.T) {
	t.Parallel()
	db := harness.SQLite(t, poolSize)
	rep := Run(t, natsOrSkip(t), Config[*sql.Tx]{
		DB:       db,
		Reader:   reader(t, testdb.Modernc.DriverName, db.DSN()),
		Relay:    RelayTarget{Dialect: "sqlite", DSNs: []string{db.DSN()}, SQLDriver: testdb.Modernc.DriverName},
		NoInbox:  true,
		Messages: 80, Duration: time.Second, Relays: 1, RelayKills: -1, BrokerRestarts: -1, Drain: 20 * time.Second,
	})
	rep.Log(t.Logf, 5)
	doubled := 0
	for _, v := range rep.Violations {
		if strings.HasPrefix(v, "doubled: ") {
			doubled++
		}
	}
	if crashes := rep.Counts[cAcksLost]; crashes == 0 || doubled < crashes {
		t.Errorf("%d messages found applied twice, want one at least for each of the consumer's %d crashes", doubled, crashes)
	}
}

// natsOrSkip starts the run's broker: a nats-server of its own
// (tests/internal/brokers skips t without one, or fails it under CI=true).
func natsOrSkip(t *testing.T) *natsBroker {
	t.Helper()
	b, err := newNATS(t)
	if err != nil {
		t.Fatalf("NATS JetStream: %v", err)
	}
	t.Cleanup(b.Close)
	return b
}

// check runs the workload on cfg with the broker b and fails t on any
// violation, or when a fault meant to fire did not.
func check[TTx any](t *testing.T, b broker, cfg Config[TTx]) {
	t.Helper()
	cfg.Messages = *messagesFlag
	if testing.Short() {
		if cfg.Messages == 0 {
			cfg.Messages = 100
		}
		cfg.Duration, cfg.RelayKills, cfg.Cuts = 2*time.Second, 2, 8
	}
	rep := Run(t, b, cfg)
	rep.Log(t.Logf, 50)
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations of the outbox's guarantees", len(rep.Violations))
	}
	want := cfg.RelayKills
	if want == 0 {
		want = 4
	}
	if n := rep.Counts[cRelayKills]; n < want {
		t.Errorf("%d relay kills, want %d", n, want)
	}
	if rep.Counts[cBrokerRestarts] < 1 {
		t.Errorf("the broker was not restarted")
	}
	if len(cfg.Proxies) > 0 {
		if rep.Counts[cCutReply] == 0 || rep.Counts[cCutCommit] == 0 {
			t.Errorf("COMMITs cut: %d with the reply lost, %d lost: want some of each", rep.Counts[cCutReply], rep.Counts[cCutCommit])
		}
		if rep.Counts[cUnknownCommit] == 0 {
			t.Errorf("no COMMIT whose reply was lost was read back as committed: the cuts proved nothing")
		}
	}
	if n := rep.Counts[cAcksLost]; n == 0 || rep.Counts[cDupsDropped] < n {
		t.Errorf("%d consumer crashes between commit and ack, %d duplicates dropped by the inbox: want some, each redelivered and dropped", n, rep.Counts[cDupsDropped])
	}
	if rep.Counts[cRolledBack] == 0 || rep.Counts[cCommitted] == 0 {
		t.Errorf("%d committed, %d rolled back on purpose: want both", rep.Counts[cCommitted], rep.Counts[cRolledBack])
	}
}

// reader opens a database/sql handle for the checks' reads, closed when t
// ends.
func reader(t *testing.T, driverName, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(2)
	t.Cleanup(func() { db.Close() })
	return db
}

// throughProxy returns db seen through a fault proxy of its own in front
// of the server (or bouncer) dsn names.
func throughProxy[TTx any](t *testing.T, db harness.DB[TTx], dsn string) (harness.DB[TTx], *faultproxy.Proxy) {
	t.Helper()
	var (
		d      faultproxy.Dialect
		target string
	)
	switch db.Dialect() {
	case "postgres":
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		d, target = faultproxy.Postgres, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	case "mysql":
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		d, target = faultproxy.MySQL, cfg.Addr
	default:
		t.Fatalf("no proxy for %s", db.Dialect())
	}
	p := faultproxy.Start(t, d, target, 600*time.Millisecond)
	via, err := harness.Reopen(t, db, poolSize, harness.Settings{Addr: p.Addr()})
	if err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	return via, p
}
