package actors

// pending is how many records wait for their incarnation's Started (tests: none at rest).
func (h *handover) pending() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.recs)
}
