package dedupe

import (
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/storeopt"
)

// The packages built on a Store (inbox, httpidem) keep their keys in a
// namespace of their own, and the inbox records no responses: the options
// that say so are handed to them through an internal package, so that no
// user of dedupe can pick them.
func init() {
	storeopt.Namespace = func(ns driver.Namespace) any {
		return Option(func(o *options) error {
			o.ns = ns
			return nil
		})
	}
	storeopt.StepsNamespace = func(ns driver.Namespace) any {
		return Option(func(o *options) error {
			o.stepsNS = ns
			return nil
		})
	}
	storeopt.NoRecord = func() any {
		return Option(func(o *options) error {
			o.noRecord = true
			return nil
		})
	}
}

// stepsKey names a row of the namespace of the Store's operations of
// several steps.
func (s *Store[TTx]) stepsKey(scope, key string) driver.Key {
	return driver.Key{Namespace: s.stepsNS, Scope: scope, Key: key}
}

// key names a row of the Store's namespace.
func (s *Store[TTx]) key(scope, key string) driver.Key {
	return driver.Key{Namespace: s.ns, Scope: scope, Key: key}
}
