package grpcidem_test

import (
	"testing"

	"github.com/sqlonce/sqlonce/internal/exampledb"
)

// The examples run against real databases (see internal/exampledb).
func TestMain(m *testing.M) { exampledb.Main(m, true, false) }
