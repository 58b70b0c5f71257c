package conformance

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/dedupe"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/tests/internal/bizdb"
	"github.com/sqlonce/sqlonce/tests/internal/ports"
	"github.com/sqlonce/sqlonce/tests/internal/testdb"
	"github.com/sqlonce/sqlonce/tests/internal/testdrv"
)

// TestMariaDBRollbackOnTimeout covers a server setting the shared suite
// cannot: with innodb_rollback_on_timeout=ON a lock wait timeout rolls back
// the whole transaction, not the statement. A no-wait claim must then not
// pass for "in progress, carry on": the caller's earlier writes are gone
// and later ones would be autocommitted. It needs a throwaway MariaDB
// server of its own (the option cannot be set at run time), started from
// the mariadbd binary when there is one.
func TestMariaDBRollbackOnTimeout(t *testing.T) {
	dsn := throwawayMariaDB(t, "--innodb-rollback-on-timeout=ON")
	ctx := ctxT(t)
	db, err := sql.Open("mysql", dsn)
	must(t, err)
	t.Cleanup(func() { db.Close() })
	must(t, migrations.Up(ctx, db, migrations.MySQL))
	must(t, bizdb.Migrate(ctx, db, "mysql"))
	s, err := dedupe.New(testdrv.MySQL(t, db), dedupe.WithNoWait())
	must(t, err)
	req := dedupe.Request{Scope: "rot", Key: "k"}
	insert := func(tx *sql.Tx, ref string) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO ledger (ref, amount) VALUES (?, 1)", ref)
		return err
	}

	tx1, err := db.BeginTx(ctx, nil)
	must(t, err)
	defer tx1.Rollback()
	res, err := s.Do(ctx, tx1, req, func(context.Context) error { return insert(tx1, req.Key) })
	wantOutcome(t, "holder", res, err, sqlonce.FirstRun, nil)

	tx2, err := db.BeginTx(ctx, nil)
	must(t, err)
	defer tx2.Rollback()
	must(t, insert(tx2, "before"))
	_, err = s.Do(ctx, tx2, req, func(context.Context) error { return insert(tx2, req.Key) })
	if !errors.Is(err, sqlonce.ErrInProgress) {
		t.Fatalf("duplicate while held: %v, want ErrInProgress", err)
	}
	if !sqlonce.IsRetryable(err) {
		t.Fatalf("the server rolled the transaction back, but the error does not say retry: %v", err)
	}
	must(t, tx2.Rollback())
	must(t, tx1.Commit())

	var n int64
	must(t, db.QueryRowContext(ctx, "SELECT count(*) FROM ledger WHERE ref = 'before'").Scan(&n))
	if n != 0 {
		t.Fatalf("%d ledger rows from the rolled back transaction", n)
	}
}

// throwawayMariaDB starts a MariaDB server with the given options in a
// temporary directory, stopped when t ends, and returns a DSN for its test
// database. It skips t where no server can be started (no binaries, not
// root to drop privileges to the mysql user), except under CI=true.
func throwawayMariaDB(t *testing.T, opts ...string) string {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		if testdb.InCI() {
			t.Fatalf(format, args...)
		}
		t.Skipf(format, args...)
	}
	install, err1 := exec.LookPath("mariadb-install-db")
	server, err2 := exec.LookPath("mariadbd")
	if server == "" {
		server, err2 = "/usr/sbin/mariadbd", nil
		if _, err := os.Stat(server); err != nil {
			err2 = err
		}
	}
	if err := errors.Join(err1, err2); err != nil {
		skip("no MariaDB binaries to start a throwaway server: %v", err)
	}
	mysqlUser, err := user.Lookup("mysql")
	if err != nil || os.Geteuid() != 0 {
		skip("a throwaway MariaDB server needs root and a mysql user (%v)", err)
	}
	uid, _ := strconv.Atoi(mysqlUser.Uid)
	gid, _ := strconv.Atoi(mysqlUser.Gid)

	dir, err := os.MkdirTemp("", "sqlonce-mariadb-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	must(t, os.Chown(dir, uid, gid))
	data := filepath.Join(dir, "data")
	// Its own temp dir (see tests/internal/dbserver): a starting mariadbd
	// deletes the #sql* files in its temp dir, other servers' temp tables
	// in the shared /tmp.
	out, err := exec.Command(install, "--no-defaults", "--datadir="+data, "--user=mysql",
		"--auth-root-authentication-method=normal", "--skip-test-db", "--tmpdir="+dir).CombinedOutput()
	if err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}

	port, err := ports.One()
	must(t, err)
	args := append([]string{"--no-defaults", "--datadir=" + data, "--user=mysql",
		"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
		"--socket=" + filepath.Join(dir, "s.sock"), "--skip-log-bin", "--tmpdir=" + dir}, opts...)
	logf, err := os.Create(filepath.Join(dir, "server.log"))
	must(t, err)
	cmd := exec.Command(server, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
	})

	dsn := fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port)
	admin, err := sql.Open("mysql", dsn)
	must(t, err)
	defer admin.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := admin.Ping()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Fatalf("throwaway MariaDB did not answer: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, err = admin.Exec("CREATE DATABASE test")
	must(t, err)
	return dsn + "test?parseTime=true"
}
