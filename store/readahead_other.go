//go:build !linux

package store

// adviseWillNeed is a no-op outside Linux (see readahead_linux.go).
func adviseWillNeed(any, int64, int64) {}
