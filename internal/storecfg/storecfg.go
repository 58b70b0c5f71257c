// Package storecfg holds the configuration of a dedupe.Store, which
// dedupe.Option sets. It is internal so that the packages built on a Store
// (inbox, httpidem, grpcidem) can set the fields that are theirs alone
// (Namespace, StepsNamespace, NoRecord) with an Option of their own, while
// a user of dedupe can only use dedupe's With functions.
package storecfg

import (
	"time"

	"github.com/sqlonce/sqlonce/internal/driver"
)

// Options is what dedupe.New applies its options to, starting from
// dedupe's defaults.
type Options struct {
	// Namespace keeps the Store's keys apart from dedupe's users'
	// (driver.NamespaceDedupe, the zero value).
	Namespace driver.Namespace
	// StepsNamespace holds the keys of the Store's operations of several
	// steps (RunSteps and its resumer): driver.NamespaceSteps unless a
	// package built on the Store has its own.
	StepsNamespace driver.Namespace
	// NoRecord: the Store records no response (the inbox); its Run claims
	// the key before fn, as Do does, and writes nothing after fn.
	NoRecord bool

	// The fields dedupe's With functions set.
	TTL             time.Duration
	MaxResponseSize int
	LockWait        time.Duration
	AwaitResult     bool
	Favor           driver.Favor
	// Codec is a dedupe.Codec (the same method set).
	Codec interface {
		Marshal(v any) ([]byte, error)
		Unmarshal(data []byte, v any) error
	}
}
