package broker

// Run and its shutdown, Close, and the loops Run starts beside the
// features' own (the config flusher, the offset saver, housekeeping).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stratamq/stratamq/broker/durability"
)

// Run serves until ctx is cancelled, then shuts down gracefully within
// cfg.ShutdownTimeout. It owns every goroutine the broker starts.
func (b *Broker) Run(ctx context.Context) error {
	// The broker's goroutines run on a context detached from ctx: when ctx
	// ends they must keep working through the graceful shutdown (the
	// uploader drains the last segment), and are cancelled after it.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	if err := b.startHA(); err != nil {
		return errors.Join(err, b.Close())
	}
	var wg sync.WaitGroup
	serveErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		serveErr <- b.server.Serve(runCtx)
	}()
	loops := []func(context.Context){b.registrar, b.hold.run, b.housekeeping, b.saveOffsets,
		b.consumers.Run} // package consumers: client expiry
	if b.tier != nil && !b.tier.ReadOnly() {
		loops = append(loops, b.tier.Run)
	}
	if b.compactor != nil && b.cfg.Role != RoleSlave {
		loops = append(loops, b.runCompaction) // wire_compaction.go
	}
	if b.dur != nil {
		loops = append(loops, b.dur.Run)
	}
	loops = append(loops, b.walLoops()...) // the bucket WAL, if any (wire_wal.go)
	if b.cfg.Role == RoleSlave {
		loops = append(loops, b.slaveFollow) // package follow (wire_follow.go)
	} else {
		loops = append(loops, b.sched.Run) // package schedule: a master only
		loops = append(loops, b.trans.Run) // broker/txn: the check rounds
		loops = append(loops, b.pop.Run)   // package pop: expiry and dead-lettering
	}
	if b.cfg.Role == RoleSlave && b.cfg.HAFailover && b.scoped != nil {
		loops = append(loops, b.watchLease)
	}
	for _, f := range loops {
		wg.Add(1)
		go func(f func(context.Context)) {
			defer wg.Done()
			f(runCtx)
		}(f)
	}
	b.log.Info("broker ready", "listen", b.Addr().String(), "advertise", b.advertise,
		"cluster", b.cfg.Cluster, "brokerId", b.cfg.BrokerID, "flush", b.cfg.Flush, "namesrv", b.cfg.Namesrv)

	var err error
	var change *RoleChange
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	case change = <-b.fo.Changes():
		b.log.Warn("changing role", "to", change.Role, "reason", change.Reason)
	}
	shutdownCtx, sc := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.ShutdownTimeout)
	defer sc()
	stopStart := time.Now()
	b.log.Info("shutdown: stopping", "deadline", b.cfg.ShutdownTimeout)
	b.closing.Store(true)
	b.sched.Close() // no delivery during the drain (package schedule)
	b.trans.Close() // nor check rounds (its Run saves as runCtx ends)
	// Stop accepting and drain in-flight requests; held pulls are answered
	// by the hold service as it stops.
	b.hold.releaseAll()
	if e := b.server.Shutdown(shutdownCtx); e != nil && err == nil && !errors.Is(e, context.Canceled) {
		err = e
	}
	b.log.Info("shutdown: requests drained, listener closed", "took", time.Since(stopStart).Round(time.Millisecond))
	b.stopHA() // no send waits for a slave's ack any more
	var drainFailed *durability.OffsetRange
	fenced := b.dur != nil && b.dur.Fenced()            // another broker has the prefix: nothing may be written to it
	if b.tier != nil && !b.tier.ReadOnly() && !fenced { // a slave uploads nothing
		// Seal and upload the active segment, so a replacement broker on
		// a fresh disk has every acknowledged message.
		// The drain gets three quarters of the budget: the final
		// checkpoint and the lease release need the rest.
		drainCtx, dc := context.WithTimeout(shutdownCtx, b.cfg.ShutdownTimeout*3/4)
		if b.dur != nil {
			if r := b.tierPending(); r.To > r.From {
				if e := b.dur.MarkDraining(drainCtx, r); e != nil {
					b.log.Warn("could not record the drain in the bucket checkpoint", "err", e)
				}
			}
		}
		drainStart, pending := time.Now(), b.tierPending()
		e := b.tier.Drain(drainCtx)
		dc()
		if e == nil {
			b.log.Info("shutdown: active segment sealed, every segment uploaded", "bytes", pending.To-pending.From,
				"took", time.Since(drainStart).Round(time.Millisecond))
		}
		if e != nil {
			// Only a complete drain is clean: the rest stays on local disk
			// (a restart on it uploads it), the final checkpoint names the
			// range, and the broker exits with an error.
			drainFailed = b.tierPending()
			b.log.Error("shutdown upload incomplete: messages stay on the local disk only; restart on this data dir to upload them",
				"err", e, "from", drainFailed.From, "to", drainFailed.To)
			if err == nil {
				err = fmt.Errorf("broker: shutdown incomplete: commitlog offsets [%d, %d) not uploaded: %w", drainFailed.From, drainFailed.To, e)
			}
		}
	}
	if b.dur != nil && !fenced {
		// The last checkpoint, then hand the prefix over.
		if b.store != nil {
			if e := b.store.Flush(); e != nil {
				b.log.Warn("final flush failed", "err", e)
			}
		}
		if e := b.dur.Final(shutdownCtx, drainFailed); e != nil {
			b.log.Warn("final checkpoint or lease release failed", "err", e)
			if err == nil && drainFailed != nil {
				err = e
			}
		} else {
			b.log.Info("shutdown: final checkpoint written, bucket lease released", "clean", drainFailed == nil)
		}
	}
	cancel()
	wg.Wait()
	b.unregisterAll(shutdownCtx)
	if e := b.Close(); e != nil && err == nil {
		err = e
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		b.log.Error("shutdown: done with an error", "err", err, "took", time.Since(stopStart).Round(time.Millisecond))
	} else {
		b.log.Info("shutdown: done; unregistered from the name servers, store closed", "took", time.Since(stopStart).Round(time.Millisecond))
	}
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	if change != nil && err == nil {
		return change // Node starts the next generation
	}
	return err
}

// stopping reports whether Run began its shutdown or Close was called.
func (b *Broker) stopping() bool { return b.closing.Load() }

// Close flushes and closes the store and writes the config files. It is
// idempotent; Run calls it on the way out.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		b.closing.Store(true)
		if b.trans != nil {
			b.trans.Close()
		}
		_ = b.server.Close()
		var errs []error
		if b.store != nil {
			// The progress files count only fdatasynced writes
			// (durable_progress.go): sync first, so a clean stop saves
			// all of it. A failure is the store's to report (Close).
			if err := b.store.Flush(); err != nil {
				b.log.Warn("flush before saving the config files failed", "err", err)
			}
		}
		b.pop.Close()       // ends its revive loop if Run's context did not (package pop)
		b.consumers.Close() // ends its expiry loop (package consumers)
		errs = append(errs, b.saveConfig())
		if b.store != nil {
			errs = append(errs, b.store.Close())
		}
		if b.tier != nil {
			errs = append(errs, b.tier.Close())
		}
		if b.nsClient != nil {
			errs = append(errs, b.nsClient.Close())
		}
		errs = append(errs, b.dirLock.Close())
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// addStoredTopics is recovery's backstop: a topic whose messages the store
// holds but topics.json lacks (a crash between the two, or an older
// version that saved the table only every few seconds) is added back and
// saved, so its messages stay readable and routable.
func (b *Broker) addStoredTopics() error {
	added := b.topics.AddStored(b.store.QueueCounts())
	if len(added) == 0 {
		return nil
	}
	b.log.Warn("topics with stored messages were missing from the topic table; added back with the queues that hold records",
		"topics", added)
	return b.topics.Save()
}

func (b *Broker) saveConfig() error {
	return errors.Join(b.topics.Save(), b.groups.Save(), b.offsets.Save(),
		b.sched.Save(), b.pop.Save())
}

// saveOffsets writes consumerOffset.json within Config.OffsetFlush
// (100ms) of a commit, off the commit path (offsets.SaveLoop); Close saves
// the last ones.
func (b *Broker) saveOffsets(ctx context.Context) {
	var logged time.Time // a failing disk is reported every 10s, not every retry
	b.offsets.SaveLoop(ctx, b.cfg.OffsetFlush, func(err error) {
		if now := time.Now(); now.Sub(logged) >= 10*time.Second {
			logged = now
			b.log.Error("persist consumer offsets; retrying", "err", err)
		}
	})
}

// housekeeping persists config files (package consumers expires silent
// clients in its own loop).
func (b *Broker) housekeeping(ctx context.Context) {
	t := time.NewTicker(b.cfg.ConfigFlush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := b.saveConfig(); err != nil {
				b.log.Error("persist config", "err", err)
			}
		}
	}
}
