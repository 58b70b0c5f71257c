package conformance

import (
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

func runOptimistic[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Skip("cases not written yet")
}
