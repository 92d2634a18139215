package failover

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/stratamq/stratamq/broker/durability"
	"github.com/stratamq/stratamq/offsets"
)

// CutFor is where a log last written under epoch must be cut to agree
// with every newer epoch: the lowest From of the entries above it (-1:
// no newer epoch wrote). Every master records its entry before it writes,
// so the entries are complete unless the oldest were trimmed: ok is false
// when they may have been and the history does not reach back to epoch.
// An HA master answers a slave's hello with it (ha.MasterOptions.Diverged).
func CutFor(h []durability.EpochStart, epoch int64) (cut int64, ok bool) {
	if len(h) >= durability.MaxEpochHistory && h[0].Epoch > epoch {
		return 0, false
	}
	cut = -1
	for _, e := range h {
		if e.Epoch > epoch && (cut < 0 || e.From < cut) {
			cut = e.From
		}
	}
	return cut, true
}

func hasEpoch(h []durability.EpochStart, epoch int64) bool {
	return slices.ContainsFunc(h, func(e durability.EpochStart) bool { return e.Epoch == epoch })
}

// rejoinCut runs before a slave's store opens: when the data dir last
// wrote or followed an older epoch than the bucket's, its log is cut where
// the newer epochs took over (see the package comment), or set aside
// whole when the history cannot say.
//
// masterCut, when not negative, is where the master itself said this log
// diverged (a hello refused with StatusDiverged): the master knows its own
// epoch's start even before its first checkpoint lands, so it is used
// when given.
func (r *Roles) rejoinCut(prev *offsets.WriterState, cur int64, history []durability.EpochStart, masterCut int64) error {
	dd := r.deps.DataDir
	if prev == nil || (prev.Epoch >= cur && masterCut < 0) || dd.Fresh() {
		return nil
	}
	localMin, localEnd, any, err := dd.LogRange()
	if err != nil || !any {
		return err
	}
	cut, ok := CutFor(history, prev.Epoch)
	if masterCut >= 0 {
		cut, ok = masterCut, true
	}
	switch {
	case !ok:
		return dd.SetAside(fmt.Sprintf("the data dir last wrote under epoch %d and the bucket's epoch history (%d entries) "+
			"does not reach back to it, so where its log diverges is unknown", prev.Epoch, len(history)))
	case cut < 0 || cut >= localEnd:
		return nil
	case cut <= localMin:
		// Nothing of this log agrees with the master's. Cut to its start,
		// it would keep the queue ranges its own restore (and, as a
		// promoted master, its resumes past the checkpoint's
		// reservations) set, which the master's records need not follow:
		// it restores afresh from the bucket instead, as a replica.
		return dd.SetAside(fmt.Sprintf("the log diverged from the master's at offset %d, at or below the local log's start %d", cut, localMin))
	}
	keep := filepath.Join(r.cfg.DataDir, "diverged", fmt.Sprintf("%020d-%020d.epoch%d", cut, localEnd, prev.Epoch))
	n, err := dd.CutLog(cut, keep)
	if err != nil {
		return fmt.Errorf("broker: cut the divergent end of the local log: %w", err)
	}
	r.deps.Logger.Warn("rejoining as a slave: the end of the local log was never part of the newer master's log; it is cut (and kept for inspection)",
		"from", cut, "to", localEnd, "bytes", n, "lastEpoch", prev.Epoch, "epoch", cur, "kept", keep)
	return nil
}
