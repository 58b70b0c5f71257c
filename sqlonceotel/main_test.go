package sqlonceotel_test

import (
	"testing"

	"github.com/sqlonce/sqlonce/internal/exampledb"
)

// The example runs against PostgreSQL (see internal/exampledb).
func TestMain(m *testing.M) { exampledb.Main(m, true, false) }
