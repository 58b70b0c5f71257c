//go:build race

package snippets

// raceEnabled: the test binary runs with the race detector, and so does
// the program it builds, with tests/run's flags, so that both share the
// build cache.
const raceEnabled = true
