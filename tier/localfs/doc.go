// Package localfs is a tier.Bucket in a local directory: the embedded
// default, and the provider tests use when they need real files.
//
// Each key is a file at DIR/<key> ('/' separates directories). A Put writes
// DIR/.tmp/<random>, fsyncs it, renames it over the key's path and fsyncs
// the directory, so an object is visible only when complete and survives a
// crash once Put returns. The first key segment ".tmp" is reserved.
//
// Conditional writes (PutIf) and plain renames of the same key are
// serialized by an in-process lock, so PutIf is atomic among all Buckets on
// the same directory in one process. Two processes must not share a
// directory (the broker holds a lock on its data dir).
//
// ETags are derived from the file's size, modification time and inode
// (which a rename preserves); they change on every write.
package localfs
