// Package mmap maps files read-only for code that reads a whole file
// once (the uploader encoding a sealed segment, the store scanning one)
// and guards those reads: a file cut shorter under its mapping, or a
// page that cannot be read, becomes an error instead of a SIGBUS that
// kills the process. It owns no state; a mapping is the caller's until it
// calls Unmap.
package mmap
