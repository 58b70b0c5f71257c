package vitess

import (
	"sync"
	"testing"

	"github.com/sqlonce/sqlonce/tests/internal/testdb"
)

var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Shared returns the test process's cluster of two shards, started on
// first use. When it cannot start, t fails under CI=true and is skipped
// elsewhere, naming what to set. Call StopShared from TestMain after m.Run.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	shared.once.Do(func() {
		shared.c, shared.err = Start(2)
		if shared.err == nil {
			t.Logf("vitess: 2 shards ready in %v (vtgate on port %d)", shared.c.Started.Round(100_000_000), shared.c.Port)
		}
	})
	if shared.err != nil {
		if testdb.InCI() {
			t.Fatalf("CI=true and the Vitess cluster did not come up: %v", shared.err)
		}
		t.Skipf("no Vitess cluster (needs root and .ci/vitess-build's binaries, or SQLONCE_VITESS_ROOT): %v", shared.err)
	}
	return shared.c
}

// StopShared stops the shared cluster, if one was started.
func StopShared() {
	if shared.c != nil {
		shared.c.Stop()
	}
}
