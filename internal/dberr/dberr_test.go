package dberr

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func pgErr(code, constraint string) error {
	return &pgconn.PgError{Severity: "ERROR", Code: code, ConstraintName: constraint, Message: "test"}
}

func myErr(number uint16, msg string) error {
	return &mysql.MySQLError{Number: number, Message: msg}
}

func TestMySQLDuplicateKeyName(t *testing.T) {
	for _, tc := range []struct {
		msg, want string
	}{
		// MariaDB and MySQL before 8.0.19: the bare key name.
		{"Duplicate entry 'A-1' for key 'orders_code_key'", "orders_code_key"},
		{"Duplicate entry '1' for key 'PRIMARY'", "PRIMARY"},
		// MySQL 8.0.19+: qualified by the table.
		{"Duplicate entry 'A-1' for key 'orders.orders_code_key'", "orders.orders_code_key"},
		{"Duplicate entry '1' for key 'orders.PRIMARY'", "orders.PRIMARY"},
		// The value is quoted without escaping: it may hold the marker.
		{"Duplicate entry 'x' for key 'orders_ref_key' for key 'orders_code_key'", "orders_code_key"},
		{"Duplicate entry 'it's for key 'x'' for key 'code_key'", "code_key"},
		{"Duplicate entry '' for key 'k'", "k"},
		// Not the server's format: no name rather than a wrong one.
		{"Duplicate entry 'x' for key 'orders_code_key", ""},
		{"Duplicate entry 'x'", ""},
		{"Duplicate entry 'x' for key '", ""},
		{" for key '", ""},
		{"", ""},
		{"Doppelter Eintrag 'x' für Schlüssel 'orders_code_key'", ""},
	} {
		if got := mysqlDuplicateKeyName(tc.msg); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.msg, got, tc.want)
		}
	}
}

func TestMySQLDuplicate(t *testing.T) {
	mariadb := myErr(mysqlDupEntry, "Duplicate entry 'A-1' for key 'orders_code_key'")
	mysql8 := myErr(mysqlDupEntry, "Duplicate entry 'A-1' for key 'orders.orders_code_key'")
	tricky := myErr(mysqlDupEntry, "Duplicate entry 'a' for key 'orders_code_key' for key 'orders_ref_key'")
	dotted := myErr(mysqlDupEntry, "Duplicate entry 'a' for key 'code.v2'")
	dotted8 := myErr(mysqlDupEntry, "Duplicate entry 'a' for key 'orders.code.v2'")
	for _, tc := range []struct {
		name string
		err  error
		key  string
		want bool
	}{
		{"mariadb", mariadb, "orders_code_key", true},
		{"mysql8 table.key", mysql8, "orders_code_key", true},
		{"any key", mariadb, "", true},
		{"other key", mariadb, "orders_ref_key", false},
		{"other key mysql8", mysql8, "orders_ref_key", false},
		{"prefix is not the key", mariadb, "orders_code", false},
		{"suffix is not the key", mariadb, "code_key", false},
		{"suffix is not the key mysql8", mysql8, "code_key", false},
		{"value holds the marker", tricky, "orders_ref_key", true},
		{"value holds the marker, other key", tricky, "orders_code_key", false},
		// MySQL index names are case-insensitive: a table cannot have two
		// that differ only by case, so the case of the caller's spelling
		// does not matter.
		{"case", mariadb, "ORDERS_CODE_KEY", true},
		{"case mysql8", mysql8, "Orders_Code_Key", true},
		// A quoted index name may contain a dot.
		{"dotted name", dotted, "code.v2", true},
		{"dotted name mysql8", dotted8, "code.v2", true},
		{"wrapped", fmt.Errorf("insert: %w", mariadb), "orders_code_key", true},
		{"joined", errors.Join(io.EOF, mariadb), "orders_code_key", true},
		{"not 1062", myErr(mysqlDeadlock, "Duplicate entry 'A-1' for key 'orders_code_key'"), "orders_code_key", false},
		{"not mysql", errors.New("Duplicate entry 'A-1' for key 'orders_code_key'"), "orders_code_key", false},
		{"pg", pgErr(pgerrcode.UniqueViolation, "orders_code_key"), "orders_code_key", false},
		{"nil", nil, "", false},
	} {
		if got := MySQLDuplicate(tc.err, tc.key); got != tc.want {
			t.Errorf("%s: MySQLDuplicate(%v, %q) = %v, want %v", tc.name, tc.err, tc.key, got, tc.want)
		}
	}
}

func TestPgUniqueViolation(t *testing.T) {
	dup := pgErr(pgerrcode.UniqueViolation, "orders_code_key")
	for _, tc := range []struct {
		name       string
		err        error
		constraint string
		want       bool
	}{
		{"named", dup, "orders_code_key", true},
		{"any", dup, "", true},
		{"other", dup, "orders_ref_key", false},
		// PostgreSQL names are case-sensitive when quoted.
		{"case", dup, "ORDERS_CODE_KEY", false},
		{"wrapped", fmt.Errorf("insert: %w", dup), "orders_code_key", true},
		{"exclusion", pgErr(pgerrcode.ExclusionViolation, "orders_code_key"), "orders_code_key", false},
		{"aborted tx", pgErr(pgerrcode.InFailedSQLTransaction, ""), "", false},
		{"mysql", myErr(mysqlDupEntry, "Duplicate entry 'a' for key 'orders_code_key'"), "orders_code_key", false},
		{"nil", nil, "", false},
	} {
		if got := PgUniqueViolation(tc.err, tc.constraint); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"pg serialization failure", pgErr(pgerrcode.SerializationFailure, ""), true},
		{"pg deadlock", pgErr(pgerrcode.DeadlockDetected, ""), true},
		{"pg lock not available", pgErr(pgerrcode.LockNotAvailable, ""), true},
		{"pg unique violation", pgErr(pgerrcode.UniqueViolation, "k"), false},
		{"pg aborted tx", pgErr(pgerrcode.InFailedSQLTransaction, ""), false},
		{"pg query canceled", pgErr(pgerrcode.QueryCanceled, ""), false},
		{"mysql deadlock", myErr(1213, "Deadlock found when trying to get lock; try restarting transaction"), true},
		{"mysql lock wait timeout", myErr(1205, "Lock wait timeout exceeded; try restarting transaction"), true},
		{"mysql nowait", myErr(3572, "Statement aborted because lock(s) could not be acquired immediately and NOWAIT is set."), true},
		// MariaDB with innodb_snapshot_isolation=ON (the default from 11.6)
		// refuses a write to a row changed after the snapshot.
		{"mariadb record changed", myErr(1020, "Record has changed since last read in table 'orders'; try restarting transaction"), true},
		{"mysql duplicate", myErr(mysqlDupEntry, "Duplicate entry 'a' for key 'k'"), false},
		{"mysql gone away", myErr(2006, "MySQL server has gone away"), false},
		{"wrapped", fmt.Errorf("tx: %w", pgErr(pgerrcode.SerializationFailure, "")), true},
		{"joined with rollback failure", errors.Join(myErr(1213, "Deadlock"), errors.New("rollback to savepoint: SAVEPOINT does not exist")), true},
		{"context canceled", context.Canceled, false},
		{"plain", errors.New("serialization failure"), false},
	} {
		if got := Retryable(tc.err); got != tc.want {
			t.Errorf("%s: Retryable(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestLockNotAvailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"pg 55P03", pgErr(pgerrcode.LockNotAvailable, ""), true},
		{"pg deadlock", pgErr(pgerrcode.DeadlockDetected, ""), false},
		{"mysql 1205", myErr(1205, "Lock wait timeout exceeded"), true},
		{"mysql 3572", myErr(3572, "NOWAIT"), true},
		{"mysql deadlock", myErr(1213, "Deadlock"), false},
		{"wrapped", fmt.Errorf("claim: %w", myErr(1205, "")), true},
		{"nil", nil, false},
	} {
		if got := LockNotAvailable(tc.err); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTxDone(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"database/sql", sql.ErrTxDone, true},
		{"pgx", pgx.ErrTxClosed, true},
		{"wrapped", fmt.Errorf("record response: %w", sql.ErrTxDone), true},
		{"commit turned rollback", pgx.ErrTxCommitRollback, false},
		{"context", context.Canceled, false},
		{"nil", nil, false},
	} {
		if got := TxDone(tc.err); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
