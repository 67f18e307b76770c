package amqpactor

// Subscription returns the App's subscription named name, or nil when it
// has none by that name. The name is Subscription.Name: the one its node has
// in the tree after "subscription:" (WithSubscriptionName, or the App's
// name and the address's). A Partitioned address runs one subscription per
// partition queue, each under a name of its own (the name with ".p0",
// ".p1", ...), each found by it; the whole, which runs nothing itself,
// is not. The debug handler uses it to pause and resume a subscription by
// name (debug.WithControl).
func (a *App) Subscription(name string) *Subscription {
	if a == nil || name == "" {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.subs {
		if s.spec.Name == name {
			return s
		}
	}
	return nil
}
