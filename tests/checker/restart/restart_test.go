package restart

import (
	"context"
	"flag"
	"io"
	"log"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/tests/checker"
	"github.com/sqlonce/sqlonce/tests/internal/dbserver"
	"github.com/sqlonce/sqlonce/tests/internal/harness"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

var durationFlag = flag.Duration("checker.duration", 0, "run length of each workload (default 12s; or set "+checker.DurationEnv+")")

// throwaway is one server per test process, started on first use.
type throwaway struct {
	once sync.Once
	srv  *dbserver.Server
	err  error
}

var pgServer, myServer throwaway

func (tw *throwaway) get(t *testing.T, start func() (*dbserver.Server, error), env string) *dbserver.Server {
	t.Helper()
	tw.once.Do(func() {
		tw.srv, tw.err = start()
		if tw.err == nil {
			// Before the harness first resolves its server: it keeps the
			// first answer for the whole process.
			os.Setenv(env, tw.srv.DSN)
		}
	})
	if tw.err != nil {
		if testdb.InCI() {
			t.Fatalf("CI=true and no throwaway server: %v", tw.err)
		}
		t.Skipf("no throwaway server for the restart test: %v", tw.err)
	}
	return tw.srv
}

func TestMain(m *testing.M) {
	flag.Parse()
	// Connections die with the servers here; the driver's log of each one
	// is noise.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	code := m.Run()
	for _, tw := range []*throwaway{&pgServer, &myServer} {
		if tw.srv != nil {
			_ = tw.srv.Stop(syscall.SIGTERM)
			os.RemoveAll(tw.srv.Dir)
		}
	}
	os.Exit(code)
}

func TestRestartPostgres(t *testing.T) {
	srv := pgServer.get(t, func() (*dbserver.Server, error) {
		// The workload deadlocks on purpose, and every claim of the keys
		// involved queues behind each detection: the default 1s makes the
		// queues, not the restarts, the slow part.
		return dbserver.NewPostgres("deadlock_timeout=200ms")
	}, testdb.PostgresEnv)
	underRestarts(t, srv, harness.Postgres(t, 70), syscall.SIGQUIT)
}

func TestRestartMySQL(t *testing.T) {
	srv := myServer.get(t, func() (*dbserver.Server, error) { return dbserver.NewMariaDB() }, testdb.MySQLEnv)
	underRestarts(t, srv, harness.MySQL(t, 70), syscall.SIGKILL)
}

// underRestarts runs the checker's whole workload and, a third and two
// thirds into it, stops the server with sig, waits for it to exit, and
// starts it again on the same data dir. Workers keep going: their
// transactions die with the server, BEGIN fails while it is down, and
// they retry. The invariants are the ones of the normal run.
func underRestarts[TTx any](t *testing.T, srv *dbserver.Server, db harness.DB[TTx], sig syscall.Signal) {
	d := checker.Duration(t, *durationFlag, 12*time.Second)
	restarts := 0
	rep := checker.Run(t, db, checker.Config[TTx]{
		Ops:          checker.Ops(t, db.Dialect()),
		Duration:     d,
		ConnectRetry: 5 * time.Second,
		During: func(ctx context.Context, logf func(string, ...any)) {
			for i := 1; i <= 2; i++ {
				time.Sleep(d / 3)
				pid := srv.Pid()
				began := time.Now()
				if err := srv.Stop(sig); err != nil {
					t.Errorf("stop %s: %v", srv.Name, err)
					return
				}
				down := time.Since(began)
				if err := srv.Start(); err != nil {
					t.Errorf("restart %s: %v", srv.Name, err)
					return
				}
				restarts++
				logf("restart %d: %s pid %d stopped with %v in %v, pid %d answering %v later",
					i, srv.Name, pid, sig, down.Round(time.Millisecond), srv.Pid(), time.Since(began).Round(time.Millisecond))
			}
		},
	})
	rep.Log(t.Logf, 50)
	if restarts != 2 {
		t.Errorf("%d restarts, want 2", restarts)
	}
	if len(rep.Violations) > 0 {
		t.Errorf("%d violations of exactly-once across server restarts", len(rep.Violations))
	}
}
