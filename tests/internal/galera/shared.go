package galera

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

// Shared returns the test process's cluster of three nodes, started on
// first use. When it cannot start, t fails under CI=true and is skipped
// elsewhere, naming why. Under -short (make test-short) t is skipped: a
// cluster of several servers is make test's (testdb.Long). Call
// StopShared from TestMain after m.Run.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	testdb.Long(t)
	shared.once.Do(func() {
		shared.c, shared.err = Start(3)
		if shared.err == nil {
			t.Logf("galera: 3 nodes ready in %v (ports %d, %d, %d)", shared.c.Started.Round(100_000_000),
				shared.c.Nodes[0].Port, shared.c.Nodes[1].Port, shared.c.Nodes[2].Port)
		}
	})
	if shared.err != nil {
		if testdb.InCI() {
			t.Fatalf("CI=true and the Galera cluster did not come up: %v", shared.err)
		}
		t.Skipf("no Galera cluster (needs root, galera-4 and rsync): %v", shared.err)
	}
	return shared.c
}

// StopShared stops the shared cluster, if one was started.
func StopShared() {
	if shared.c != nil {
		shared.c.Stop()
	}
}
