// Package broker is the RocketMQ-compatible broker: it answers the remoting
// requests producers, consumers and admin tools send, on top of the local
// store (package store), and keeps the broker's live and durable state —
// topics, subscription groups, consumer offsets, connected producers and
// consumers, held long-poll pulls — and registers itself with the name
// servers.
//
// # Where a request goes
//
// remoting.Server reads a frame → Broker.ServeRemoting looks the code up in
// the handler table (handlers.go) → one file per request code,
// rcNNN_<name>.go, named by RocketMQ's code, so `ls broker/rc*` is the
// protocol surface. Handlers run on the remoting server's bounded pools
// (send, pull, admin, heartbeat); a full pool answers SYSTEM_BUSY. With
// STRATAMQ_ACL_FILE, ServeRemoting first has the acl package check the
// request's signature and permissions (acl.go) and answers NO_PERMISSION
// itself when they fail; the broker's own requests to name servers and to
// its master go through Broker.invoke, which signs them. With ACL 2.0 on
// (STRATAMQ_AUTHENTICATION_ENABLED, STRATAMQ_AUTHORIZATION_ENABLED) a
// request signed by a user is checked by package acl2 against the users
// and policies the AUTH_* codes keep (auth2.go: config/authMetadata.json
// and the checkpoint's authMetadata section), any other by the ACL file.
//
// # State and who owns it
//
//	TopicConfigManager         topics.json; TBW102 auto-create; at most STRATAMQ_MAX_TOPICS
//	                           topics (UPDATE_AND_CREATE_TOPIC, auto-create refused past it;
//	                           retry/DLQ topics are not refused here: the store, with a
//	                           backstop of twice that, refuses their first message instead)
//	                           a topic a request creates is saved before the request is
//	                           answered and visible to others only then (configtable.Table.AddSaved);
//	                           on open a master adds back topics the store holds but the file lacks
//	consumers.Groups           subscriptionGroup.json (a new group: saved as a new topic is);
//	                           package consumers (broker/consumers, its doc.go), wired in
//	                           wire_consumers.go; its table and topics.json's are a
//	                           configtable.Table (broker/configtable)
//	offsets.ConsumerOffsets    consumerOffset.json, written within Config.OffsetFlush (100ms)
//	                           of a commit by saveOffsets (offsets.SaveLoop), off the commit path
//	consumers.Registry         live consumer clients per group, their subscriptions (from
//	                           heartbeats), and live producer clients per group; its Run
//	                           expires silent clients (Config.ClientExpiry) and asks the broker
//	                           (wire_consumers.go, the Notifier) to send NOTIFY_CONSUMER_IDS_CHANGED
//	sql_filter.go              SQL92 subscriptions (issue 11 item 6): compiled once by package
//	                           filter (heartbeat: reused while the expression is unchanged;
//	                           a pull that carries one: Broker.sqlCache), served by the
//	                           store's record-level GetRequest.Match on each record's
//	                           properties; a bad expression, or STRATAMQ_SQL_FILTER=false,
//	                           is SUBSCRIPTION_PARSE_FAILED (23) naming why, on the heartbeat
//	                           and the group's pulls; CHECK_CLIENT_CONFIG (46) answers Java
//	                           clients' pre-start check. A held SQL92 pull wakes on any message
//	                           of its queue (dispatch knows tag codes only) and, if none it
//	                           scanned matches, is held again past them (sqlRepark)
//	pullHold                   long-polled pulls, woken by the store's dispatch; a pull's
//	                           commit offset is applied when it arrives, never when re-run
//	registrar                  REGISTER_BROKER to every name server every 30 s and on topic change
//	package tiering            tiering to the bucket: tiering.Tiering (broker/tiering/doc.go) uploads
//	(broker/tiering),          sealed segments with their queue and key indexes (sections of the
//	wire_tiering.go            segment's object), serves dropped ranges from the bucket (its cold
//	                           reader; the store's ColdIndex and ColdKeyIndex over the manifest),
//	                           local and bucket retention, age sealing, a slave's manifest reload
//	                           (ReloadManifest, MarkCovered). wire_tiering.go: its config, readManifest
//	                           (the lease holder claims the manifest first), and the adapters
//	                           tierHost (the lease: Owner; per-topic policy: Retention) and
//	                           tierStore (b.store, read when called: the store opens after it);
//	wire_compaction.go,        compacted topics (cleanup.policy=COMPACTION): package compaction (its
//	broker/compaction          doc.go) owns the generations in the bucket, the Reader every consumer
//	                           read of a compacted queue goes through below its point (getQueue,
//	                           minOffset, readRecord, queueEntry, offsetByTime, the key query's
//	                           merge) and the Compactor a master runs beside tiering; tiering's
//	                           retention counts a span a generation covers as no longer keeping
//	                           its segment
//	wire_retention.go,         per-topic retention: package retention (its doc.go)
//	broker/retention           owns the policy: a topic's retention.time attribute overrides
//	                           STRATAMQ_RETENTION; each tiering tick raises queue minima by each
//	                           topic's retention and the internal queues' checkpointed progress
//	                           (retention.Service.ExpireTopics: store.RaiseQueueMins)
//	                           and the Tiering deletes a segment only once its expiredSegments says
//	                           every queue with a record in it has its min past them (the one
//	                           deletion decision), from the front of the log or from its middle
//	                           (Uploader.Expire records the gap in the manifest; the cold index
//	                           skips it); STRATAMQ_TOPIC_RETENTION (880005) reports what each topic
//	                           holds back (Tiering.BucketHolds). Key indexes (the store's .kix files,
//	                           a section of the segment's object beside its queue index, deleted
//	                           with it by retention) are served back to QUERY_MESSAGE (rc012) as
//	                           ColdKeys through the cold reader's frame cache
//	msgtype.go                 a topic's message.type attribute (remoting.TopicMessageType): its
//	                           values checked on UPDATE_AND_CREATE_TOPIC (MIXED only with
//	                           STRATAMQ_ENABLE_MIXED_MESSAGE_TYPE); Route hands it to the gRPC
//	                           endpoint, which refuses sends of another type (proxy/msgtype.go)
//	trace.go                   message traces: STRATAMQ_TRACE_TOPIC_ENABLE creates the trace topic
//	                           (1 queue); its records are ordinary messages (package msgtrace decodes
//	                           them for admin and the console: console_trace.go)
//	fence.go                   Broker.fence: asked before every bucket write of the uploader
//	                           (objects, manifest, retention deletes); the lease epoch it
//	                           returns is stamped into the manifest
//	durability (durability.go) the bucket lease (fencing; epoch; monotonic self-fence; renewed
//	                           every TTL/5 on its own timer) and the checkpoints of offsets,
//	                           topics, groups and the commitlog: its durable end (hwm), the offset
//	                           reservation the store enforces (sized by the write rate; a send
//	                           that reaches it waits for the checkpoint it triggers, up to
//	                           STRATAMQ_CHECKPOINT_WAIT), and a drain's un-uploaded range
//	                           (drainFailed)
//	fence.go                   also the send gates: writeGate before a send is stored (lease
//	                           valid; queue listed by a durable checkpoint, else one is written
//	                           first) and ackGate right before its SEND_OK
//	wire_restore.go            the start-up judgement over the local data and the bucket:
//	                           package restore (its doc.go) decides it. checkLocalData: a
//	                           non-empty data dir is served only if it wrote the prefix last
//	                           (writer.json epoch >= the bucket's); otherwise it is set aside
//	                           when the bucket holds it all, else the start is refused naming
//	                           the range (STRATAMQ_ACCEPT_LOSS). A fresh data dir resumes from
//	                           the bucket's checkpoint and manifest past every reservation, and
//	                           refuses over a recorded drainFailed; this file wires the judge
//	                           (New's calls, and what wire_failover.go reads of the data dir)
//	<data dir>/lock            flock: one process per data dir
//	ha.go, wire_replication.go STRATAMQ_ROLE (issue 10): a master with STRATAMQ_HA_LISTEN (default
//	                           :10912 for sync_master) runs ha.Master (package replication's
//	                           Service owns it, its high watermark and its acknowledgement
//	                           waits; broker/replication/doc.go), woken by the store's
//	                           dispatch hook and stamping the lease epoch on transfers;
//	                           sync_master answers a stored send FLUSH_SLAVE_TIMEOUT (12) or
//	                           SLAVE_NOT_AVAILABLE (11), send header kept, unless a slave acked
//	                           it within STRATAMQ_HA_ACK_TIMEOUT, or, with STRATAMQ_HA_MIN_INSYNC=1,
//	                           no slave is in sync (ha/insync.go; counted in haStatus and
//	                           stratamq_ha_acked_alone_total) (awaitSlave: no goroutine waits;
//	                           the report reader that receives the covering ack answers the
//	                           batch with a non-blocking write, remoting.ReleaseWritesNoWait, and
//	                           the conn's reader goes on reading meanwhile); a slave runs ha.Slave
//	                           (the Service's too: StartSlave, Slave, Stop)
//	                           into its store from STRATAMQ_HA_MASTER, or the HA address the
//	                           name servers' REGISTER_BROKER answer names (Resolve); a master
//	                           registers its advertised host with its HA port as haServerAddr.
//	                           readBound: a sync_master's consumers read only what a slave
//	                           acked (pulls, their maxOffset, GET_MAX_OFFSET, the timestamp
//	                           search; held pulls wake on acks, pull_hold.go wakeVisible), all
//	                           of its log while no slave is in sync (with
//	                           STRATAMQ_HA_MIN_INSYNC=1: the in-sync set, ha.Master.InSync).
//	                           wire_replication.go: the Service's config and the thin methods
//	                           (readBound; wire_wal.go: readBoundOf, visibleOf, hiddenEndOf; holdHANotify, pushHA, slaveAck,
//	                           awaitSlave, slaveHeld) the handlers and the pull hold call
//	wire_follow.go             a serving slave: package follow (its doc.go) every
//	                           STRATAMQ_HA_SYNC_INTERVAL pushes the offsets committed to it
//	                           (UPDATE_CONSUMER_OFFSET, accepted on a slave) to the master, then
//	                           mirrors the master's topics (deleted ones with their data and
//	                           offsets), groups and offsets (GET_ALL_*, 21/201/43) from the
//	                           remoting address its HA hello reply (else the name server) names,
//	                           never overwriting an offset not pushed yet; with a bucket, reloads
//	                           the master's manifest into the cold reader, lets local retention
//	                           drop segments inside its indexed prefix, and moves the minima of
//	                           topics with their own retention (retention.Service.ExpireTopics).
//	                           This file wires it: its adapters over invoke and the HA stream
//	read_suggest.go            suggestWhichBrokerId of every pull answer: with
//	                           STRATAMQ_SLAVE_READ_ENABLE a master sends a lagging pull (read from
//	                           the bucket, or past STRATAMQ_SLAVE_READ_LAG behind) to a connected,
//	                           caught-up slave; a slave sends a caught-up consumer back (0) while
//	                           its HA stream is up and keeps every consumer once its master is gone
//	ha_status.go               HAStatus (issue 10 item 6): role, epoch, failover count (the
//	                           Node's RoleChanges), per-slave or slave-side lag in bytes and time
//	                           (defined there), read on demand from ha.Master.Slaves and
//	                           ha.Slave.State; served as GET_BROKER_HA_STATUS (907, body
//	                           HAStatusJSON: HAStatus plus RocketMQ's HARuntimeInfo fields), GET
//	                           /ha and the stratamq_ha_* series (Metrics.WatchHA, at scrape time)
//	node.go, wire_failover.go  STRATAMQ_HA_FAILOVER: the bucket lease decides the role (package
//	                           failover's Roles: the lease watch, the candidacy, the rejoin cut,
//	                           replica records, role-change requests, promote/demote;
//	                           broker/failover/doc.go; wire_failover.go its config and the
//	                           adapters over the data dir, checkpoint and addresses). A Node
//	                           runs generations (New + Run) on one data dir; Run returns a
//	                           *RoleChange to continue in another role. A slave watches the lease
//	                           (watchLease) and takes it when it lapses (promotion hands the
//	                           lease to the master generation); a fenced master, or a node that
//	                           finds the lease held at start, becomes the holder's slave (its HA
//	                           master is the lease record's haAddr). Each master records in the
//	                           checkpoint's epoch history where it took the log over; a slave of
//	                           an older epoch cuts its log there (store.CutLog, the cut bytes
//	                           kept in <data>/diverged/), and the HA master refuses one that did
//	                           not (StatusDiverged). A promoted slave keeps its copy when it
//	                           reaches the bucket's end (else sets it aside and restores) and
//	                           adopts the checkpoint's topics, groups and offsets it lacks and
//	                           the queues its topics lack, written to its config dir before it
//	                           serves (failover_topics.go).
//	                           Promote/Demote are the planned handover (admin promote/demote)
//	wire_schedule.go           delayed messages: package schedule (its doc.go) owns the delay
//	                           levels, the timer wheel, the delivery goroutine (masters only)
//	                           and its progress (delayOffset.json, the checkpoint's
//	                           delayOffsets and timerOffsets). Here: the exported names
//	                           (ScheduleTopic, TimerTopic, PropTimer*, ParseDelayLevels),
//	                           scheduleRoute/scheduleSend (sends with DELAY=n or a TIMER_*
//	                           property become schedule records; half messages, DLQ and the
//	                           schedule topics are left alone), ensureScheduleTopic and the
//	                           adapters (schedWire: topics, send gates, durable ends, recalls).
//	                           Bucket retention stops at the oldest scheduled record whose
//	                           delivery the bucket lacks (PinnedFloor). Send-backs (rc036) go
//	                           through it with level 3+reconsumeTimes
//	durable_progress.go        the internal services' saved progress (schedule, transaction
//	                           check, POP dead-lettering) counts only writes as durable as the
//	                           save: package progress (progress.Log) keeps each step with the
//	                           commitlog end its writes reached; the local files save what is
//	                           fdatasynced, the bucket checkpoint what the manifest lists or a
//	                           sync_master's slave holds (durableEnds); recovery does the rest
//	                           again (at least once)
//	rc880_dlq.go               STRATAMQ_DLQ_LIST (880003) and STRATAMQ_DLQ_RESEND (880004): a
//	                           group's DLQ listed, and resent to %RETRY%<group> (admin dlqList,
//	                           dlqResend)
//	send_half.go,              transactional messages (issue 11 item 3), as RocketMQ 4.9: a
//	rc037_end_transaction.go,  prepared send is stored as a half message in
//	wire_txn.go,               RMQ_SYS_TRANS_HALF_TOPIC queue 0 (REAL_TOPIC/REAL_QID;
//	broker/txn                 send_half.go, which refuses halves too large to check or commit:
//	                           halfFits); END_TRANSACTION (37) commits it into its real topic
//	                           (UNIQ_KEY kept) or rolls it back, each with an op record in
//	                           RMQ_SYS_TRANS_OP_HALF_TOPIC (body: the half's queue offset), in
//	                           one store call. broker/txn's Service owns which halves are
//	                           resolved (at most once), the progress (half and op offsets, in
//	                           config/transactionOffset.json and the checkpoint's
//	                           "transactions" section) and the master's check rounds, which put
//	                           halves in doubt back with TRANSACTION_CHECK_TIMES+1 and ask a
//	                           producer of PGROUP (CHECK_TRANSACTION_STATE, 39); wire_txn.go
//	                           builds it over the store, the gated put (putTrans), the
//	                           producers and the durable progress (formats in its doc.go)
//	broker/msgprop             message properties (k\x01v\x02...): the shared keys, Value, Parse,
//	                           With, Without (broker/txn and send_half.go use it)
//	package pop (broker/pop)   POP consumption (issue 16), for the gRPC consumers (package proxy,
//	pop.go, wire_pop.go,       through grpc_pop_backend.go): pop.Engine owns, per group, topic and
//	grpc_pop_backend.go        queue, the next offset not read and the messages in flight (invisible
//	                           until a deadline, or visible again); the group's committed offset is
//	                           the first offset in flight. Its revive loop (pop.Engine.Run, masters
//	                           only) redelivers in place with the attempt counted, past the maximum
//	                           dead-letters through the send-back path (sendBackMessage); FIFO
//	                           receives hold a queue while one of its messages is invisible.
//	                           Receipt handles carry a per-delivery random nonce. Bounded by
//	                           STRATAMQ_POP_MAX_INFLIGHT(_PER_GROUP|_PER_CLIENT). Saved in
//	                           config/popState.json and the checkpoint's "pop" section, loaded from
//	                           the newer (a promoted slave: the checkpoint's), clamped to the
//	                           committed offsets: at least once (formats: broker/pop/doc.go).
//	                           pop.go: Broker.Pop* and the names (PopRequest, ErrPop*) broker
//	                           exports for it; wire_pop.go: its config and popHost, the adapter
//	                           over the store, offsets, topics, groups, filters, send-back and
//	                           durable ends that implements the interfaces pop declares
//	rc880_promote_demote.go    StrataMQ's own admin codes (a private range RocketMQ does not use,
//	                           880000-880999): STRATAMQ_PROMOTE_BROKER (880001) and
//	                           STRATAMQ_DEMOTE_BROKER (880002) call Promote and Demote
//	                           (wire_failover.go) and answer their error as a SYSTEM_ERROR remark
//	slave with a bucket        no durability (no lease, checkpoint) and a read-only tiering
//	                           (Config.ReadOnly, Tiering.ReadOnly: cold reader and cold index over the manifest
//	                           read at start, then as package follow reloads it; the uploader
//	                           is never run, nothing sealed, uploaded or deleted in the bucket,
//	                           local segments dropped only by package follow's retention);
//	                           the checkpoint is read, never loaded for writing (topics,
//	                           groups, offsets on a fresh data dir; floor and queue minima);
//	                           the store always opens with a replica restore at U = the end of
//	                           the contiguous prefix of commitlog objects listed with their
//	                           queue index, counting ranges retention deleted from the middle
//	                           (Manifest.Expired) as present (restore.ReplicaStart, Judge.ReplicaPoint): it keeps a log
//	                           that reaches U and drops one that lags it; sends and send-backs are refused NO_PERMISSION
//
// The Broker struct's fields: New assigns the wiring (settings and the
// collaborators above), which any file reads and calls; the few fields
// written after New (state) each have one owner file, and other files go
// through its methods. fieldowners_test.go holds the table and checks it
// (package infra/statecheck states the rule).
//
// # Goroutines
//
// Run (run.go; the Broker struct, Deps and New are in broker.go) owns every goroutine the broker starts (the remoting server, the
// hold-service checker, the registrar, the client-expiry scanner
// (broker/consumers' Registry.Run), the config flusher, the HA master or slave, a slave's sync loop (broker/follow's Run), a master's
// schedule service, transaction check service (broker/txn's Run), the POP
// revive loop, the lease renewal and checkpoint loop: broker/durability's
// Run) and returns after they have all exited (pending sync_master ack waits are
// settled, SLAVE_NOT_AVAILABLE, when the HA master stops).
//
// # Shutdown order
//
// Stop the schedule service (no delivery during the drain) and the
// transaction check rounds (txn.Service.Close) → answer held
// pulls → stop accepting (listener closed) and drain in-flight
// requests under STRATAMQ_SHUTDOWN_TIMEOUT → stop the HA listener or the
// slave's stream (ends sync_master waits) → record the range not yet
// uploaded in a checkpoint (drainFailed), then seal the active segment and
// upload everything sealed (three quarters of the budget) → final
// checkpoint: clean only if the drain finished, else naming what it left
// (Run then returns an error: exit status 1) → lease release → stop the
// broker's goroutines (the transaction check saves its progress as it
// stops) → unregister
// from the name servers → persist the config files, flush and close the
// store and the cold reader. The goroutines run on a context detached from
// Run's, so the uploader works through the drain.
//
// # Lock order
//
// Locks are leaf locks: no manager's lock is held while calling another
// manager, the store or the network, with one exception: pop.Engine.mu ->
// ConsumerOffsets.mu (the POP engine commits a queue's progress under its
// lock, through pop.Offsets, so commits land in order). Where a method is
// called with a lock held its name ends in Locked.
package broker
