//go:build !race

package upload_test

const raceEnabled = false
