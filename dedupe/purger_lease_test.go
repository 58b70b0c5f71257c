package dedupe

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqlonce/sqlonce/internal/testclock"
	"github.com/sqlonce/sqlonce/migrations"
	"github.com/sqlonce/sqlonce/sqlitedriver"
	"github.com/sqlonce/sqlonce/sqlitedriver/modernc"
)

// A holder whose round starts a little late keeps PurgeEvery's lease: an
// instance whose tick comes just after an interval skips, and takes the
// lease over only once the holder has missed a whole round. (With a
// lease as long as one interval, the lease hopped from instance to
// instance whenever a round started a moment late.)
func TestPurgerLeaseSurvivesALateRound(t *testing.T) {
	ctx := context.Background()
	db, err := modernc.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		t.Fatal(err)
	}
	store := func() *Store[*sql.Tx] {
		drv, err := sqlitedriver.New(db)
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(drv)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := store(), store()
	const interval = time.Minute
	lease := purgerLeaseFor(interval)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) context.Context { return testclock.With(ctx, t0.Add(d)) }

	ta := a.purgeRound(at(0), lease, 100, 0)
	if ta == 0 {
		t.Fatal("the first instance did not get the free lease")
	}
	// b's tick comes a second after the interval, before a's round
	// (which starts late): a still holds the lease.
	if tb := b.purgeRound(at(interval+time.Second), lease, 100, 0); tb != 0 {
		t.Fatalf("an instance took the lease a second after one interval (token %d): the holder's late round loses it", tb)
	}
	if got := a.purgeRound(at(interval+2*time.Second), lease, 100, ta); got != ta {
		t.Fatalf("the holder's late round: token %d, want %d kept", got, ta)
	}
	// a stops: once its lease (extended by its last round) lapses, b
	// takes it over.
	if tb := b.purgeRound(at(2*interval), lease, 100, 0); tb != 0 {
		t.Fatalf("b took the lease while a's last extension still ran (token %d)", tb)
	}
	tb := b.purgeRound(at(3*interval+3*time.Second), lease, 100, 0)
	if tb == 0 || tb == ta {
		t.Fatalf("b did not take over the lapsed lease: token %d (a's %d)", tb, ta)
	}
	// a's next round finds its lease taken over.
	if got := a.purgeRound(at(3*interval+4*time.Second), lease, 100, ta); got != 0 {
		t.Fatalf("a kept a lease taken over: token %d", got)
	}
}
