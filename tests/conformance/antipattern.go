package conformance

import (
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/harness"
)

func runAntiPattern[TTx any](t *testing.T, f harness.Factory[TTx]) {
	t.Skip("cases not written yet")
}
