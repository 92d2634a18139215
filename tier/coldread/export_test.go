package coldread

// BackgroundIdle reports whether no hint is being followed and no
// read-ahead GET is in flight (tests wait for it, with a deadline).
func (r *Reader) BackgroundIdle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.hints == 0 && r.mu.ahead == 0 && len(r.mu.flights) == 0
}

// MaxHints is maxHints.
const MaxHints = maxHints
