// Package vfs is the filesystem seam used by the store, the offsets
// checkpoints and the local bucket, so that tests can crash a process in the
// middle of a write and inject I/O errors.
//
// It owns three implementations of FS:
//
//   - OS() — the real filesystem. File.Sync is fdatasync(2) on Linux; a
//     directory opened with OpenDir syncs with fsync(2). FreeSpace and
//     TotalSpace are statfs.
//   - NewMem() — an in-memory filesystem that remembers, for every file, the
//     contents as of its last Sync, and for every directory, the entries as
//     of its last Sync. Mem.CrashClone returns what a machine would find after
//     losing power at that instant: only synced data and synced directory
//     entries survive. Free space and the total size are settable, for
//     disk-full tests.
//   - errorfs.Wrap(fs, injector) — any FS with an error injected where the
//     injector says so (errorfs.OnIndex(i) fails the i-th operation).
//
// Durability rules every caller follows (and Mem enforces):
//
//   - File data is durable after File.Sync.
//   - A created, renamed or removed name is durable after its parent
//     directory is synced: d, _ := fs.OpenDir(parent); d.Sync(); d.Close().
//   - A new directory made by MkdirAll is itself a name in its parent
//     (MkdirAllDurable syncs the parent of each directory it creates).
//
// WriteFileAtomic replaces a small file crash-safely (unique temp name →
// fsync → rename → fsync of the directory, which it creates durably if
// needed); RemoveTemps clears the temp files a crash left behind.
//
// The package never knows about topics, messages or buckets; keep the
// interfaces small and add a method only when a caller needs it.
package vfs
