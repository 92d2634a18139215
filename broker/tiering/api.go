package tiering

import (
	"context"
	"fmt"

	"github.com/stratamq/stratamq/store"
	"github.com/stratamq/stratamq/tier/coldread"
	"github.com/stratamq/stratamq/tier/upload"
)

// Uploader is the uploader Run runs: its manifest, stats, Notify and Flush.
func (t *Tiering) Uploader() *upload.Uploader { return t.uploader }

// Cold is the cold reader: the store reads dropped ranges through it.
func (t *Tiering) Cold() *coldread.Reader { return t.cold }

// ReadOnly reports whether this is a slave's view of its master's bucket.
func (t *Tiering) ReadOnly() bool { return t.readOnly }

// AtStart is the manifest read at start (nil if it was not readable).
func (t *Tiering) AtStart() *upload.Manifest { return t.atStart }

// ReloadManifest (read-only Tiering: a slave) reads the master's manifest
// again, tells the cold reader its commitlog objects and makes it the one
// the cold indexes go by.
func (t *Tiering) ReloadManifest(ctx context.Context) (*upload.Manifest, error) {
	m, _, err := upload.LoadManifest(ctx, t.bucket, upload.ManifestKey(""))
	if err != nil {
		return nil, fmt.Errorf("reload the master's manifest: %w", err)
	}
	t.coldMu.Lock()
	err = t.cold.SetObjects(coldread.CommitLogObjects(m))
	if err == nil {
		t.latest.Store(m)
	}
	t.coldMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("tell the cold reader the master's objects: %w", err)
	}
	return m, nil
}

// MarkCovered (read-only Tiering: a slave) counts local segments the
// master's manifest covers as uploaded, with their queue and key indexes,
// so EnforceLocalRetention may drop them.
func (t *Tiering) MarkCovered(covered []store.SegmentInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range covered {
		t.mu.uploaded[s.Base] = upload.Object{Kind: upload.KindCommitLog.String(), Base: s.Base, Length: s.Length}
		t.mu.uploadedIdx[s.Base] = true
		t.mu.uploadedKix[s.Base] = true // the master's key index objects cover it (ColdKeys)
	}
}

// ReadIndexDirectoryForTest is readIndexDirectory (tests).
func (t *Tiering) ReadIndexDirectoryForTest(ctx context.Context, base int64) (*store.SegmentIndex, error) {
	return t.readIndexDirectory(ctx, base)
}
