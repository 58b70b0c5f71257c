package pgsqldriver_test

import (
	"testing"

	"github.com/sqlonce/sqlonce/internal/exampledb"
)

func TestMain(m *testing.M) { exampledb.Main(m, true, false) }
