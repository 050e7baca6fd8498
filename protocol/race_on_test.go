//go:build race

package protocol

// raceEnabled reports whether the tests run under the race detector (franz-go's
// race_on_test.go/race_off_test.go pair).
const raceEnabled = true
