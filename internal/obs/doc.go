// Package obs is what the strategies call to report their operations to a
// sqlonce.Observer. Every method is a no-op on an Op without an Observer,
// and reads no clock then: a strategy without an Observer pays a nil
// check per call site.
package obs
