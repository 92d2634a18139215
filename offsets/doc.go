// Package offsets owns the broker's small, durable metadata files: consumer
// offsets (ConsumerOffsets, RocketMQ's ConsumerOffsetManager) and the atomic
// JSON file writer the topic and subscription-group managers persist with.
//
// Files are JSON compatible with RocketMQ's config files:
//
//	config/consumerOffset.json   {"offsetTable":{"topic@group":{"0":12,"1":30}}}
//
// RocketMQ (fastjson) writes integer map keys unquoted ({0:12}); Load accepts
// both forms, Save writes standard JSON, which RocketMQ also reads.
//
// Every write goes temp file → fsync → rename → fsync of the directory
// (WriteFileAtomic), through infra/vfs, so a crash leaves either the old or
// the new file, never a torn one, and the store's crash tests apply here too.
//
// What it must never do: import broker, store or tier. Checkpointing to a
// bucket (issue 4) takes a bucket-shaped interface declared here.
package offsets
