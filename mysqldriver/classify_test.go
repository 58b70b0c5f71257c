package mysqldriver

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/go-sql-driver/mysql"

	sqdriver "github.com/sqlonce/sqlonce/internal/driver"
)

func myErr(number uint16, msg string) error {
	return &mysql.MySQLError{Number: number, Message: msg}
}

// TestClassify checks the classes of go-sql-driver/mysql's errors, alone
// and anywhere in a wrapped or joined tree, as driver.Classify reports
// them in a program that links this package.
func TestClassify(t *testing.T) {
	const (
		retry  = sqdriver.Retryable
		lock   = sqdriver.LockNotAvailable
		gone   = sqdriver.TxRolledBack
		unique = sqdriver.Unique
		lost   = sqdriver.ConnLost
	)
	dup := myErr(errDupEntry, "Duplicate entry 'a' for key 'orders_code_key'")
	deadlock := myErr(errDeadlock, "Deadlock found when trying to get lock; try restarting transaction")
	for _, tc := range []struct {
		name string
		err  error
		want sqdriver.Class
	}{
		{"nil", nil, 0},
		{"deadlock", deadlock, retry | gone},
		{"lock wait timeout", myErr(errLockWaitTimeout, "Lock wait timeout exceeded; try restarting transaction"), retry | lock | gone},
		{"nowait", myErr(errLockNowait, "Statement aborted because lock(s) could not be acquired immediately and NOWAIT is set."), retry | lock},
		// MariaDB with innodb_snapshot_isolation=ON (the default from 11.6)
		// refuses a write to a row changed after the snapshot.
		{"record changed", myErr(errCheckRead, "Record has changed since last read in table 'orders'; try restarting transaction"), retry},
		{"duplicate", dup, unique},
		{"gone away", myErr(2006, "MySQL server has gone away"), 0},
		{"read_only", myErr(errOptionPrevents, "The MariaDB server is running with the --read-only option so it cannot execute this statement"), sqdriver.ReadOnly},
		{"read-only mode", myErr(errReadOnlyMode, "Running in read-only mode"), sqdriver.ReadOnly},
		{"read-only transaction", myErr(errReadOnlyTx, "Cannot execute statement in a READ ONLY transaction"), sqdriver.ReadOnly},
		{"server shutdown", myErr(errServerShutdown, "Server shutdown in progress"), lost},
		{"connection killed", myErr(errConnectionKilled, "Connection was killed"), lost},
		{"savepoint does not exist", myErr(1305, "SAVEPOINT sqlonce_sp_1 does not exist"), 0},
		{"invalid connection", mysql.ErrInvalidConn, lost},
		{"bad conn", driver.ErrBadConn, lost},
		{"unexpected EOF", io.ErrUnexpectedEOF, lost},
		{"wrapped", fmt.Errorf("tx: %w", deadlock), retry | gone},
		// The measured shape: unique.Insert's duplicate joined to the
		// deadlock its savepoint rollback met, on a multi-primary cluster.
		{"duplicate joined to deadlock", errors.Join(dup, fmt.Errorf("rollback to savepoint: %w", deadlock)), unique | retry | gone},
		{"deadlock joined to rollback failure", errors.Join(deadlock, errors.New("rollback to savepoint: SAVEPOINT does not exist")), retry | gone},
		{"two %w", fmt.Errorf("%w, then %w", dup, deadlock), unique | retry | gone},
		{"context canceled", context.Canceled, 0},
		{"plain", errors.New("Deadlock found"), 0},
	} {
		if got := sqdriver.Classify(tc.err); got != tc.want {
			t.Errorf("%s: Classify(%v) = %b, want %b", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestDuplicateKeyName(t *testing.T) {
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
		if got := duplicateKeyName(tc.msg); got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.msg, got, tc.want)
		}
	}
}

func TestDuplicate(t *testing.T) {
	mariadb := myErr(errDupEntry, "Duplicate entry 'A-1' for key 'orders_code_key'")
	mysql8 := myErr(errDupEntry, "Duplicate entry 'A-1' for key 'orders.orders_code_key'")
	tricky := myErr(errDupEntry, "Duplicate entry 'a' for key 'orders_code_key' for key 'orders_ref_key'")
	dotted := myErr(errDupEntry, "Duplicate entry 'a' for key 'code.v2'")
	dotted8 := myErr(errDupEntry, "Duplicate entry 'a' for key 'orders.code.v2'")
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
		{"second of a join", errors.Join(myErr(errDupEntry, "Duplicate entry 'b' for key 'PRIMARY'"), mariadb), "orders_code_key", true},
		{"not 1062", myErr(errDeadlock, "Duplicate entry 'A-1' for key 'orders_code_key'"), "orders_code_key", false},
		{"not mysql", errors.New("Duplicate entry 'A-1' for key 'orders_code_key'"), "orders_code_key", false},
		{"nil", nil, "", false},
	} {
		if got := duplicate(tc.err, tc.key); got != tc.want {
			t.Errorf("%s: duplicate(%v, %q) = %v, want %v", tc.name, tc.err, tc.key, got, tc.want)
		}
	}
}
