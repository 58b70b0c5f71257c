//go:build !unix

package wire

import "time"

func sleepUntil(due time.Time) {
	if d := time.Until(due); d > 0 {
		time.Sleep(d)
	}
}
