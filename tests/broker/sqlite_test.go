package broker_test

import (
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

func TestSQLite(t *testing.T) { runInbox(t, harness.SQLite) }
