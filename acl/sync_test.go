package acl

import (
	"bytes"
	"sync"
)

var logMu sync.Mutex

type syncWriter struct{ w *bytes.Buffer }

func (s *syncWriter) Write(p []byte) (int, error) {
	logMu.Lock()
	defer logMu.Unlock()
	return s.w.Write(p)
}

func logsString(b *bytes.Buffer) string {
	logMu.Lock()
	defer logMu.Unlock()
	return b.String()
}
