package dedupe

import (
	"fmt"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
)

// Favor says which of Run's two answers, a first run or a repeat, a Store
// makes cheaper where its driver can trade one for the other. See
// WithFavor.
type Favor int8

const (
	// FavorDefault is each driver's own choice, the table in WithFavor's
	// doc.
	FavorDefault Favor = Favor(driver.FavorDefault)
	// FavorFirstRuns makes a first run as cheap as the driver can, at the
	// cost of repeats: for traffic whose repeats are rare.
	FavorFirstRuns Favor = Favor(driver.FavorFirstRuns)
	// FavorRepeats makes a repeat as cheap as the driver can, at the cost
	// of first runs: for traffic that repeats often (clients that poll
	// with the same key, aggressive redelivery).
	FavorRepeats Favor = Favor(driver.FavorRepeats)
)

func (f Favor) String() string {
	switch f {
	case FavorDefault:
		return "FavorDefault"
	case FavorFirstRuns:
		return "FavorFirstRuns"
	case FavorRepeats:
		return "FavorRepeats"
	}
	return fmt.Sprintf("Favor(%d)", int8(f))
}

// WithFavor sets which of Store.Run's answers the Store makes cheaper,
// where its driver can trade one for the other. It changes Run alone, and
// only its cost: every outcome and error is the same whatever the Favor.
// Round trips of one Run, a first run / a repeat (BEGIN and COMMIT
// counted; a first run that takes over an expired key or a lapsed lease
// costs what a first run does, plus one to three statements):
//
//	driver                                       FavorDefault  FavorFirstRuns  FavorRepeats
//	pgxdriver (on a *pgxpool.Pool or *pgx.Conn)  3 / 2         3 / 2           4 / 1
//	mysqldriver                                  5 / 1         4 / 5           5 / 1
//	pgsqldriver                                  5 / 1         4 / 5           5 / 1
//	sqlitedriver, another pgx Beginner  the same whatever the Favor (no round trips to save, or no Runner)
//
// FavorRepeats reads the key before anything else, outside any
// transaction: a repeat ends there. On PostgreSQL through pgx the default
// already sends that read together with BEGIN, so a first run takes the
// bare transaction's three round trips and a repeat two; FavorRepeats
// spends a round trip of its own on the read, which a first run pays too.
//
// FavorFirstRuns reads nothing before fn: Run begins the transaction,
// runs fn, and records the key with fn's response before COMMIT. A repeat
// finds the key only then, so it runs fn too and rolls fn's work back
// before it answers AlreadyDone with the recorded response: fn runs once
// more for every repeat (which Run's doc allows: only the run that commits
// leaves anything behind), and a repeat that arrives while the first run
// is still open waits for it at the record, holding what fn locked. It
// pays when repeats are rare: below about one Run in five, on the
// round-trip counts above. With WithNoWait or WithLockWait the Favor does
// not apply: Run claims the key before fn (see Run).
//
// An unknown value is sqlonce.ErrInvalidArgument.
func WithFavor(f Favor) Option {
	return func(o *options) error {
		switch f {
		case FavorDefault, FavorFirstRuns, FavorRepeats:
			o.favor = driver.Favor(f)
			return nil
		}
		return fmt.Errorf("%w: unknown %v", sqlonce.ErrInvalidArgument, f)
	}
}
