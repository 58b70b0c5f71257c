package dedupe

import (
	"github.com/sqlonce/sqlonce/internal/driver"
	"github.com/sqlonce/sqlonce/internal/namespace"
)

// The packages built on a Store (inbox, httpidem) keep their keys in a
// namespace of their own: the option that sets it is handed to them
// through an internal package, so that no user of dedupe can pick it.
func init() {
	namespace.Option = func(ns driver.Namespace) any {
		return Option(func(o *options) error {
			o.ns = ns
			return nil
		})
	}
}

// key names a row of the Store's namespace.
func (s *Store[TTx]) key(scope, key string) driver.Key {
	return driver.Key{Namespace: s.ns, Scope: scope, Key: key}
}
