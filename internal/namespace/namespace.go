// Package namespace gives the packages built on dedupe.Store a namespace
// of their own in sqlonce_keys, apart from the keys of dedupe's users.
package namespace

import "github.com/sqlonce/sqlonce/internal/driver"

// Option returns the dedupe.Option (as any: this package cannot import
// dedupe, which sets Option in its init) that puts a Store's keys in ns.
// Packages that import dedupe may call it from their own code.
var Option func(ns driver.Namespace) any
