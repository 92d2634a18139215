// Package localfs is a tier.Bucket in a local directory: the embedded
// default, and the provider tests use when they need real files.
//
// Each key is a file at DIR/<key> ('/' separates directories). A Put writes
// DIR/.tmp/<random>, fsyncs it, renames it over the key's path and fsyncs
// the directory, so an object is visible only when complete and survives a
// crash once Put returns. The first key segment ".tmp" is reserved.
//
// The commit step of every write (a PutIf's check and rename, a Put's
// rename, a Delete) runs under an exclusive flock on DIR/.tmp/lock, taken
// for each commit, plus an in-process lock per path; so PutIf is atomic
// among all Buckets and all processes on the same directory (two brokers
// on one file:// bucket: the fencing case). The lock is advisory and local:
// it holds for processes on one host (and on NFS where flock is emulated
// with byte-range locks). On a vfs.FS without file descriptors (vfs.Mem)
// only the in-process lock applies.
//
// A temp file is flocked by its Put until the rename, so New, which removes
// crash leftovers from DIR/.tmp, leaves the uploads of another process on
// the directory alone.
//
// A Put whose body is a tier.FrozenFile (the uploader's finished spool
// file, on the same filesystem, with no other name yet) links that file
// in as its temp file instead of copying it: the object and the caller's
// file are one inode until the caller removes its name. The link must be
// the body's own open file (checked after linking, without following
// symlinks), it gets createTemp's mode (0644 less the umask), a new
// modification time, and a full fsync before the rename; anything else
// is copied.
//
// ETags are derived from the file's size, modification time and inode
// (which a rename preserves); they change on every write.
package localfs
