// Package errorfs wraps a vfs.FS so that tests can make any operation fail.
//
// Every FS and File operation asks an Injector first; a non-nil error is
// returned instead of doing the operation (Close still closes the underlying
// file, so descriptors do not leak, and then returns the error). The usual
// pattern, after pebble's TestErrors, fails operation i for i = 0, 1, 2, …
// until the workload completes:
//
//	fs := errorfs.Wrap(vfs.NewMem(), errorfs.OnIndex(i))
//	... run the workload; every failure must match errors.Is(err, errorfs.ErrInjected)
package errorfs
