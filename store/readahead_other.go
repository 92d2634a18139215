//go:build !linux

package store

import "github.com/stratamq/stratamq/infra/vfs"

// adviseWillNeed is a no-op outside Linux (see readahead_linux.go).
func adviseWillNeed(vfs.File, int64, int64) {}
