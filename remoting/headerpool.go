package remoting

import (
	"sync"
	"unsafe"
)

// decodedHeaders holds decoded request headers given back by
// recycleHeader: a connection's sends, served and answered within their
// read batch, reuse them instead of allocating one per request.
var decodedHeaders = sync.Pool{New: func() any { return new(decodedCommandHeader) }}

// decodedHeader returns a decodedCommandHeader whose command is zero but
// for pooledHdr. Its pairs, text and header copy hold stale bytes that
// decoding overwrites before anything reads them.
func decodedHeader() *decodedCommandHeader {
	dh := decodedHeaders.Get().(*decodedCommandHeader)
	dh.cmd = Command{pooledHdr: true}
	return dh
}

func putDecodedHeader(dh *decodedCommandHeader) {
	dh.cmd = Command{}
	decodedHeaders.Put(dh)
}

// recycleHeader gives c's memory back to decodedHeaders when c is the head
// of a pooled header and its handler marked it (ReadBatch.Recycle).
// Idempotent. The caller guarantees nothing refers to c or to its header
// strings any more.
func recycleHeader(c *Command) {
	if !c.pooledHdr || !c.recycle {
		return
	}
	// c is the first field of the decodedCommandHeader decodedHeader made
	// (decodedCommandHeader → decodedCommandText → decodedCommand → cmd).
	dh := (*decodedCommandHeader)(unsafe.Pointer(c))
	if poisonRecycled {
		for i := range dh.hdr {
			dh.hdr[i] = poisonByte
		}
		for i := range dh.text {
			dh.text[i] = poisonByte
		}
	}
	putDecodedHeader(dh)
}

// poisonByte fills a recycled header under the race detector
// (poisonRecycled).
const poisonByte = '\xa5'
