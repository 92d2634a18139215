package upload

// WarmCodecs makes the manifest's shared zstd encoder and decoder, and
// their lazily made pools (channels), now rather than on first use. Code
// that runs brokers in testing/synctest bubbles (broker/simtest) calls it
// outside any bubble first, so that no bubble owns them.
func WarmCodecs() {
	frame := zencOnce().EncodeAll([]byte("warm"), nil)
	_, _ = zdecOnce().DecodeAll(frame, nil)
}
