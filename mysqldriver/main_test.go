package mysqldriver_test

import (
	"testing"

	"github.com/sqlonce/sqlonce/internal/exampledb"
)

func TestMain(m *testing.M) { exampledb.Main(m, false, true) }
