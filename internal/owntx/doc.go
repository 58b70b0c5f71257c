// Package owntx runs the transactions sqlonce starts itself, on a driver's
// own database handle.
package owntx
