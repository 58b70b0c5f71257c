package conformance

import (
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

func runUnique[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Skip("cases not written yet")
}
