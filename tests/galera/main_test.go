// Package galera holds the tests of sqlonce on a three-node MariaDB Galera
// cluster (tests/internal/galera) that are not the checker's: the harness
// itself, what the MySQL driver does where writes and reads land on
// different nodes, and the conformance suite with each transaction on the
// next node. docs/deployments.md cites them.
package galera

import (
	"io"
	"log"
	"os"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/sqlonce/sqlonce/tests/internal/galera"
)

func TestMain(m *testing.M) {
	// Connections die with the killed node; the driver's log of each one
	// is noise.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	code := m.Run()
	galera.StopShared()
	os.Exit(code)
}
