//go:build !linux

package mmap

import "errors"

// Map is not supported here (errors.ErrUnsupported): callers read the
// file instead.
func Map(File, int64) ([]byte, error) { return nil, errors.ErrUnsupported }

// Unmap releases nothing here.
func Unmap([]byte) error { return nil }
