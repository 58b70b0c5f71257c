//go:build !race

package snippets

const raceEnabled = false
