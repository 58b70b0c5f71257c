// Package storeopt hands the packages built on dedupe.Store (inbox,
// httpidem, grpcidem) the Store options that are theirs alone, so that no
// user of dedupe can pick them. dedupe sets the functions in its init;
// they return a dedupe.Option as any, since this package cannot import
// dedupe.
package storeopt

import "github.com/sqlonce/sqlonce/internal/driver"

// Namespace returns the option that puts a Store's keys in ns, apart from
// the keys of dedupe's users.
var Namespace func(ns driver.Namespace) any

// StepsNamespace returns the option that puts the keys of a Store's
// operations of several steps (RunSteps, and its completer) in ns, in
// place of driver.NamespaceSteps.
var StepsNamespace func(ns driver.Namespace) any

// NoRecord returns the option of a Store that records no response (the
// inbox): its Run claims the key before fn, as Do does, and writes nothing
// after fn.
var NoRecord func() any
