// Package bytesize parses and prints byte counts with binary and decimal
// suffixes ("64MiB", "4MB", "512k", "1073741824"), for configuration.
package bytesize
