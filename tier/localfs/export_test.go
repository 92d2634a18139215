package localfs

// SetAfterCheck installs a hook that runs inside a conditional write's
// commit step, after the condition held and before the rename.
func SetAfterCheck(b *Bucket, fn func(key string)) { b.afterCheck = fn }

// ObjectPath is the file that holds key's object.
func ObjectPath(b *Bucket, key string) (string, error) { return b.path(key) }
