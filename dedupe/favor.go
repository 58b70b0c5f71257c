package dedupe

import (
	"fmt"

	"github.com/sqlonce/sqlonce"
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/storecfg"
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
// FavorRepeats reads the key before anything else, outside any
// transaction, so a repeat ends there. FavorFirstRuns reads nothing before
// fn: a repeat then runs fn too and rolls its work back before it answers
// AlreadyDone, which pays when repeats are rare. With WithNoWait or
// WithLockWait the Favor does not apply. An unknown value is
// sqlonce.ErrInvalidArgument. Round trips per driver and Favor:
// https://github.com/sqlonce/sqlonce/blob/main/docs/drivers.md#round-trips-of-storerun
func WithFavor(f Favor) Option {
	return func(o *storecfg.Options) error {
		switch f {
		case FavorDefault, FavorFirstRuns, FavorRepeats:
			o.Favor = driver.Favor(f)
			return nil
		}
		return fmt.Errorf("%w: unknown %v", sqlonce.ErrInvalidArgument, f)
	}
}
